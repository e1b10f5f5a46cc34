# Surreal: every command a user or CI needs. `make run` trains PPO locally; `make test` runs the suite.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv run test test-fast lint bench-protocol bench-throughput bench-learning clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[rl,test]"
	touch $(STAMP)

venv: $(STAMP)

## Train PPO on a MuJoCo task with the local launcher (override anything: make run ARGS="env=Hopper-v5 actors=4").
ARGS ?= env=HalfCheetah-v5 actors=2
run: $(STAMP)
	$(VENV)/bin/surreal run $(ARGS)

## The whole suite, learning and reliability runs included (what CI runs).
test: $(STAMP)
	$(PY) -m ruff check src tests bench
	$(PY) -m pytest -q

## Everything but the slow learning/reliability runs.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(PY) -m ruff check src tests bench

bench-protocol: $(STAMP)
	$(PY) -m bench.protocol

bench-throughput: $(STAMP)
	$(PY) -m bench.throughput

bench-learning: $(STAMP)
	$(PY) -m bench.learning ppo HalfCheetah-v5

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache

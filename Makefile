# One entry point for developers and CI. Everything runs from the project's own virtualenv.
PY      ?= .venv/bin/python
VENV    := .venv
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: install test unit e2e lint typecheck crds manifests demo cluster-up cluster-down clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e ".[dev]"
	touch $@

install: $(VENV)/.installed

lint: install
	ruff check operator tests e2e bench
	ruff format --check operator tests e2e bench

typecheck: install
	mypy
	cd bench && mypy --strict *.py fleetsim/*.py  # the benchmarks import fleetsim as the scripts do

## The whole test suite: lint, types, unit tests, then the e2e tests on the local cluster.
test: lint typecheck
	$(PY) -m pytest

unit: install
	$(PY) -m pytest tests

e2e: install
	$(PY) -m pytest e2e/tests

## Regenerate the CRD (and the chart's copy) from the typed API, then the install manifest that embeds it.
crds: install
	$(PY) -m sglang_operator.api.crdgen --write
	$(PY) -m localcluster.helm --write-manifests

## Regenerate manifests/install.yaml from the chart (helm is built from Go modules on first use).
manifests: install
	$(PY) -m localcluster.helm --write-manifests

cluster-up: install
	$(PY) -m localcluster up

cluster-down: install
	$(PY) -m localcluster down

## Demo: local cluster + operator + quickstart example, requests through the router, scale up and down.
demo: install
	$(PY) -m localcluster.demo $(DEMO_ARGS)

clean:
	rm -rf $(VENV) e2e/.bin e2e/.state

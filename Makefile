# One entry point for developers and CI. Everything runs from the project's own virtualenv.
PY      ?= .venv/bin/python
VENV    := .venv
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: install test unit integration e2e lint typecheck crds manifests demo cluster-up cluster-down clean image

## The operator (editable, with its dev tools) and testing/'s distribution: the simulator and the local cluster.
$(VENV)/.installed: pyproject.toml testing/pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e ".[dev]" -e ./testing
	touch $@

install: $(VENV)/.installed

lint: install
	ruff check operator testing tests e2e bench
	ruff format --check operator testing tests e2e bench

typecheck: install
	mypy
	cd bench && mypy --strict *.py fleetsim/*.py  # the benchmarks import fleetsim as the scripts do

## The whole test suite: lint, types, then the three tiers (tests/tiers.py prints one line per tier at the end).
test: lint typecheck
	$(PY) -m tests.tiers unit integration e2e

## One tier: unit (pure, the quick loop while coding), integration (real processes, no cluster), e2e (local cluster).
unit: install
	$(PY) -m tests.tiers unit

integration: install
	$(PY) -m tests.tiers integration

e2e: install
	$(PY) -m tests.tiers e2e

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

## The operator image, tagged as the chart runs it by default (image.repository : appVersion), with docker, buildah or
## podman, whichever is installed. Into kind: kind load docker-image $(IMAGE)  (docs/operations.md, "Image").
IMAGE ?= ghcr.io/sglang-operator/sglang-operator:$(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' charts/sglang-operator/Chart.yaml)
image:
	@if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then set -x; docker build -t $(IMAGE) .; \
	elif command -v buildah >/dev/null 2>&1; then set -x; buildah build -t $(IMAGE) .; \
	elif command -v podman >/dev/null 2>&1; then set -x; podman build -t $(IMAGE) .; \
	elif command -v docker >/dev/null 2>&1; then \
	echo "make image: docker is installed but its daemon does not answer (docker info failed), and neither buildah" \
	"nor podman is installed: start the Docker daemon or install buildah to build $(IMAGE)" >&2; exit 1; \
	else echo "make image: no container builder found (docker, buildah or podman): install one to build $(IMAGE)" >&2; \
	exit 1; fi

clean:
	rm -rf $(VENV) e2e/.bin e2e/.state

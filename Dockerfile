# The operator image: `sglang-operator run` (kopf) on python:3.11-slim, as a non-root user.
#   make image    (docker, buildah or podman; tags ghcr.io/sglang-operator/sglang-operator:<chart appVersion>)
# Into kind: kind load docker-image ghcr.io/sglang-operator/sglang-operator:0.1.0 (docs/operations.md, "Image").
# The chart (charts/sglang-operator) runs it with `command: ["sglang-operator"]`, `args: ["run", ...]`, a
# read-only root filesystem and an emptyDir on /tmp.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/sglang-operator
WORKDIR /src
# Only what the operator's distribution is built from: no test code (the simulator and the local cluster are
# testing/'s own distribution).
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN /opt/sglang-operator/bin/pip install . \
 && /opt/sglang-operator/bin/sglang-operator --help >/dev/null

FROM python:3.11-slim
LABEL org.opencontainers.image.title="sglang-operator" \
      org.opencontainers.image.description="Kubernetes operator for fleets of SGLang servers behind the smg router" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PATH=/opt/sglang-operator/bin:$PATH
COPY --from=build /opt/sglang-operator /opt/sglang-operator
# A fixed numeric uid/gid so `runAsNonRoot` can verify it without a passwd lookup.
RUN groupadd --gid 65532 operator && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin operator
USER 65532:65532
ENTRYPOINT ["sglang-operator"]
CMD ["run"]

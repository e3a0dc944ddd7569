"""`sglang-operator run`: start kopf with this package's handlers."""

import asyncio
import logging
import os

import kopf


def run_operator(namespaces: list[str], prometheus_url: str | None, verbose: bool, liveness: str | None = None) -> int:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if prometheus_url:
        os.environ["SGLANG_OPERATOR_PROMETHEUS_URL"] = prometheus_url
    from ..autoscaling import daemon  # noqa: F401  (registers the autoscaler)
    from . import handlers  # noqa: F401  (registers the handlers)

    asyncio.run(
        kopf.operator(
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=True,
            liveness_endpoint=liveness,
        )
    )
    return 0

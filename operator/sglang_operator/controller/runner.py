"""`sglang-operator run`: start kopf with this package's handlers."""

import asyncio
import logging
import os

import kopf


def run_operator(
    namespaces: list[str],
    prometheus_url: str | None,
    verbose: bool,
    liveness: str | None = None,
    prometheus_token_file: str | None = None,
    prometheus_ca_file: str | None = None,
) -> int:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from ..autoscaling.credentials import CA_FILE_ENV, TOKEN_FILE_ENV
    from ..autoscaling.loop import PROMETHEUS_URL_ENV

    for env, value in ((PROMETHEUS_URL_ENV, prometheus_url), (TOKEN_FILE_ENV, prometheus_token_file),
                       (CA_FILE_ENV, prometheus_ca_file)):  # fmt: skip
        if value:
            os.environ[env] = value
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

"""Container lifecycle hooks: `preStop` (exec, httpGet or sleep) before a container is stopped.

The hook's time counts against the termination grace period, as in the kubelet. `postStart` is not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp

from localcluster.nodeagent.prober import ProbeTarget, http_get, run_exec

log = logging.getLogger(__name__)


async def run_hook(hook: Mapping[str, Any], target: ProbeTarget, budget: float) -> None:
    """Run one lifecycle handler for at most `budget` seconds; failures are logged, never raised."""
    try:
        if "sleep" in hook:
            await asyncio.sleep(min(float(hook["sleep"].get("seconds", 0)), budget))
        elif "exec" in hook:
            ok, message = await run_exec(target, hook["exec"], budget)
            if not ok:
                log.info("preStop hook of %s failed: %s", target.container.get("name"), message)
        elif "httpGet" in hook:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(http_get(target, hook["httpGet"], budget), budget)
    except (OSError, ValueError, aiohttp.ClientError) as err:
        log.info("preStop hook of %s failed: %s", target.container.get("name"), err)

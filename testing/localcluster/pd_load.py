"""Closed-loop load of chosen prompt and output lengths, for the prefill/decode tests: a fixed number of clients,
each sending its next request as soon as its last one is answered, so the concurrency a role sees is known (an
open-loop rate would let requests pile up without bound once a role saturates).

Prompts are unique from their first characters (no prefix-cache hit: every prompt token is uncached), and about
`prompt_tokens` long in the simulator's 4-characters-per-token count. Bounded by a request count and a deadline.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import requests

from localcluster.fleet import LoadResult

CHARS_PER_TOKEN = 4  # the simulator's stand-in tokenizer (testing/sglang_sim/tokens.py)
FILLER = "the quick brown fox jumps over the lazy dog "


def unique_prompt(index: int, tokens: int, run: str) -> str:
    """About `tokens` tokens, unique from the first block on (so nothing of it is cached)."""
    head = f"{run}-{index:08d} "
    body = FILLER * (tokens * CHARS_PER_TOKEN // len(FILLER) + 1)
    return (head + body)[: max(len(head), tokens * CHARS_PER_TOKEN)]


@contextmanager
def closed_loop_load(
    router_url: str,
    clients: int,
    prompt_tokens: int,
    output_tokens: int,
    max_requests: int,
    max_seconds: float,
    request_timeout: float = 60.0,
) -> Iterator[LoadResult]:
    """`clients` concurrent clients of native `/generate` requests (`prompt_tokens` unique prompt tokens,
    `max_new_tokens` = `output_tokens`, `ignore_eos`), at most `max_requests` in all and none started after
    `max_seconds`; leaving the block stops new requests and waits for those in flight."""
    result = LoadResult()
    stop = threading.Event()
    lock = threading.Lock()
    run = uuid.uuid4().hex[:12]
    deadline = time.monotonic() + max_seconds

    def next_index() -> int | None:
        with lock:
            if stop.is_set() or result.sent >= max_requests or time.monotonic() >= deadline:
                return None
            result.sent += 1
            return result.sent - 1

    def client() -> None:
        session = requests.Session()
        while (index := next_index()) is not None:
            body: dict[str, Any] = {
                "text": unique_prompt(index, prompt_tokens, run),
                "sampling_params": {"max_new_tokens": output_tokens, "ignore_eos": True},
            }
            try:
                response = session.post(f"{router_url}/generate", json=body, timeout=request_timeout)
                error = None if response.status_code == 200 else f"HTTP {response.status_code}: {response.text[:200]}"
            except requests.RequestException as exc:
                error = str(exc)[:200]
            if error is not None:
                with lock:
                    result.failed += 1
                    result.errors.append(error)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield result
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=request_timeout + 5)

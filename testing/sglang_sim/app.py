"""The aiohttp application: SGLang's HTTP surface on rank 0, the dummy health server on ranks >= 1.

Handlers only translate HTTP to the runtime and to the pure body builders (`protocol`, `views`, `metrics`).
Errors look like the FastAPI server's: unknown paths 404 {"detail": "Not Found"}, a missing or wrong API key
401 {"error": "Unauthorized"} (health, readiness and metrics stay open, as in SGLang's auth middleware).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from aiohttp import web

from . import disagg, protocol, versions, views
from .args import ServerArgs
from .disagg import PdRequest
from .engine import Job
from .knobs import SimKnobs
from .metrics import CONTENT_TYPE, PodIdentity, SimMetrics, dcgm_family, render
from .pd_runtime import PdFailure, PdRuntime
from .protocol import BadRequest, GenInput
from .runtime import Progress, Runtime
from .tokens import output_text, output_token_ids

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_PREFIXES = ("/health", "/ready", "/metrics")


@dataclass
class Lifecycle:
    status: str = "Starting"  # Starting -> Up -> Exiting
    startup_time: float = 0.0


@dataclass
class SimContext:
    args: ServerArgs
    knobs: SimKnobs
    cap: views.Capacity
    identity: PodIdentity
    launch_command: str
    runtime: Runtime | None  # None on ranks >= 1
    metrics: SimMetrics | None
    busy: Callable[[], list[float]]  # busy fraction per DP rank, for the GPU utilisation gauge
    pd: PdRuntime | None = None  # PD disaggregation (prefill or decode mode, rank 0)
    life: Lifecycle = field(default_factory=Lifecycle)
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def up(self) -> bool:
        return self.life.status == "Up"

    def rt(self) -> Runtime:
        assert self.runtime is not None, "rank >= 1 serves no inference routes"
        return self.runtime

    def pd_loads(self) -> list[disagg.PdRankLoad]:
        return self.pd.loads() if self.pd is not None else []

    def pd_request(self, body: dict[str, Any], rid: str, index: int = 0) -> PdRequest | None:
        """The request's PD fields on a prefill or decode server (None otherwise); BadRequest without a room."""
        if self.pd is None:
            return None
        req = disagg.pd_request(body, self.args, index)
        error = disagg.missing_room_error(self.args, req, rid)
        if error is not None:
            raise BadRequest(error)
        return req

    def run(self, job: Job, streaming: bool, pd: PdRequest | None) -> AsyncGenerator[Progress, None]:
        return self.rt().run(job, streaming) if pd is None or self.pd is None else self.pd.run(job, streaming, pd)

    async def complete(self, job: Job, pd: PdRequest | None) -> Progress:
        last: Progress | None = None
        async with contextlib.aclosing(self.run(job, False, pd)) as gen:
            async for p in gen:
                last = p
        assert last is not None
        return last

    def prefill_only(self, inp: GenInput) -> GenInput:
        """What a PD prefill server generates: one token (`max_new_tokens` forced to 1), finish_reason length 0."""
        if self.args.disaggregation_mode != "prefill":
            return inp
        return GenInput(inp.prompt, 1, True, prefill_only=True)


CTX = web.AppKey("sim_ctx", SimContext)


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def jresp(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=dumps)


def _ctx(request: web.Request) -> SimContext:
    return request.app[CTX]


@web.middleware
async def errors_mw(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return jresp({"detail": "Not Found"}, 404)
    except web.HTTPMethodNotAllowed:
        return jresp({"detail": "Method Not Allowed"}, 405)


@web.middleware
async def auth_mw(request: web.Request, handler: Handler) -> web.StreamResponse:
    args = _ctx(request).args
    keys = {args.api_key} if args.api_key else set()
    if request.path == "/flush_cache" and args.admin_api_key:
        keys.add(args.admin_api_key)
    if keys and not request.path.startswith(OPEN_PREFIXES):
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or auth[len("Bearer ") :] not in keys:
            return jresp({"error": "Unauthorized"}, 401)
    return await handler(request)


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"Invalid JSON body: {e}") from e
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object")
    return body


# --- health ---------------------------------------------------------------------------------------------


async def health(request: web.Request) -> web.Response:
    """503 until Up; with health generation on (SGLang's default) a probe takes ~1 s (scaled), like the real one."""
    ctx = _ctx(request)
    if not ctx.up:
        return web.Response(status=503)
    if ctx.runtime is not None and ctx.knobs.health_generation:
        await asyncio.sleep(ctx.knobs.scaled(1.0))
        if not ctx.up:
            return web.Response(status=503)
    return web.Response(status=200)


async def ready(request: web.Request) -> web.Response:
    return web.Response(status=200 if _ctx(request).up else 503)


async def metrics_route(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    fams = []
    busy: list[float]
    if ctx.runtime is not None and ctx.metrics is not None:
        loads = ctx.runtime.loads()
        fams = ctx.metrics.families(loads, ctx.pd_loads())
        busy = [r.busy_fraction for r in loads]
    else:
        busy = ctx.busy()
    fams.append(dcgm_family(ctx.args, ctx.identity, busy))
    return web.Response(body=render(fams).encode(), headers={"Content-Type": CONTENT_TYPE})


# --- info -----------------------------------------------------------------------------------------------


async def model_info(request: web.Request) -> web.Response:
    a = _ctx(request).args
    return jresp(protocol.model_info(a.model_path, a.tokenizer_path, a.served_model_name, a.disaggregation_mode))


async def server_info(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    body = views.server_info(
        ctx.args, ctx.cap, ctx.rt().loads(), ctx.launch_command, ctx.life.startup_time, ctx.life.status
    )
    return jresp(body)


async def list_models(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    card = protocol.model_card(ctx.args.served_model_name, ctx.created, ctx.cap.context_length)
    return jresp({"object": "list", "data": [card]})


async def get_model(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    model = request.match_info["model"]
    if model != ctx.args.served_model_name:
        return jresp(protocol.model_not_found(model), 404)
    return jresp(protocol.model_card(model, ctx.created, ctx.cap.context_length))


async def loads(request: web.Request) -> web.StreamResponse:
    ctx = _ctx(request)
    q = request.query
    try:
        include = views.parse_include(q.get("include"))
        rank = int(q["dp_rank"]) if q.get("dp_rank") not in (None, "") else None
    except ValueError as e:
        return jresp({"detail": str(e)}, 400)
    snapshot = [r for r in ctx.rt().loads() if rank is None or r.dp_rank == rank]
    if rank is not None and not snapshot:
        return jresp({"detail": f"dp_rank {rank} out of range"}, 400)
    ts = time.time()
    iso = datetime.fromtimestamp(ts, UTC).isoformat()
    pd = [p for p in ctx.pd_loads() if rank is None or p.dp_rank == rank]
    body = views.loads_body(ctx.args, ctx.cap, snapshot, include, ts, iso, ctx.identity.gpu_model, pd)
    if q.get("format") == "prometheus":
        return web.Response(body=views.loads_prometheus(body["loads"]).encode(), headers={"Content-Type": CONTENT_TYPE})
    return jresp(body)


async def flush_cache(request: web.Request) -> web.Response:
    ok = _ctx(request).rt().engine.flush_cache()
    text = (
        "Cache flushed.\nPlease check backend logs for more details. "
        "(When there are running or waiting requests, the operation will not be performed.)\n"
    )
    return web.Response(text=text, status=200 if ok else 400)


# --- generation -----------------------------------------------------------------------------------------


def _not_ready() -> web.Response:
    return jresp({"error": {"message": "The server is not ready yet (still starting)."}}, 503)


def _job(inp: GenInput, dp_rank: int | None) -> Job:
    return Job(uuid.uuid4().hex, inp.prompt, inp.max_new_tokens, dp_rank)


async def _sse_open(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    return resp


async def _sse(resp: web.StreamResponse, obj: Any) -> None:
    await resp.write(f"data: {dumps(obj)}\n\n".encode())


async def _sse_close(resp: web.StreamResponse) -> None:
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()


def _pd_error(e: PdFailure) -> web.Response:
    """A PD request the scheduler aborted, not streamed: FastAPI's HTTPException handler (ErrorResponse)."""
    return jresp(protocol.openai_error(e.message, e.status, str(e.status)), e.status)


def _pd_stream_error(e: PdFailure) -> dict[str, Any]:
    """The same, streamed by the OpenAI routes (`create_streaming_error_response`, the status's name as type)."""
    return {"error": protocol.openai_error(e.message, e.status, HTTPStatus(e.status).name)}


async def generate(request: web.Request) -> web.StreamResponse:
    ctx = _ctx(request)
    try:
        body = await _json(request)
        inputs, batch = protocol.parse_generate(body, ctx.knobs.output_tokens)
        for inp in inputs:
            protocol.check_context(inp, ctx.cap.context_length)
        if body.get("stream") and batch:
            raise BadRequest("Streaming batch requests are not supported by the simulator")
        rank = protocol.pinned_rank(body, ctx.args.num_dp_ranks)
    except BadRequest as e:
        return jresp({"error": {"message": str(e)}}, 400)
    if not ctx.up:
        return _not_ready()
    given = body.get("rid")
    rid = given if isinstance(given, str) else uuid.uuid4().hex
    jobs = [_job(inp, rank) for inp in inputs]
    try:
        pds = [ctx.pd_request(body, job.rid, i) for i, job in enumerate(jobs)]
    except BadRequest as e:
        return jresp({"error": {"message": str(e)}}, 400)
    inputs = [ctx.prefill_only(inp) for inp in inputs]
    jobs = [replace(job, max_new_tokens=inp.max_new_tokens) for job, inp in zip(jobs, inputs, strict=True)]
    t0 = time.monotonic()
    if body.get("stream"):
        inp = inputs[0]
        resp = await _sse_open(request)
        ids = output_token_ids(inp.prompt.seed, inp.max_new_tokens)
        with contextlib.suppress(ConnectionError):
            try:
                async with contextlib.aclosing(ctx.run(jobs[0], True, pds[0])) as gen:
                    async for p in gen:
                        out = protocol.native_body(
                            rid, inp, ids[: p.tokens], p.schedule.cached_tokens, p.done, time.monotonic() - t0
                        )
                        await _sse(resp, out)
            except PdFailure as e:  # the abort is the stream's last output
                out = protocol.native_body(rid, inp, [], 0, False, time.monotonic() - t0)
                out["meta_info"]["finish_reason"] = protocol.abort_reason(e.message, e.status)
                await _sse(resp, out)
            await _sse_close(resp)
        return resp
    try:
        done = await asyncio.gather(*(ctx.complete(job, pd) for job, pd in zip(jobs, pds, strict=True)))
    except PdFailure as e:
        return _pd_error(e)
    e2e = time.monotonic() - t0
    bodies = [
        protocol.native_body(
            rid if not batch else uuid.uuid4().hex,
            inp,
            output_token_ids(inp.prompt.seed, p.tokens),
            p.schedule.cached_tokens,
            True,
            e2e,
        )
        for inp, p in zip(inputs, done, strict=True)
    ]
    return jresp(bodies if batch else bodies[0])


async def _openai_inputs(
    request: web.Request, parse: Callable[[dict[str, Any]], list[GenInput]]
) -> tuple[dict[str, Any], list[GenInput], int | None] | web.Response:
    ctx = _ctx(request)
    try:
        body = await _json(request)
        inputs = parse(body)
        for inp in inputs:
            protocol.check_context(inp, ctx.cap.context_length)
        if body.get("stream") and len(inputs) > 1:
            raise BadRequest("Streaming batch requests are not supported by the simulator")
        rank = protocol.pinned_rank(body, ctx.args.num_dp_ranks)
    except BadRequest as e:
        return jresp(protocol.openai_error(str(e)), 400)
    if not ctx.up:
        return jresp(protocol.openai_error("The server is not ready yet.", 503, "ServiceUnavailableError"), 503)
    return body, inputs, rank


def _include_usage(body: dict[str, Any]) -> bool:
    opts = body.get("stream_options")
    return isinstance(opts, dict) and bool(opts.get("include_usage"))


def _openai_pd(
    ctx: SimContext, body: dict[str, Any], inputs: list[GenInput], rank: int | None
) -> tuple[list[GenInput], list[Job], list[PdRequest | None]] | web.Response:
    jobs = [_job(inp, rank) for inp in inputs]
    try:
        pds = [ctx.pd_request(body, job.rid, i) for i, job in enumerate(jobs)]
    except BadRequest as e:
        return jresp(protocol.openai_error(str(e)), 400)
    inputs = [ctx.prefill_only(inp) for inp in inputs]
    jobs = [replace(job, max_new_tokens=inp.max_new_tokens) for job, inp in zip(jobs, inputs, strict=True)]
    return inputs, jobs, pds


async def completions(request: web.Request) -> web.StreamResponse:
    ctx = _ctx(request)
    got = await _openai_inputs(request, protocol.parse_completion)
    if isinstance(got, web.Response):
        return got
    body, inputs, rank = got
    prepared = _openai_pd(ctx, body, inputs, rank)
    if isinstance(prepared, web.Response):
        return prepared
    inputs, jobs, pds = prepared
    rid, created = uuid.uuid4().hex, int(time.time())
    model = str(body.get("model") or ctx.args.served_model_name)
    if not body.get("stream"):
        try:
            done = await asyncio.gather(*(ctx.complete(job, pd) for job, pd in zip(jobs, pds, strict=True)))
        except PdFailure as e:
            return _pd_error(e)
        results = [(inp, output_token_ids(inp.prompt.seed, p.tokens)) for inp, p in zip(inputs, done, strict=True)]
        return jresp(protocol.completion_body(rid, model, created, results))
    inp = inputs[0]
    ids = output_token_ids(inp.prompt.seed, inp.max_new_tokens)
    resp = await _sse_open(request)
    with contextlib.suppress(ConnectionError):
        sent = 0
        try:
            async with contextlib.aclosing(ctx.run(jobs[0], True, pds[0])) as gen:
                async for p in gen:
                    text = output_text(ids[sent : p.tokens])
                    sent = p.tokens
                    await _sse(resp, protocol.completion_chunk(rid, model, created, text, inp if p.done else None))
            if _include_usage(body):
                chunk = protocol.usage_chunk(rid, model, created, "text_completion", inp.prompt.num_tokens, sent)
                await _sse(resp, chunk)
        except PdFailure as e:
            await _sse(resp, _pd_stream_error(e))
        await _sse_close(resp)
    return resp


async def chat_completions(request: web.Request) -> web.StreamResponse:
    ctx = _ctx(request)
    got = await _openai_inputs(request, lambda b: [protocol.parse_chat(b, ctx.knobs.output_tokens)])
    if isinstance(got, web.Response):
        return got
    body, inputs, rank = got
    prepared = _openai_pd(ctx, body, inputs, rank)
    if isinstance(prepared, web.Response):
        return prepared
    (inp,), (job,), (pd,) = prepared
    rid, created = uuid.uuid4().hex, int(time.time())
    model = str(body.get("model") or ctx.args.served_model_name)
    ids = output_token_ids(inp.prompt.seed, inp.max_new_tokens)
    if not body.get("stream"):
        try:
            p = await ctx.complete(job, pd)
        except PdFailure as e:
            return _pd_error(e)
        return jresp(protocol.chat_body(rid, model, created, inp, ids[: p.tokens]))
    resp = await _sse_open(request)
    with contextlib.suppress(ConnectionError):
        await _sse(resp, protocol.chat_chunk(rid, model, created, {"role": "assistant", "content": ""}, None))
        sent = 0
        try:
            async with contextlib.aclosing(ctx.run(job, True, pd)) as gen:
                async for p in gen:
                    delta = {"content": output_text(ids[sent : p.tokens])}
                    sent = p.tokens
                    await _sse(resp, protocol.chat_chunk(rid, model, created, delta, inp if p.done else None))
            if inp.max_new_tokens == 0:
                await _sse(resp, protocol.chat_chunk(rid, model, created, {}, inp))
            if _include_usage(body):
                chunk = protocol.usage_chunk(rid, model, created, "chat.completion.chunk", inp.prompt.num_tokens, sent)
                await _sse(resp, chunk)
        except PdFailure as e:
            await _sse(resp, _pd_stream_error(e))
        await _sse_close(resp)
    return resp


def build_app(ctx: SimContext) -> web.Application:
    """Rank 0 gets the whole API; ranks >= 1 only SGLang's dummy health server (plus /metrics if enabled)."""
    if ctx.args.node_rank >= 1:
        app = web.Application(middlewares=[errors_mw])
    else:
        app = web.Application(middlewares=[errors_mw, auth_mw], client_max_size=64 * 1024 * 1024)
    app[CTX] = ctx
    r = app.router
    for path in ("/health", "/health_generate", "/ping"):
        r.add_get(path, health if path != "/ping" else ready)
    if ctx.args.enable_metrics:
        r.add_get("/metrics", metrics_route)
    if ctx.args.node_rank >= 1:
        return app
    if versions.serves("/ready", ctx.args.sglang_version):
        r.add_get("/ready", ready)
    for path in ("/model_info", "/get_model_info"):
        r.add_get(path, model_info)
    for path in ("/server_info", "/get_server_info"):
        r.add_get(path, server_info)
    r.add_get("/v1/models", list_models)
    r.add_get("/v1/models/{model:.+}", get_model)
    r.add_get("/v1/loads", loads)
    r.add_route("GET", "/flush_cache", flush_cache)
    r.add_post("/flush_cache", flush_cache)
    r.add_post("/generate", generate)
    r.add_put("/generate", generate)
    r.add_post("/v1/completions", completions)
    r.add_post("/v1/chat/completions", chat_completions)
    return app

"""Hostile specs, round two (issue 29):
strings the kubelet expands ($(VAR)), reserved env names, monitoring bounds, releases; and (issue 37) strings exec
cannot pass (a NUL in a command-line value or an env value), control characters after a flag, Secret keys no Secret
holds.

Every CR string that lands in the command or an env value of the worker's main container or the router's container
is expanded by the kubelet with that container's env: each such field, through each place it can be set (the top
level, the template's `sglang` entry, a worker group). A worker group's refusal names the group's own field with its
index, as the API server does for a rule on the group's item.
"""

from __future__ import annotations

from typing import Any

from tests.support.hostile.model import SCHEMA, Hostile, cr, main_container, sidecar

_EXPANDS = "must not contain '$('"
_OWNED_ENV = "must not set env the operator sets"
_INTERVAL = "must be from 5s to 10m"
_PATTERN = "should match"
_KEY_ENV = "SGLANG_OPERATOR_API_KEY"
_PD = {"disaggregation": {"transferBackend": "mooncake_tcp"},
       "workerGroups": [{"name": "p", "role": "prefill", "replicas": 1, "parallelism": {}},
                        {"name": "d", "role": "decode", "replicas": 1, "parallelism": {}}]}  # fmt: skip
"""A disaggregated fleet that needs no RDMA setting, for the ibDevice cases."""


def _env(name: str, value: str) -> list[dict[str, str]]:
    return [{"name": name, "value": value}]


def _group(**fields: Any) -> dict[str, Any]:
    """One worker group `g` that sets `fields` beside its parallelism."""
    return {"workerGroups": [{"name": "g", "replicas": 1, "parallelism": {}, **fields}]}


def _interval(value: str, field_fragment: str, why: str) -> Hostile:
    return Hostile(f"monitoring-interval-{value or 'empty'}", cr({"monitoring": {"podMonitor": True,
                   "interval": value}}), "spec.monitoring.interval", field_fragment, SCHEMA, why)  # fmt: skip


# fmt: off
CASES: list[Hostile] = [
    # --- gap 4: $(VAR) in every string the kubelet expands in the worker's or the router's container ---
    Hostile("expand-model-path-secret", cr({"model": {"path": "$(HF_TOKEN)", "tokenSecretRef": {"name": "hf"}}}),
            "spec.model.path", _EXPANDS, SCHEMA, "the HF token served as the model name (/v1/models, logs, status)"),
    Hostile("expand-model-path-api-key", cr({"model": {"path": f"org/$({_KEY_ENV})"},
                                            "engine": {"apiKeySecretRef": {"name": "k"}}}),
            "spec.model.path", _EXPANDS, SCHEMA, "the workers' API key on the command line, in `ps`"),
    Hostile("expand-served-name", cr({"model": {"servedName": "x$(POD_IP)"}}), "spec.model.servedName", _EXPANDS,
            SCHEMA, "a served name the operator and status do not know"),
    Hostile("expand-revision", cr({"model": {"revision": "$(HF_TOKEN)"}}), "spec.model.revision", _EXPANDS, SCHEMA,
            "the HF token sent to the hub as a revision"),
    Hostile("expand-cache-mount-path", cr({"model": {"cache": {"mountPath": "/c/$(POD_NAME)"}}}),
            "spec.model.cache.mountPath", _EXPANDS, SCHEMA, "HF_HOME away from the mounted cache"),
    Hostile("expand-engine-args-owned-flag", cr({"engine": {"env": _env("X", "--host"), "args": ["$(X)", "0.0.0.0"]}}),
            "spec.engine.args", _EXPANDS, SCHEMA, "an owned flag assembled past the owned-flag rule"),
    Hostile("expand-engine-args-prefix", cr({"engine": {"env": _env("P", "--po"), "args": ["$(P)rt=1"]}}),
            "spec.engine.args", _EXPANDS, SCHEMA, "--port assembled from a prefix and an env value"),
    Hostile("expand-engine-args-api-key", cr({"engine": {"apiKeySecretRef": {"name": "k"},
                                                         "args": [f"--log-level=$({_KEY_ENV})"]}}),
            "spec.engine.args", _EXPANDS, SCHEMA, "the workers' API key on the command line, in `ps`"),
    Hostile("expand-engine-args-escaped", cr({"engine": {"args": ["$$(HF_TOKEN)"]}}), "spec.engine.args", _EXPANDS,
            SCHEMA, "one `$` more or less away from an expansion: refused alike"),
    Hostile("expand-engine-env", cr({"engine": {"env": _env("COPY", "$(HF_TOKEN)")}}), "spec.engine.env", _EXPANDS,
            SCHEMA, "a Secret copied under a name the tenant's code logs"),
    Hostile("expand-template-main-env", cr(main_container(env=_env("Z", "$(POD_IP)"))),
            "spec.template.spec.containers", _EXPANDS, SCHEMA, "the same through the template's sglang entry"),
    Hostile("expand-router-args", cr({"router": {"apiKeySecretRef": {"name": "r"},
                                                 "args": ["--log-dir=$(SMG_API_KEY)"]}}),
            "spec.router.args", _EXPANDS, SCHEMA, "the router's key written where its logs go"),
    Hostile("expand-group-args", cr({"engine": {"env": _env("X", "--port")}, **_group(engine={"args": ["$(X)", "1"]})}),
            "spec.workerGroups[0].engine.args", _EXPANDS, SCHEMA, "an owned flag through a worker group's args"),
    Hostile("expand-group-env", cr(_group(engine={"env": _env("COPY", "$(HF_TOKEN)")})),
            "spec.workerGroups[0].engine.env", _EXPANDS, SCHEMA, "a Secret copied through a worker group's env"),
    Hostile("expand-group-template-env",
            cr(_group(template={"spec": {"containers": [{"name": "sglang", "env": _env("Z", "$(HF_TOKEN)")}]}})),
            "spec.workerGroups[0].template.spec.containers", _EXPANDS, SCHEMA,
            "a Secret copied through a worker group's template"),

    # --- gap 5: the env name that carries the workers' API key, wherever env is set ---
    Hostile("env-worker-api-key", cr({"engine": {"apiKeySecretRef": {"name": "k"}, "env": _env(_KEY_ENV, "known")}}),
            "spec.engine.env", _OWNED_ENV, SCHEMA, "workers run with a key the tenant knows"),
    Hostile("env-worker-api-key-empty", cr({"engine": {"apiKeySecretRef": {"name": "k"}, "env": _env(_KEY_ENV, "")}}),
            "spec.engine.env", _OWNED_ENV, SCHEMA, "workers run without a key"),
    Hostile("env-worker-api-key-template", cr({"engine": {"apiKeySecretRef": {"name": "k"}},
                                               **main_container(env=_env(_KEY_ENV, "known"))}),
            "spec.template.spec.containers", _OWNED_ENV, SCHEMA, "the same through the template's sglang entry"),
    Hostile("env-worker-api-key-group", cr({"engine": {"apiKeySecretRef": {"name": "k"}},
                                            **_group(engine={"env": _env(_KEY_ENV, "known")})}),
            "spec.workerGroups[0].engine.env", _OWNED_ENV, SCHEMA, "the same through a worker group's env"),
    Hostile("env-worker-api-key-group-template",
            cr(_group(template={"spec": {"containers": [{"name": "sglang", "env": _env(_KEY_ENV, "k")}]}})),
            "spec.workerGroups[0].template.spec.containers", _OWNED_ENV, SCHEMA,
            "the same through a worker group's template"),
    Hostile("env-pod-ip-group", cr(_group(engine={"env": _env("POD_IP", "10.0.0.1")})),
            "spec.workerGroups[0].engine.env", _OWNED_ENV, SCHEMA, "another pod's address, through a group"),

    # --- gap 6: monitoring.interval within 5 s .. 10 min, as Prometheus parses durations ---
    _interval("1ms", _INTERVAL, "a thousand scrapes a second of every pod by the shared Prometheus"),
    _interval("0s", _INTERVAL, "a scrape interval Prometheus treats as its global default or refuses"),
    _interval("4s999ms", _INTERVAL, "just under the floor"),
    _interval("11m", _INTERVAL, "rate windows without two samples"),
    _interval("1h", _INTERVAL, "rate windows without two samples"),
    _interval("10m1ms", _INTERVAL, "just over the ceiling"),
    _interval("1s1m", _PATTERN, "units out of order: Prometheus cannot parse it"),
    _interval("1m1m", _PATTERN, "a unit twice: Prometheus cannot parse it"),
    _interval("1d", _PATTERN, "a unit outside h, m, s and ms"),
    _interval("-5s", _PATTERN, "a negative duration"),
    _interval("5 s", _PATTERN, "a space: Prometheus cannot parse it"),
    _interval("9999999s", _PATTERN, "more digits than any bound needs (and than CEL's duration() can hold)"),

    # --- issue 37: what exec cannot pass (NUL), control characters after a flag, keys no Secret holds ---
    Hostile("nul-in-revision", cr({"model": {"revision": "main\x00"}}), "spec.model.revision", _PATTERN, SCHEMA,
            "every pod fails at start (exec: invalid argument), no field named"),
    Hostile("nul-in-served-name", cr({"model": {"servedName": "m\x00x"}}), "spec.model.servedName", _PATTERN,
            SCHEMA, "every pod fails at start, no field named"),
    Hostile("escape-in-served-name", cr({"model": {"servedName": "m\x1b[2J"}}), "spec.model.servedName", _PATTERN,
            SCHEMA, "a terminal escape in every log line and /v1/models answer"),
    Hostile("del-in-revision", cr({"model": {"revision": "v1\x7f"}}), "spec.model.revision", _PATTERN, SCHEMA,
            "a revision no hub has, after a character no terminal shows"),
    Hostile("vertical-tab-in-revision", cr({"model": {"revision": "a\x0bb"}}), "spec.model.revision", _PATTERN,
            SCHEMA, "refused by validate and admitted by the API server (\\s differs between the two engines)"),
    Hostile("nul-in-ib-device", cr({**_PD, "disaggregation": {"transferBackend": "mooncake_tcp",
                                                              "ibDevice": "mlx5_0\x00"}}),
            "spec.disaggregation.ibDevice", _PATTERN, SCHEMA, "every prefill and decode pod fails at start"),
    Hostile("newline-in-ib-device", cr({**_PD, "disaggregation": {"transferBackend": "mooncake_tcp",
                                                                  "ibDevice": "mlx5_0\nmlx5_1"}}),
            "spec.disaggregation.ibDevice", _PATTERN, SCHEMA, "a second line in the worker's command line"),
    Hostile("nul-in-engine-env", cr({"engine": {"env": _env("X", "a\x00b")}}), "spec.engine.env[0].value",
            _PATTERN, SCHEMA, "every pod fails at start (exec takes env as C strings), no field named"),
    Hostile("nul-in-main-env", cr(main_container(env=_env("X", "\x00"))),
            "spec.template.spec.containers[0].env[0].value", _PATTERN, SCHEMA, "the same through the sglang entry"),
    Hostile("nul-in-sidecar-env", cr(sidecar(env=_env("X", "\x00"))),
            "spec.template.spec.containers[0].env[0].value", _PATTERN, SCHEMA, "every pod's sidecar fails at start"),
    Hostile("nul-in-sidecar-args", cr(sidecar(args=["a\x00"])),
            "spec.template.spec.containers[0].args[0]", _PATTERN, SCHEMA, "every pod's sidecar fails at start"),
    Hostile("nul-in-group-env", cr(_group(engine={"env": _env("X", "a\x00")})),
            "spec.workerGroups[0].engine.env[0].value", _PATTERN, SCHEMA, "the same through a worker group's env"),
    Hostile("token-secret-key-dotdot", cr({"model": {"tokenSecretRef": {"name": "hf", "key": ".."}}}),
            "spec.model.tokenSecretRef.key", _PATTERN, SCHEMA,
            "every pod waits for a key no Secret can hold (IsConfigMapKey)"),
    Hostile("token-secret-key-dot", cr({"model": {"tokenSecretRef": {"name": "hf", "key": "."}}}),
            "spec.model.tokenSecretRef.key", _PATTERN, SCHEMA, "every pod waits for a key no Secret can hold"),
    Hostile("api-key-secret-key-dotdot-prefix", cr({"engine": {"apiKeySecretRef": {"name": "k", "key": "..key"}}}),
            "spec.engine.apiKeySecretRef.key", _PATTERN, SCHEMA, "every pod waits for a key no Secret can hold"),

    # --- releases, and worker-group rules that read the fleet's version: the group named in the message ---
    Hostile("version-contradicts-image", cr({"engine": {"image": "lmsysorg/sglang:v0.5.21", "version": "0.5.9"}}),
            "spec.engine.version", "which is given too", SCHEMA, "status and flags for a release the pods do not run"),
    Hostile("group-backend-of-a-later-release",
            cr({"engine": {"version": "0.5.9"},
                **_group(parallelism={"tp": 8, "ep": 8, "moeA2ABackend": "deepep_v2"})}),
            "spec.workerGroups", "worker group 'g': is not accepted", SCHEMA, "workers that exit at start-up"),
]
# fmt: on

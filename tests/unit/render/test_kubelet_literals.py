"""Issue 29, gap 4, defence in depth: what a CR put into the worker's main container or the router's command reaches
the process as written, never expanded by the kubelet with the env the operator filled.

The rule (`tenant_rules`) refuses `$(` there for new CRs; these specs bypass it (`model_validate`, as for a CR
stored before the rule), render, and go through `kubelet_expand`, the kubelet's own expansion
(k8s.io/kubernetes third_party/forked/golang/expansion, `Expand` with `MappingFuncFor`) ported line by line.
"""

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sglang_operator.api.reserved import WORKER_API_KEY_ENV, kubelet_literal
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.render import Owner, render_all
from sglang_operator.render.router import router_deployment

SECRETS = {"HF_TOKEN": "hf_secret", WORKER_API_KEY_ENV: "worker-key", "SMG_API_KEY": "router-key"}
FIELDS = {"metadata.name": "pod-0", "metadata.namespace": "team-a", "status.podIP": "10.0.0.7"}


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """`$$` is `$`, `$(NAME)` is NAME's value when defined and stays `$(NAME)` when not, an unclosed `$(` stays."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            following = text[i + 1]
            if following == "$":
                out.append("$")
            elif following == "(" and (close := text.find(")", i + 2)) != -1:
                name = text[i + 2 : close]
                out.append(env.get(name, f"$({name})"))
                i = close + 1
                continue
            else:
                out.append("$" + following)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The env the kubelet builds: each value expanded with the variables defined before it, a later duplicate
    winning; Secrets and pod fields from the stand-ins above."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        source = var.get("valueFrom", {})
        if "value" in var:
            env[var["name"]] = kubelet_expand(var["value"], env)
        elif "secretKeyRef" in source:
            env[var["name"]] = SECRETS[var["name"]]
        elif "fieldRef" in source:
            env[var["name"]] = FIELDS[source["fieldRef"]["fieldPath"]]
    return env


def as_run(container: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    env = container_env(container)
    return [kubelet_expand(part, env) for part in container["command"]], env


def stored(raw: dict[str, Any]) -> SGLangDeploymentSpec:
    """A spec as the operator reads a CR stored before the rule: parsed, not checked."""
    return SGLangDeploymentSpec.model_validate({"model": {"path": "m"}, **raw})


def main_container(spec: SGLangDeploymentSpec) -> dict[str, Any]:
    pod = render_all(spec, Owner("f", "ns", "uid"))[0]
    assert pod["kind"] == "Pod"
    main: dict[str, Any] = next(c for c in pod["spec"]["containers"] if c["name"] == "sglang")
    return main


HOSTILE = stored({
    "model": {"path": "$(HF_TOKEN)", "servedName": "x$(POD_IP)", "revision": "$$(HF_TOKEN)",
              "tokenSecretRef": {"name": "hf"}, "cache": {"mountPath": "/c/$(POD_NAME)"}},
    "engine": {"apiKeySecretRef": {"name": "k"}, "args": ["$(X)", "0.0.0.0", "--log-level=$(SGLANG_OPERATOR_API_KEY)"],
               "env": [{"name": "X", "value": "--host"}, {"name": "Y", "value": "$(HF_TOKEN)"}]},
    "template": {"spec": {"containers": [{"name": "sglang", "env": [{"name": "Z", "value": "$(POD_IP)"}]},
                                         {"name": "helper", "image": "busybox", "command": ["echo", "$(B)"],
                                          "env": [{"name": "B", "value": "own"}]}]}},
})  # fmt: skip


def test_the_worker_runs_the_strings_the_cr_holds_never_their_expansion() -> None:
    command, env = as_run(main_container(HOSTILE))
    assert command[command.index("--model-path") + 1] == "$(HF_TOKEN)"
    assert command[command.index("--served-model-name") + 1] == "x$(POD_IP)"
    assert command[command.index("--revision") + 1] == "$$(HF_TOKEN)"
    assert command[-3:] == ["$(X)", "0.0.0.0", "--log-level=$(SGLANG_OPERATOR_API_KEY)"]
    assert command.count("--host") == 1  # the operator's own: no second one assembled from env X
    assert not any(secret in part for part in command for secret in SECRETS.values())
    assert (env["HF_HOME"], env["Y"], env["Z"]) == ("/c/$(POD_NAME)", "$(HF_TOKEN)", "$(POD_IP)")


def test_sidecars_keep_their_own_expansion() -> None:
    """A sidecar's command and env expand with its own env only (nothing of the operator's): left as written."""
    pod = render_all(HOSTILE, Owner("f", "ns", "uid"))[0]
    helper = next(c for c in pod["spec"]["containers"] if c["name"] == "helper")
    assert helper["command"] == ["echo", "$(B)"] and as_run(helper)[0] == ["echo", "own"]


def test_the_router_expands_only_the_operators_key_reference() -> None:
    spec = stored({"router": {"apiKeySecretRef": {"name": "r"}, "args": ["--log-dir=$(SMG_API_KEY)"]}})
    deployment = router_deployment(spec, Owner("f", "ns", "uid"))
    command, _ = as_run(deployment["spec"]["template"]["spec"]["containers"][0])
    assert command[command.index("--api-key") + 1] == "router-key"
    assert command[-1] == "--log-dir=$(SMG_API_KEY)"


@given(st.text(alphabet="$()AB x", max_size=24))
def test_a_literal_expands_to_no_variable(text: str) -> None:
    """Whatever the env holds, the expansion is the same: no reference is resolved. A string without `$$` comes
    back as written; one without `$(` is not touched at all, so a spec without one renders byte-identical objects
    (its `$$`, which the kubelet reads as `$`, means what it meant)."""
    literal = kubelet_literal(text)
    assert kubelet_expand(literal, {"A": "--host", "B": "secret"}) == kubelet_expand(literal, {})
    if "$$" not in text:
        assert kubelet_expand(literal, {"A": "--host"}) == text
    if "$(" not in text:
        assert literal == text

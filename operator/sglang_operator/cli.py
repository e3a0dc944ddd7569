"""`sglang-operator {run,render,validate,plan,sim}`.

Exit codes: 0 success; 1 the CR is invalid (render/validate); 2 the command could not run (unreadable file,
YAML error, wrong kind or apiVersion, bad arguments). Errors go to stderr as one line each, never a traceback.
"""

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from .api.constants import API_VERSION, KIND
from .api.spec import SGLangDeploymentSpec
from .api.validation import NAME_RULE, FieldError, parse_spec
from .capacity import replicas_for_load
from .render import Owner, render_all

PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"


class UsageError(Exception):
    """The command cannot run at all (exit 2)."""


@dataclass(frozen=True)
class LoadedCR:
    owner: Owner
    raw_spec: Any


def load_cr(path: str) -> LoadedCR:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{path}: invalid YAML{where}: {getattr(exc, 'problem', exc)}") from exc
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise UsageError(f"{path}: expected exactly one {KIND} object, found {len(documents)} documents")
    doc = documents[0]
    if doc.get("kind") != KIND or doc.get("apiVersion") != API_VERSION:
        raise UsageError(
            f"{path}: expected kind {KIND} and apiVersion {API_VERSION}, "
            f"got kind {doc.get('kind')!r} and apiVersion {doc.get('apiVersion')!r}"
        )
    meta = doc.get("metadata") or {}
    owner = Owner(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or "default"),
        uid=str(meta.get("uid") or PLACEHOLDER_UID),
    )
    return LoadedCR(owner=owner, raw_spec=doc.get("spec"))


def check_cr(cr: LoadedCR) -> tuple[SGLangDeploymentSpec | None, list[FieldError]]:
    name_errors = [FieldError("metadata.name", "is required.")] if not cr.owner.name else NAME_RULE.check(cr.owner.name)
    spec, errors = parse_spec(cr.raw_spec)
    errors = name_errors + errors
    return (spec if not errors else None), errors


def _print_errors(errors: list[FieldError]) -> None:
    for error in errors:
        print(f"error: {error}", file=sys.stderr)


def cmd_validate(args: argparse.Namespace) -> int:
    cr = load_cr(args.file)
    _, errors = check_cr(cr)
    if args.output == "json":
        payload = {"valid": not errors, "errors": [{"field": e.field, "message": e.message} for e in errors]}
        print(json.dumps(payload, indent=2))
    elif errors:
        _print_errors(errors)
    else:
        print(f"{cr.owner.namespace}/{cr.owner.name}: valid")
    return 1 if errors else 0


def cmd_render(args: argparse.Namespace) -> int:
    cr = load_cr(args.file)
    spec, errors = check_cr(cr)
    if spec is None:
        _print_errors(errors)
        return 1
    objects = render_all(spec, cr.owner)
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
    else:
        print(yaml.safe_dump_all(objects, sort_keys=False, width=120), end="")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    for flag, value in (
        ("--qps", args.qps),
        ("--latency", args.latency),
        ("--concurrency", args.concurrency),
    ):
        if value is None or value <= 0:
            raise UsageError(f"{flag} must be a positive number (got {value})")
    if args.headroom < 0:
        raise UsageError(f"--headroom must be 0 or more (got {args.headroom})")
    replicas = replicas_for_load(args.qps, args.latency, args.concurrency)
    with_headroom = replicas_for_load(args.qps, args.latency, args.concurrency, args.headroom)
    if args.output == "json":
        print(json.dumps({"replicas": replicas, "replicasWithHeadroom": with_headroom}))
    else:
        print(
            f"{args.qps:g} QPS x {args.latency:g} s / {args.concurrency:g} concurrent per replica -> "
            f"{replicas} replicas; with {args.headroom:.0%} headroom: {with_headroom}"
        )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .controller.runner import run_operator

    return run_operator(
        namespaces=args.namespace or [],
        prometheus_url=args.prometheus_url,
        verbose=args.verbose,
        liveness=args.liveness,
        prometheus_token_file=args.prometheus_bearer_token_file,
        prometheus_ca_file=args.prometheus_ca_file,
        allowed_prometheus_urls=args.allow_prometheus_url or [],
        allowed_host_paths=args.allow_host_path or [],
        operator_namespace=args.operator_namespace,
        operator_pod_labels=args.operator_pod_labels,
        prometheus_namespace_labels=args.prometheus_namespace_labels,
        prometheus_pod_labels=args.prometheus_pod_labels,
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sglang-operator", description="Run and check fleets of SGLang servers on Kubernetes.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    render = sub.add_parser("render", help="print every child object of the CR in FILE")
    render.add_argument("-f", "--file", required=True, help="SGLangDeployment YAML ('-' for stdin)")
    render.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    render.set_defaults(func=cmd_render)

    validate = sub.add_parser("validate", help="check the CR in FILE against every rule the API server enforces")
    validate.add_argument("-f", "--file", required=True, help="SGLangDeployment YAML ('-' for stdin)")
    validate.add_argument("-o", "--output", choices=["text", "json"], default="text")
    validate.set_defaults(func=cmd_validate)

    plan = sub.add_parser("plan", help="replicas for a load, by Little's law: ceil(QPS x latency / concurrency)")
    plan.add_argument("--qps", type=float, help="requests per second")
    plan.add_argument("--latency", type=float, help="seconds a request spends in the server")
    plan.add_argument("--concurrency", type=float, help="requests one replica serves at once")
    plan.add_argument("--headroom", type=float, default=0.3, help="spare capacity fraction (default 0.3)")
    plan.add_argument("-o", "--output", choices=["text", "json"], default="text")
    plan.set_defaults(func=cmd_plan)

    run = sub.add_parser("run", help="run the operator (kopf) against the current kubeconfig or in-cluster")
    run.add_argument("--namespace", action="append", help="watch only these namespaces (default: all)")
    run.add_argument("--prometheus-url", default=None, help="default Prometheus for autoscaling")
    run.add_argument(
        "--prometheus-bearer-token-file",
        metavar="PATH",
        help="bearer token for the default Prometheus, read every pass (e.g. the service account's token)",
    )
    run.add_argument("--prometheus-ca-file", metavar="PATH", help="CA bundle that signed the default Prometheus")
    run.add_argument(
        "--allow-prometheus-url",
        action="append",
        metavar="PREFIX",
        help="URL prefix a CR's own autoscaling.prometheusURL may start with (repeatable; default: none, only "
        "--prometheus-url is read)",
    )
    run.add_argument(
        "--allow-host-path",
        action="append",
        metavar="PATH",
        help="node directory (and below) a CR's model.cache.hostPath may name (repeatable; default: none)",
    )
    run.add_argument("--operator-namespace", metavar="NS", help="the operator's namespace, admitted by NetworkPolicies")
    run.add_argument("--operator-pod-labels", metavar="K=V,...", help="the operator pods' labels (NetworkPolicies)")
    run.add_argument(
        "--prometheus-namespace-labels", metavar="K=V,...", help="labels of Prometheus' namespace (NetworkPolicies)"
    )
    run.add_argument("--prometheus-pod-labels", metavar="K=V,...", help="Prometheus pods' labels (NetworkPolicies)")
    run.add_argument("--liveness", metavar="URL", help="kopf health endpoint, e.g. http://0.0.0.0:8080/healthz")
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(func=cmd_run)

    sub.add_parser("sim", help="run the SGLang engine simulator: sglang-operator sim <sglang.launch_server flags>")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sim"] and argv[1:2] not in (["-h"], ["--help"]):
        # sglang.launch_server flags start with "--", which argparse would take for ours: hand them over untouched.
        from .sim import main as sim_main

        return sim_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        result = int(args.func(args))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return result


if __name__ == "__main__":
    raise SystemExit(main())

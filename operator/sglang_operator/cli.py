"""`sglang-operator {run,render,validate,plan,doctor}`.

Exit codes: 0 success; 1 the CR is invalid (render/validate); 2 the command could not run (unreadable file,
YAML error, wrong kind or apiVersion, bad arguments). Errors go to stderr as one line each, never a traceback:
`error: <file>: <field>: <problem>`. Reading the file is bounded (`crfile`), and so is what `render` prints.
"""

import argparse
import contextlib
import json
import math
import os
import re
import sys
from collections.abc import Mapping
from typing import Any, NoReturn

import yaml

from .api.disaggregation_rules import check_transition
from .api.rule import FieldError
from .api.spec import SGLangDeploymentSpec
from .api.validation import NAME_RULE, check_pod_policy, parse_spec
from .capacity import concurrency_per_replica, plan_for_spec, replicas_for_load
from .crfile import CRFileError, LoadedCR, load_cr
from .groupplan import GroupArgError, format_plan, parse_group, plan_groups
from .kubeyaml import kubectl_dumper
from .render import Owner, render_all
from .runtime.leasetiming import Timing
from .settings import OperatorSettings, load_settings, operator_environment

MAX_ERROR_LINES = 100
"""Problems printed per file; a list of 100,000 wrong items says the same thing after the first hundred."""
MAX_LINE_CHARS = 1000
"""Characters printed per problem: the field and the rule come first, the quoted input last."""
MAX_RENDERED_PODS = 1024
"""Worker pods `render` prints at most (about 3 MB of YAML, 2 s): a preview, never an unbounded amount of output."""
MAX_PLANNED_REPLICAS = 1e9
"""`plan` answers up to here; beyond, the units are wrong (and a float no longer rounds to a count)."""
# libyaml's emitter (same text, faster), quoting what kubectl would read otherwise (`y`, `0o10`)
_Dumper = kubectl_dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper))


class UsageError(Exception):
    """The command cannot run at all (exit 2)."""


def check_cr(
    cr: LoadedCR, settings: OperatorSettings | None = None
) -> tuple[SGLangDeploymentSpec | None, list[FieldError]]:
    """Everything wrong with the CR (its metadata, its spec with unknown fields as errors, then what the operator's
    settings refuse: by default, as the default operator, any node directory and any Prometheus of the CR's own);
    the spec only when nothing is."""
    settings = settings or OperatorSettings()
    problems = list(cr.meta_errors)
    if not cr.meta.name and not problems:
        problems.append(FieldError("metadata.name", "is required."))
    elif cr.meta.name:
        problems += NAME_RULE.check(cr.meta.name)
    if len(cr.meta.namespace) > 63 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", cr.meta.namespace):
        problems.append(
            FieldError(
                "metadata.namespace",
                "must be a DNS-1123 label of at most 63 characters (lower-case letters, digits and '-'): no "
                "namespace has another name.",
            )
        )
    spec, errors = parse_spec(cr.raw_spec, strict=True)
    problems += errors
    if spec is not None:
        problems += check_pod_policy(spec, settings.pod_policy)
        url = spec.autoscaling.prometheus_url
        if url is not None and not settings.prometheus_url_allowed(url):
            allowed = ", ".join(settings.allowed_prometheus_urls) or "none"
            problems.append(
                FieldError(
                    "spec.autoscaling.prometheusURL",
                    f"is not a Prometheus the operator allows (allowed: {allowed}): it sends that URL no query and "
                    "reads no prometheusAuth Secret for it, so the fleet does not autoscale; omit prometheusURL to "
                    "use the operator's default Prometheus, or ask the cluster admin to allow it "
                    "(--allow-prometheus-url).",
                )
            )
    return (spec if not problems else None), problems


def printable(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """`text` as one line of at most `limit` characters: control characters (a newline, an escape sequence a
    tenant put in a field name) are shown escaped instead of acting on the terminal."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else f"{text[: limit - 40]}... ({len(text) - limit + 40} more characters)"


def _shown(errors: list[FieldError]) -> list[FieldError]:
    return [FieldError(printable(e.field, 200), printable(e.message)) for e in errors[:MAX_ERROR_LINES]]


def _print_errors(source: str, errors: list[FieldError]) -> None:
    for error in _shown(errors):
        print(f"error: {printable(source, 200)}: {error}", file=sys.stderr)
    if len(errors) > MAX_ERROR_LINES:
        print(f"error: {printable(source, 200)}: ... and {len(errors) - MAX_ERROR_LINES} more", file=sys.stderr)


def _settings(args: argparse.Namespace) -> OperatorSettings:
    """The operator `validate` and `render` check against: their policy flags read by the parser `run` reads its own
    with (`settings.load_settings`), so that a value `run` reads as none (`--rdma-resource "rdma hca"`, not a
    resource name) is none here too; the environment is not read (by default, the default operator)."""
    return load_settings(
        operator_environment(
            allowed_host_paths=args.allow_host_path or [],
            allowed_prometheus_urls=args.allow_prometheus_url or [],
            rdma_resource=args.rdma_resource,
        )
    )


def _owner(cr: LoadedCR) -> Owner:
    return Owner(name=cr.meta.name, namespace=cr.meta.namespace, uid=cr.meta.uid)


def cmd_validate(args: argparse.Namespace) -> int:
    cr = load_cr(args.file)
    spec, errors = check_cr(cr, _settings(args))
    if args.old is not None and spec is not None:
        old, old_errors = check_cr(load_cr(args.old), _settings(args))
        if old is None:
            raise UsageError(f"{args.old}: the stored CR does not validate itself: {old_errors[0]}")
        errors = check_transition(old, spec)
    if args.output == "json":
        payload: dict[str, Any] = {
            "file": cr.source,
            "valid": not errors,
            "errors": [{"field": e.field, "message": e.message} for e in _shown(errors)],
        }
        if len(errors) > MAX_ERROR_LINES:
            payload["moreErrors"] = len(errors) - MAX_ERROR_LINES
        print(json.dumps(payload, indent=2))
    elif errors:
        _print_errors(cr.source, errors)
    else:
        print(f"{printable(cr.meta.namespace, 200)}/{printable(cr.meta.name, 200)}: valid")
    return 1 if errors else 0


def cmd_render(args: argparse.Namespace) -> int:
    cr = load_cr(args.file)
    settings = _settings(args)
    spec, errors = check_cr(cr, settings)
    if spec is None:
        _print_errors(cr.source, errors)
        return 1
    pods = spec.replicas * spec.parallelism.nnodes
    if pods > MAX_RENDERED_PODS:
        raise UsageError(
            f"{cr.source}: render prints at most {MAX_RENDERED_PODS} worker pods and this fleet has {pods} "
            "(replicas x nnodes); lower spec.replicas to preview it"
        )
    objects = render_all(spec, _owner(cr), settings)
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
    else:
        print(yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=120), end="")
    return 0


def _plan_concurrency(args: argparse.Namespace) -> tuple[float, SGLangDeploymentSpec | None]:
    """C from `--concurrency`, or from the spec in `-f` as SGLang computes it (maxRunningRequests split across
    attention-DP ranks, whole per in-process DP replica); a spec that does not validate is exit 1."""
    if args.file is None:
        return args.concurrency, None
    cr = load_cr(args.file)
    spec, errors = parse_spec(cr.raw_spec, strict=True)
    if spec is None:
        _print_errors(cr.source, errors)
        raise SpecInvalid
    return float(concurrency_per_replica(spec)), spec


class SpecInvalid(Exception):
    """The spec given to `plan -f` does not validate (exit 1; its errors are printed)."""


def cmd_plan(args: argparse.Namespace) -> int:
    if args.file is not None and args.concurrency is not None:
        raise UsageError("give --concurrency or -f SPEC (which sets it), not both")
    if args.group:
        return _plan_mix(args)
    try:
        concurrency, spec = _plan_concurrency(args)
    except SpecInvalid:
        return 1
    for flag, value in (
        ("--qps", args.qps),
        ("--latency", args.latency),
        ("--concurrency", concurrency),
    ):
        if value is None or not math.isfinite(value) or value <= 0:
            raise UsageError(f"{flag} must be a positive number (got {value})")
    if not math.isfinite(args.headroom) or args.headroom < 0:
        raise UsageError(f"--headroom must be 0 or more (got {args.headroom})")
    load = args.qps * args.latency * (1 + args.headroom) / concurrency
    if not load <= MAX_PLANNED_REPLICAS:
        raise UsageError(
            f"{args.qps:g} QPS x {args.latency:g} s / {concurrency:g} needs more than {MAX_PLANNED_REPLICAS:g} "
            "replicas: check the units (QPS, seconds, requests per replica)"
        )
    replicas = replicas_for_load(args.qps, args.latency, concurrency)
    with_headroom = replicas_for_load(args.qps, args.latency, concurrency, args.headroom)
    payload: dict[str, Any] = {"replicas": replicas, "replicasWithHeadroom": with_headroom}
    if spec is not None:
        planned = plan_for_spec(spec, args.qps, args.latency, args.headroom)
        payload.update({key: planned[key] for key in ("concurrencyPerReplica", "gpusPerReplica", "totalGPUs")})
    if args.output == "json":
        print(json.dumps(payload))
    else:
        gpus = f" ({payload['totalGPUs']} GPUs)" if spec is not None else ""
        print(
            f"{args.qps:g} QPS x {args.latency:g} s / {concurrency:g} concurrent per replica -> "
            f"{replicas} replicas; with {args.headroom:.0%} headroom: {with_headroom}{gpus}"
        )
    return 0


def _plan_mix(args: argparse.Namespace) -> int:
    """`plan --group ... [--group ...]`: per-group and total capacity of a mix of shapes, and with a load the
    autoscaler's split for it."""
    if args.file is not None or args.concurrency is not None:
        raise UsageError("--group describes the fleet: give it without -f and --concurrency")
    if (args.qps is None) != (args.latency is None):
        raise UsageError("give both --qps and --latency, or neither")
    for flag, value in (("--qps", args.qps), ("--latency", args.latency)):
        if value is not None and (not math.isfinite(value) or value <= 0 or value > 1e9):
            raise UsageError(f"{flag} must be a positive number (got {value})")
    try:
        groups = [parse_group(text, i) for i, text in enumerate(args.group)]
    except GroupArgError as err:
        raise UsageError(str(err)) from err
    plan = plan_groups(groups, args.qps, args.latency, args.headroom)
    print(json.dumps(plan) if args.output == "json" else format_plan(plan))
    return 0


def leader_timing(args: argparse.Namespace) -> Timing:
    """The election's durations from `run`'s flags; ValueError when they would allow two leaders at once."""
    return Timing(
        lease_seconds=args.leader_election_lease_duration,
        renew_deadline_seconds=args.leader_election_renew_deadline,
        renew_interval_seconds=args.leader_election_renew_interval,
        retry_seconds=args.leader_election_retry_period,
    )


def run_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> OperatorSettings:
    """The operator's settings: `run`'s flags over the environment (the chart's `extraEnv`), parsed once. Pure."""
    flags = operator_environment(
        prometheus_url=args.prometheus_url,
        prometheus_token_file=args.prometheus_bearer_token_file,
        prometheus_ca_file=args.prometheus_ca_file,
        allowed_prometheus_urls=args.allow_prometheus_url or [],
        allowed_host_paths=args.allow_host_path or [],
        rdma_resource=args.rdma_resource,
        operator_namespace=args.operator_namespace,
        operator_pod_labels=args.operator_pod_labels,
        prometheus_namespace_labels=args.prometheus_namespace_labels,
        prometheus_pod_labels=args.prometheus_pod_labels,
        allow_prometheus_headers_to_default=args.allow_prometheus_headers_to_default,
        workers=args.workers,
        resync_seconds=args.resync_seconds,
    )
    return load_settings({**environ, **flags})


def cmd_run(args: argparse.Namespace) -> int:
    from .app import operator_loops
    from .runtime import leader
    from .runtime.runner import LeaderElection, run_operator

    election = None
    if args.leader_elect:
        try:
            timing = leader_timing(args)
        except ValueError as exc:
            print(f"error: --leader-election-*: {exc}", file=sys.stderr)
            return 2
        election = LeaderElection(
            namespace=args.leader_election_namespace or leader.default_namespace(os.environ),
            name=args.leader_election_name or leader.LEASE_NAME,
            identity=leader.new_identity(args.leader_election_identity, os.environ),
            timing=timing,
        )
    settings = run_settings(args, os.environ)
    return run_operator(
        operator_loops(settings),
        settings,
        namespaces=args.namespace or [],
        verbose=args.verbose,
        liveness=args.liveness,
        leader_election=election,
        metrics_port=args.metrics_port,
        metrics_address=args.metrics_address,
    )


def cmd_doctor(args: argparse.Namespace) -> int:
    """The fleet doctor's findings for one SGLangDeployment (the code lives in `doctor.report`)."""
    from .doctor.report import DoctorError, default_namespace, examine, render

    try:
        settings = load_settings(os.environ)  # the CLI's default Prometheus: $SGLANG_OPERATOR_PROMETHEUS_URL
        report = examine(args.name, args.namespace or default_namespace(), args.prometheus_url, settings)
    except DoctorError as exc:
        raise UsageError(str(exc)) from exc
    sys.stdout.write(render(report, args.output))
    return 1 if report["findings"] else 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (0-65535): {text!r}")
    return port


def _add_policy_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-host-path",
        action="append",
        metavar="PATH",
        help="check against an operator that allows model.cache.hostPath under PATH (as run --allow-host-path; "
        "default: none, as the default operator)",
    )
    parser.add_argument(
        "--allow-prometheus-url",
        action="append",
        metavar="PREFIX",
        help="check against an operator that allows a CR's own autoscaling.prometheusURL under PREFIX (as run "
        "--allow-prometheus-url; default: none, as the default operator)",
    )
    parser.add_argument(
        "--rdma-resource",
        metavar="NAME",
        help="render as an operator whose prefill/decode workers get one NAME device and IPC_LOCK (as run "
        "--rdma-resource; default: none)",
    )


LEADER_RENEW_DEADLINE_HELP = "the holder stops this long after its last successful renewal; keep it 2 s or more \
under the lease duration"
LEADER_RENEW_INTERVAL_HELP = "the holder renews this often: the operator's fixed API cost when nothing changes"
LEADER_RETRY_HELP = "after a failed renewal, read or write of the Lease, the next attempt comes this soon"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sglang-operator", description="Run and check fleets of SGLang servers on Kubernetes.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    render = sub.add_parser("render", help="print every child object of the CR in FILE")
    render.add_argument("-f", "--file", required=True, help="SGLangDeployment YAML ('-' for stdin)")
    render.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    _add_policy_flags(render)
    render.set_defaults(func=cmd_render)

    validate = sub.add_parser("validate", help="check the CR in FILE against every rule the API server enforces")
    validate.add_argument("-f", "--file", required=True, help="SGLangDeployment YAML ('-' for stdin)")
    validate.add_argument("-o", "--output", choices=["text", "json"], default="text")
    validate.add_argument(
        "--old",
        metavar="FILE",
        help="the stored CR this one would replace: also check what the API server refuses on update (switching a "
        "fleet between colocated and prefill/decode)",
    )
    _add_policy_flags(validate)
    validate.set_defaults(func=cmd_validate)

    plan = sub.add_parser("plan", help="replicas for a load, by Little's law: ceil(QPS x latency / concurrency)")
    plan.add_argument("--qps", type=float, help="requests per second")
    plan.add_argument("--latency", type=float, help="seconds a request spends in the server")
    plan.add_argument("--concurrency", type=float, help="requests one replica serves at once")
    plan.add_argument(
        "-f", "--file", help="take the concurrency from this SGLangDeployment, as SGLang computes it ('-' for stdin)"
    )
    plan.add_argument("--headroom", type=float, default=0.3, help="spare capacity fraction (default 0.3)")
    plan.add_argument(
        "--group",
        action="append",
        metavar="tp=4,count=1[,dp=N,attentionDP=N,maxRunningRequests=N|concurrency=N,max=N,name=X]",
        help="one worker group of a mix (repeat): prints per-group and total capacity",
    )
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
        "--allow-prometheus-headers-to-default",
        action="store_true",
        help="send a CR's autoscaling.prometheusAuth.headers (e.g. X-Scope-OrgID) to the default --prometheus-url "
        "too (default: a CR that names headers and no prometheusURL of its own is not read)",
    )
    run.add_argument(
        "--allow-host-path",
        action="append",
        metavar="PATH",
        help="node directory (and below) a CR's model.cache.hostPath may name (repeatable; default: none)",
    )
    run.add_argument(
        "--rdma-resource",
        metavar="NAME",
        help="the RDMA device plugin's resource (e.g. rdma/rdma_shared_device_a): prefill/decode workers whose KV "
        "moves over RDMA ask for one and get IPC_LOCK, never privileged (default: none)",
    )
    run.add_argument("--operator-namespace", metavar="NS", help="the operator's namespace, admitted by NetworkPolicies")
    run.add_argument("--operator-pod-labels", metavar="K=V,...", help="the operator pods' labels (NetworkPolicies)")
    run.add_argument(
        "--prometheus-namespace-labels", metavar="K=V,...", help="labels of Prometheus' namespace (NetworkPolicies)"
    )
    run.add_argument("--prometheus-pod-labels", metavar="K=V,...", help="Prometheus pods' labels (NetworkPolicies)")
    run.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="threads every pass runs in, whatever the number of CRs (1-256; default $SGLANG_OPERATOR_WORKERS, else 8)",
    )
    run.add_argument(
        "--resync-seconds",
        type=float,
        metavar="SECONDS",
        help="a CR's pass comes at least this often with nothing changing (1-3600; default "
        "$SGLANG_OPERATOR_RESYNC_SECONDS, else 5)",
    )
    run.add_argument("--liveness", metavar="URL", help="kopf health endpoint, e.g. http://0.0.0.0:8080/healthz")
    run.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="run kopf only while holding a coordination.k8s.io Lease, so that of several replicas one writes "
        "(default: off, for a single process; the chart turns it on)",
    )
    run.add_argument(
        "--leader-election-namespace",
        metavar="NS",
        help="namespace of the Lease (default: $POD_NAMESPACE, else the in-cluster namespace, else default)",
    )
    run.add_argument(
        "--leader-election-name", metavar="NAME", help="name of the Lease (default: sglang-operator-leader)"
    )
    run.add_argument(
        "--leader-election-identity",
        metavar="NAME",
        help="this replica's name in the Lease (default: $POD_NAME, else the host name); a random suffix is added",
    )
    timing = run.add_argument_group(
        "leader election timing", "a standby takes over at most the lease duration after the last renewal"
    )
    default = Timing()
    for flag, kind, seconds, help_text in (
        ("--leader-election-lease-duration", int, default.lease_seconds, "how long a Lease runs unrenewed"),
        ("--leader-election-renew-deadline", float, default.renew_deadline_seconds, LEADER_RENEW_DEADLINE_HELP),
        ("--leader-election-renew-interval", float, default.renew_interval_seconds, LEADER_RENEW_INTERVAL_HELP),
        ("--leader-election-retry-period", float, default.retry_seconds, LEADER_RETRY_HELP),
    ):
        timing.add_argument(
            flag, type=kind, default=seconds, metavar="SECONDS", help=f"{help_text} (default {seconds:g} s)"
        )
    run.add_argument(
        "--metrics-port", type=_port, default=0, metavar="PORT", help="serve /metrics on PORT (default 0: off)"
    )
    run.add_argument(
        "--metrics-address", default="0.0.0.0", metavar="ADDR", help="address /metrics listens on (default 0.0.0.0)"
    )
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(func=cmd_run)

    doctor = sub.add_parser(
        "doctor",
        help="diagnose a fleet: uneven load, slow replicas, cache-hit spread, slow starts and scale-ups (exit 0: "
        "no findings, 1: findings, 2: could not read the fleet)",
    )
    doctor.add_argument("name", metavar="NAME", help="the SGLangDeployment")
    doctor.add_argument("-n", "--namespace", metavar="NS", help="its namespace (default: the kubeconfig context's)")
    doctor.add_argument("-o", "--output", choices=("table", "json"), default="table")
    doctor.add_argument(
        "--prometheus-url",
        metavar="URL",
        help="read metrics here (default: the CR's autoscaling.prometheusURL with its prometheusAuth, else "
        "$SGLANG_OPERATOR_PROMETHEUS_URL)",
    )
    doctor.set_defaults(func=cmd_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return int(args.func(args))  # the operator's own failures keep their tracebacks, for its logs
    for stream in (sys.stdout, sys.stderr):  # a terminal that cannot show a character gets an escape, not an error
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    try:
        return int(args.func(args))
    except (UsageError, CRFileError) as exc:
        print(f"error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `render | head`: the reader left. Say nothing more; what stdout still buffers goes to /dev/null at exit
        # instead of raising again there (the recipe of Python's signal docs).
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:
        # Last resort, never expected (the tests' fuzzers check that nothing reaches it): one line, no traceback.
        print(f"error: internal error: {type(exc).__name__}: {printable(str(exc), 300)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

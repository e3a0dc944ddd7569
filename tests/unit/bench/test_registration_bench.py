"""The pure half of `bench/registration.py`: episodes, latencies, stale exposure, the table, the discovery router.

Timelines are written by hand so every expected number can be checked on paper; the cluster half runs only in
the benchmark itself.
"""

import numpy as np
import pytest

from bench.registration_model import (
    WORKER_SELECTOR,
    ChurnEvent,
    PodObs,
    RouterSample,
    discovery_routers,
    exposure,
    percentile,
    ready_episodes,
    registration_time,
    removal_time,
    render_table,
    routable_urls,
    summarize,
)
from sglang_operator.api.spec import SGLangDeploymentSpec

A, B = "http://127.1.0.1:30000", "http://127.1.0.2:30000"


def obs(t: float, uid: str, url: str | None, serving: bool, initial: bool = False) -> PodObs:
    return PodObs(t, uid, f"pod-{uid}", url, serving, None, initial)


def sample(t: float, router: str, routable: set[str], listed: set[str] | None = None, group: str = "g") -> RouterSample:
    return RouterSample(t, group, router, frozenset(routable), frozenset(routable if listed is None else listed))


def test_episodes_open_on_ready_and_close_on_not_ready_or_deletion() -> None:
    timeline = [
        obs(0.0, "a", A, True, initial=True),
        obs(1.0, "a", A, False),  # killed
        obs(2.0, "b", None, False),  # created, no IP yet
        obs(3.0, "b", B, False),
        obs(4.0, "a", A, True),  # restarted in place
        obs(5.0, "b", B, True),
        obs(6.0, "b", B, True),  # a repeated Ready does not open a second episode
        obs(7.0, "b", B, False),  # deleted
    ]
    episodes = ready_episodes(timeline)
    assert [(e.uid, e.start, e.end, e.initial) for e in episodes] == [
        ("a", 0.0, 1.0, True),
        ("a", 4.0, None, False),
        ("b", 5.0, 7.0, False),
    ]


def test_registration_needs_every_router_and_must_happen_while_the_pod_serves() -> None:
    (episode,) = ready_episodes([obs(10.0, "a", A, True), obs(20.0, "a", A, False)])
    fast = [sample(9.0, "r1", {A}), sample(10.5, "r1", {A})]
    slow = [sample(10.5, "r2", set(), listed={A}), sample(12.0, "r2", {A})]
    assert registration_time(episode, {"r1": fast}) == pytest.approx(0.5)  # the 9.0 sample predates Ready
    assert registration_time(episode, {"r1": fast, "r2": slow}) == pytest.approx(2.0)  # listed-unhealthy is not enough
    assert registration_time(episode, {"r1": fast, "r2": slow}, listed=True) == pytest.approx(0.5)
    too_late = [sample(21.0, "r3", {A})]
    assert registration_time(episode, {"r1": fast, "r3": too_late}) is None


def test_removal_counts_until_unroutable_everywhere_or_none_if_kept_until_back() -> None:
    episodes = ready_episodes([obs(0.0, "a", A, True), obs(5.1, "a", A, False), obs(15.0, "a", A, True)])
    kill = ChurnEvent(5.0, "kill", "pod-a", A)
    quick = [sample(5.05, "r1", {A}), sample(5.3, "r1", set())]
    slow = [sample(5.3, "r2", {A}), sample(9.0, "r2", set())]
    assert removal_time(kill, episodes, {"r1": quick}) == pytest.approx(0.3)
    assert removal_time(kill, episodes, {"r1": quick, "r2": slow}) == pytest.approx(4.0)
    kept = [sample(t, "r3", {A}) for t in (5.5, 10.0, 14.9)] + [sample(16.0, "r3", set())]
    assert removal_time(kill, episodes, {"r3": kept}) is None  # back at 15.0 before it ever left


def test_percentile_matches_numpy() -> None:
    values = [0.3, 2.5, 1.0, 7.25, 0.8, 4.0, 3.3]
    for q in (0, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 50) is None


def test_exposure_integrates_stale_listed_and_missing_entries() -> None:
    pods = [obs(0.0, "a", A, True), obs(0.0, "b", B, True), obs(1.05, "b", B, False)]
    samples = [
        sample(0.5, "r", {A, B}),
        sample(1.5, "r", {A, B}),  # b is gone: 1 stale for 1.0 s
        sample(2.0, "r", {A}, listed={A, B}),  # b draining: listed-stale for 0.5 s, routable-stale 0
        sample(2.5, "r", set(), listed={A}),  # a not routable: missing for 0.5 s
        sample(5.0, "r", {A}),  # a 2.5 s gap counts as MAX_DT_S = 1.0 s
    ]
    seen = exposure(pods, samples)
    assert seen.samples == 5
    assert (seen.stale_max, seen.stale_mean) == (1, pytest.approx(0.2))
    assert seen.stale_s == pytest.approx(1.0)
    assert seen.listed_stale_s == pytest.approx(1.5)
    assert seen.missing_s == pytest.approx(0.5)


def test_summarize_excludes_pods_that_were_ready_before_recording() -> None:
    pods = [obs(0.0, "a", A, True, initial=True), obs(3.0, "b", B, True)]
    samples = [sample(0.1, "r", {A}, group="operator"), sample(3.4, "r", {A, B}, group="operator")]
    samples += [sample(3.2, "d", {A, B}, group="discovery")]
    pods += [obs(4.0, "a", A, False)]
    samples += [sample(4.3, "r", {B}, group="operator"), sample(4.6, "d", {B}, group="discovery")]
    events = [ChurnEvent(3.9, "delete", "pod-a", A)]
    op, disc = (summarize(g, pods, samples, events, sent=10, failed=1) for g in ("operator", "discovery"))
    assert (op.transitions, len(op.latencies), op.routers) == (1, 1, 1)
    assert op.latencies == [pytest.approx(0.4)] and disc.latencies == [pytest.approx(0.2)]
    assert op.removals == {"delete": [pytest.approx(0.4)]} and disc.removals == {"delete": [pytest.approx(0.7)]}
    table = render_table([op, disc], "header")
    assert table.splitlines()[0] == "header"
    assert "unroutable after delete p50 / max" in table
    assert "0.40s" in table and "0.20s" in table and "0.70s / 0.70s" in table and "10 / 1" in table


def test_routable_means_healthy_and_ready() -> None:
    workers = [
        {"url": A, "is_healthy": True, "status": "ready"},
        {"url": B, "is_healthy": False, "status": "draining"},
        {"url": "http://127.1.0.3:30000", "is_healthy": True, "status": "pending"},
    ]
    routable, listed = routable_urls(workers)
    assert routable == {A} and len(listed) == 3


def test_discovery_router_is_the_operator_router_plus_discovery_flags() -> None:
    spec = SGLangDeploymentSpec.model_validate({"model": {"path": "m"}, "router": {"args": ["--log-level", "warn"]}})
    objects = discovery_routers("ns", spec, count=2)
    kinds = [o["kind"] for o in objects]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "Pod", "Pod"]
    pod = objects[-1]
    command = pod["spec"]["containers"][0]["command"]
    assert pod["spec"]["serviceAccountName"] == objects[0]["metadata"]["name"]
    assert command[:2] == ["smg", "launch"] and "--health-check-interval-secs" in command
    i = command.index("--selector")
    assert command[i + 1 : i + 3] == WORKER_SELECTOR.split(",")
    assert command[command.index("--service-discovery-namespace") + 1] == "ns"
    assert "sglang.ai/component" not in pod["metadata"]["labels"]  # the operator's router selector must not match

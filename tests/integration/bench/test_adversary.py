"""`bench/adversary.py`: for a policy, a trace on which it does not dominate HPA, built from the policy's own run.

The pure parts (where two runs first differ, which continuations to try, the attacked trace) are checked on
hand-made runs; the script is checked end to end: on flat traffic the operator's policy dominates HPA, and on the
trace the script writes (the same traffic up to a moment, then a burst) the benchmark itself says it does not.
"""

from pathlib import Path

import numpy as np

from bench.fleetsim.adversary import BURST_OFFSET_S, TRICKLES_S, Attack, attacked, attacks, first_difference, same_until
from bench.fleetsim.sim import SimResult
from tests.integration.bench.test_autoscale_bench import REPO, run_bench, run_json

ADVERSARY = REPO / "bench" / "adversary.py"


def result(name: str, paid: list[int], ready: list[int]) -> SimResult:
    """A run seen only through its timeline: scrapes every 15 s from 0."""
    return SimResult(name, 0.0, np.zeros(0), 0, [15.0 * k for k in range(len(paid))], paid, ready)


def test_first_difference_is_the_first_scrape_paying_for_other_counts() -> None:
    hpa = result("hpa", [3, 3, 4, 4, 4], [3, 3, 3, 3, 4])
    assert first_difference(result("p", [3, 3, 3, 4, 4], [3, 3, 3, 3, 3]), hpa) == 2
    assert first_difference(result("p", [3, 3, 4, 4, 4], [3, 3, 3, 3, 4]), hpa) is None


def test_same_until_compares_paid_and_ready_before_the_moment() -> None:
    a = result("p", [3, 3, 4, 4], [3, 3, 3, 4])
    assert same_until(a, result("p", [3, 3, 4, 9], [3, 3, 3, 9]), until_s=45.0)
    assert not same_until(a, result("p", [3, 3, 4, 9], [3, 3, 3, 9]), until_s=46.0)
    assert not same_until(a, result("p", [3, 3, 4, 4], [3, 2, 3, 4]), until_s=45.0)
    assert not same_until(a, result("p", [3], [3]), until_s=45.0)  # a run that stopped early is not the same


def test_attacks_put_the_policys_smaller_fleet_first_then_the_end_of_its_larger_one() -> None:
    # Scrapes 1-2: the policy pays for one more replica than HPA; scrape 3: it has one fewer ready.
    policy = result("p", [3, 5, 5, 4, 4, 4], [3, 3, 3, 3, 4, 4])
    hpa = result("hpa", [3, 4, 4, 4, 4, 4], [3, 3, 3, 4, 4, 4])
    tried = attacks(policy, hpa, first=1, span=4, bursts=(0, 100))
    per_moment = 2 * len(TRICKLES_S)
    assert len(tried) == 4 * per_moment  # each of the four scrapes once, with every burst and trickle
    moments = [a.at_s for a in tried[::per_moment]]
    assert moments == [45.0 + BURST_OFFSET_S, 30.0 + BURST_OFFSET_S, 15.0 + BURST_OFFSET_S, 60.0 + BURST_OFFSET_S]
    assert [a.why for a in tried[::per_moment]] == [
        "fewer ready replicas than HPA",
        "paid for more replicas than HPA",  # the last scrape of the stretch first: it has paid more for longest
        "paid for more replicas than HPA",
        "after the first difference",
    ]
    assert {(a.burst, a.trickle_s) for a in tried[:per_moment]} == {(b, s) for b in (0, 100) for s in TRICKLES_S}


def test_attacked_keeps_the_past_then_ends_with_the_burst_and_trickle() -> None:
    arrivals = np.array([1.0, 5.0, 9.9, 10.0, 30.0])
    out = attacked(arrivals, Attack(10.0, burst=3, why="x", trickle_s=2))
    assert out.tolist() == [1.0, 5.0, 9.9, 10.0, 10.0, 10.0, 11.0, 12.0]


def test_the_operator_policy_dominates_flat_traffic_but_not_the_trace_built_from_it(tmp_path: Path) -> None:
    report = run_json(ADVERSARY, "--out", str(tmp_path), "--shape", "flat", "--policy", "sglang-operator")
    [row] = report["rows"]
    assert row["dominates_on_the_shape"] is True
    shape = run_bench(tmp_path / "flat.csv", "--no-plot")
    assert shape["dominates"] == {"hpa": True, "keda": True}
    assert row["found"] and row["loses"] and row["first_difference_s"] < row["at_s"]
    # The benchmark, run as anyone would run it on the written trace, agrees: no dominance, and the same numbers.
    attacked_trace = run_bench(Path(row["trace"]), "--no-plot")
    assert attacked_trace["scale"] == shape["scale"] == 1
    assert attacked_trace["target_qps_per_replica"] == shape["target_qps_per_replica"]
    assert attacked_trace["dominates"]["hpa"] is False
    for name in ("sglang-operator", "hpa"):
        policy = attacked_trace["policies"][name]
        assert [policy["replica_hours"], round(policy["slo_miss_pct"], 3)] == row["after"][name]


def test_other_policies_lose_too_and_a_policy_that_never_differs_ties(tmp_path: Path) -> None:
    report = run_json(
        ADVERSARY, "--out", str(tmp_path), "--shape", "flat", "--policy", "hpa-headroom-0.5", "--policy", "keda"
    )
    wide, keda = report["rows"]
    assert wide["found"] and wide["loses"] and wide["why"] == "paid for more replicas than HPA"
    hours, misses = wide["after"]["hpa-headroom-0.5"]
    assert hours > wide["after"]["hpa"][0] and misses <= wide["after"]["hpa"][1]
    # KEDA reads the same rate with the same behaviour: on flat traffic it runs HPA's fleet, a tie.
    assert keda["first_difference_s"] is None and keda["found"] and not keda["loses"]
    assert keda["on_the_shape"]["keda"] == keda["on_the_shape"]["hpa"]

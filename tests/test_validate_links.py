"""The links check's pure parts: the pair search, its judgement and its jobs."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest

from hpcprov.request.job import JobRequest
from hpcprov.site.model import Reference
from hpcprov.site.profiles import load_site
from hpcprov.validate.judge import JobResult
from hpcprov.validate.links import (
    LinkSearch,
    Pair,
    judge_pairs,
    link_outcomes,
    pair_busbw,
    simulate,
)
from hpcprov.validate.plan import Job, Options, job_script, link_job
from hpcprov.validate.run import _search_links


def names(n: int) -> list[str]:
    return [f"gpu{i:04d}" for i in range(1, n + 1)]


def log2_bound(n: int) -> int:
    """The documented bound on the rounds of pairs: ceil(log2 N) + 1."""
    return math.ceil(math.log2(n)) + 1


def healthy_pairs(nodes: list[str], bad: set[str]) -> list[Pair]:
    return [p for p in itertools.combinations(nodes, 2) if not set(p) & bad]


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8, 9, 16, 33, 100])
def test_one_bad_node_is_named_within_log2_rounds_wherever_it_is(n: int) -> None:
    """ceil(log2 N) + 1 rounds of pairs, then its two slow pairs again, one at a time."""
    nodes = names(n)
    for bad in nodes:
        got = simulate(nodes, {bad})
        assert got["named"] == [bad] and got["unresolved"] == []
        assert got["confirmations"] == 2, (bad, got)
        assert got["rounds"] <= log2_bound(n) + 2, (bad, got)
        assert got["jobs"] <= n + 2  # never more pair jobs than nodes, plus the two
    assert simulate(nodes, set())["confirmations"] == 0  # a healthy partition confirms nothing


@pytest.mark.parametrize("n", [4, 5, 6, 7, 8, 9])
@pytest.mark.parametrize("alone_too", [False, True], ids=["in-its-round", "alone-too"])
def test_a_healthy_pair_that_reads_slow_convicts_nobody(n: int, alone_too: bool) -> None:
    """Noise (a busy node) can slow one healthy pair's reading, in its round or even when
    measured again alone: with or without a bad node, the search still names exactly the
    bad one, within the same bound."""
    nodes = names(n)
    for bad in [set(), *({x} for x in nodes)]:
        for noisy in healthy_pairs(nodes, bad):
            got = simulate(nodes, bad, **{"misread_alone" if alone_too else "misread": {noisy}})
            assert got["named"] == sorted(bad) and got["unresolved"] == [], (bad, noisy)
            assert got["rounds"] - got["confirmations"] <= log2_bound(n), (bad, noisy, got)
            assert got["confirmations"] == 2 * len(bad), (bad, noisy, got)  # the bad one's


@pytest.mark.parametrize("n", [4, 5, 6, 7, 8, 9])
def test_a_healthy_node_slow_with_two_good_partners_is_confirmed_alone_not_named(
        n: int) -> None:
    """The CI failure: a healthy node read slow with two different known-good partners, in
    two rounds running (its pair jobs shared the machine's CPUs with the bad node's). Any
    two healthy pairs that read slow in their rounds (and fast alone), with every position
    of the bad node or none: exactly the bad node is named, nobody else, nothing open."""
    nodes = names(n)
    for bad in [set(), *({x} for x in nodes)]:
        for noisy in itertools.combinations(healthy_pairs(nodes, bad), 2):
            got = simulate(nodes, bad, misread=set(noisy))
            assert got["named"] == sorted(bad) and got["unresolved"] == [], (bad, noisy, got)
            assert got["rounds"] - got["confirmations"] <= log2_bound(n) + 1, (bad, noisy, got)
            assert got["confirmations"] <= 2 * len(bad) + 1, (bad, noisy, got)


@pytest.mark.parametrize("n", [4, 5, 6, 7, 8, 9])
def test_noise_in_a_round_and_alone_on_different_pairs_convicts_nobody(n: int) -> None:
    """One healthy pair slow in its round, another slow alone too: still only the bad node
    (a healthy node is named only if two of its pairs with good partners read slow alone)."""
    nodes = names(n)
    for bad in [set(), {nodes[0]}, {nodes[-1]}]:
        for once, twice in itertools.permutations(healthy_pairs(nodes, bad), 2):
            got = simulate(nodes, bad, misread={once}, misread_alone={twice})
            assert got["named"] == sorted(bad) and got["unresolved"] == [], (once, twice)


def test_ci_failure_replayed_the_suspects_are_measured_again_alone() -> None:
    """The CI run: gpu03's link slowed; gpu02+gpu04 read slow in round 2 and gpu01+gpu04 in
    round 3, both beside a pair holding gpu03. Before, gpu04 was named with gpu03. Now
    both are suspects, their slow pairs run again one at a time: gpu04 reads fast alone and
    is cleared; gpu03 reads slow again with both partners and is named alone."""
    search = LinkSearch(["gpu01", "gpu02", "gpu03", "gpu04"])
    rounds = [({("gpu01", "gpu02"): True, ("gpu03", "gpu04"): False}, False),
              ({("gpu01", "gpu03"): False, ("gpu02", "gpu04"): False}, False),
              ({("gpu02", "gpu03"): False, ("gpu01", "gpu04"): False}, False)]
    for results, alone in rounds:
        assert search.next_step() == (list(results), alone)
        search.record(results, alone=alone)
    assert search.verdict()["bad"] == []  # slow with two good partners: suspects, not bad
    assert search.suspects() == ["gpu03", "gpu04"]
    alone_truth = {("gpu01", "gpu03"): False, ("gpu02", "gpu03"): False,
                   ("gpu02", "gpu04"): True, ("gpu01", "gpu04"): True}
    seen = []
    while (step := search.next_step())[0]:
        (pair,), alone = step
        assert alone  # one job, nothing else running
        seen.append(pair)
        search.record({pair: alone_truth[pair]}, alone=True)
    assert seen == [("gpu01", "gpu03"), ("gpu02", "gpu03"), ("gpu02", "gpu04")]
    assert search.verdict() == {"bad": ["gpu03"], "unresolved": [],
                                "good": ["gpu01", "gpu02", "gpu04"]}
    assert search.rounds == 6

    measured = {("gpu01", "gpu02"): 0.46, ("gpu03", "gpu04"): 0.006,
                ("gpu01", "gpu03"): 0.006, ("gpu02", "gpu04"): 0.209,
                ("gpu02", "gpu03"): 0.006, ("gpu01", "gpu04"): 0.198}
    alone = {("gpu01", "gpu03"): 0.0061, ("gpu02", "gpu03"): 0.0059, ("gpu02", "gpu04"): 0.44}
    out = {o.name: o for o in link_outcomes(search, measured, [], alone)}
    assert set(out) == {"links gpu03", "links"}
    assert "gpu01+gpu03 0.006 GB/s, alone 0.0061 GB/s" in out["links gpu03"].detail
    assert out["links gpu03"].measured == 0.0059
    detail = out["links"].detail
    assert detail.startswith("9 pair jobs in 6 round(s), 3 of them alone to confirm")
    assert ("slow once, not confirmed: gpu02+gpu04 0.209 GB/s, alone 0.44 GB/s, "
            "gpu01+gpu04 0.198 GB/s") in detail


def test_a_healthy_pair_slow_again_alone_is_reported_not_convicted() -> None:
    """A pair between two nodes that other pairs cleared, slow also alone: the path
    between them is suspect, not either node; the pass line says so."""
    search = LinkSearch(["n1", "n2", "n3", "n4"])
    search.record({("n1", "n2"): True, ("n3", "n4"): True})
    search.tried[("n1", "n3")] = False
    search.alone[("n1", "n3")] = False
    out = link_outcomes(search, {("n1", "n2"): 0.4, ("n3", "n4"): 0.4, ("n1", "n3"): 0.1},
                        [], {("n1", "n3"): 0.12})
    assert [o.status for o in out] == ["pass"]
    assert ("slow again alone, between nodes other pairs cleared (look at the path between "
            "them): n1+n3 0.1 GB/s, alone 0.12 GB/s") in out[0].detail


def test_with_no_second_good_partner_the_node_stays_unresolved() -> None:
    """3 nodes, one bad, and the two good ones read slow together: nothing is known good,
    so nobody is named; all three are reported as open, with their slow pairs."""
    got = simulate(names(3), {"gpu0001"}, frozenset({("gpu0002", "gpu0003")}))
    assert got["named"] == [] and got["unresolved"] == names(3)


def test_a_healthy_partition_takes_one_round_of_disjoint_pairs() -> None:
    search = LinkSearch(names(6))
    pairs = search.next_round()
    assert len(pairs) == 3 and len({x for p in pairs for x in p}) == 6
    search.record(dict.fromkeys(pairs, True))
    assert search.next_round() == [] and search.verdict()["bad"] == []
    assert simulate(names(7), set())["rounds"] == 2  # the spare node is tested too


def test_two_bad_nodes_and_a_whole_slow_network() -> None:
    assert simulate(names(8), {"gpu0001", "gpu0002"})["named"] == ["gpu0001", "gpu0002"]
    assert simulate(names(8), {"gpu0002", "gpu0007"})["named"] == ["gpu0002", "gpu0007"]
    everything = simulate(names(3), set(names(3)))
    assert everything["named"] == [] and everything["unresolved"] == names(3)


def test_two_nodes_cannot_say_whose_link_it_is() -> None:
    got = simulate(["gpu01", "gpu02"], {"gpu02"})
    assert got["named"] == [] and got["unresolved"] == ["gpu01", "gpu02"]


def pair_result(pair: str, busbw: float | None, exit_code: int = 0) -> JobResult:
    records = [] if busbw is None else [{"check": "allreduce", "size_bytes": 1 << 20,
                                         "busbw_GBps": busbw, "correct": True}]
    return JobResult(f"links-r1-{pair}", "links", "torch-gloo", 2,
                     "COMPLETED" if exit_code == 0 else "FAILED", exit_code, pair, records, [],
                     1.0, pinned=pair, reason="" if exit_code == 0 else "killed")


def test_a_pair_is_slow_below_half_the_best_or_the_reference_or_when_it_failed() -> None:
    a, b, c = ("n1", "n2"), ("n3", "n4"), ("n5", "n6")
    measured = {a: 1.0, b: 0.45, c: None}
    assert judge_pairs(measured, {}, [a, b, c]) == {a: True, b: False, c: False}
    refs = {"links_busbw": Reference(value=2.0, lower=-0.2, unit="GB/s")}
    assert judge_pairs({a: 1.0}, refs, [a]) == {a: False}
    assert pair_busbw(pair_result("n1,n2", 0.7)) == 0.7
    noisy = pair_result("n1,n2", 0.2)  # the mean call waited for a CPU; the median did not
    noisy.records[0].update(time_s=0.005, time_median_s=0.002)
    assert pair_busbw(noisy) == pytest.approx(0.5)
    assert pair_busbw(pair_result("n1,n2", 0.7, exit_code=1)) is None
    wrong = pair_result("n1,n2", 0.7)
    wrong.records[0]["correct"] = False
    assert pair_busbw(wrong) is None


def test_the_outcome_names_the_node_and_the_pairs_that_convicted_it() -> None:
    search = LinkSearch(["n1", "n2", "n3", "n4"])
    got: dict[bool, dict[Pair, float | None]] = {False: {}, True: {}}  # alone? -> busbw
    truth = {("n1", "n2"): 0.9, ("n3", "n4"): 0.01, ("n1", "n3"): 0.012, ("n2", "n4"): 0.8}
    again = {("n3", "n4"): 0.011, ("n1", "n3"): 0.013}
    while (step := search.next_step())[0]:
        pairs, alone = step
        got[alone].update({p: (again if alone else truth)[p] for p in pairs})
        search.record(judge_pairs(got[alone], {}, pairs, also=got[not alone]), alone=alone)
    out = link_outcomes(search, got[False], [], got[True])
    (bad,) = [o for o in out if o.status == "fail"]
    assert bad.nodes == "n3" and bad.measured == 0.01
    assert "n3+n4 0.01 GB/s, alone 0.011 GB/s" in bad.detail
    assert "n1+n3 0.012 GB/s, alone 0.013 GB/s" in bad.detail
    (ok,) = [o for o in out if o.status == "pass"]
    assert ok.nodes == "n[1-2,4]"
    assert ok.detail == "6 pair jobs in 4 round(s), 2 of them alone to confirm"


def test_a_pair_job_pins_both_nodes_with_one_rank_each() -> None:
    site = load_site("testbed")
    o = Options(JobRequest(site, partition="amd_a100nv_8", nodes=2, prefix="/p"), ("links",),
                node_names=("gpu01", "gpu02"), link_bytes=1 << 20)
    job = link_job(o, ("gpu01", "gpu02"), 1)
    assert job.nodes == 2 and job.ranks_per_node == 1 and job.node == "gpu01,gpu02"
    assert job.args[job.args.index("--min-bytes") + 1] == str(1 << 20)
    assert job.args[job.args.index("--max-bytes") + 1] == str(1 << 20)
    script = job_script(job, o, "/run", ("python", "/run/allreduce.py"))
    assert "#SBATCH --nodelist=gpu01,gpu02" in script
    assert "#SBATCH --ntasks-per-node=1" in script


class FakeRounds:
    """Runs pair jobs against an oracle, as validate.run's rounds would on Slurm: busbw
    from ``speed(pair, jobs in the round)``; every round's jobs kept."""

    def __init__(self, speed: Callable[[Pair, int], float | None]) -> None:
        self.speed, self.seen = speed, []

    def run(self, jobs: list[Job]) -> list[JobResult]:
        self.seen.append([j.node for j in jobs])
        out = []
        for j in jobs:
            got = self.speed(tuple(j.node.split(",")), len(jobs))
            if got is None:
                out.append(JobResult(j.id, "links", j.impl, 2, "NOT_RUN", None, "", [], [],
                                     0.0, pinned=j.node, reason="not run: out of time"))
                continue
            records = [{"check": "allreduce", "size_bytes": 1 << 20, "busbw_GBps": got,
                        "correct": True}]
            out.append(JobResult(j.id, "links", j.impl, 2, "COMPLETED", 0, j.node, records,
                                 [], 1.0, pinned=j.node))
        return out


def four_node_options() -> Options:
    return Options(JobRequest(load_site("testbed"), partition="amd_a100nv_8", nodes=2),
                   ("links",), node_names=("gpu01", "gpu02", "gpu03", "gpu04"),
                   link_bytes=1 << 20)


def ci_speed(pair: Pair, jobs: int) -> float:
    """gpu03's link slowed; gpu04's pairs read slow whenever another pair job runs beside
    them (they share the machine's two CPUs), fast alone."""
    if "gpu03" in pair:
        return 0.006
    return 0.2 if "gpu04" in pair and jobs > 1 else 0.45


def test_the_run_confirms_suspects_one_job_at_a_time_and_names_only_the_bad_node() -> None:
    fake = FakeRounds(ci_speed)
    results, links = _search_links(four_node_options(), fake)
    search = links["search"]
    assert search.verdict()["bad"] == ["gpu03"] and search.verdict()["unresolved"] == []
    assert fake.seen[:3] == [["gpu01,gpu02", "gpu03,gpu04"], ["gpu01,gpu03", "gpu02,gpu04"],
                             ["gpu02,gpu03", "gpu01,gpu04"]]
    assert all(len(r) == 1 for r in fake.seen[3:])  # each confirmation alone
    assert links["alone"][("gpu02", "gpu04")] == 0.45 and len(results) == 9
    (ok,) = [o for o in link_outcomes(search, links["busbw"], results, links["alone"])
             if o.status == "pass"]
    assert "slow once, not confirmed: gpu02+gpu04 0.2 GB/s, alone 0.45 GB/s" in ok.detail


def test_a_confirmation_that_could_not_run_names_nobody() -> None:
    """Out of time before the slow pairs ran again alone: the suspect stays undecided."""
    def speed(pair: Pair, jobs: int) -> float | None:
        return None if jobs == 1 else 0.006 if "gpu03" in pair else 0.45

    results, links = _search_links(four_node_options(), FakeRounds(speed))
    assert links["search"].verdict()["bad"] == [] and links["alone"] == {}
    assert links["search"].verdict()["unresolved"] == ["gpu03"]
    (open_,) = [o for o in link_outcomes(links["search"], links["busbw"], results,
                                         links["alone"]) if o.status == "fail"]
    assert open_.nodes == "gpu03" and "both confirmed alone" in open_.detail

"""The links check's pure parts: the pair search, its judgement and its jobs."""

from __future__ import annotations

import itertools
import math

import pytest
from hpcprov.validate.judge import JobResult
from hpcprov.validate.links import (
    LinkSearch,
    judge_pairs,
    link_outcomes,
    pair_busbw,
    simulate,
)
from hpcprov.validate.plan import Options, job_script, link_job

from hpcprov.model import Reference
from hpcprov.profiles import load_site


def names(n: int) -> list[str]:
    return [f"gpu{i:04d}" for i in range(1, n + 1)]


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8, 9, 16, 33, 100])
def test_one_bad_node_is_named_within_log2_rounds_wherever_it_is(n: int) -> None:
    nodes = names(n)
    for bad in nodes:
        got = simulate(nodes, {bad})
        assert got["named"] == [bad] and got["unresolved"] == []
        assert got["rounds"] <= math.ceil(math.log2(n)) + 1, (bad, got)
        assert got["jobs"] <= n  # never more pair jobs than nodes


@pytest.mark.parametrize("n", [4, 5, 6, 7, 8, 9])
def test_a_healthy_pair_that_reads_slow_once_convicts_nobody(n: int) -> None:
    """Noise (a busy node) can slow one healthy pair's reading: with or without a bad node,
    the search still names exactly the bad one (a node needs two known-good partners it was
    slow with), within the same bound."""
    nodes = names(n)
    for bad in [set(), *({x} for x in nodes)]:
        for misread in itertools.combinations(sorted(set(nodes) - bad), 2):
            got = simulate(nodes, bad, frozenset({misread}))
            assert got["named"] == sorted(bad) and got["unresolved"] == [], (bad, misread)
            assert got["rounds"] <= math.ceil(math.log2(n)) + 1, (bad, misread, got)


def test_one_slow_reading_with_one_good_partner_is_not_a_verdict() -> None:
    """The CI case: gpu02+gpu04 read slow beside the truly slow gpu01+gpu03. gpu04 is then
    paired with a good node it has not met; only gpu03, slow with two, is named."""
    search = LinkSearch(["gpu01", "gpu02", "gpu03", "gpu04"])
    assert search.next_round() == [("gpu01", "gpu02"), ("gpu03", "gpu04")]
    search.record({("gpu01", "gpu02"): True, ("gpu03", "gpu04"): False})
    assert search.next_round() == [("gpu01", "gpu03"), ("gpu02", "gpu04")]
    search.record({("gpu01", "gpu03"): False, ("gpu02", "gpu04"): False})
    assert search.verdict()["bad"] == []  # one good partner each: not yet
    assert search.next_round() == [("gpu02", "gpu03"), ("gpu01", "gpu04")]
    search.record({("gpu02", "gpu03"): False, ("gpu01", "gpu04"): True})
    assert search.next_round() == []
    assert search.verdict() == {"bad": ["gpu03"], "unresolved": [],
                                "good": ["gpu01", "gpu02", "gpu04"]}
    measured = {("gpu01", "gpu02"): 0.46, ("gpu03", "gpu04"): 0.006,
                ("gpu01", "gpu03"): 0.006, ("gpu02", "gpu04"): 0.209,
                ("gpu02", "gpu03"): 0.006, ("gpu01", "gpu04"): 0.44}
    out = {o.name: o for o in link_outcomes(search, measured, [])}
    assert set(out) == {"links gpu03", "links"}
    assert "slow once between nodes that other pairs cleared: gpu02+gpu04 0.209 GB/s" in (
        out["links"].detail)


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
    measured: dict[tuple[str, str], float | None] = {}
    truth = {("n1", "n2"): 0.9, ("n3", "n4"): 0.01, ("n1", "n3"): 0.012, ("n2", "n4"): 0.8}
    while pairs := search.next_round():
        measured.update({p: truth[p] for p in pairs})
        search.record(judge_pairs(measured, {}, pairs))
    out = link_outcomes(search, measured, [])
    (bad,) = [o for o in out if o.status == "fail"]
    assert bad.nodes == "n3" and bad.measured == 0.01
    assert "n3+n4 0.01 GB/s" in bad.detail and "n1+n3 0.012 GB/s" in bad.detail
    (ok,) = [o for o in out if o.status == "pass"]
    assert ok.nodes == "n[1-2,4]" and "4 pair jobs in 2 round(s)" in ok.detail


def test_a_pair_job_pins_both_nodes_with_one_rank_each() -> None:
    site = load_site("testbed")
    o = Options(site, "amd_a100nv_8", 2, ("links",), node_names=("gpu01", "gpu02"),
                link_bytes=1 << 20)
    job = link_job(o, ("gpu01", "gpu02"), 1)
    assert job.nodes == 2 and job.ranks_per_node == 1 and job.node == "gpu01,gpu02"
    assert job.args[job.args.index("--min-bytes") + 1] == str(1 << 20)
    assert job.args[job.args.index("--max-bytes") + 1] == str(1 << 20)
    script = job_script(job, o, "/p", "/run", ("python", "/run/allreduce.py"))
    assert "#SBATCH --nodelist=gpu01,gpu02" in script
    assert "#SBATCH --ntasks-per-node=1" in script

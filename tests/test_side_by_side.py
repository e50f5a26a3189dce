"""A smoke run (`validate --quick` on CPUs) runs its measurement jobs side by side: one round
on the same nodes, each job with a rendezvous port of its own, the allocation sized for all
of them, and their figures reported but not judged against the references."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hpcprov_tests import write_profile

from hpcprov.jobs.launchers import build_launch
from hpcprov.request.job import JobRequest
from hpcprov.site.model import Reference
from hpcprov.site.profiles import load_site
from hpcprov.validate.judge import JobResult, judge
from hpcprov.validate.plan import allocation_request, job_rounds, job_script, plan_jobs


def prepared(tmp_path: Path, site: str = "testbed", **kw: object):
    from hpcprov.jobs.layout import manifest_file
    from hpcprov.validate.api import ValidateOptions, prepare

    manifest_file(tmp_path / "env").parent.mkdir(parents=True, exist_ok=True)
    manifest_file(tmp_path / "env").write_text("{}")
    return prepare(ValidateOptions(site=site, nodes=2, prefix=str(tmp_path / "env"),
                                   workdir=str(tmp_path / "run"), **kw)).options


def test_a_quick_cpu_run_has_env_alone_then_the_measurement_jobs_in_one_round(
        tmp_path: Path) -> None:
    o = prepared(tmp_path, quick=True, device="cpu")
    assert o.side_by_side
    jobs = plan_jobs(o)
    rounds = job_rounds(jobs)
    assert [[j.id for j in r] for r in rounds[:1]] == [["env"]] and len(rounds) == 2
    shared = rounds[1]
    assert {j.check for j in shared} == {"allreduce", "train"} and len(shared) == 5
    assert all(j.shared for j in shared) and not jobs[0].shared
    ports = [j.port for j in shared]
    assert len(set(ports)) == len(ports) and None not in ports
    # the allocation holds a task per node for every job of the round
    assert allocation_request(o).ranks_per_node == sum(j.ranks_per_node for j in shared)
    # each torch job's script exports its own port
    exported = {j.id: [ln for ln in job_script(j, o, "/run", ("python", "x.py"))
                       .splitlines() if "MASTER_PORT=" in ln] for j in shared
                if j.launcher == "srun"}
    assert len(exported) == 2 and exported["allreduce-torch-gloo"] != exported["train-torch-ddp"]
    for j in shared:
        if j.launcher == "srun":
            assert exported[j.id] == [f"export MASTER_PORT={j.port}"]


def test_the_default_run_gpu_runs_and_nodes_too_small_keep_one_job_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not prepared(tmp_path).side_by_side                          # not --quick
    assert not prepared(tmp_path, quick=True).side_by_side              # on the GPUs
    assert prepared(tmp_path, quick=True, device="cpu").side_by_side
    # 5 jobs x 1 task x 4 CPUs do not fit 16 CPUs a node: one after another
    sites = tmp_path / "sites"
    write_profile(sites, "small", "extends: testbed\nname: small\npartitions:\n"
                  "  amd_a100nv_8: {cores_per_node: 16}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(sites))
    small = prepared(tmp_path, "small", quick=True, device="cpu")
    assert not small.side_by_side
    assert all(len(r) == 1 for r in job_rounds(plan_jobs(small)))
    assert allocation_request(small).ranks_per_node == 1


def test_a_requests_own_port_reaches_every_rendezvous() -> None:
    site = load_site("testbed")
    req = JobRequest(site=site, nodes=2, launcher="torchrun", command=("python", "t.py"))
    assert ":29500" in " ".join(map(str, build_launch(req).argv))
    moved = replace(req, port=29507)
    assert ":29507" in " ".join(map(str, build_launch(moved).argv))
    srun = build_launch(replace(req, launcher="srun", port=29508))
    assert "export MASTER_PORT=29508" in srun.setup
    mpirun = build_launch(replace(req, launcher="mpirun", port=29509))
    assert "export MASTER_PORT=29509" in mpirun.setup


def test_figures_of_a_shared_job_are_reported_not_judged() -> None:
    refs = {"train_samples_per_s": Reference(value=1000.0, lower=-0.1, unit="samples/s"),
            "allreduce_busbw_4MiB": Reference(value=10.0, lower=-0.1, unit="GB/s")}
    train = {"check": "train", "in_sync": True, "max_param_spread": 0.0,
             "samples_per_s_total": 150.0}
    reduce = {"check": "allreduce", "size_bytes": 4 << 20, "busbw_GBps": 0.1,
              "correct": True, "ranks": 2}

    def outcomes(shared: bool) -> dict[str, tuple[str, str]]:
        jobs = [JobResult(f"{check}-x", check, "torch-gloo", 2, "COMPLETED", 0, "gpu[01-02]",
                          [record], [], 1.0, shared=shared)
                for check, record in (("train", train), ("allreduce", reduce))]
        return {o.name: (o.status, o.expected) for o in judge(jobs, refs)}

    alone, side = outcomes(False), outcomes(True)
    assert alone["train-x throughput"][0] == "fail"
    assert alone["allreduce-x busbw 4MiB"][0] == "fail"
    for name in ("train-x throughput", "allreduce-x busbw 4MiB"):
        assert side[name][0] == "info" and "beside other jobs" in side[name][1]
    # correctness and sync are judged all the same
    assert side["train-x in sync"][0] == side["allreduce-x correctness"][0] == "pass"


def test_a_quick_run_is_compared_with_quick_runs_and_never_by_its_shared_figures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcprov.validate.judge import SHARED
    from hpcprov.validate.report import compare, load_baseline, save_history

    monkeypatch.setenv("HPCPROV_HISTORY", str(tmp_path / "history"))

    def run(quick: bool, value: float, expected: str = "no reference") -> dict:
        return {"site": "testbed", "quick": quick, "outcomes": [
            {"check": "train", "name": "train-x throughput", "status": "info",
             "measured": value, "expected": expected, "unit": "samples/s", "nodes": "n"}]}

    full = run(False, 100.0)
    save_history(full)
    assert load_baseline("testbed", "latest", quick=True)[0] is None
    save_history(run(True, 30.0, SHARED))
    assert load_baseline("testbed", "latest", quick=False)[0]["quick"] is False
    assert load_baseline("testbed", "latest", quick=True)[0]["quick"] is True
    # a side-by-side figure is no baseline and is held to none
    assert compare(run(True, 10.0, SHARED), run(True, 30.0, SHARED)) == ([], [])
    assert compare(run(False, 10.0), run(True, 30.0, SHARED)) == ([], [])
    rows, worse = compare(run(False, 10.0), full)
    assert len(rows) == 1 and len(worse) == 1


def test_in_one_allocation_the_1_node_baselines_run_at_once_on_nodes_of_their_own(
        tmp_path: Path) -> None:
    from hpcprov.validate.plan import Job, baselines_apart, placement

    o = prepared(tmp_path, device="cpu")
    assert o.apart and not o.side_by_side
    rounds = job_rounds(plan_jobs(o))
    baselines = [r for r in rounds if any(j.baseline for j in r)]
    assert len(baselines) == 1 and {j.id for j in baselines[0]} == {
        "train-torch-ddp-1node", "train-horovod-torch-1node"}
    slot = {j.id: j.slot for j in baselines[0]}
    # horovodrun's on the first node, where the steps start; srun's on the second
    assert slot == {"train-horovod-torch-1node": 0, "train-torch-ddp-1node": 1}
    assert [placement(j, o).first for j in baselines[0]] == [slot[j.id] for j in baselines[0]]
    assert all(j.slot is None for r in rounds for j in r if not j.baseline)
    # a job each (the scheduler picks the nodes): one at a time, as measurements must
    each = prepared(tmp_path, device="cpu", allocation="per-job")
    assert not each.apart
    assert all(len(r) == 1 for r in job_rounds(plan_jobs(each)))
    # more baselines than free nodes: the next round; two horovodrun ones never share one
    hvd, srun = "horovodrun", "srun"
    jobs = [Job(f"b{i}", "train", "x", 1, 1, launcher, "train.py", (), baseline=True)
            for i, launcher in enumerate((hvd, srun, hvd, srun, srun))]
    apart = baselines_apart(jobs, o)
    assert [j.slot for j in apart] == [0, 1, 0, 1, 1]
    assert [[j.id for j in r] for r in job_rounds(apart)] == [["b0", "b1"], ["b2", "b3"],
                                                              ["b4"]]

"""The validation suite's pure parts: the job plan, the judgement, the reports."""

from __future__ import annotations

import json
import shlex
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
from hpcprov_tests import write_profile

from hpcprov.core.shell import NO_WRITE_FOR_OTHERS, quote
from hpcprov.jobs.jobscript import build_jobscript
from hpcprov.request.job import JobRequest
from hpcprov.site.model import Reference
from hpcprov.site.profiles import load_site
from hpcprov.validate.judge import JUDGES, JobResult, judge, parse_records, size_label
from hpcprov.validate.plan import (
    CHECKS,
    DEFAULT_CHECKS,
    REGISTRY,
    Options,
    job_request,
    job_rounds,
    job_script,
    plan_jobs,
    program_check,
    status_trap,
)
from hpcprov.validate.report import compare, junit, markdown, table
from hpcprov.validate.run import command_for, copy_programs


def test_testbed_plan_has_every_implementation_and_a_1_node_baseline() -> None:
    site = load_site("testbed")
    o = Options(JobRequest(site, partition="amd_a100nv_8", nodes=2, prefix="/p"),
                ("env", "allreduce", "train", "pernode"), node_names=("gpu01", "gpu02"))
    jobs = {j.id: j for j in plan_jobs(o)}
    assert {"allreduce-torch-gloo", "allreduce-horovod-gloo", "allreduce-horovod-mpi"} <= set(jobs)
    assert jobs["train-torch-ddp-1node"].baseline and jobs["train-torch-ddp-1node"].nodes == 1
    assert [j.node for j in plan_jobs(o) if j.check == "pernode"] == ["gpu01", "gpu02"]
    script = job_script(jobs["pernode-gpu02"], o, "/run", ("python", "/run/a.py"))
    assert "#SBATCH --nodelist=gpu02" in script
    assert "\nhpcprov_exit_file=/run/pernode-gpu02.exit\nhpcprov_t0=$(date +%s.%N)\n" in script
    assert ("trap 'printf \"%s %s %s\\n\" \"$?\" \"$hpcprov_t0\" \"$(date +%s.%N)\" > "
            "\"$hpcprov_exit_file\"' EXIT") in script
    # the job script's prolog: after `set -eo pipefail`, before the environment and launch
    assert script.index("set -eo pipefail") < script.index("hpcprov_t0=") \
        < script.index("trap ") < script.index("\nsrun ")


@pytest.mark.parametrize(("site_name", "partition", "scheduler_prolog"), [
    ("testbed", "amd_a100nv_8", None),
    ("sockeye", "gpu", 'cd "$PBS_O_WORKDIR"'),
    ("lsf-example", None, 'cd "$LS_SUBCWD"'),
])
def test_the_status_trap_is_the_job_scripts_prolog_and_the_script_parses(
        site_name: str, partition: str | None, scheduler_prolog: str | None,
        tmp_path: Path) -> None:
    """The trap goes in through build_jobscript's prolog (no splicing): after `set -eo
    pipefail` and the scheduler's own prolog, before the environment and the launch; the
    rest of the script is the generated one, line for line."""
    site = load_site(site_name)
    o = Options(JobRequest(site, partition=partition or next(iter(site.partitions)),
                           activate=False), ("allreduce",))
    job = plan_jobs(o)[0]
    rundir = str(tmp_path / "run dir")  # a space: quoted by hpcprov.core.shell
    script = job_script(job, o, rundir, ("python", f"{rundir}/allreduce.py"))
    lines = script.splitlines()
    at = lines.index("set -eo pipefail")
    assert lines[at + 1] == NO_WRITE_FOR_OTHERS  # then nothing the job makes is others'
    at += 1
    if scheduler_prolog:
        assert lines[at + 1] == scheduler_prolog
        at += 1
    trap = status_trap(f"{rundir}/{job.id}.exit")
    assert lines[at + 1:at + 1 + len(trap)] == trap
    assert lines[at + 1] == f"hpcprov_exit_file={quote(f'{rundir}/{job.id}.exit')}"
    assert shlex.split(lines[at + 1]) == [f"hpcprov_exit_file={rundir}/{job.id}.exit"]
    check = program_check(job, rundir)  # then the programs' digests, checked
    assert lines[at + 1 + len(trap):at + 1 + len(trap) + len(check)] == check
    plain = build_jobscript(replace(job_request(job, o, f"hpcprov-{job.id}"),
                                    command=("python", f"{rundir}/allreduce.py")))
    added = at + 1, at + 1 + len(trap) + len(check)
    assert lines[:added[0]] + lines[added[1]:] == plain.splitlines()
    assert script.endswith("\n") and not script.endswith("\n\n")
    path = tmp_path / "job.sh"
    path.write_text(script)
    check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_build_jobscript_places_prolog_and_epilog_and_leaves_the_rest_alone() -> None:
    o = Options(JobRequest(load_site("sockeye"), partition="gpu", activate=False),
                ("allreduce",))
    req = replace(job_request(plan_jobs(o)[0], o, "j"), command=("python", "x.py"))
    plain = build_jobscript(req)
    assert build_jobscript(req, prolog=(), epilog=()) == plain
    lines = build_jobscript(req, prolog=["echo first"], epilog=["echo last"]).splitlines()
    assert lines[lines.index('cd "$PBS_O_WORKDIR"') + 1] == "echo first"
    launch = plain.splitlines()[-1]
    assert lines[-2:] == [launch, "echo last"]
    assert [ln for ln in lines if not ln.startswith("echo ")] == plain.splitlines()


def test_the_checks_are_one_registry_of_planners_and_judges() -> None:
    assert CHECKS == ("env", "allreduce", "train", "pernode", "links")
    assert DEFAULT_CHECKS == ("env", "allreduce", "train") == Options.__dataclass_fields__[
        "checks"].default
    # every judge the judgement dispatches to is its check's in the registry
    assert {n: c.judge for n, c in REGISTRY.items() if c.judge is not None} == JUDGES
    site = load_site("testbed")
    o = Options(JobRequest(site, partition="amd_a100nv_8", nodes=2), CHECKS,
                node_names=("gpu01", "gpu02"))
    jobs = plan_jobs(o)
    assert all(REGISTRY[j.check].plan is not None for j in jobs)
    assert [j.check for j in jobs] == sorted((j.check for j in jobs), key=CHECKS.index)
    assert not [j for j in jobs if j.check == "links"]  # planned round by round
    rounds = job_rounds(jobs)
    assert rounds[-1] == [j for j in jobs if j.check == "pernode"]
    assert all(len(r) == 1 for r in rounds[:-1]) and sum(map(len, rounds)) == len(jobs)
    with pytest.raises(ValueError, match="unknown checks nccl"):
        plan_jobs(replace(o, checks=("env", "nccl")))
    with pytest.raises(ValueError, match="no judge for check 'links'"):
        judge([job("l", "links", [])], {})


def test_every_program_and_their_runtime_are_copied_and_env_answers_cb_where_built(
        tmp_path: Path) -> None:
    copy_programs(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["allreduce.py", "envcheck.py",
                                                          "runtime.py", "train.py"]
    o = Options(JobRequest(load_site("testbed"), partition="amd_a100nv_8"), ("env",))
    (env,) = plan_jobs(o)
    assert command_for(env, o, tmp_path) == (
        "python", str(tmp_path / "envcheck.py"), *env.args, "--check-build")
    technion = load_site("technion")
    container = Options(JobRequest(technion, partition=next(iter(technion.partitions))),
                        ("env",))
    (env,) = plan_jobs(container)
    assert "--check-build" not in command_for(env, container, tmp_path)


def test_the_status_file_gives_exit_status_and_the_jobs_own_run_time(tmp_path) -> None:
    import subprocess

    from hpcprov.schedulers.base import read_exit as _read_exit
    from hpcprov.schedulers.base import read_run_seconds

    site = load_site("local")
    o = Options(JobRequest(site, partition="local", activate=False), ("allreduce",))
    job = plan_jobs(o)[0]
    script = tmp_path / "j.sh"
    script.write_text(job_script(job, o, str(tmp_path), ("bash", "-c", "exit 3")))
    proc = subprocess.run(["bash", str(script)], capture_output=True, timeout=60)
    status = tmp_path / f"{job.id}.exit"
    assert proc.returncode != 0 and _read_exit(status) == proc.returncode
    run = read_run_seconds(status)
    assert run is not None and 0 <= run < 30
    assert read_run_seconds(tmp_path / "missing") is None


def test_the_tensorflow_env_trains_with_both_apis_so_keras_drift_is_caught() -> None:
    site = load_site("local-tf")
    ids = [j.id for j in plan_jobs(Options(JobRequest(site, partition="local"), ("train",)))]
    assert "train-horovod-tf-tape" in ids and "train-horovod-tf-keras" in ids


def rec(size: int, busbw: float, correct: bool = True) -> dict:
    return {"check": "allreduce", "size_bytes": size, "busbw_GBps": busbw, "correct": correct,
            "ranks": 2}


def job(id_: str, check: str, records: list, exit_code: int | None = 0,
        **kw: object) -> JobResult:
    return JobResult(id_, check, kw.pop("impl", "torch-gloo"), kw.pop("nodes", 2),
                     "COMPLETED" if exit_code == 0 else "FAILED", exit_code,
                     kw.pop("node_list", "gpu[01-02]"), records, [], 1.0, **kw)


def test_busbw_against_the_reference_band() -> None:
    refs = {"allreduce_busbw_64MiB": Reference(value=10.0, lower=-0.1, unit="GB/s")}
    ok = judge([job("a", "allreduce", [rec(64 << 20, 9.5)])], refs)
    slow = judge([job("a", "allreduce", [rec(64 << 20, 8.0)])], refs)
    assert [o.status for o in ok if "busbw" in o.name] == ["pass"]
    (o,) = [o for o in slow if "busbw" in o.name]
    assert o.status == "fail" and o.measured == 8.0 and ">= 9" in o.expected
    assert o.nodes == "gpu[01-02]"


def test_a_wrong_sum_fails_and_a_dead_job_is_an_error_naming_its_nodes() -> None:
    out = judge([job("a", "allreduce", [rec(8, 0.1, correct=False)]),
                 job("b", "allreduce", [], exit_code=None, node_list="gpu02",
                     reason="NODE_FAIL")], {})
    status = {o.name: o for o in out}
    assert status["a correctness"].status == "fail"
    assert status["b"].status == "error" and status["b"].nodes == "gpu02"
    assert "NODE_FAIL" in status["b"].detail


def test_training_out_of_sync_fails_and_efficiency_uses_the_1_node_run() -> None:
    synced = {"check": "train", "in_sync": True, "max_param_spread": 0.0,
              "samples_per_s_total": 150.0}
    drift = {"check": "train", "in_sync": False, "max_param_spread": 0.23,
             "samples_per_s_total": 150.0}
    base = {"check": "train", "in_sync": True, "max_param_spread": 0.0,
            "samples_per_s_total": 100.0}
    out = judge([job("t", "train", [synced], impl="x"),
                 job("t1", "train", [base], impl="x", nodes=1, baseline=True),
                 job("k", "train", [drift], exit_code=1, impl="keras")], {})
    by = {o.name: o for o in out}
    assert by["t in sync"].status == "pass"
    assert by["t scaling efficiency"].measured == pytest.approx(0.75)
    assert by["k in sync"].status == "fail" and "not averaged" in by["k in sync"].detail
    assert "k" not in by  # the failure is explained by the check, not a bare job error


def test_pernode_names_the_slow_node() -> None:
    jobs = [job(f"pernode-{n}", "pernode", [rec(1 << 20, bw)], nodes=1, node_list=n, pinned=n)
            for n, bw in (("gpu01", 2.0), ("gpu02", 2.1), ("gpu03", 0.3), ("gpu04", 1.9))]
    bad = [o for o in judge(jobs, {}) if o.status != "pass"]
    assert [(o.name, o.nodes) for o in bad] == [("pernode gpu03 busbw", "gpu03")]


def test_records_are_found_behind_launcher_prefixes() -> None:
    text = ('[1]<stdout>:noise\n[0]<stdout>:HPCPROV_RESULT {"check": "allreduce", '
            '"size_bytes": 8}\nHPCPROV_RESULT {broken\n')
    assert parse_records(text) == [{"check": "allreduce", "size_bytes": 8}]
    assert [size_label(n) for n in (8, 1024, 64 << 20, 3000)] == ["8B", "1KiB", "64MiB",
                                                                    "3000B"]


def run_data(busbw: float) -> dict:
    outcomes = judge([job("a", "allreduce", [rec(1 << 20, busbw)])], {})
    return {"site": "testbed", "partition": "p", "nodes": 2, "started": "now", "seconds": 3.0,
            "overhead_s": 0.4, "ok": True, "outcomes": [o.to_json() for o in outcomes],
            "jobs": []}


def test_compare_fails_a_regression_and_reports_every_metric() -> None:
    rows, worse = compare(run_data(1.0), run_data(2.0))
    assert rows and rows[0]["change"] == pytest.approx(-0.5)
    assert len(worse) == 1 and worse[0].status == "fail"
    assert compare(run_data(1.95), run_data(2.0))[1] == []


def test_junit_and_markdown_and_table() -> None:
    data = run_data(1.0)
    data["outcomes"].append({"check": "train", "name": "t in sync", "status": "fail",
                             "measured": 0.2, "expected": "0", "unit": "", "nodes": "gpu02",
                             "detail": "drift"})
    suite = ET.fromstring(junit(data).split("?>", 1)[1])
    assert suite.get("failures") == "1" and suite.get("tests") == "2"
    assert suite.find("testcase/failure") is not None
    md = markdown(data, "x.png")
    assert "![busbw against message size](x.png)" in md and "| fail | t in sync |" in md
    from hpcprov.validate.judge import Outcome

    text = table([Outcome(**o) for o in data["outcomes"]])
    assert text.splitlines()[0].startswith("STATUS") and "FAIL" in text
    json.dumps(data)


def test_the_default_node_count_fits_the_partition(tmp_path: Path) -> None:
    """`hpcprov validate --site local` (one node) works without --nodes; 2 elsewhere."""
    from hpcprov.jobs.layout import manifest_file
    from hpcprov.validate.api import ValidateOptions, prepare

    manifest_file(tmp_path).parent.mkdir(parents=True)
    manifest_file(tmp_path).write_text("{}")
    local = prepare(ValidateOptions(site="local", prefix=str(tmp_path), workdir=str(tmp_path)))
    testbed = prepare(ValidateOptions(site="testbed", prefix=str(tmp_path),
                                      workdir=str(tmp_path)))
    assert (local.options.nodes, testbed.options.nodes) == (1, 2)
    assert local.options.job.prefix == str(tmp_path) and local.options.job.activate


def test_a_gpu_partition_is_validated_on_its_gpus_by_default(tmp_path: Path) -> None:
    from hpcprov.jobs.layout import manifest_file
    from hpcprov.validate.api import ValidateOptions, prepare

    manifest_file(tmp_path).parent.mkdir(parents=True)
    manifest_file(tmp_path).write_text("{}")

    def device(site: str, **kw: str) -> str:
        return prepare(ValidateOptions(site=site, prefix=str(tmp_path), workdir=str(tmp_path),
                                       **kw)).options.device
    assert device("local") == "cpu"          # no GPUs
    assert device("testbed") == "cuda"       # a GPU partition
    assert device("testbed", device="cpu") == "cpu"


def test_horovod_on_gpus_is_named_by_its_data_path() -> None:
    from hpcprov.validate.plan import Options, plan_jobs

    site = load_site("neuron")   # Horovod built with NCCL, launched by horovodrun and mpirun
    run = JobRequest(site, partition="amd_a100nv_8", nodes=2)
    gpu = [j.id for j in plan_jobs(Options(run, ("allreduce",), device="cuda"))]
    cpu = [j.id for j in plan_jobs(Options(run, ("allreduce",)))]
    assert [i for i in gpu if i.startswith("allreduce-horovod-")] == \
        ["allreduce-horovod-nccl-via-mpi"]
    assert "allreduce-torch-nccl" in gpu and "allreduce-torch-gloo" in cpu
    assert not [i for i in cpu if "nccl" in i]


def test_a_partition_without_a_published_node_count_defaults_to_two_nodes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcprov.jobs.layout import manifest_file
    from hpcprov.validate.api import ValidateOptions, prepare

    sites = tmp_path / "sites"
    write_profile(sites, "nocount", "extends: testbed\nname: nocount\npartitions:\n"
                  "  amd_a100nv_8: {nodes: null}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(sites))
    manifest_file(tmp_path).parent.mkdir(parents=True)
    manifest_file(tmp_path).write_text("{}")
    got = prepare(ValidateOptions(site="nocount", prefix=str(tmp_path), workdir=str(tmp_path)))
    assert got.options.nodes == 2


def test_two_validations_never_share_a_run_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two validations started in the same second (two partitions of one site) got one
    folder and the files of one named by check: run A reported run B's results."""
    import fcntl
    import os

    from hpcprov_tests import cli

    from hpcprov.validate.run import RUN_LOCK, default_rundir

    o = Options(JobRequest(load_site("testbed"), partition="amd_a100nv_8"), ("env",))
    assert default_rundir(o)[0] != default_rundir(o)[0]
    # a folder given by --workdir is held for the run's life: a second run there is refused
    prefix = tmp_path / "prefix"
    (prefix / ".hpcprov").mkdir(parents=True)
    (prefix / ".hpcprov" / "manifest.json").write_text("{}")
    run = tmp_path / "run"
    run.mkdir()
    fd = os.open(run / RUN_LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.pwrite(fd, b"pid 4242\n", 0)
    try:
        res = cli(capsys, "validate", "--site", "local", "--env", str(prefix), "--workdir",
                  str(run), "--checks", "env", "--no-history", "--timeout", "60")
    finally:
        os.close(fd)
    assert res.rc == 2
    assert f"another validation is running in {run} (pid 4242)" in res.err
    assert not (run / "env.sh").exists()

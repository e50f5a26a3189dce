"""`hpcprov validate` on the real Slurm testbed: 2 nodes, a provisioned prefix, every
allreduce implementation the site has, JSON + JUnit + Markdown out, exit 0 only on a pass."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hpcprov_testbed_tests import reconfigured, until
from hpcprov_tests import hpcprov_argv

pytestmark = [pytest.mark.testbed, pytest.mark.slow]



def validate(testbed, prefix: Path, tmp_path: Path, *args: str
             ) -> tuple[subprocess.CompletedProcess[str], dict]:
    env = {**testbed.environ(), "HPCPROV_HISTORY": str(tmp_path / "history")}
    rundir = testbed.scratch / "pytest-validate" / tmp_path.name
    proc = subprocess.run(
        [*hpcprov_argv(), "validate", "--site", "testbed", "--device", "cpu", "--env",
         str(prefix), "--json",
         "--workdir", str(rundir), "--max-bytes", "4194304", "--iters", "3", "--steps", "8",
         *args], capture_output=True, text=True, env=env, timeout=900)
    return proc, json.loads(proc.stdout or "{}")


def test_allreduce_across_two_nodes_passes_with_every_implementation(
        testbed, prefix: Path, tmp_path: Path) -> None:
    junit, report = tmp_path / "v.xml", tmp_path / "v.md"
    proc, data = validate(testbed, prefix, tmp_path, "--nodes", "2", "--checks", "allreduce",
                          "--junit", str(junit), "--report", str(report))
    assert proc.returncode == 0, (data.get("outcomes"), proc.stderr)
    assert data["ok"] and data["scheduler"] == "slurm"
    # Slurm's default: every job a step of one allocation, a single wait in the queue
    assert data["allocation"] == "one" and data["submissions"] == 1
    jobs = {j["id"]: j for j in data["jobs"]}
    assert {"allreduce-torch-gloo", "allreduce-horovod-gloo", "allreduce-horovod-mpi"} <= set(jobs)
    for j in jobs.values():
        assert j["state"] == "COMPLETED" and j["exit_code"] == 0
        assert j["node_list"] == "gpu[01-02]"
        sizes = [r["size_bytes"] for r in j["records"]]
        assert sizes[0] == 8 and sizes[-1] == 4194304
        assert all(r["correct"] and r["ranks"] == 2 and r["nodes"] == 2 for r in j["records"])
    suite = ET.fromstring(junit.read_text().split("?>", 1)[1])
    assert suite.get("failures") == "0" and int(suite.get("tests")) >= 3
    assert "| pass | allreduce-torch-gloo correctness |" in report.read_text()
    assert "![busbw against message size](v-busbw.png)" in report.read_text()
    assert (tmp_path / "v-busbw.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert data["overhead_s"] < 5  # measured properly in benchmarks/; a sanity bound here


def test_a_job_that_cannot_run_fails_the_run_and_says_why(testbed, prefix: Path,
                                                          tmp_path: Path) -> None:
    # a job that cannot start within the pending timeout is cancelled, and the run fails
    proc, data = validate(testbed, prefix, tmp_path, "--nodes", "2", "--checks", "allreduce",
                          "--pending-timeout", "3", "-o", "begin=now+3600")
    assert proc.returncode == 1
    assert not data["ok"]
    errors = [o for o in data["outcomes"] if o["status"] == "error"]
    assert len(errors) == 3 and all("still pending after 3 s" in o["detail"]
                                    for o in errors), errors
    assert all(j["state"] == "PENDING_TIMEOUT" for j in data["jobs"])


def test_the_default_checks_run_in_one_allocation_and_per_job_on_request(
        testbed, prefix: Path, tmp_path: Path) -> None:
    """env, allreduce and train (--quick: 6 jobs, no 1-node baselines) as steps of one
    allocation, the measurement jobs side by side; the same with a job each (--allocation
    per-job). The 1-node steps of an allocation: the training test."""
    proc, data = validate(testbed, prefix, tmp_path, "--nodes", "2", "--quick")
    assert proc.returncode == 0, (data.get("outcomes"), proc.stderr)
    assert (data["allocation"], data["submissions"], data["quick"]) == ("one", 1, True)
    jobs = {j["id"]: j for j in data["jobs"]}
    assert sorted(jobs) == ["allreduce-horovod-gloo", "allreduce-horovod-mpi",
                            "allreduce-torch-gloo", "env", "train-horovod-torch",
                            "train-torch-ddp"]
    assert all(j["state"] == "COMPLETED" for j in jobs.values())
    for jid, j in jobs.items():
        assert j["node_list"] == "gpu[01-02]", jid
        ranks = {r.get("nodes") for r in j["records"] if "nodes" in r}
        assert ranks <= {2}, (jid, j["records"])
    allocation = [e for e in data["events"] if e["event"] == "submitted"]
    assert len(allocation) == 1
    steps = [e for e in data["events"] if e["event"] == "started as a step"]
    assert len(steps) == 6 and all(e["job"].startswith(allocation[0]["job"] + ".")
                                   for e in steps)
    # --quick on CPUs: env first, alone; then the five others side by side on the same
    # nodes (every one started before any ended), the torch ones on ports of their own
    events = [e["event"] for e in data["events"]]
    ends = [i for i, e in enumerate(events) if e.startswith("ended")]
    starts = [i for i, e in enumerate(events) if e == "started as a step"]
    assert starts[0] < ends[0] < starts[1] and max(starts[1:]) < ends[1], events
    rundir = testbed.scratch / "pytest-validate" / tmp_path.name
    ports = {jid: [ln for ln in (rundir / f"{jid}.sh").read_text().splitlines()
                   if "MASTER_PORT=" in ln] for jid in ("allreduce-torch-gloo",
                                                        "train-torch-ddp")}
    assert all(ports.values()) and ports["allreduce-torch-gloo"] != ports["train-torch-ddp"]
    measured = [o for o in data["outcomes"] if o["measured"] is not None
                and o["name"].endswith(("throughput", "busbw 4MiB"))]
    assert measured and all(o["status"] == "info" and "beside other jobs" in o["expected"]
                            for o in measured), measured
    per_job = tmp_path / "per-job"
    per_job.mkdir()
    proc, data = validate(testbed, prefix, per_job, "--nodes", "2", "--checks", "env",
                          "--allocation", "per-job")
    assert proc.returncode == 0, (data.get("outcomes"), proc.stderr)
    assert data["allocation"] == "per-job" and data["submissions"] == len(data["jobs"]) == 1
    assert not [e for e in data["events"] if e["event"] == "started as a step"]


def test_training_across_two_nodes_is_in_sync_and_scales_against_one(
        testbed, prefix: Path, tmp_path: Path) -> None:
    proc, data = validate(testbed, prefix, tmp_path, "--nodes", "2", "--checks", "train")
    assert proc.returncode == 0, (data.get("outcomes"), proc.stderr)
    out = {o["name"]: o for o in data["outcomes"]}
    for impl in ("torch-ddp", "horovod-torch"):
        assert out[f"train-{impl} in sync"]["status"] == "pass"
        assert out[f"train-{impl} in sync"]["nodes"] == "gpu[01-02]"
        assert out[f"train-{impl} throughput"]["measured"] > 0
        eff = out[f"train-{impl} scaling efficiency"]
        assert eff["measured"] > 0 and "on 2 nodes vs" in eff["detail"]
    jobs = {j["id"]: j for j in data["jobs"]}
    assert jobs["train-torch-ddp"]["node_list"] == "gpu[01-02]"
    # the 1-node baselines at once, each on a node of its own (horovodrun's on the first)
    assert jobs["train-horovod-torch-1node"]["node_list"] == "gpu01"
    assert jobs["train-torch-ddp-1node"]["node_list"] == "gpu02"
    events = [(e["job"], e["event"]) for e in data["events"]]
    started = [i for i, (_, ev) in enumerate(events) if ev == "started as a step"]
    ended = [i for i, (_, ev) in enumerate(events) if ev.startswith("ended")]
    # four steps: two 2-node runs one after another, then both baselines before either ends
    assert len(started) == 4 and started[3] < ended[2], events


def test_pernode_runs_every_node_at_once_each_pinned(testbed, prefix: Path,
                                                     tmp_path: Path) -> None:
    proc, data = validate(testbed, prefix, tmp_path, "--checks", "pernode")
    jobs = {j["id"]: j for j in data["jobs"]}
    assert set(jobs) == {"pernode-gpu01", "pernode-gpu02"}, proc.stderr
    for node in ("gpu01", "gpu02"):
        assert jobs[f"pernode-{node}"]["state"] == "COMPLETED"
        assert jobs[f"pernode-{node}"]["node_list"] == node
        assert all(r["correct"] and r["nodes"] == 1 for r in jobs[f"pernode-{node}"]["records"])
    # one round: both jobs started (as steps of the one allocation) before either ended
    events = [e["event"] for e in data["events"]]
    assert events.index("started as a step", events.index("started as a step") + 1) < min(
        i for i, e in enumerate(events) if e.startswith("ended"))
    assert data["submissions"] == 1
    # pass or fail is not asserted here: the testbed's nodes share this machine's 2 cores,
    # so two nodes measured at once differ by 2-3x (the half-the-median rule is unit-tested)
    got = {o["nodes"] for o in data["outcomes"] if o["name"].endswith("busbw")}
    assert got == {"gpu01", "gpu02"}


def test_a_node_that_dies_mid_run_is_named_and_the_run_fails_in_time(
        testbed, prefix: Path, tmp_path: Path) -> None:
    """gpu02 is powered off (link down, every process killed) while an allreduce runs:
    validate cancels the hung job once Slurm stops hearing from the node, names gpu02,
    does not submit the jobs that need 2 nodes, keeps the sizes measured before the kill,
    and exits 1 well within its timeout."""
    env = {**testbed.environ(), "HPCPROV_HISTORY": str(tmp_path / "history")}
    rundir = testbed.scratch / "pytest-validate" / tmp_path.name
    shutil.rmtree(rundir, ignore_errors=True)
    proc = subprocess.Popen(
        [*hpcprov_argv(), "validate", "--site", "testbed", "--device", "cpu", "--env",
         str(prefix), "--json",
         "--workdir", str(rundir), "--nodes", "2", "--checks", "allreduce",
         "--max-bytes", "4194304", "--iters", "2000", "--timeout", "240",
         "--pending-timeout", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        def running() -> str | None:
            """An allreduce job that has reported a size and not ended yet."""
            for out in sorted(rundir.glob("allreduce-*.out")):
                if "HPCPROV_RESULT" in out.read_text() and \
                        not (rundir / f"{out.stem}.exit").exists():
                    return out.stem
            return None

        t0 = time.monotonic()
        while (victim := running()) is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - t0 < 300, "no allreduce job ever reported"
            time.sleep(0.1)
        killed_at = time.monotonic()
        testbed.kill_node("gpu02")
        out, err = proc.communicate(timeout=300)
        took = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
        testbed.down()
        testbed.up()  # gpu02 back for the other tests
    data = json.loads(out)
    assert proc.returncode == 1 and not data["ok"], err
    assert took < 120  # Slurm's ping notices within ~SlurmdTimeout/3 + MessageTimeout
    out_by = {o["name"]: o for o in data["outcomes"]}
    dead = out_by[victim]
    assert dead["status"] == "error" and dead["nodes"] == "gpu02"
    assert "gpu02 stopped answering" in dead["detail"]
    assert out_by[f"{victim} correctness"]["status"] == "pass"  # partial results kept
    jobs = {j["id"]: j for j in data["jobs"]}
    assert jobs[victim]["state"] == "NODE_FAIL"
    later = [j for j in jobs.values() if j["state"] == "NOT_RUN"]
    assert later or victim == data["jobs"][-1]["id"]
    assert all("gpu02 stopped answering during this run" in j["reason"] for j in later)




def test_a_slow_link_is_found_by_pairs_and_the_report_names_the_node(
        four_nodes, prefix: Path, tmp_path: Path) -> None:
    four_nodes.slow_link("gpu03", "50mbit")
    report = tmp_path / "links.md"
    env = {**four_nodes.environ(), "HPCPROV_HISTORY": str(tmp_path / "history")}
    rundir = four_nodes.scratch / "pytest-validate" / tmp_path.name
    proc = subprocess.run(
        [*hpcprov_argv(), "validate", "--site", "testbed", "--device", "cpu", "--partition",
         "all", "--env",
         str(prefix), "--json", "--workdir", str(rundir), "--checks", "links",
         "--link-bytes", "1048576", "--iters", "20", "--report", str(report)],
        capture_output=True, text=True, env=env, timeout=600)
    data = json.loads(proc.stdout or "{}")
    assert proc.returncode == 1, proc.stderr
    links = data["links"]
    assert links["bad"] == ["gpu03"] and links["unresolved"] == [], links
    # rounds of pairs: ceil(log2 4) + 1, one more if two healthy pairs read slow (the
    # pair jobs of a round share this machine's CPUs); then the confirmations, alone
    assert links["rounds"] - links["confirmations"] <= 4, links
    fast = {tuple(p["pair"]): p["fast"] for p in links["pairs"] if not p["alone"]}
    assert not fast[("gpu03", "gpu04")] and not fast[("gpu01", "gpu03")]
    again = [p for p in links["pairs"] if p["alone"] and "gpu03" in p["pair"]]
    assert len(again) == 2 and not any(p["fast"] for p in again), links  # confirmed alone
    outcomes = {o["name"]: o for o in data["outcomes"]}
    assert {o["name"] for o in data["outcomes"] if o["status"] == "fail"} == {"links gpu03"}
    bad = outcomes["links gpu03"]
    assert bad["nodes"] == "gpu03"
    assert bad["measured"] < 0.05  # 50 Mbit/s is 0.00625 GB/s
    for p in links["pairs"]:  # a slow reading it did not convict on is still reported
        if not p["fast"] and not p["alone"] and "gpu03" not in p["pair"]:
            assert "+".join(p["pair"]) in outcomes["links"]["detail"], outcomes["links"]
    text = report.read_text()
    assert "| fail | links gpu03 |" in text
    assert "| gpu01+gpu03 | 2 |" in text  # the link search's pairs, round by round


@pytest.fixture
def no_accounting(testbed):
    """The session's testbed without slurmdbd (sacct cannot answer), back afterwards."""
    with reconfigured(testbed, accounting=False) as plain:
        yield plain


def test_without_accounting_exit_codes_still_come_from_the_controller(
        no_accounting, prefix: Path, tmp_path: Path) -> None:
    env = no_accounting.environ()
    sacct = subprocess.run(["sacct", "-X", "-n"], capture_output=True, text=True, env=env)
    assert sacct.returncode != 0  # accounting really is missing
    proc, data = validate(no_accounting, prefix, tmp_path, "--nodes", "2", "--checks",
                          "env,allreduce", "--max-bytes", "65536")
    assert proc.returncode == 0, (data.get("outcomes"), proc.stderr)
    assert data["ok"] and len(data["jobs"]) >= 4
    assert all(j["state"] == "COMPLETED" and j["exit_code"] == 0 for j in data["jobs"])


def test_a_job_the_controller_forgot_gets_its_status_from_the_file_or_is_an_error(
        no_accounting, tmp_path: Path) -> None:
    """Accounting is off and the controller restarted with its state gone (as after
    MinJobAge purged the jobs): a job's exit status comes from the status file its EXIT
    trap wrote; a job without one is UNKNOWN, which the judgement makes an error."""
    from dataclasses import replace

    from hpcprov.request.job import JobRequest
    from hpcprov.schedulers.base import Handle
    from hpcprov.schedulers.slurm import SlurmExecutor
    from hpcprov.site.profiles import load_site
    from hpcprov.validate.judge import JobResult, judge
    from hpcprov.validate.plan import Options, job_script, plan_jobs
    from hpcprov.validate.run import copy_programs

    work = no_accounting.scratch / "pytest-validate" / tmp_path.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    copy_programs(work)  # what the scripts check before they run (their digests)
    o = Options(JobRequest(load_site("testbed"), partition="amd_a100nv_8", activate=False),
                ("env",))
    env_job = plan_jobs(o)[0]
    ex = SlurmExecutor(no_accounting.environ())
    handles = []
    for name, rc in (("ok", 0), ("bad", 3), ("lost", 0)):
        script = work / f"{name}.sh"  # validate's own job script, with its EXIT trap
        script.write_text(job_script(replace(env_job, id=name), o, str(work),
                                     ("bash", "-c", f"echo {name}; exit {rc}")))
        handles.append(ex.submit(script, work / f"{name}.out", work / f"{name}.exit"))
    ex.wait(handles, timeout_s=120, pending_timeout_s=60)
    # while the controller remembers the jobs, it gives their exit codes (no sacct)
    assert [(h.state, h.exit_code) for h in handles] == [
        ("COMPLETED", 0), ("FAILED", 3), ("COMPLETED", 0)]

    (work / "lost.exit").unlink()  # as if the job died before its trap could run
    no_accounting.down()
    no_accounting.up()  # a controller that knows none of these jobs
    seen = [Handle(h.job_id, h.script, h.output, h.exit_file, h.submitted) for h in handles]
    scontrol = subprocess.run(["scontrol", "show", "job", seen[1].job_id],
                              capture_output=True, text=True, env=no_accounting.environ())
    assert scontrol.returncode != 0  # forgotten
    ex.wait(seen, timeout_s=30, pending_timeout_s=30)
    by = {h.script.stem: h for h in seen}
    assert (by["ok"].state, by["ok"].exit_code) == ("COMPLETED", 0)
    assert (by["bad"].state, by["bad"].exit_code) == ("FAILED", 3)
    assert (by["lost"].state, by["lost"].exit_code) == ("UNKNOWN", None)
    assert "accounting is unavailable" in by["lost"].reason

    lost = JobResult("lost", "env", "", 1, by["lost"].state, by["lost"].exit_code, "", [], [],
                     1.0, reason=by["lost"].reason)
    (outcome,) = judge([lost], {})
    assert outcome.status == "error" and "accounting is unavailable" in outcome.detail


def _queue(testbed) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True,
                         env=testbed.environ(), timeout=60, check=True).stdout
    return out.split("\n")[:-1]


@pytest.mark.parametrize(("sig", "how"), [(signal.SIGINT, "one"), (signal.SIGTERM, "per-job")])
def test_an_interrupted_validation_leaves_the_queue_empty(testbed, prefix: Path, tmp_path: Path,
                                                          sig: signal.Signals, how: str) -> None:
    """Ctrl-C while the allocation runs a long allreduce step (cancelled at once: no wait for
    its steps), and SIGTERM while a job of its own runs; squeue is empty within seconds."""
    assert not _queue(testbed)
    rundir = testbed.scratch / "pytest-validate" / tmp_path.name
    env = {**testbed.environ(), "HPCPROV_HISTORY": str(tmp_path / "history")}
    proc = subprocess.Popen(
        [*hpcprov_argv(), "validate", "--site", "testbed", "--device", "cpu", "--env",
         str(prefix), "--workdir", str(rundir), "--nodes", "2", "--checks", "allreduce",
         "--allocation", how, "--max-bytes", "4194304", "--iters", "1000000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # a job runs, and (one allocation) its first step has started
        assert until(lambda: any(line.endswith("RUNNING") for line in _queue(testbed))
                      and (how == "per-job" or any(rundir.glob("allocation/*/*.run"))),
                      120), proc.stderr
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err
    last = err.strip().splitlines()[-1]
    word = "allocation " if how == "one" else "job "
    assert last.startswith(f"hpcprov: error: interrupted by {sig.name}: cancelled {word}"), err
    assert until(lambda: not _queue(testbed), 10), _queue(testbed)


def test_horovod_over_mpi_runs_through_srun_where_the_site_forbids_mpirun(
        testbed, prefix: Path, tmp_path: Path) -> None:
    """Issue 45, defect 5: a site whose MPI programs start only with `srun --mpi=pmix`
    (mpirun and horovodrun forbidden, so absent from its profile) could not validate Horovod
    over MPI: a SKIPPED row whose fix named the forbidden launchers. Its srun, naming the
    MPI's plugin, now starts Horovod's MPI ranks, for real on the testbed's Slurm and Open
    MPI (PMIx)."""
    site = tmp_path / "sites" / "srun-only.yaml"
    site.parent.mkdir()
    site.write_text("extends: testbed\nname: srun-only\nlaunchers:\n  mpirun: null\n"
                    "  horovodrun: null\n")
    env = {**testbed.environ(), "HPCPROV_HISTORY": str(tmp_path / "history")}
    rundir = testbed.scratch / "pytest-validate" / tmp_path.name
    proc = subprocess.run(
        [*hpcprov_argv(), "validate", "--site", str(site), "--device", "cpu", "--env",
         str(prefix), "--json", "--workdir", str(rundir), "--max-bytes", "65536", "--iters",
         "3", "--nodes", "2", "--checks", "allreduce"],
        capture_output=True, text=True, env=env, timeout=900)
    data = json.loads(proc.stdout or "{}")
    assert proc.returncode == 0, (data.get("outcomes"), proc.stderr)
    jobs = {j["id"]: j for j in data["jobs"]}
    assert "allreduce-horovod-mpi" in jobs, data["outcomes"]
    assert "srun --mpi=pmix" in (rundir / "allreduce-horovod-mpi.sh").read_text()
    records = jobs["allreduce-horovod-mpi"]["records"]
    assert records and all(r["correct"] and r["ranks"] == 2 and r["nodes"] == 2
                           for r in records)

"""hpcprov on the testbed's real Grid Engine (SGE 8.1.9; issue 43, deliverable 3), the
profile sites/testbed-gridengine.yaml: `validate -N 2` passes env, allreduce and training;
a `jobscript` script submitted with qsub trains an unmodified env:// DDP script on 2 hosts;
SIGINT deletes the run's jobs (qdel); a node stopped mid-run is named and ends the run in
time; `site draft` on the cell gives a profile that passes `site check` and validates."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hpcprov_testbed_tests import DDP, SgeClient, generated_jobscript, until
from hpcprov_tests import hpcprov_argv

pytestmark = [pytest.mark.testbed, pytest.mark.slow]

SITE = "testbed-gridengine"
SMALL = ("--max-bytes", "65536", "--iters", "3", "--steps", "8")


def rundir_of(gridengine, tmp_path: Path) -> Path:
    return gridengine.testbed.scratch / "pytest-validate" / f"ge-{tmp_path.name}"


def validate_argv(gridengine, prefix: Path, tmp_path: Path, *args: str,
                  site: str = SITE) -> list[str]:
    return [*hpcprov_argv(), "validate", "--site", site, "--device", "cpu", "--env",
            str(prefix), "--json", "--workdir", str(rundir_of(gridengine, tmp_path)), *args]


def environ(gridengine, tmp_path: Path) -> dict[str, str]:
    """Grid Engine's clients (no SLURM_CONF), this interpreter's bin dir first, a history of
    the test's own."""
    env = gridengine.environ()
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    env["HPCPROV_HISTORY"] = str(tmp_path / "history")
    return env


def validate(gridengine, prefix: Path, tmp_path: Path, *args: str, site: str = SITE
             ) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc = subprocess.run(validate_argv(gridengine, prefix, tmp_path, *args, site=site),
                          capture_output=True, text=True, env=environ(gridengine, tmp_path),
                          timeout=600)
    return proc, json.loads(proc.stdout or "{}")


def queue(gridengine) -> list[str]:
    """Every job the qmaster lists (any user, any state), one line each."""
    out = subprocess.run(["qstat", "-u", "*"], capture_output=True, text=True, timeout=60,
                         env=gridengine.environ(), check=True).stdout
    return [ln for ln in out.splitlines()[2:] if ln.strip()]


def test_validate_on_two_hosts_passes_env_allreduce_and_training(
        gridengine, prefix: Path, tmp_path: Path) -> None:
    """One run, a job per check (Grid Engine's jobs run no steps of one allocation): every
    job on gpu01 and gpu02 through qsub, each rank's records there, a PASS."""
    proc, data = validate(gridengine, prefix, tmp_path, "-N", "2", "--quick", *SMALL)
    assert proc.returncode == 0, (data.get("outcomes"), proc.stderr)
    assert data["ok"] and data["scheduler"] == "gridengine"
    assert data["allocation"] == "per-job" and data["submissions"] == len(data["jobs"])
    jobs = {j["id"]: j for j in data["jobs"]}
    assert sorted(jobs) == ["allreduce-horovod-gloo", "allreduce-horovod-mpi",
                            "allreduce-torch-gloo", "env", "train-horovod-torch",
                            "train-torch-ddp"]
    for jid, j in jobs.items():
        assert (j["state"], j["exit_code"], j["node_list"]) == ("COMPLETED", 0,
                                                                "gpu01,gpu02"), jid
    assert sorted(r["host"] for r in jobs["env"]["records"] if "host" in r) == [
        "gpu01", "gpu02"], jobs["env"]["records"]
    for impl in ("torch-gloo", "horovod-gloo", "horovod-mpi"):
        records = jobs[f"allreduce-{impl}"]["records"]
        assert [r["size_bytes"] for r in records][-1] == 65536
        assert all(r["correct"] and r["ranks"] == 2 and r["nodes"] == 2 for r in records)
    out = {o["name"]: o for o in data["outcomes"]}
    for impl in ("torch-ddp", "horovod-torch"):
        assert out[f"train-{impl} in sync"]["status"] == "pass"
        assert out[f"train-{impl} in sync"]["nodes"] == "gpu01,gpu02"
    # the scripts qsub ran: a parallel environment of one slot per host, the GPU consumable
    script = (rundir_of(gridengine, tmp_path) / "allreduce-torch-gloo.sh").read_text()
    assert "#$ -pe mpi1 2\n" in script and "\n#$ -l h_rt=" in script




# (torchrun on the cell: tests/testbed/test_testbed_gridengine_torchrun.py, its agents
# through qrsh -inherit; here the site's mpirun, as the site's guide submits it)
@pytest.mark.parametrize("launcher", ["mpirun"])
def test_an_unmodified_ddp_script_trains_on_two_hosts_through_qsub(
        sge: SgeClient, capsys, torch, launcher: str) -> None:
    """`hpcprov jobscript -N 2 -G 2` as a user submits it: `qsub script`, nothing else on
    the command line; 4 ranks, 2 on each host, each with torch's environment."""
    sge.write("ddp.py", DDP)
    script = generated_jobscript(capsys, SITE, "-N", "2", "-G", "2", "-l", launcher,
                                 "-J", f"ddp-{launcher}", "--", sys.executable,
                                 str(sge.workdir / "ddp.py"))
    path = sge.write(f"ddp-{launcher}.sh", script)
    job_id = sge.run("qsub", "-terse", str(path)).stdout.strip()
    assert re.fullmatch(r"\d+", job_id), job_id
    job = sge.wait(job_id, timeout=120)
    assert job.exit_status == 0, job.output
    # mpirun starts 2 ranks on each host, torchrun 1 agent (which starts 2): slots per host
    pe = {"mpirun": "mpi2", "torchrun": "mpi1"}[launcher]
    assert job.accounting["granted_pe"].strip() == pe, job.accounting
    ranks = re.findall(r"DDP rank=(\d+) world=(\d+) local=(\d+) host=(\S+?) sum=(\d+)",
                       job.output)
    assert sorted((int(r), int(w), int(lr), int(t)) for r, w, lr, _h, t in ranks) == [
        (r, 4, r % 2, 10) for r in range(4)], job.output  # 1 + 2 + 3 + 4 on every rank
    hosts = {int(r): h for r, _w, _lr, h, _t in ranks}
    # two ranks on each host: the first host of $PE_HOSTFILE (Grid Engine's order, gpu02
    # first at times) has ranks 0 and 1 under mpirun; torchrun's agents number the nodes
    # as they join
    assert sorted(hosts.values()) == ["gpu01", "gpu01", "gpu02", "gpu02"], job.output
    if launcher == "mpirun":
        assert hosts[0] == hosts[1] != hosts[2] == hosts[3], job.output


def test_sigint_deletes_the_runs_jobs(gridengine, prefix: Path, tmp_path: Path) -> None:
    """Ctrl-C while an allreduce job runs on both hosts: validate says what it deleted,
    exits 130, and qstat is empty within seconds (qdel)."""
    assert not queue(gridengine)
    proc = subprocess.Popen(
        validate_argv(gridengine, prefix, tmp_path, "-N", "2", "--checks", "allreduce",
                      "--max-bytes", "65536", "--iters", "1000000"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=environ(gridengine, tmp_path))
    try:
        assert until(lambda: [ln.split()[4] for ln in queue(gridengine)] == ["r"], 120), \
            proc.stderr
        job_id = queue(gridengine)[0].split()[0]
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"hpcprov: error: interrupted by SIGINT: cancelled job {job_id};"
                           " the run's files are in "), err
    assert until(lambda: not queue(gridengine), 20), queue(gridengine)


def test_a_node_stopped_mid_run_is_named_and_ends_the_run_in_time(
        gridengine, prefix: Path, tmp_path: Path) -> None:
    """gpu02 is powered off (link down, its execd and every process killed) while an
    allreduce runs: once the qmaster stops hearing from it (queue state u: max_unheard
    20 s), validate deletes the hung job, names gpu02, runs no more 2-host jobs, keeps the
    sizes measured before, and exits 1 long before its timeout."""
    testbed = gridengine.testbed
    rundir = rundir_of(gridengine, tmp_path)
    proc = subprocess.Popen(
        validate_argv(gridengine, prefix, tmp_path, "-N", "2", "--checks", "allreduce",
                      "--max-bytes", "65536", "--iters", "20000", "--timeout", "240"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=environ(gridengine, tmp_path))
    try:
        def running() -> str | None:
            """An allreduce job that has reported a size and not ended yet."""
            for out in sorted(rundir.glob("allreduce-*.out")):
                if "HPCPROV_RESULT" in out.read_text() and \
                        not (rundir / f"{out.stem}.exit").exists():
                    return out.stem
            return None

        assert until(lambda: running() is not None or proc.poll() is not None, 120)
        victim = running()
        assert victim is not None, proc.communicate()
        killed_at = time.monotonic()
        testbed.kill_node("gpu02")
        out, err = proc.communicate(timeout=200)
        took = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
        testbed.down()  # gpu02 back (and Grid Engine, fresh) for the other tests
        testbed.up()
        gridengine.up()
    data = json.loads(out)
    assert proc.returncode == 1 and not data["ok"], err
    assert took < 60, took  # max_unheard 20 s + a load report + the executor's 2 s
    by = {o["name"]: o for o in data["outcomes"]}
    dead = by[victim]
    assert dead["status"] == "error" and dead["nodes"] == "gpu02", dead
    assert "gpu02 stopped answering (Grid Engine queue state u" in dead["detail"]
    assert by[f"{victim} correctness"]["status"] == "pass"  # the sizes measured before
    jobs = {j["id"]: j for j in data["jobs"]}
    assert jobs[victim]["state"] == "NODE_FAIL"
    later = [j for j in jobs.values() if j["state"] == "NOT_RUN"]
    assert later or victim == data["jobs"][-1]["id"]
    assert all("gpu02 stopped answering during this run" in j["reason"] for j in later), later


def test_a_draft_of_the_cell_passes_site_check_and_validates(
        gridengine, prefix: Path, tmp_path: Path) -> None:
    """`site draft` on the cell (qconf, qhost; --scheduler, since Slurm's commands are on
    this login node's PATH too), the person's answers (scratch, the framework, root's
    Open MPI switches), `site check`, then a 2-host allreduce with it."""
    env = environ(gridengine, tmp_path)
    path = tmp_path / "drafted.yaml"

    def hpcprov(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*hpcprov_argv(), *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=300)

    made = hpcprov("site", "draft", "--scheduler", "gridengine", "--name", "drafted-ge",
                   "-o", str(path))
    assert made.returncode == 0, made.stderr
    text = path.read_text()
    assert '\n  pe: "mpi{per_node}"' in text and '\n  gpu_resource: "gpu"' in text
    assert "cores_per_node: 64" in text  # the queue's slots: 8 ranks per host fit
    checked = hpcprov("site", "check", str(path))
    assert checked.returncode == 0, (checked.stderr, text)
    scratch = gridengine.testbed.scratch
    answered = text.replace("# paths:", "paths:").replace(
        '  # scratch: "/scratch/$USER"', f'  scratch: "{scratch}"')
    answered += ("env: {OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1'}\n")
    answered = answered.replace("# frameworks:\n", "frameworks:\n").replace(
        '    # pytorch:\n      # version: "2.1.2"', '    pytorch:\n      version: "2.13.0"')
    path.write_text(answered)
    checked = hpcprov("site", "check", str(path))
    assert checked.returncode == 0, (checked.stderr, answered)
    proc, data = validate(gridengine, prefix, tmp_path, "-N", "2", "--checks", "allreduce",
                          *SMALL, site=str(path))
    assert proc.returncode == 0, (data.get("outcomes"), proc.stderr)
    jobs = {j["id"]: j for j in data["jobs"]}
    assert "allreduce-torch-gloo" in jobs
    assert all(j["state"] == "COMPLETED" and j["node_list"] == "gpu01,gpu02"
               for j in jobs.values()), jobs

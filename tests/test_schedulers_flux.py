"""The Flux backend up to the boundary: `# flux:` directives, flux alloc and flux run lines
from the bundled example profile, the rank contract under flux run, nested and parent
submission, and validate run through tests/flux_emulator.py, which answers as flux-core's
commands do (no Flux instance can run here). What FluxExecutor does as every executor must
is checked in tests/test_backend_conformance.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import cli, emulated_scheduler, hpcprov_argv, unshimmed, write_profile

from hpcprov.core.errors import UsageError
from hpcprov.jobs.launchers.common import rank_shim_line
from hpcprov.schedulers.flux import FluxExecutor, directive, duration, job_fields, job_ids
from hpcprov.site.launcher_kinds import KINDS

EMULATOR = Path(__file__).with_name("flux_emulator.py")
OMPI_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


@pytest.mark.parametrize(("walltime", "want"), [
    ("01:00:00", "1h"), ("60", "1h"), ("45:00", "45m"), ("00:00:30", "30s"),
    ("1-00:00:00", "1d"), ("01:30:00", "90m"), ("00:01:30", "90s")])
def test_walltime_becomes_a_flux_standard_duration(walltime: str, want: str) -> None:
    assert duration(walltime) == want


def test_directive_values_are_flux_words() -> None:
    assert directive("nodes", "2") == "-N 2"
    assert directive("account", "proj") == "--bank=proj"
    assert directive("setattr", "system.foo=1") == "--setattr=system.foo=1"
    assert directive("exclusive", None) == "--exclusive"
    assert directive("job-name", "a b") == "'--job-name=a b'"  # one shell word to Flux
    with pytest.raises(UsageError, match="newline"):
        directive("job-name", "a\nb")


def test_jobscript_has_flux_directives_and_starts_ranks_with_flux_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "jobscript", "--site", "flux-example", "-N", "2", "-t", "02:00:00",
              "-o", "account=proj1", "--", "python", "train.py")
    assert res.rc == 0, res.err
    lines = res.out.splitlines()
    assert lines[0] == "#!/bin/bash"
    flux = [ln for ln in lines if ln.startswith("# flux: ")]
    assert flux == ["# flux: --job-name=hpcprov", "# flux: -t 2h", "# flux: -q pbatch",
                    "# flux: -N 2", "# flux: -n 8", "# flux: -c 24", "# flux: -g 1",
                    "# flux: --exclusive", "# flux: '--output=flux-{{id}}.out'",
                    "# flux: --bank=proj1"]
    assert not [ln for ln in lines if "SLURM_" in ln or "PBS_" in ln or "LSB_" in ln]
    assert 'MASTER_ADDR="$(flux hostlist -n 0 local)"' in lines
    assert unshimmed(lines[-1]) == "flux run -N 2 -n 8 -c 24 -g 1 python train.py"


def test_one_gpu_per_rank_asks_flux_run_for_per_task_gpu_affinity(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """By default every task of flux run sees all of the job's GPUs on its node; a partition
    whose ranks each see their own GPU gets -o gpu-affinity=per-task."""
    sites = tmp_path / "sites"
    write_profile(sites, "flux-one", "extends: flux-example\nname: flux-one\n"
                  "partitions:\n  pbatch:\n    gpus: {per_rank: one}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(sites))
    res = cli(capsys, "jobscript", "--site", "flux-one", "-N", "2", "--", "python", "t.py")
    assert res.rc == 0, res.err
    line = unshimmed(res.out.splitlines()[-1])
    assert line == "flux run -N 2 -n 8 -c 24 -g 1 -o gpu-affinity=per-task python t.py"
    res = cli(capsys, "jobscript", "--site", "flux-example", "-N", "2", "--", "python", "t.py")
    assert "gpu-affinity" not in res.out


def test_interactive_allocation_is_flux_alloc(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "launch", "--site", "flux-example", "-N", "2", "-p", "pdebug",
              "--allocate", "--", "python", "x.py")
    assert res.rc == 0, res.err
    assert res.out.splitlines()[0] == ("flux alloc --job-name=interactive -t 30m -q pdebug "
                                       "-N 2 -n 8 -c 24 -g 1 --exclusive")


def test_torchrun_starts_once_per_node_with_flux_run(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "jobscript", "--site", "flux-example", "-N", "2", "-l", "torchrun",
              "--", "python", "train.py")
    assert res.rc == 0, res.err
    assert "# flux: -n 2" in res.out and "# flux: -g 4" in res.out  # one slot per node
    line = res.out.rstrip().splitlines()[-1]
    # each agent gets its node's GPUs of the job (-g 4: a task given none sees none) and its
    # CPUs (-c: the job shell binds a task to its cores, the ranks it spawns with it)
    assert line.startswith("flux run -N 2 -n 2 -c 96 -g 4 python -m torch.distributed.run "
                           "--nnodes=2 --nproc_per_node=4 --rdzv_id=\"$FLUX_JOB_ID\"")


def test_srun_is_refused_on_flux_and_flux_run_off_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    sites = tmp_path / "sites"
    write_profile(sites, "flux-srun", "extends: flux-example\nname: flux-srun\n"
                  "launchers:\n  srun: {kind: srun}\n")
    write_profile(sites, "slurm-flux", "extends: neuron\nname: slurm-flux\n"
                  "launchers:\n  flux: {kind: flux}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(sites))
    res = cli(capsys, "jobscript", "--site", "flux-srun", "-l", "srun", "--", "python", "t.py")
    assert res.rc != 0 and "needs a site with scheduler: slurm" in res.err
    res = cli(capsys, "jobscript", "--site", "slurm-flux", "-l", "flux", "--", "python", "t.py")
    assert res.rc != 0 and "needs a site with scheduler: flux" in res.err, res.err


def test_flux_jobs_lines_and_job_ids_are_read() -> None:
    assert job_fields("f68GQ|INACTIVE|FAILED|3|node[1-2]\n") == {
        "id": "f68GQ", "state": "INACTIVE", "result": "FAILED", "returncode": "3",
        "nodelist": "node[1-2]"}
    assert job_fields("flux-jobs: ERROR: unknown jobid") == {}
    assert job_ids("ƒ2X3uhMmq5\n") == "ƒ2X3uhMmq5" and job_ids("f2X3uhMmq5") == "f2X3uhMmq5"
    assert job_ids("123456\n") == "123456"
    assert job_ids("") is None and job_ids("f0OIl") is None  # no F58 digit 0, O, I, l


@pytest.fixture
def flux(tmp_path: Path) -> dict[str, str]:
    """PATH with `flux` from the emulator; its state in tmp_path."""
    env = emulated_scheduler(tmp_path, EMULATOR, ("flux",), "FLUX_EMULATOR_DIR", "flux")
    env.pop("FLUX_URI", None)
    return env


def _submissions(tmp_path: Path) -> list[dict[str, object]]:
    log = tmp_path / "flux-state" / "submitted.log"
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.parametrize(("mode", "inside", "parent"), [
    ("auto", False, False), ("auto", True, True), ("parent", True, True),
    ("nested", True, False)])
def test_submission_goes_to_the_parent_instance_or_nests_as_the_profile_says(
        flux: dict[str, str], tmp_path: Path, mode: str, inside: bool, parent: bool) -> None:
    """Inside a Flux job ($FLUX_URI set), plain `flux batch` would run the job in the
    current allocation; `flux --parent batch` queues it in the enclosing instance, and it
    is polled and cancelled there too."""
    env = {**flux, **({"FLUX_URI": "local:///run/flux/job-42"} if inside else {})}
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n# flux: -N 1\nsleep 600\n")
    ex = FluxExecutor(env, mode)
    h = ex.submit(script, tmp_path / "job.out", tmp_path / "job.exit")
    ex.refresh([h])
    assert h.state == "RUNNING"
    ex.cancel(h)
    ex.refresh([h])
    assert (h.state, h.exit_code) == ("FAILED", 143)
    (sub,) = _submissions(tmp_path)
    assert sub["parent"] is parent and sub["id"] == h.job_id


def test_the_profile_chooses_the_submission(flux: dict[str, str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcprov import schedulers
    from hpcprov.site.profiles import load_site

    sites = tmp_path / "sites"
    write_profile(sites, "flux-nested", "extends: flux-example\nname: flux-nested\n"
                  "flux: {submit: nested}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(sites))
    inside = {**flux, "FLUX_URI": "local:///run/flux/job-42"}
    for name, parent in (("flux-nested", False), ("flux-example", True)):
        site = load_site(name)
        ex = schedulers.of(site).site_executor(site, inside)
        assert isinstance(ex, FluxExecutor) and ex.parent() is parent, name


def test_a_job_that_never_starts_is_cancelled_at_the_pending_timeout(
        flux: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "held.sh"
    script.write_text("#!/bin/bash\n# flux: -N 1\ntrue\n")
    ex = FluxExecutor({**flux, "FLUX_EMULATOR_HOLD": "1"})
    h = ex.submit(script, tmp_path / "held.out", tmp_path / "held.exit")
    ex.wait([h], timeout_s=60, pending_timeout_s=1)
    assert (h.state, h.exit_code, h.started) == ("PENDING_TIMEOUT", None, None)
    asked = subprocess.run(["flux", "jobs", "-n", "-o", "{state} {result} {returncode}",
                            h.job_id], capture_output=True, text=True, env=flux, timeout=30)
    assert asked.stdout.split() == ["INACTIVE", "CANCELED", "-128"]
    h.ended, h.state = None, "PENDING"  # what the scheduler says now: no status of a script
    ex.refresh([h])
    assert (h.state, h.exit_code) == ("UNKNOWN", None)
    assert h.reason == "Flux ended the job before its tasks ran (CANCELED, returncode -128)"


def test_flux_run_ranks_get_torchs_environment(flux: dict[str, str], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch line as hpcprov writes it, run by the emulated flux run: each rank's
    RANK, WORLD_SIZE and LOCAL_RANK come from FLUX_TASK_RANK, FLUX_JOB_SIZE and
    FLUX_TASK_LOCAL_ID through the rank shim."""
    sites = tmp_path / "sites"
    write_profile(sites, "local-flux", "extends: local\nname: local-flux\nscheduler: flux\n"
                  "launchers:\n  flux: {kind: flux}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(sites))
    res = cli(capsys, "launch", "--site", "local-flux", "-l", "flux", "--tasks-per-node", "2",
              "--", "sh", "-c", 'echo "$HPCPROV_RANK_SOURCE $RANK/$WORLD_SIZE $LOCAL_RANK"')
    assert res.rc == 0, res.err
    proc = subprocess.run(["bash", "-c", res.out], capture_output=True, text=True,
                          env={**flux, **OMPI_ROOT}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split("\n")[:-1]) == ["flux 0/2 0", "flux 1/2 1"]


def test_slurm_like_wrappers_over_flux_give_ranks_through_flux_variables() -> None:
    """Slurm-like srun over Flux exports only part of Slurm's variables (here no
    SLURM_NTASKS): the srun kind's ranks take Flux's own."""
    assert KINDS["srun"].starters == ("slurm", "flux")
    shim = rank_shim_line(KINDS["srun"]).split("=", 1)[1]
    env = {"PATH": os.environ["PATH"], "SLURM_PROCID": "3", "FLUX_TASK_RANK": "3",
           "FLUX_JOB_SIZE": "4", "FLUX_TASK_LOCAL_ID": "1"}
    proc = subprocess.run(
        ["bash", "-c", f"hpcprov_rank={shim}\n" + 'bash -c "$hpcprov_rank" hpcprov-rank 4 2 '
         'n1 29500 -- sh -c \'echo "$HPCPROV_RANK_SOURCE $RANK $WORLD_SIZE $LOCAL_RANK '
         '$NODE_RANK"\''], capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["flux", "3", "4", "1", "1"]


@pytest.mark.slow
def test_validate_runs_its_jobs_through_flux_batch_and_flux_run(
        flux: dict[str, str], tmp_path: Path, local_prefix: Path) -> None:
    """The whole command on a Flux site whose node is this machine: jobs submitted with
    flux batch, their ranks started by flux run, polled with flux jobs, judged."""
    sites = tmp_path / "sites"
    # the emulated flux run has no PMI, so Horovod's MPI check (which flux run would start
    # on a real system) is left out: Horovod runs over Gloo through horovodrun
    write_profile(sites, "local-flux", "extends: local\nname: local-flux\nscheduler: flux\n"
                  "launchers:\n  flux: {kind: flux}\ndefault_launcher: flux\n"
                  "horovod: {controllers: [gloo]}\n")
    env = {**flux, **OMPI_ROOT, "HPCPROV_SITES_PATH": str(sites),
           "HPCPROV_HISTORY": str(tmp_path / "h")}
    proc = subprocess.run(
        [*hpcprov_argv(), "validate", "--site", "local-flux", "--nodes", "1", "--checks",
         "allreduce", "--env", str(local_prefix), "--max-bytes", "65536", "--iters", "3",
         "--workdir", str(tmp_path / "run"), "--json"],
        capture_output=True, text=True, env=env, timeout=600)
    data = json.loads(proc.stdout or "{}")
    assert proc.returncode == 0, (proc.stderr, data.get("outcomes"))
    assert data["scheduler"] == "flux" and data["ok"]
    assert all(j["state"] == "COMPLETED" and j["exit_code"] == 0 for j in data["jobs"])
    assert sorted(j["id"] for j in data["jobs"]) == ["allreduce-horovod-gloo",
                                                     "allreduce-torch-gloo"]
    submitted = _submissions(tmp_path)
    assert len(submitted) == len(data["jobs"]) >= 2
    assert not any(s["parent"] for s in submitted)  # no FLUX_URI: plain flux batch
    texts = [p.read_text() for p in (tmp_path / "run").rglob("*.sh")]
    assert any("# flux: -N 1" in t and "\nflux run -N 1 -n " in t for t in texts)


def test_validate_dry_run_plans_flux_batch_jobs_whose_ranks_flux_run_starts() -> None:
    from hpcprov_tests import cli_subprocess

    res = cli_subprocess("validate", "--site", "flux-example", "--dry-run")
    assert res.rc == 0, res.err
    lines = res.out.splitlines()
    assert "# flux: -N 2" in lines and "# flux: -n 8" in lines and "# flux: -g 1" in lines
    runs = [unshimmed(ln) for ln in lines if ln.startswith("flux run ")]
    assert any(ln.startswith("flux run -N 2 -n 8 -c 24 -g 1 python ") and "--impl horovod" in ln
               for ln in runs)  # Horovod over MPI: ranks started by flux run (Flux's PMI)
    assert not [ln for ln in lines if ln.startswith(("#SBATCH", "srun ", "#PBS", "#BSUB"))]

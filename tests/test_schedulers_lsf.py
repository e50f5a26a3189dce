"""The LSF backend up to the boundary: #BSUB directives and launch lines from the bundled
example profile, bjobs output parsing, and validate run through tests/lsf_emulator.py, which
answers as LSF 10.1's bsub, bjobs and bkill do (no LSF cluster can run here). What LsfExecutor
does as every executor must (submit, poll, exit codes, cancel, refusal) is checked in
tests/test_backend_conformance.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import cli, emulated_scheduler, hpcprov_argv, unshimmed, write_profile

from hpcprov.core.errors import UsageError
from hpcprov.schedulers.lsf import directive, exec_hosts, job_fields, minutes

EMULATOR = Path(__file__).with_name("lsf_emulator.py")


@pytest.mark.parametrize(("walltime", "want"), [
    ("01:00:00", "1:00"), ("90", "1:30"), ("00:00:30", "0:01"), ("1-02:03:04", "26:04"),
    ("45:00", "0:45")])
def test_walltime_becomes_lsf_hours_and_minutes_rounded_up(walltime: str, want: str) -> None:
    assert minutes(walltime) == want


def test_directive_values_are_quoted_or_refused() -> None:
    assert directive("resource", "span[ptile=4]") == '-R "span[ptile=4]"'
    assert directive("job-name", "train") == "-J train"
    assert directive("exclusive", None) == "-x"
    assert directive("alloc_flags", "smt4") == "-alloc_flags smt4"  # any LSF option
    with pytest.raises(UsageError, match="cannot be written"):
        directive("job-name", 'x" -q other "y')


def test_jobscript_has_bsub_directives_and_reads_the_lsf_host_file(
        capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "jobscript", "--site", "lsf-example", "-N", "2", "-t", "02:00:00",
              "-o", "account=proj1", "--", "python", "train.py")
    assert res.rc == 0, res.err
    lines = res.out.splitlines()
    bsub = [ln for ln in lines if ln.startswith("#BSUB ")]
    assert bsub[:7] == ["#BSUB -J hpcprov", "#BSUB -W 2:00", "#BSUB -q gpuv100",
                        "#BSUB -n 4", '#BSUB -R "span[ptile=2]"', "#BSUB -gpu num=2",
                        "#BSUB -o %J.out"]
    assert "#BSUB -P proj1" in bsub
    assert 'cd "$LS_SUBCWD"' in lines
    assert not [ln for ln in lines if "SLURM_" in ln or "PBS_" in ln]
    launch = unshimmed(lines[-1])
    assert launch.startswith('mpirun -np 4 --hostfile "${LSB_DJOB_HOSTFILE}"')


def test_torchrun_starts_once_per_host_with_blaunch(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "jobscript", "--site", "lsf-example", "-N", "2", "-l", "torchrun",
              "--no-activate", "--", "python", "train.py")
    assert res.rc == 0, res.err
    launch = res.out.rstrip().split("\n\n")[-1]  # the host file lines and the launch
    # run the launch with blaunch and python (torchrun is `python -m torch.distributed.run`)
    # replaced by printers, on a host file with one line per slot as LSF writes it
    (tmp_path / "bin").mkdir()
    for tool in ("blaunch", "python"):
        exe = tmp_path / "bin" / tool
        exe.write_text(f'#!/bin/bash\necho {tool} "$@"\n' + (
            'cat "$2"; shift 2; exec "$@"\n' if tool == "blaunch" else ""))
        exe.chmod(0o755)
    hosts = tmp_path / "hosts"
    hosts.write_text("n1\nn1\nn2\nn2\n")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
           "LSB_DJOB_HOSTFILE": str(hosts), "LSB_JOBID": "77", "LS_SUBCWD": str(tmp_path)}
    proc = subprocess.run(["bash", "-c", "set -eo pipefail\n" + launch],
                          capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[1:3] == ["n1", "n2"]  # blaunch's host file: each host once
    assert "--rdzv_id=77" in out[3] and "--rdzv_endpoint=n1:29500" in out[3]
    assert "--nnodes=2" in out[3] and "--nproc_per_node=2" in out[3]


def test_interactive_allocation_is_bsub_is(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "launch", "--site", "lsf-example", "-N", "2", "--allocate", "--",
              "python", "x.py")
    assert res.rc == 0, res.err
    assert res.out.splitlines()[0] == ("bsub -Is -J interactive -W 1:00 -q gpuv100 -n 4 "
                                       "-R 'span[ptile=2]' -gpu num=2 /bin/bash")


def test_a_launch_node_in_the_host_file_runs_no_ranks(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    sites = tmp_path / "sites"
    write_profile(sites, "csm", "extends: lsf-example\nname: csm\n"
                  "lsf: {task_request: nnodes, launch_node_in_hostfile: true}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(sites))
    res = cli(capsys, "jobscript", "--site", "csm", "-N", "2", "--no-activate", "--",
              "python", "t.py")
    assert res.rc == 0, res.err
    assert "#BSUB -nnodes 2" in res.out and "#BSUB -n " not in res.out
    hosts = tmp_path / "hosts"
    hosts.write_text("batch1\nh1\nh1\nh2\nh2\n")
    line = res.out.rstrip().splitlines()[-1]
    echo = subprocess.run(["bash", "-c", "printf '%s\\n' " + line.split(" ", 1)[1]],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "LSB_DJOB_HOSTFILE": str(hosts)})
    words = echo.stdout.split()
    assert words[words.index("-H") + 1] == "h1:2,h2:2"
    assert "MASTER_ADDR=h1" in words


def test_bjobs_output_is_read() -> None:
    assert job_fields("12|EXIT|3|4*n1:4*n2\n") == {"jobid": "12", "stat": "EXIT",
                                                   "exit_code": "3", "exec_host": "4*n1:4*n2"}
    assert job_fields("Job <12> is not found") == {}
    assert exec_hosts("4*n1:4*n2") == "n1,n2" and exec_hosts("n3") == "n3"


@pytest.fixture
def lsf(tmp_path: Path) -> dict[str, str]:
    """PATH with bsub, bjobs, bkill from the emulator; its state in tmp_path."""
    return emulated_scheduler(tmp_path, EMULATOR, ("bsub", "bjobs", "bkill"), "LSF_EMULATOR_DIR",
                              "lsf")


@pytest.mark.slow
def test_validate_runs_its_jobs_through_bsub_and_bjobs(lsf: dict[str, str], tmp_path: Path,
                                                      local_prefix: Path) -> None:
    """The whole command on an LSF site whose node is this machine."""
    sites = tmp_path / "sites"
    write_profile(sites, "local-lsf", "extends: local\nname: local-lsf\nscheduler: lsf\n")
    env = {**lsf, "HPCPROV_SITES_PATH": str(sites), "HPCPROV_HISTORY": str(tmp_path / "h"),
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    proc = subprocess.run(
        [*hpcprov_argv(), "validate", "--site", "local-lsf", "--nodes", "1", "--checks",
         "allreduce", "--env", str(local_prefix), "--max-bytes", "65536", "--iters", "3",
         "--workdir", str(tmp_path / "run"), "--json"],
        capture_output=True, text=True, env=env, timeout=600)
    data = json.loads(proc.stdout or "{}")
    assert proc.returncode == 0, (proc.stderr, data.get("outcomes"))
    assert data["scheduler"] == "lsf" and data["ok"]
    # horovodrun --gloo fails under LSF (Horovod finds no network interfaces there): the
    # Horovod allreduce runs through mpirun only
    assert sorted(j["id"] for j in data["jobs"]) == ["allreduce-horovod-mpi",
                                                     "allreduce-torch-gloo"]
    assert all(j["state"] == "COMPLETED" and j["exit_code"] == 0 for j in data["jobs"])
    submitted = sorted((tmp_path / "lsf-state").glob("*.sh"))
    assert len(submitted) == len(data["jobs"]) >= 1
    assert "#BSUB -n " in submitted[0].read_text()


def test_horovodrun_gloo_is_refused_under_lsf(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    sites = tmp_path / "sites"
    write_profile(sites, "local-lsf", "extends: local\nname: local-lsf\nscheduler: lsf\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(sites))
    res = cli(capsys, "jobscript", "--site", "local-lsf", "-l", "horovodrun", "--",
              "python", "t.py")
    assert res.rc == 2 and "[lsf-horovod-gloo]" in res.err
    assert "set 'controller: mpi' on launcher horovodrun" in res.err


def test_a_horovodrun_that_runs_gloo_without_saying_so_is_refused_under_lsf(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The lint looked for a literal --gloo in args: a horovodrun launcher with no
    controller, on a site whose Horovod has no MPI controller, runs Gloo all the same."""
    sites = tmp_path / "sites"
    write_profile(sites, "lsf-gloo", "extends: local\nname: lsf-gloo\nscheduler: lsf\n"
                  "horovod: {controllers: [gloo]}\n"
                  "launchers:\n  horovodrun: {kind: horovodrun, controller: null}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(sites))
    res = cli(capsys, "jobscript", "--site", "lsf-gloo", "-l", "horovodrun", "--",
              "python", "t.py")
    assert res.rc == 2 and "[lsf-horovod-gloo]" in res.err, res.err
    assert "no MPI controller" in res.err
    # with MPI built, horovodrun's own default is MPI: nothing to refuse
    write_profile(sites, "lsf-mpi", "extends: lsf-gloo\nname: lsf-mpi\n"
                  "horovod: {controllers: [mpi, gloo]}\n")
    res = cli(capsys, "jobscript", "--site", "lsf-mpi", "-l", "horovodrun", "--",
              "python", "t.py")
    assert res.rc == 0, res.err

"""The PBS backend up to the boundary: qstat output parsing, and validate run through
tests/pbs_emulator.py, which answers as PBS Pro's qsub, qstat and qdel do (no PBS server can
run here; docs/validation.md says so). What PbsExecutor does as every executor must (submit,
poll, exit codes, cancel, refusal) is checked in tests/test_backend_conformance.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import emulated_scheduler, hpcprov_argv, write_profile

from hpcprov.schedulers.pbs import exit_status as pbs_exit
from hpcprov.schedulers.pbs import fields as pbs_fields

EMULATOR = Path(__file__).with_name("pbs_emulator.py")

QSTAT_F = """Job Id: 4242.pbs01
    Job_Name = hpcprov-allreduce-torch-gloo
    Job_Owner = alice@login01
    resources_used.walltime = 00:01:07
    job_state = F
    queue = gpu
    exec_host = se001/0*8+se002/0*8
    exec_vnode = (se001:ncpus=8:ngpus=4)+(se002:ncpus=8:ngpus=4)
    comment = Job run at Mon Mar 02 at 10:01 on (se001:ncpus=8:ngpus=4)+(se002:ncpus=8:n
\tgpus=4) and finished
    Exit_status = 3
"""


def test_qstat_f_attributes_are_read_with_their_continuation_lines() -> None:
    fields = pbs_fields(QSTAT_F)
    assert fields["job_state"] == "F" and fields["Exit_status"] == "3"
    assert fields["exec_host"] == "se001/0*8+se002/0*8"
    assert fields["comment"].endswith("(se002:ncpus=8:ngpus=4) and finished")
    assert "Job Id: 4242.pbs01" not in fields.values()


@pytest.mark.parametrize(("value", "code", "why"), [
    ("0", 0, ""), ("3", 3, ""), ("271", 143, ""), ("265", 137, ""),
    ("-1", -1, "PBS could not run the job (Exit_status -1)"), ("", None, ""), (None, None, ""),
])
def test_exit_status_becomes_a_shell_status(value: str | None, code: int | None,
                                            why: str) -> None:
    assert pbs_exit(value) == (code, why)


@pytest.fixture
def pbs(tmp_path: Path) -> dict[str, str]:
    """PATH with qsub, qstat, qdel from the emulator; its state in tmp_path."""
    return emulated_scheduler(tmp_path, EMULATOR, ("qsub", "qstat", "qdel"), "PBS_EMULATOR_DIR",
                              "pbs")


@pytest.mark.slow
def test_validate_runs_its_jobs_through_qsub_and_qstat(pbs: dict[str, str], tmp_path: Path,
                                                      local_prefix: Path) -> None:
    """The whole command on a PBS site whose nodes are this machine: jobs submitted with
    qsub, polled with qstat -x -f, judged and reported."""
    sites = tmp_path / "sites"
    # mpirun under PBS must be told it may place ranks beyond $PBS_NODEFILE's slot lines:
    # jobscript refuses it otherwise ([pbs-slots]), and so does validate now (issue 45)
    write_profile(sites, "local-pbs", "extends: local\nscheduler: pbs\n"
                  "launchers:\n  mpirun: {oversubscribe: true}\n")
    env = {**pbs, "HPCPROV_SITES_PATH": str(sites), "HPCPROV_HISTORY": str(tmp_path / "h"),
           # the emulator runs jobs as whoever runs the tests (root in CI); PBS never does
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    proc = subprocess.run(
        [*hpcprov_argv(), "validate", "--site", "local-pbs", "--nodes", "1", "--checks",
         "allreduce", "--env", str(local_prefix), "--max-bytes", "65536", "--iters", "3",
         "--workdir",
         str(tmp_path / "run"), "--json"],
        capture_output=True, text=True, env=env, timeout=600)
    data = json.loads(proc.stdout or "{}")
    assert proc.returncode == 0, (proc.stderr, data.get("outcomes"))
    assert data["scheduler"] == "pbs" and data["ok"]
    assert all(j["state"] == "COMPLETED" and j["exit_code"] == 0 for j in data["jobs"])
    submitted = sorted((tmp_path / "pbs-state").glob("*.pbs-emu.json"))
    assert len(submitted) == len(data["jobs"]) >= 1
    first = json.loads(submitted[0].read_text())
    assert "#PBS -l select=" in Path(first["script"]).read_text()


def test_horovodrun_under_pbs_gets_hosts_and_slots_from_the_nodefile(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """$PBS_NODEFILE has one line per slot; horovodrun's --hostfile wants `host slots=N`
    (it fails with IndexError on the plain file), so it is given -H built from the file."""
    from hpcprov_tests import cli

    sites = tmp_path / "sites"
    write_profile(sites, "local-pbs", "extends: local\nscheduler: pbs\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(sites))
    res = cli(capsys, "jobscript", "--site", "local-pbs", "--no-activate", "-l",
              "horovodrun", "--tasks-per-node", "2", "--", "python", "t.py")
    assert res.rc == 0, res.err
    (line,) = [ln for ln in res.out.splitlines() if ln.startswith("horovodrun ")]
    assert "--hostfile" not in line
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("cn2\ncn2\ncn1\ncn1\n")
    echo = subprocess.run(["bash", "-c", "printf '%s\\n' " + line.split(" ", 1)[1]],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PBS_NODEFILE": str(nodefile)})
    words = echo.stdout.split()
    assert words[words.index("-H") + 1] == "cn2:2,cn1:2"

"""tests/gridengine_emulator.py answers as SGE 8.1.9 does where the conformance suite does not
look: the #$ reading rule, $PE_HOSTFILE over several emulated hosts, qstat's layout, qacct
and qdel's words (the real cell: tests/testbed/test_testbed_gridengine*.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import gridengine_emulator as ge
import pytest
from hpcprov_tests import emulated_scheduler

from hpcprov.schedulers.gridengine import GridEngineExecutor, qstat_jobs

TOOLS = ("qsub", "qstat", "qacct", "qdel")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**emulated_scheduler(tmp_path, Path(__file__).with_name("gridengine_emulator.py"),
                                 TOOLS, "GRIDENGINE_EMULATOR_DIR", "ge"),
            "GRIDENGINE_EMULATOR_HOSTS": "gpu01:4 gpu02:4"}


def run(env: dict[str, str], *argv: str,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=cwd)


def test_directives_are_read_as_qsub_reads_them() -> None:
    script = "#!/bin/bash\n#$ -N 'a b'\"c\" -cwd # a comment\necho x\n#$ -l h_rt=1:00:00\n"
    assert ge.directive_args(script) == ["-N", "a bc", "-cwd", "-l", "h_rt=1:00:00"]
    assert ge.options(script + "#$ -pe mpi 8\n") == [
        ("-N", "a bc"), ("-cwd", None), ("-l h_rt", "1:00:00"), ("-pe", "mpi 8")]


def test_a_two_host_job_its_hostfile_and_qacct(env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#$ -pe mpi 6\n#$ -q gpu.q\n#$ -N hf\n"
                      'cat "$PE_HOSTFILE"; echo "$JOB_ID $NSLOTS $NHOSTS"; exit 3\n')
    ex = GridEngineExecutor(env)
    h = ex.submit(script, tmp_path / "out", tmp_path / "never.exit")
    ex.wait([h], timeout_s=60)
    assert (h.job_id, h.state, h.exit_code) == ("1", "FAILED", 3)
    assert (tmp_path / "out").read_text().splitlines() == [
        "gpu01 4 gpu.q@gpu01 UNDEFINED", "gpu02 2 gpu.q@gpu02 UNDEFINED", "1 6 2"]
    acct = run(env, "qacct", "-j", "1").stdout.splitlines()
    assert {"jobname      hf", "failed       0", "exit_status  3", "slots        6"} <= set(acct)


def test_qstat_lists_a_running_job_per_host_and_qdel_ends_it(env: dict[str, str],
                                                             tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#$ -pe mpi 6\n#$ -N long\nexec sleep 600\n")
    sub = run(env, "qsub", "-cwd", "-o", "out", "-j", "y", str(script), cwd=tmp_path)
    assert sub.stdout == 'Your job 1 ("long") has been submitted\n', sub.stderr
    table = run(env, "qstat", "-g", "t", "-u", "*").stdout.splitlines()
    assert table[0] == ge.HEADER and set(table[1]) == {"-"}
    assert [line.split()[0::8] for line in table[2:]] == [["1", "MASTER"], ["1", "SLAVE"]]
    assert qstat_jobs("\n".join(table)) == {"1": ("r", ["gpu01", "gpu02"])}
    assert run(env, "qdel", "1").stdout.endswith("has registered the job 1 for deletion\n")
    assert run(env, "qstat", "-g", "t", "-u", "*").stdout == ""
    acct = run(env, "qacct", "-j", "1").stdout
    assert "failed       100 : assumedly after job" in acct and "exit_status  137" in acct
    gone = run(env, "qdel", "1")
    assert (gone.returncode, gone.stderr) == (1, 'denied: job "1" does not exist\n')


def test_a_request_the_hosts_cannot_hold_waits_and_leaves_no_record(
        env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "big.sh"
    script.write_text("#!/bin/bash\n#$ -pe mpi 9\ntrue\n")
    assert run(env, "qsub", "-terse", str(script)).stdout == "1\n"
    assert run(env, "qstat", "-g", "t", "-u", "*").stdout.splitlines()[2].split()[4] == "qw"
    assert run(env, "qdel", "1").stdout.endswith("has deleted job 1\n")
    assert run(env, "qacct", "-j", "1").stderr == "error: job id 1 not found\n"

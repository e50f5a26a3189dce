"""Grid Engine's executor (issue 43): `qstat -f` as SGE 8.1.9 prints it on the testbed (a
host whose execd went unheard: queue state u, load -NA-), read into the hosts that take jobs
and the running jobs on a dead host deleted with the host named. For real on the testbed:
tests/testbed/test_testbed_gridengine_validate.py."""

from __future__ import annotations

from pathlib import Path

from hpcprov.core.commands import Completed
from hpcprov.schedulers import gridengine as ge
from hpcprov.schedulers.base import Handle

QSTAT_F = """\
queuename                      qtype resv/used/tot. load_avg arch          states
---------------------------------------------------------------------------------
amd_a100nv_8@gpu01             BIP   0/1/64         2.05     lx-amd64
     18 0.50000 s2.sh      root         r     11/28/2026 13:33:55     1
---------------------------------------------------------------------------------
amd_a100nv_8@gpu02.cluster     BIP   0/1/64         -NA-     lx-amd64      u
     18 0.50000 s2.sh      root         r     11/28/2026 13:33:55     1
---------------------------------------------------------------------------------
cas_v100_4@gpu03               BIP   0/0/40         0.01     lx-amd64      d
---------------------------------------------------------------------------------
cas_v100_4@gpu04               BIP   0/0/40         0.01     lx-amd64

############################################################################
 - PENDING JOBS - PENDING JOBS - PENDING JOBS - PENDING JOBS - PENDING JOBS
############################################################################
     19 0.00000 wait.sh    root         qw    11/28/2026 13:34:01     2
"""


def test_qstat_f_is_read_into_queue_instances_and_their_states() -> None:
    assert ge.qstat_queues(QSTAT_F) == {
        "amd_a100nv_8@gpu01": ("gpu01", ""), "amd_a100nv_8@gpu02.cluster": ("gpu02", "u"),
        "cas_v100_4@gpu03": ("gpu03", "d"), "cas_v100_4@gpu04": ("gpu04", "")}


class Qstat(ge.GridEngineExecutor):
    """The executor with Grid Engine's answers given (qstat -g t, qstat -f), qdel recorded."""

    def __init__(self, jobs: str, queues: str) -> None:
        super().__init__({})
        self.texts = {("qstat", "-g", "t", "-u", "*"): jobs, ("qstat", "-f"): queues}
        self.deleted: list[str] = []

    def _run(self, *argv: str, timeout: float = 60, stdin: Path | None = None) -> Completed:
        if argv[0] == "qdel":
            self.deleted.append(argv[1])
            return Completed(0, "", "")
        return Completed(0, self.texts[argv], "")


# (qstat -g t, its columns narrowed: words count, not columns)
QSTAT_GT = """\
job-ID  prior  name  user  state submit/start at  queue  master ja-task-ID
------------------------------------------------------------------------------------------
     18 0.50000 s2.sh  root  r  11/28/2026 13:33:55 amd_a100nv_8@gpu02.cluster  MASTER
                                                          amd_a100nv_8@gpu02.cluster     SLAVE
     18 0.50000 s2.sh  root  r  11/28/2026 13:33:55 amd_a100nv_8@gpu01  SLAVE
     20 0.50000 one.sh  root  r  11/28/2026 13:33:56 cas_v100_4@gpu04  MASTER
"""


def test_a_job_on_a_host_gone_unheard_is_deleted_and_the_host_named(tmp_path: Path) -> None:
    ex = Qstat(QSTAT_GT, QSTAT_F)
    on_dead, alive = (Handle(j, tmp_path / "s", tmp_path / "o", tmp_path / "e", 0.0)
                      for j in ("18", "20"))
    ex.refresh([on_dead, alive])
    assert ex.deleted == ["18"]
    assert (on_dead.state, on_dead.bad_nodes, on_dead.done) == ("NODE_FAIL", "gpu02", True)
    assert on_dead.nodes == "gpu01,gpu02"  # by name, though the MASTER runs on gpu02
    assert on_dead.reason == "node gpu02 stopped answering (Grid Engine queue state u)"
    assert (alive.state, alive.nodes, alive.done) == ("RUNNING", "gpu04", False)


def test_the_hosts_that_take_jobs_leave_out_unheard_and_disabled_ones() -> None:
    ex = Qstat("", QSTAT_F)
    assert ex.usable_nodes("amd_a100nv_8") == ["gpu01"]
    assert ex.usable_nodes("cas_v100_4") == ["gpu04"]
    assert ex.usable_nodes("nosuch.q") is None  # no such queue: unknown, not none
    assert ex.usable_nodes("amd_a100nv_8", {"constraint": "a100"}) is None


def test_a_job_held_in_error_state_is_deleted_and_failed_with_the_reason(
        tmp_path: Path) -> None:
    """A job Grid Engine holds in Eqw never runs (here it could not chdir to the submitter's
    folder on the node): it was only marked, and validate waited for its timeout. Now it is
    deleted at once and fails with Grid Engine's reason, without its date and ids."""
    eqw = ("job-ID  prior  name  user  state submit/start at  queue  master ja-task-ID\n"
           "-----------------------------------------------------------------------\n"
           "      5 0.50000 hpcprov-al root  Eqw  11/28/2026 14:02:11\n")
    ex = Qstat(eqw, "")
    ex.texts[("qstat", "-j", "5")] = (
        "job_number:                 5\n"
        "error reason          1:      11/28/2026 14:02:11 [0:31373]: error: can't chdir to "
        "/tmp/ci-check: No such file or directory\n")
    h = Handle("5", tmp_path / "j.sh", tmp_path / "j.out", tmp_path / "j.exit", 0.0)
    ex.refresh([h])
    assert h.done and ex.deleted == ["5"] and h.exit_code is None
    assert h.reason == ("Grid Engine held the job in error state Eqw: error: can't chdir to "
                        "/tmp/ci-check: No such file or directory")


def test_a_job_starts_in_its_scripts_folder_whatever_the_submitters(tmp_path: Path) -> None:
    """qsub -wd FOLDER of the script: the submitter's folder may not exist on the nodes."""
    calls: list[tuple[str, ...]] = []

    class Submit(ge.GridEngineExecutor):
        def _run(self, *argv: str, timeout: float = 60, stdin: Path | None = None
                 ) -> Completed:
            calls.append(argv)
            return Completed(0, "7\n", "")

    script = tmp_path / "run" / "env.sh"
    h = Submit({}).submit(script, tmp_path / "env.out", tmp_path / "env.exit")
    (argv,) = calls
    assert h.job_id == "7" and argv[argv.index("-wd") + 1] == str(script.parent)
    assert argv[0:2] == ("qsub", "-terse") and argv[-1] == str(script)

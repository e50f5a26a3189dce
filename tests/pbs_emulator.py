#!/usr/bin/env python3
"""qsub, qstat and qdel as PBS Pro / OpenPBS answer them, for the tests of hpcprov's PBS
executor: no PBS server can run on this machine, so this is the boundary its tests reach.

Symlink this file as `qsub`, `qstat` and `qdel` into a folder on PATH; state lives in
$PBS_EMULATOR_DIR. A job runs at once as a local `bash SCRIPT` (stdout and stderr to the
`-o` file, as `-j oe` asks), unless $PBS_EMULATOR_HOLD is set at submission (it stays
queued until qdel). What it reproduces of PBS Pro, because hpcprov depends on it:
- `qsub` prints the job id (`N.SERVER`) and nothing else; the script's #PBS lines before
  its first command are read (:func:`directive_args`: words apart at whitespace, as
  hpcprov's spelling record of PBS, hpcprov.schedulers.spelling.PBS, writes them; not
  checked against qsub's own parser) and kept with the job (its `-N` is qstat's Job_Name);
- `qstat -f ID` prints `Job Id: ID` and `    name = value` attributes (job_state Q/R/F,
  exec_host, Exit_status once finished, comment while queued); a finished job needs `-x`
  (without it: "Job has finished, use -x or -H ..." and exit 35);
- with $PBS_EMULATOR_HISTORY=0 (job history off, the PBS Pro default) a finished job is
  gone: "Unknown Job Id" and exit 153, `-x` or not;
- Exit_status is the script's status, 256 + N when signal N killed it;
- `qdel` kills a running job (Exit_status 271: SIGTERM, as PBS reports it) and removes a
  queued one.
For `hpcprov site draft` (OpenPBS 20's answers, one vnode: this host):
- `pbsnodes -av` lists this host as a free vnode with `resources_available.ncpus`
  ($PBS_EMULATOR_NCPUS, default the machine's), `mem` and `ngpus` ($PBS_EMULATOR_NGPUS,
  default 0);
- `qstat -Qf` shows the execution queue `workq` (the OpenPBS default), with a walltime
  limit when $PBS_EMULATOR_MAX_WALLTIME is set; `qstat -Bf` the server, its
  default_queue and pbs_version.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emulator_kit as kit

from hpcprov.schedulers.spelling import PBS as SPELLING

SERVER = "pbs-emu"
SPOOL = kit.Spool("PBS_EMULATOR_DIR")
STATES = {"pending": "Q", "running": "R", "ended": "F", "cancelled": "F"}


def directive_args(text: str) -> list[str]:
    """The words of a script's directives: the lines that start with the prefix, before the
    first command, each split at whitespace."""
    return kit.directive_args(text, SPELLING, str.split)


def options(text: str) -> list[kit.Option]:
    """The options a script's #PBS lines give qsub, each as (flag, value)."""
    return kit.options(directive_args(text), SPELLING)[0]


def qsub(argv: list[str]) -> int:
    cli, rest = kit.options(argv, SPELLING)
    script = rest[0] if rest else None
    if script is None or not Path(script).is_file():
        print("qsub: script file:: No such file or directory", file=sys.stderr)
        return 2
    n = SPOOL.number()
    given = dict(options(Path(script).read_text(errors="replace")) + cli)
    out = given.get(SPELLING.flag("output"))
    job = SPOOL.new(f"{n}.{SERVER}", n, script=os.path.abspath(script),
                    name=given.get(SPELLING.flag("job-name")) or Path(script).name)
    SPOOL.save(job)
    if not os.environ.get("PBS_EMULATOR_HOLD"):
        nodefile = SPOOL.file(job["id"], "nodes")
        nodefile.write_text(socket.gethostname() + "\n")
        env = {**os.environ, "PBS_JOBID": job["id"], "PBS_O_WORKDIR": os.getcwd(),
               "PBS_NODEFILE": str(nodefile)}
        SPOOL.start(job, ["bash", job["script"]], env=env, cwd=os.getcwd(), out=out)
    print(job["id"])
    return 0


def _exit_status(job: dict) -> int:
    """Exit_status: the script's, 256 + N where signal N killed it (271: qdel's SIGTERM)."""
    if job["phase"] == "cancelled":
        return 256 + signal.SIGTERM
    return 256 + job["signal"] if job["signal"] else job["rc"]


def _ncpus() -> int:
    return int(os.environ.get("PBS_EMULATOR_NCPUS") or os.cpu_count() or 1)


def pbsnodes(argv: list[str]) -> int:
    host = socket.gethostname()
    ngpus = int(os.environ.get("PBS_EMULATOR_NGPUS") or 0)
    lines = [host, f"     Mom = {host}", "     ntype = PBS", "     state = free",
             f"     pcpus = {_ncpus()}", "     resources_available.arch = linux",
             f"     resources_available.host = {host}",
             "     resources_available.mem = 16318496kb",
             f"     resources_available.ncpus = {_ncpus()}"]
    if ngpus:
        lines.append(f"     resources_available.ngpus = {ngpus}")
    lines += [f"     resources_available.vnode = {host}",
              "     resources_assigned.accelerator_memory = 0kb",
              "     resources_assigned.mem = 0kb", "     resources_assigned.ncpus = 0",
              "     resv_enable = True", "     sharing = default_shared",
              "     last_state_change_time = Tue Jan  9 10:00:00 2024"]
    print("\n".join(lines) + "\n")
    return 0


def _queues() -> int:
    lines = ["Queue: workq", "    queue_type = Execution", "    total_jobs = 0",
             "    state_count = Transit:0 Queued:0 Held:0 Waiting:0 Running:0 Exiting:0 "
             "Begun:0 "]
    if os.environ.get("PBS_EMULATOR_MAX_WALLTIME"):
        lines.append(f"    resources_max.walltime = {os.environ['PBS_EMULATOR_MAX_WALLTIME']}")
    lines += ["    resources_assigned.mem = 0kb", "    resources_assigned.ncpus = 0",
              "    resources_assigned.nodect = 0", "    hasnodes = True",
              "    enabled = True", "    started = True"]
    print("\n".join(lines) + "\n")
    return 0


def _server() -> int:
    print("\n".join([f"Server: {SERVER}", "    server_state = Active",
                     f"    server_host = {socket.gethostname()}", "    scheduling = True",
                     "    total_jobs = 0", "    default_queue = workq",
                     "    resources_default.ncpus = 1", "    default_chunk.ncpus = 1",
                     "    pbs_version = 20.0.1"]) + "\n")
    return 0


def qstat(argv: list[str]) -> int:
    if "-Qf" in argv:
        return _queues()
    if "-Bf" in argv:
        return _server()
    history = "-x" in argv
    ids = [a for a in argv if not a.startswith("-")]
    for jid in ids:
        job = SPOOL.load(jid)
        if job is not None:
            job["state"] = STATES[job["phase"]]
        if job is None or (job["state"] == "F" and os.environ.get("PBS_EMULATOR_HISTORY")
                           == "0"):
            print(f"qstat: Unknown Job Id {jid}", file=sys.stderr)
            return 153
        if job["state"] == "F" and not history:
            print(f"qstat: {jid} Job has finished, use -x or -H to obtain historical job "
                  "information", file=sys.stderr)
            return 35
        lines = [f"Job Id: {jid}", f"    Job_Name = {job.get('name') or Path(job['script']).name}",
                 f"    Job_Owner = root@{socket.gethostname()}",
                 f"    job_state = {job['state']}", "    queue = workq"]
        if job["state"] in ("R", "F"):
            lines.append(f"    exec_host = {socket.gethostname()}/0*2")
        if job["state"] == "Q":
            lines += ["    comment = Not Running: Insufficient amount of resource: ncpus ",
                      "\t(R: 64 A: 0 T: 64)"]
        if job["state"] == "F":
            lines.append(f"    Exit_status = {_exit_status(job)}")
        print("\n".join(lines) + "\n")
    return 0


def qdel(argv: list[str]) -> int:
    for jid in (a for a in argv if not a.startswith("-")):
        job = SPOOL.load(jid)
        if job is None:
            print(f"qdel: Unknown Job Id {jid}", file=sys.stderr)
            return 153
        if SPOOL.cancel(job) == "pending":  # a queued job is gone; a running one F, 271
            SPOOL.drop(jid)
    return 0


if __name__ == "__main__":
    sys.exit(kit.main({"qsub": qsub, "qstat": qstat, "qdel": qdel, "pbsnodes": pbsnodes},
                      sys.argv))

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

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's hpcprov
from hpcprov.schedulers.spelling import PBS as SPELLING

SERVER = "pbs-emu"


def _state() -> Path:
    d = Path(os.environ["PBS_EMULATOR_DIR"])
    d.mkdir(parents=True, exist_ok=True)
    return d


def _load(job: str) -> dict | None:
    path = _state() / f"{job}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _save(job: dict) -> None:
    (_state() / f"{job['id']}.json").write_text(json.dumps(job))


def directive_args(text: str) -> list[str]:
    """The words of a script's directives: the lines that start with the prefix, before the
    first command, each split at whitespace."""
    words: list[str] = []
    for line in text.splitlines()[1:]:
        if line.startswith(SPELLING.prefix):
            words += line[len(SPELLING.prefix):].split()
        elif line.strip() and not line.startswith("#"):
            break
    return words


def _value(args: list[str], name: str) -> str | None:
    """The value the directives give the option ``name`` (its flag's last one), or None."""
    flag, found = SPELLING.flag(name), None
    for i, arg in enumerate(args[:-1]):
        if arg == flag:
            found = args[i + 1]
    return found


def qsub(argv: list[str]) -> int:
    out, script = None, None
    it = iter(argv)
    for a in it:
        if a == "-o":
            out = next(it)
        elif a == "-j":
            next(it)
        elif not a.startswith("-"):
            script = a
    if script is None or not Path(script).is_file():
        print("qsub: script file:: No such file or directory", file=sys.stderr)
        return 2
    counter = _state() / "counter"
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    args = directive_args(Path(script).read_text(errors="replace"))
    job = {"id": f"{n}.{SERVER}", "script": os.path.abspath(script), "out": out,
           "state": "Q", "pid": None, "args": args,
           "name": _value(args, "job-name") or Path(script).name}
    if not os.environ.get("PBS_EMULATOR_HOLD"):
        status = _state() / f"{job['id']}.status"
        nodefile = _state() / f"{job['id']}.nodes"
        nodefile.write_text(socket.gethostname() + "\n")
        env = {**os.environ, "PBS_JOBID": job["id"], "PBS_O_WORKDIR": os.getcwd(),
               "PBS_NODEFILE": str(nodefile)}
        with open(out or os.devnull, "wb") as fh:
            proc = subprocess.Popen(
                ["bash", "-c", 'bash "$1"; echo $? > "$2"', "pbs-job", job["script"],
                 str(status)], stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True, cwd=os.getcwd())
        job.update(state="R", pid=proc.pid)
    _save(job)
    print(job["id"])
    return 0


def _finish(job: dict) -> dict:
    """Mark a running job finished once its script has ended."""
    status = _state() / f"{job['id']}.status"
    if job["state"] == "R" and status.exists() and status.read_text().strip():
        code = int(status.read_text())
        job.update(state="F", exit=256 + code - 128 if code > 128 else code)
        _save(job)
    return job


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
        job = _load(jid)
        if job is not None:
            job = _finish(job)
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
            lines.append(f"    Exit_status = {job['exit']}")
        print("\n".join(lines) + "\n")
    return 0


def qdel(argv: list[str]) -> int:
    for jid in (a for a in argv if not a.startswith("-")):
        job = _load(jid)
        if job is None:
            print(f"qdel: Unknown Job Id {jid}", file=sys.stderr)
            return 153
        if _finish(job)["state"] == "R":
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job["pid"], signal.SIGKILL)
            job.update(state="F", exit=256 + signal.SIGTERM)  # what PBS reports after qdel
            _save(job)
        elif job["state"] == "Q":
            (_state() / f"{jid}.json").unlink()
    return 0


if __name__ == "__main__":
    tool = Path(sys.argv[0]).name
    sys.exit({"qsub": qsub, "qstat": qstat, "qdel": qdel,
              "pbsnodes": pbsnodes}[tool](sys.argv[1:]))

#!/usr/bin/env python3
"""qsub, qstat, qacct and qdel as Son of Grid Engine 8.1.9 answers them, for the tests of
hpcprov's Grid Engine executor that run without root (the conformance suite); the real
proof stays the testbed's Grid Engine (tests/testbed/test_testbed_gridengine*.py). Symlink
this file under those names into a folder on PATH; state lives in $GRIDENGINE_EMULATOR_DIR,
jobs in the shared kit (tests/emulator_kit.py).

- `qsub [-terse] [OPTIONS] SCRIPT [ARGS]`: `-terse` prints the job id alone, else `Your job
  N ("NAME") has been submitted`; ids from 1. The script's `#$` lines are read with hpcprov's
  spelling record of Grid Engine (hpcprov.schedulers.spelling.GRIDENGINE) and its reading
  rule (:func:`words`: split at blanks, a quoted stretch one word without its quotes, `#`
  ending the line), in the whole script; the command line wins. A missing script: `Unable
  to read script file because of error: error opening SCRIPT: No such file or directory`.
- The job runs at once as `bash SCRIPT` (-cwd: in the submission folder, -wd DIR, else
  $HOME), stdout to -o (appended; default NAME.oID), stderr to -e or, with -j y, the
  output; its environment: JOB_ID, JOB_NAME, NSLOTS, NHOSTS, NQUEUES, PE, QUEUE,
  SGE_O_WORKDIR and PE_HOSTFILE, whose lines (`host slots queue@host UNDEFINED`) place the
  slots of its `-pe NAME SLOTS` on the emulated hosts, filling each in turn ($fill_up);
  `-l NODE_RESOURCE=N` where the site sizes jobs in node units: N hosts, all their slots.
  Where the hosts cannot hold the request the job waits (qw), as without `-w e`.
- `qstat -g t -u '*'` in SGE 8.1.9's layout: the header, a line of dashes, one line per
  job and host (the master's `MASTER`, the others' `SLAVE`); a pending job one line, `qw`
  (held: `hqw`). An ended job is gone.
  `qstat -j ID`: `job_number: ID` and its name; unknown: `Following jobs do not exist:`.
- `qacct -j ID` once the job ended: `qname`, `hostname`, `jobnumber`, `jobname`, `failed`
  (`0`; `100 : assumedly after job` after qdel), `exit_status` (the script's, 128 + N when
  signal N killed it; 137 after qdel); unknown: `error: job id ID not found`, exit 1.
- `qdel ID`: a running job: SIGKILL to its processes, `root has registered the job ID for
  deletion`; a pending one is deleted (`... has deleted job ID`), with no accounting record;
  unknown: `denied: job "ID" does not exist`, exit 1.

Knobs: $GRIDENGINE_EMULATOR_HOSTS (`host:slots ...`; default this host, 64 slots) and
$GRIDENGINE_EMULATOR_NODE_RESOURCE (the node unit, e.g. node_f); at qsub
$GRIDENGINE_EMULATOR_HOLD=1 (the job waits until qdel) and $GRIDENGINE_EMULATOR_ACCOUNTING=0
(its end is not accounted: qacct does not know it). Not emulated: arrays, qrsh, qconf,
qhost, consumables (-l gpu= is read, not counted), hosts other than this one running jobs.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emulator_kit as kit

from hpcprov.schedulers.spelling import GRIDENGINE as SPELLING

HOST = socket.gethostname()
SPOOL = kit.Spool("GRIDENGINE_EMULATOR_DIR")
# qsub's flags that take no value (by the flag the record reads them as)
VALUELESS = {"-cwd", "-V", "-h", "-terse", "-notify", "-hard", "-soft", "-clear", "-verify"}
USER = os.environ.get("USER") or "root"
HEADER = ("job-ID  prior   name       user         state submit/start at     queue       "
          "                   master ja-task-ID ")


def words(line: str) -> list[str]:
    """One #$ line's words, as SGE 8.1.9's qsub reads them: apart at blanks; a stretch in
    single or double quotes stays in one word and its quotes are dropped; a # ends the
    line, in quotes too."""
    found: list[str] = []
    current: list[str] | None = None
    quote = ""
    for c in line:
        if c == "#":
            break
        if quote:
            if c == quote:
                quote = ""
            else:
                current = (current or []) + [c]
        elif c in "'\"":
            quote, current = c, current or []
        elif c.isspace():
            if current is not None:
                found.append("".join(current))
            current = None
        else:
            current = (current or []) + [c]
    if current is not None:
        found.append("".join(current))
    return found


def directive_args(text: str) -> list[str]:
    """The words of a script's #$ lines (every one: qsub reads the whole script)."""
    return kit.directive_args(text, SPELLING, words, whole=True)


def options(text: str) -> list[kit.Option]:
    """The options a script's #$ lines give qsub, each as (flag, value)."""
    return kit.options(directive_args(text), SPELLING, VALUELESS)[0]


def _hosts() -> list[tuple[str, int]]:
    given = os.environ.get("GRIDENGINE_EMULATOR_HOSTS") or f"{HOST}:64"
    return [(h.partition(":")[0], int(h.partition(":")[2] or 1)) for h in given.split()]


def placed(given: dict[str, str | None]) -> list[tuple[str, int]] | None:
    """The hosts and slots of a job's request (None: the hosts cannot hold it): -pe NAME
    SLOTS filled up host by host, N hosts of the site's node unit, else one slot."""
    unit = os.environ.get("GRIDENGINE_EMULATOR_NODE_RESOURCE")
    hosts = _hosts()
    if unit and given.get(SPELLING.key(unit)):
        count = int(given[SPELLING.key(unit)] or 1)
        return hosts[:count] if count <= len(hosts) else None
    pe = (given.get("-pe") or "").split()
    left = int(pe[1].split("-")[-1]) if len(pe) > 1 else 1
    out = []
    for host, slots in hosts:
        if left > 0:
            out.append((host, min(slots, left)))
            left -= min(slots, left)
    return None if left else out


def qsub(argv: list[str]) -> int:
    cli, rest = kit.options(argv, SPELLING, VALUELESS)
    script = Path(rest[0]) if rest else None
    if script is None or not script.is_file():
        print("Unable to read script file because of error: error opening "
              f"{script or ''}: No such file or directory", file=sys.stderr)
        return 1
    try:
        given = dict(options(script.read_text(errors="replace")) + cli)
    except UnicodeError as exc:
        print(f"Unable to read script file because of error: {exc}", file=sys.stderr)
        return 1
    n = SPOOL.number()
    name = given.get("-N") or script.name
    pe = (given.get("-pe") or "").split()
    hosts = placed(given)
    workdir = os.getcwd() if "-cwd" in given else given.get("-wd") or \
        os.environ.get("HOME", "/")
    job = SPOOL.new(str(n), n, name=name, script=str(script.resolve()), args=rest[1:],
                    queue=given.get("-q") or "all.q", pe=pe[0] if pe else "",
                    hosts=hosts or [], workdir=workdir,
                    held="-h" in given, accounted=os.environ.get(
                        "GRIDENGINE_EMULATOR_ACCOUNTING") != "0")
    SPOOL.save(job)
    hold = os.environ.get("GRIDENGINE_EMULATOR_HOLD") == "1" or "-h" in given
    if hosts and not hold:
        _start(job, given)
    print(job["id"] if "-terse" in given else
          f'Your job {job["id"]} ("{name}") has been submitted')
    return 0


def _start(job: dict, given: dict[str, str | None]) -> None:
    hostfile = SPOOL.file(job["id"], "pe_hostfile")
    hostfile.write_text("".join(f"{h} {s} {job['queue']}@{h} UNDEFINED\n"
                                for h, s in job["hosts"]))
    env = {**os.environ, "JOB_ID": job["id"], "JOB_NAME": job["name"],
           "NSLOTS": str(sum(s for _, s in job["hosts"])), "NHOSTS": str(len(job["hosts"])),
           "NQUEUES": str(len(job["hosts"])), "PE": job["pe"] or "NONE",
           "QUEUE": job["queue"], "SGE_O_WORKDIR": os.getcwd(), "PE_HOSTFILE": str(hostfile),
           "SGE_TASK_ID": "undefined", "REQUEST": job["name"]}
    out = given.get("-o") or f"{job['name']}.o{job['id']}"
    err = out if given.get("-j", "n") in ("y", "yes") else \
        given.get("-e") or f"{job['name']}.e{job['id']}"
    SPOOL.start(job, ["bash", job["script"], *job["args"]], env=env, cwd=job["workdir"],
                out=os.path.join(job["workdir"], out), err=os.path.join(job["workdir"], err),
                append=True)


def _when(t: float) -> str:
    return time.strftime("%m/%d/%Y %H:%M:%S", time.localtime(t))


def qstat(argv: list[str]) -> int:
    if "-j" in argv:
        ids = argv[argv.index("-j") + 1:argv.index("-j") + 2]
        jobs = [j for j in (SPOOL.load(i) for i in ids) if j and j["phase"] in
                ("pending", "running")]
        if not jobs:
            print(f"Following jobs do not exist: \n{','.join(ids)}", file=sys.stderr)
            return 1
        for job in jobs:
            print(f"job_number:                 {job['id']}\njob_name:                   "
                  f"{job['name']}\nhard_queue_list:            {job['queue']}")
        return 0
    live = [j for j in SPOOL.jobs() if j["phase"] in ("pending", "running")]
    if not live:
        return 0
    lines = [HEADER, "-" * 114]
    for job in live:
        head = f"{job['id']:>7} {'0.55500' if job['start'] else '0.00000'} " \
               f"{job['name'][:10]:<10} {USER[:12]:<12} "
        if job["phase"] == "pending":
            state = "hqw" if job["held"] else "qw"
            lines.append(f"{head}{state:<5} {_when(job['submit'])}")
            continue
        for i, (host, _slots) in enumerate(job["hosts"]):
            lines.append(f"{head}{'r':<5} {_when(job['start'])} {job['queue'] + '@' + host:<30} "
                         f"{'MASTER' if i == 0 else 'SLAVE':<6}")
    print("\n".join(lines))
    return 0


def qacct(argv: list[str]) -> int:
    jid = argv[argv.index("-j") + 1] if "-j" in argv and argv.index("-j") + 1 < len(argv) \
        else ""
    job = SPOOL.load(jid)
    if job is None or not job["accounted"] or job["phase"] not in ("ended", "cancelled") \
            or not job["start"]:
        print(f"error: job id {jid} not found", file=sys.stderr)
        return 1
    cancelled = job["phase"] == "cancelled"
    fields = [("qname", job["queue"]), ("hostname", job["hosts"][0][0]), ("owner", USER),
              ("jobname", job["name"]), ("jobnumber", job["id"]),
              ("granted_pe", job["pe"] or "NONE"),
              ("slots", str(sum(s for _, s in job["hosts"]))),
              ("failed", "100 : assumedly after job" if cancelled else "0"),
              ("exit_status", str(128 + signal.SIGKILL if cancelled else kit.status(job)))]
    print("=" * 62)
    print("\n".join(f"{k:<13}{v}" for k, v in fields))
    return 0


def qdel(argv: list[str]) -> int:
    rc = 0
    for jid in (a for a in argv if not a.startswith("-")):
        job = SPOOL.load(jid)
        if job is None or job["phase"] not in ("pending", "running"):
            print(f'denied: job "{jid}" does not exist', file=sys.stderr)
            rc = 1
            continue
        if SPOOL.cancel(job, (signal.SIGKILL,)) == "pending":
            SPOOL.drop(jid)
            print(f"{USER} has deleted job {jid}")
        else:
            print(f"{USER} has registered the job {jid} for deletion")
    return rc


if __name__ == "__main__":
    sys.exit(kit.main({"qsub": qsub, "qstat": qstat, "qacct": qacct, "qdel": qdel},
                      sys.argv))

#!/usr/bin/env python3
"""bsub, bjobs and bkill as IBM Spectrum LSF 10.1 answers them, for the tests of hpcprov's
LSF backend: no LSF cluster can run on this machine, so this is the boundary its tests reach.

Symlink this file as `bsub`, `bjobs` and `bkill` into a folder on PATH; state lives in
$LSF_EMULATOR_DIR. What it reproduces of LSF (IBM's command reference), because hpcprov
depends on it:
- `bsub [-o F] [-e F] < SCRIPT` reads the job script from stdin and prints
  `Job <N> is submitted to default queue <normal>.`; the job runs at once as a local
  `bash` process with LSB_JOBID, LSB_DJOB_HOSTFILE (one line per slot, from the `#BSUB -n`
  and `-R span[ptile=]` directives) and LS_SUBCWD set, unless $LSF_EMULATOR_HOLD is set (PEND
  until bkill); the #BSUB lines before the first command are read by :func:`directive_args`
  (words apart at blanks, a double-quoted run one word without its quotes, as hpcprov's
  spelling record of LSF, hpcprov.schedulers.spelling.LSF, writes them; not checked against
  bsub's own parser);
- `bjobs -noheader -o "jobid stat exit_code exec_host delimiter='|'" ID` prints one line:
  stat PEND/RUN/DONE/EXIT, exit_code `-` unless the job exited non-zero, exec_host as
  `N*host`; with $LSF_EMULATOR_CLEAN=1 a finished job has been cleaned (CLEAN_PERIOD over):
  `Job <N> is not found` on stderr, exit 255;
- `bkill ID` kills a running job (EXIT, exit_code 130, as LSF reports its SIGINT first)
  and removes a pending one.
For `hpcprov site draft` (one host: this one):
- `bqueues -l` shows the queue `normal` (LSF's default lsb.queues: "This is the default
  queue."), with a RUNLIMIT when $LSF_EMULATOR_RUNLIMIT (minutes) is set;
- `bhosts -l` shows this host, ok, with MAX job slots $LSF_EMULATOR_SLOTS (default the
  machine's CPUs); `bhosts -l -gpu` its $LSF_EMULATOR_NGPUS GPUs (default 0) of model
  $LSF_EMULATOR_GPU_MODEL.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emulator_kit as kit

from hpcprov.schedulers.spelling import LSF as SPELLING

SPOOL = kit.Spool("LSF_EMULATOR_DIR")
VALUELESS = {"-x", "-B", "-N", "-I", "-K", "-r", "-rn"}  # bsub's flags that take no value


def words(line: str) -> list[str]:
    """One #BSUB line's words: apart at blanks, a double-quoted run part of a word without
    its quotes (ValueError where one is left open)."""
    found = []
    for m in re.finditer(r'(?:[^\s"]+|"[^"]*")+|"', line):
        if m.group(0).count('"') % 2:
            raise ValueError(f"unmatched quote in {line}")
        found.append(m.group(0).replace('"', ""))
    return found


def directive_args(text: str) -> list[str]:
    """The words of a script's directives: the lines that start with the prefix, before the
    first command (:func:`words`)."""
    return kit.directive_args(text, SPELLING, words)


def options(text: str) -> list[kit.Option]:
    """The options a script's #BSUB lines give bsub, each as (flag, value)."""
    return kit.options(directive_args(text), SPELLING, VALUELESS)[0]


def _slots(script: str) -> int:
    """Slots on this (only) host: ptile when given, else -n, else 1."""
    given = options(script)
    ptile = [m.group(1) for flag, r in given if flag == SPELLING.flag("resource")
             if (m := re.search(r"span\[ptile=(\d+)\]", r or ""))]
    total = [v for flag, v in given if flag == SPELLING.flag("ntasks") and v]
    return int(ptile[-1]) if ptile else int(total[-1]) if total else 1


def bsub(argv: list[str]) -> int:
    cli = dict(kit.options(argv, SPELLING, VALUELESS)[0])
    text = sys.stdin.read()
    if not text.strip():
        print("No command is specified. Job not submitted.", file=sys.stderr)
        return 255
    try:
        slots = _slots(text)
    except ValueError as exc:
        print(f"{exc}. Job not submitted.", file=sys.stderr)
        return 255
    n = SPOOL.number()
    script = SPOOL.file(str(n), "sh")
    script.write_text(text)
    job = SPOOL.new(str(n), n, script=str(script), slots=slots)
    SPOOL.save(job)
    if not os.environ.get("LSF_EMULATOR_HOLD"):
        hostfile = SPOOL.file(job["id"], "hosts")
        hostfile.write_text((socket.gethostname() + "\n") * slots)
        env = {**os.environ, "LSB_JOBID": job["id"], "LSB_DJOB_HOSTFILE": str(hostfile),
               "LS_SUBCWD": os.getcwd()}
        SPOOL.start(job, ["bash", job["script"]], env=env, cwd=os.getcwd(),
                    out=cli.get("-o"), err=cli.get("-e"), append=True)
    print(f"Job <{n}> is submitted to default queue <normal>.")
    return 0


def _state(job: dict) -> tuple[str, str]:
    """STAT and exit_code: PEND, RUN, DONE or EXIT (the script's status, 130 after bkill:
    LSF reports the SIGINT it sends first)."""
    if job["phase"] == "cancelled":
        return "EXIT", "130"
    if job["phase"] == "ended":
        return ("DONE", "-") if kit.succeeded(job) else ("EXIT", str(kit.status(job)))
    return ("PEND" if job["phase"] == "pending" else "RUN"), "-"


def bjobs(argv: list[str]) -> int:
    ids = [a for a in argv if re.fullmatch(r"\d+", a)]
    for jid in ids:
        job = SPOOL.load(jid)
        state, code = _state(job) if job is not None else ("", "")
        cleaned = state in ("DONE", "EXIT") and os.environ.get("LSF_EMULATOR_CLEAN") == "1"
        if job is None or cleaned:
            print(f"Job <{jid}> is not found", file=sys.stderr)
            return 255
        host = f"{job['slots']}*{socket.gethostname()}" if state != "PEND" else "-"
        print("|".join([jid, state, code, host]))
    return 0


def bkill(argv: list[str]) -> int:
    for jid in (a for a in argv if re.fullmatch(r"\d+", a)):
        job = SPOOL.load(jid)
        if job is None:
            print(f"Job <{jid}>: No matching job found", file=sys.stderr)
            return 255
        # SIGINT, SIGTERM, then SIGKILL (JOB_TERMINATE_INTERVAL); a pending job is gone
        if SPOOL.cancel(job, (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)) == "pending":
            SPOOL.drop(jid)
        print(f"Job <{jid}> is being terminated")
    return 0


def bqueues(argv: list[str]) -> int:
    lines = ["QUEUE: normal",
             "  -- For normal low priority jobs, running only if hosts are lightly loaded.  "
             "This is the default queue.", "", "PARAMETERS/STATISTICS",
             "PRIO NICE STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN SSUSP USUSP  RSV",
             " 30    0  Open:Active       -    -    -    -     0     0     0     0     0    0",
             "Interval for a host to accept two jobs is 0 seconds", ""]
    if os.environ.get("LSF_EMULATOR_RUNLIMIT"):
        lines += [" RUNLIMIT", f" {float(os.environ['LSF_EMULATOR_RUNLIMIT']):.1f} min", ""]
    lines += ["SCHEDULING PARAMETERS",
              "           r15s   r1m  r15m   ut      pg    io   ls    it    tmp    swp    mem",
              " loadSched   -     -     -     -       -     -    -     -     -      -      -",
              " loadStop    -     -     -     -       -     -    -     -     -      -      -",
              "", "USERS: all  ", "HOSTS:  all ", ""]
    print("\n".join(lines))
    return 0


def bhosts(argv: list[str]) -> int:
    host = socket.gethostname()
    if "-gpu" in argv:
        n = int(os.environ.get("LSF_EMULATOR_NGPUS") or 0)
        model = os.environ.get("LSF_EMULATOR_GPU_MODEL", "TeslaV100_SXM2_16GB")
        lines = [f"HOST: {host}", "NGPUS NGPUS_SHARED_AVAIL NGPUS_EXCLUSIVE_AVAIL",
                 f"{n}     {n}                  {n}", "", "STATIC ATTRIBUTES",
                 "GPU_ID  MODEL                MTOTAL  FACTOR  SOCKET  NVLINK"]
        lines += [f"{i}       {model}  15.7G   7.0     0       -" for i in range(n)]
        print("\n".join(lines) + "\n")
        return 0
    slots = int(os.environ.get("LSF_EMULATOR_SLOTS") or os.cpu_count() or 1)
    print("\n".join([
        f"HOST  {host}",
        "STATUS           CPUF  JL/U    MAX  NJOBS    RUN  SSUSP  USUSP    RSV DISPATCH_WINDOW",
        f"ok              60.00     -  {slots:5d}      0      0      0      0      0      -",
        "", " CURRENT LOAD USED FOR SCHEDULING:",
        "              r15s   r1m  r15m    ut    pg    io   ls    it   tmp   swp   mem  slots",
        f" Total         0.0   0.0   0.0    1%   0.0     2    1     0 8605M    0M 13.2G  {slots}",
        " Reserved      0.0   0.0   0.0    0%   0.0     0    0     0    0M    0M    0M  -", ""]))
    return 0


if __name__ == "__main__":
    sys.exit(kit.main({"bsub": bsub, "bjobs": bjobs, "bkill": bkill, "bqueues": bqueues,
                       "bhosts": bhosts}, sys.argv))

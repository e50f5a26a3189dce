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

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's hpcprov
from hpcprov.schedulers.spelling import LSF as SPELLING


def _state() -> Path:
    d = Path(os.environ["LSF_EMULATOR_DIR"])
    d.mkdir(parents=True, exist_ok=True)
    return d


def _load(job: str) -> dict | None:
    path = _state() / f"{job}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _save(job: dict) -> None:
    (_state() / f"{job['id']}.json").write_text(json.dumps(job))


def directive_args(text: str) -> list[str]:
    """The words of a script's directives: the lines that start with the prefix, before the
    first command; a double-quoted run is part of a word, without its quotes (ValueError
    where one is left open)."""
    words: list[str] = []
    for line in text.splitlines()[1:]:
        if line.startswith(SPELLING.prefix):
            for m in re.finditer(r'(?:[^\s"]+|"[^"]*")+|"', line[len(SPELLING.prefix):]):
                if m.group(0).count('"') % 2:
                    raise ValueError(f"unmatched quote in {line}")
                words.append(m.group(0).replace('"', ""))
        elif line.strip() and not line.startswith("#"):
            break
    return words


def _values(args: list[str], name: str) -> list[str]:
    """The values the directives give the option ``name``, in order."""
    flag = SPELLING.flag(name)
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == flag]


def _slots(script: str) -> int:
    """Slots on this (only) host: ptile when given, else -n, else 1."""
    args = directive_args(script)
    ptile = [m.group(1) for r in _values(args, "resource")
             if (m := re.search(r"span\[ptile=(\d+)\]", r))]
    total = _values(args, "ntasks")
    return int(ptile[-1]) if ptile else int(total[-1]) if total else 1


def bsub(argv: list[str]) -> int:
    out = err = None
    it = iter(argv)
    for a in it:
        if a == "-o":
            out = next(it)
        elif a == "-e":
            err = next(it)
    text = sys.stdin.read()
    if not text.strip():
        print("No command is specified. Job not submitted.", file=sys.stderr)
        return 255
    try:
        slots = _slots(text)
    except ValueError as exc:
        print(f"{exc}. Job not submitted.", file=sys.stderr)
        return 255
    counter = _state() / "counter"
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    script = _state() / f"{n}.sh"
    script.write_text(text)
    job = {"id": str(n), "script": str(script), "state": "PEND", "pid": None,
           "slots": slots}
    if not os.environ.get("LSF_EMULATOR_HOLD"):
        _start(job, out, err)
    _save(job)
    print(f"Job <{n}> is submitted to default queue <normal>.")
    return 0


def _start(job: dict, out: str | None, err: str | None) -> None:
    hostfile = _state() / f"{job['id']}.hosts"
    hostfile.write_text((socket.gethostname() + "\n") * job["slots"])
    env = {**os.environ, "LSB_JOBID": job["id"], "LSB_DJOB_HOSTFILE": str(hostfile),
           "LS_SUBCWD": os.getcwd()}
    status = _state() / f"{job['id']}.status"
    with open(out or os.devnull, "ab") as fh:
        errs = open(err, "ab") if err and err != out else fh  # noqa: SIM115
        proc = subprocess.Popen(
            ["bash", "-c", 'bash "$1"; echo $? > "$2"', "lsf-job", job["script"],
             str(status)], stdout=fh, stderr=errs, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)
    job.update(state="RUN", pid=proc.pid)


def _finish(job: dict) -> dict:
    """Mark a running job finished once its script has ended."""
    status = _state() / f"{job['id']}.status"
    if job["state"] == "RUN" and status.exists() and status.read_text().strip():
        code = int(status.read_text())
        job.update(state="DONE" if code == 0 else "EXIT", exit=code)
        _save(job)
    return job


def bjobs(argv: list[str]) -> int:
    ids = [a for a in argv if re.fullmatch(r"\d+", a)]
    for jid in ids:
        job = _load(jid)
        if job is not None:
            job = _finish(job)
        cleaned = job is not None and job["state"] in ("DONE", "EXIT") and \
            os.environ.get("LSF_EMULATOR_CLEAN") == "1"
        if job is None or cleaned:
            print(f"Job <{jid}> is not found", file=sys.stderr)
            return 255
        code = str(job["exit"]) if job["state"] == "EXIT" else "-"
        host = f"{job['slots']}*{socket.gethostname()}" if job["state"] != "PEND" else "-"
        print("|".join([jid, job["state"], code, host]))
    return 0


def bkill(argv: list[str]) -> int:
    for jid in (a for a in argv if re.fullmatch(r"\d+", a)):
        job = _load(jid)
        if job is None:
            print(f"Job <{jid}>: No matching job found", file=sys.stderr)
            return 255
        if _finish(job)["state"] == "RUN":
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job["pid"], signal.SIGKILL)
            job.update(state="EXIT", exit=130)
            _save(job)
        elif job["state"] == "PEND":
            (_state() / f"{jid}.json").unlink()
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
    tool = Path(sys.argv[0]).name
    sys.exit({"bsub": bsub, "bjobs": bjobs, "bkill": bkill, "bqueues": bqueues,
              "bhosts": bhosts}[tool](sys.argv[1:]))

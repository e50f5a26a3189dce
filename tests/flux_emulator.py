#!/usr/bin/env python3
"""flux's batch, jobs, cancel, run, hostlist, resource and queue commands as flux-core answers
them, for the tests of hpcprov's Flux backend: no Flux instance can run on this machine, so
this is the boundary its tests reach.

Symlink this file as `flux` into a folder on PATH; state lives in $FLUX_EMULATOR_DIR. What it
reproduces of Flux (flux-core's manual pages), because hpcprov depends on it:
- `flux [--parent] batch [--output=F] [--error=F] SCRIPT` prints the job id in F58 (ASCII
  `f`, as flux prints it without a UTF-8 locale) and runs the script at once as a local
  `bash` process with FLUX_JOB_ID, FLUX_URI (the job's own instance), FLUX_JOB_NNODES set,
  in the submission directory, unless $FLUX_EMULATOR_HOLD is set (SCHED until cancelled).
  A missing script is refused as flux-batch refuses it. Each submission records whether it
  came with --parent, and the FLUX_URI it was made under (`submitted.log`);
- `flux jobs -n -o FORMAT ID...` fills {id}, {id.f58}, {state} (SCHED, RUN, INACTIVE),
  {result} (COMPLETED, FAILED, CANCELED), {returncode} (empty while active; -128 for a job
  cancelled before it started) and {nodelist}; with $FLUX_EMULATOR_PURGE=1 an inactive job
  has been purged: `flux-jobs: ERROR: unknown jobid`, exit 1;
- `flux cancel ID` ends a running job with SIGTERM (returncode 143) and a pending one as
  CANCELED (-128);
- `flux run -N N -n TOTAL [-c C] [-g G] [-o OPT] CMD...` starts TOTAL tasks here with
  FLUX_TASK_RANK, FLUX_TASK_LOCAL_ID, FLUX_JOB_SIZE set (one node: the local id is the
  rank); no PMI: an MPI program's ranks would not find each other;
- `flux hostlist -n 0 local` / `flux hostlist -e local`: this host;
- `flux resource list -s up -q QUEUE -n -o {nodelist}`: this host, up, in every queue; with
  `-o '{state}|{queue}|{nnodes}|{ncores}|{ngpus}|{nodelist}'` one line for the draft
  ($FLUX_EMULATOR_NGPUS GPUs, default 0, $FLUX_EMULATOR_CORES cores, default the CPUs);
- `flux queue list -n -o '{queuem}|{defaults.timelimit}|{limits.timelimit}|
  {limits.range.nnodes}'`: one queue, `batch*` (the default).
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

F58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _state() -> Path:
    d = Path(os.environ["FLUX_EMULATOR_DIR"])
    d.mkdir(parents=True, exist_ok=True)
    return d


def f58(n: int) -> str:
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = F58[r] + out
    return "f" + (out or "1")


def _key(jid: str) -> str:
    return jid.replace("ƒ", "f")


def _load(jid: str) -> dict | None:
    path = _state() / f"{_key(jid)}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _save(job: dict) -> None:
    (_state() / f"{job['id']}.json").write_text(json.dumps(job))


def _directive(script: str, *flags: str) -> int | None:
    for flag in flags:
        m = re.search(rf"^# flux: {re.escape(flag)}[ =](\d+)$", script, re.M)
        if m:
            return int(m.group(1))
    return None


def batch(argv: list[str], parent: bool) -> int:
    out = err = None
    rest = []
    for a in argv:
        if a.startswith("--output="):
            out = a.split("=", 1)[1]
        elif a.startswith("--error="):
            err = a.split("=", 1)[1]
        else:
            rest.append(a)
    path = Path(rest[-1]) if rest else None
    if path is None or not path.is_file():
        print(f"flux-batch: ERROR: [Errno 2] No such file or directory: '{path}'",
              file=sys.stderr)
        return 1
    counter = _state() / "counter"
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    jid = f58(1000000 + n)
    text = path.read_text()
    with open(_state() / "submitted.log", "a") as log:
        log.write(json.dumps({"id": jid, "parent": parent,
                              "uri": os.environ.get("FLUX_URI", "")}) + "\n")
    job = {"id": jid, "num": 1000000 + n, "script": str(path.resolve()), "state": "SCHED",
           "pid": None,
           "nodes": _directive(text, "-N", "--nodes") or 1}
    if not os.environ.get("FLUX_EMULATOR_HOLD"):
        _start(job, out, err)
    _save(job)
    print(jid)
    return 0


def _start(job: dict, out: str | None, err: str | None) -> None:
    env = {**os.environ, "FLUX_JOB_ID": job["id"], "FLUX_JOB_NNODES": str(job["nodes"]),
           "FLUX_URI": f"local://{_state()}/{job['id']}"}
    status = _state() / f"{job['id']}.status"
    with open(out or os.devnull, "ab") as fh:
        errs = open(err, "ab") if err and err != out else fh  # noqa: SIM115
        proc = subprocess.Popen(
            ["bash", "-c", 'bash "$1"; echo $? > "$2"', "flux-job", job["script"],
             str(status)], stdout=fh, stderr=errs, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)
    job.update(state="RUN", pid=proc.pid)


def _finish(job: dict) -> dict:
    status = _state() / f"{job['id']}.status"
    if job["state"] == "RUN" and status.exists() and status.read_text().strip():
        code = int(status.read_text())
        job.update(state="INACTIVE", result="COMPLETED" if code == 0 else "FAILED",
                   returncode=code)
        _save(job)
    return job


def jobs(argv: list[str]) -> int:
    fmt = argv[argv.index("-o") + 1] if "-o" in argv else "{id.f58} {state}"
    ids = [a for a in argv if re.fullmatch(r"[ƒf][1-9A-Za-z]+", a)]
    for jid in ids:
        job = _load(jid)
        if job is not None:
            job = _finish(job)
        purged = job is not None and job["state"] == "INACTIVE" and \
            os.environ.get("FLUX_EMULATOR_PURGE") == "1"
        if job is None or purged:
            print(f"flux-jobs: ERROR: unknown jobid {jid}", file=sys.stderr)
            return 1
        values = {"id": str(job["num"]), "id.f58": job["id"],
                  "state": job["state"], "result": job.get("result", ""),
                  "returncode": str(job.get("returncode", "")),
                  "nodelist": socket.gethostname() if job.get("pid") else ""}
        print(re.sub(r"\{([a-z0-9.]+)\}", lambda m, v=values: v[m.group(1)], fmt))
    return 0


def cancel(argv: list[str]) -> int:
    for jid in (a for a in argv if not a.startswith("-")):
        job = _load(jid)
        if job is None:
            print(f"flux-cancel: ERROR: {jid}: unknown job id", file=sys.stderr)
            return 1
        if _finish(job)["state"] == "RUN":
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job["pid"], signal.SIGTERM)
            job.update(state="INACTIVE", result="CANCELED", returncode=143)
        elif job["state"] == "SCHED":
            job.update(state="INACTIVE", result="CANCELED", returncode=-128)
        _save(job)
    return 0


def run(argv: list[str]) -> int:
    total, i = 1, 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in ("-n", "--ntasks"):
            total = int(argv[i + 1])
        i += 1 if "=" in argv[i] else 2
    cmd = argv[i:]
    procs = [subprocess.Popen(cmd, env={**os.environ, "FLUX_TASK_RANK": str(r),
                                        "FLUX_TASK_LOCAL_ID": str(r),
                                        "FLUX_JOB_SIZE": str(total)})
             for r in range(total)]
    return max(p.wait() for p in procs)


def hostlist(argv: list[str]) -> int:
    print(socket.gethostname())
    return 0


def resource(argv: list[str]) -> int:
    fmt = argv[argv.index("-o") + 1] if "-o" in argv else "{nodelist}"
    cores = int(os.environ.get("FLUX_EMULATOR_CORES") or os.cpu_count() or 1)
    values = {"state": "free", "queue": "batch", "nnodes": "1", "ncores": str(cores),
              "ngpus": os.environ.get("FLUX_EMULATOR_NGPUS", "0"),
              "nodelist": socket.gethostname()}
    print(re.sub(r"\{([a-z]+)\}", lambda m: values[m.group(1)], fmt))
    return 0


def queue(argv: list[str]) -> int:
    print("batch*|3600.0|86400.0|1-inf")
    return 0


def main(argv: list[str]) -> int:
    parent = False
    if argv[:1] == ["--parent"]:
        parent, argv = True, argv[1:]
    command, rest = argv[0], argv[1:]
    if command == "batch":
        return batch(rest, parent)
    if command == "resource" and rest[:1] == ["list"]:
        return resource(rest[1:])
    if command == "queue" and rest[:1] == ["list"]:
        return queue(rest[1:])
    tools = {"jobs": jobs, "cancel": cancel, "run": run, "hostlist": hostlist}
    if command not in tools:
        print(f"flux: '{command}' is not a flux command (emulated)", file=sys.stderr)
        return 1
    return tools[command](rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

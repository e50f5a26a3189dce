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
  A missing script is refused as flux-batch refuses it, and so is one whose `# flux:`
  directives flux's parser refuses (RFC 36, :func:`parse_directives` below: flux-core's own
  parser, from flux-python);
  the node count is the directives' -N/--nodes (-N: the flag hpcprov's spelling record of
  Flux, hpcprov.schedulers.spelling.FLUX, writes `nodes` with). Each submission records
  whether it came with --parent, and the FLUX_URI it was made under (`submitted.log`);
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

import functools
import importlib.util
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emulator_kit as kit

from hpcprov.schedulers.spelling import FLUX as SPELLING

F58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
SPOOL = kit.Spool("FLUX_EMULATOR_DIR")
VALUELESS = {"--exclusive", "--wait", "--unbuffered", "-v", "--verbose"}
MISSING = ("flux emulator: flux-core's directive parser (flux-python, in the dev extra: pip "
           "install -e '.[dev]') is not installed")


def f58(n: int) -> str:
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = F58[r] + out
    return "f" + (out or "1")


def _load(jid: str) -> dict | None:
    return SPOOL.load(jid.replace("ƒ", "f"))


# --- RFC 36 submission directives, as flux batch reads them ---------------------------------
# flux-core's own parser (flux/job/directives.py of flux-python, a development dependency of
# the project): no reimplementation of its rules to drift from it (tests/test_flux_directives.py
# holds what it does with RFC 36's examples and with hpcprov's quoting).

Directive = tuple[int, str, list[str]]  # (line number, SETARGS or NOOP, its words)


@functools.cache
def flux_core_parser() -> ModuleType:
    """flux-core's own directive parser (flux/job/directives.py of flux-python), loaded on
    its own: it needs only the standard library, where importing the ``flux`` package needs
    libflux-core. Without flux-python (the dev extra) the emulator stops, saying so."""
    try:
        spec = importlib.util.find_spec("flux")  # finds the package without importing it
    except (ImportError, ValueError):
        raise SystemExit(MISSING) from None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "job" / "directives.py"
        if path.is_file():
            loaded = importlib.util.spec_from_file_location("_flux_core_directives", path)
            if loaded is None or loaded.loader is None:
                raise SystemExit(MISSING)
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
            return module
    raise SystemExit(MISSING)


def parse_directives(script: str) -> list[Directive]:
    """The directives of a script as flux batch reads them, by flux-core's own parser; a
    ValueError where flux batch refuses the script."""
    parsed = flux_core_parser().DirectiveParser(io.StringIO(script, newline=None))
    return [(d.lineno, d.action, list(d.args)) for d in parsed.directives]


def directive_args(script: str) -> list[str]:
    """The options a script's directives give flux batch, in order."""
    return [word for _, action, words in parse_directives(script) if action == "SETARGS"
            for word in words]


def options(script: str) -> list[kit.Option]:
    """The options a script's directives give flux batch, each as (flag, value)."""
    return kit.options(directive_args(script), SPELLING, VALUELESS)[0]


def batch(argv: list[str], parent: bool) -> int:
    cli, rest = kit.options(argv, SPELLING, VALUELESS)
    given = dict(cli)
    path = Path(rest[-1]) if rest else None
    if path is None or not path.is_file():
        print(f"flux-batch: ERROR: [Errno 2] No such file or directory: '{path}'",
              file=sys.stderr)
        return 1
    try:  # as flux batch reads the script: UTF-8, universal newlines
        read = options(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeError) as exc:
        print(f"flux-batch: ERROR: {rest[-1]}: {exc}", file=sys.stderr)
        return 1
    nodes = [v for flag, v in read if flag == SPELLING.flag("nodes") and v and v.isdigit()]
    n = SPOOL.number()
    job = SPOOL.new(f58(1000000 + n), n, num=1000000 + n, script=str(path.resolve()),
                    nodes=int(nodes[-1]) if nodes else 1)
    with open(SPOOL.root / "submitted.log", "a") as log:
        log.write(json.dumps({"id": job["id"], "parent": parent,
                              "uri": os.environ.get("FLUX_URI", "")}) + "\n")
    SPOOL.save(job)
    if not os.environ.get("FLUX_EMULATOR_HOLD"):
        env = {**os.environ, "FLUX_JOB_ID": job["id"], "FLUX_JOB_NNODES": str(job["nodes"]),
               "FLUX_URI": f"local://{SPOOL.root}/{job['id']}"}
        SPOOL.start(job, ["bash", job["script"]], env=env, cwd=os.getcwd(),
                    out=given.get("--output"), err=given.get("--error"), append=True)
    print(job["id"])
    return 0


def _result(job: dict) -> tuple[str, str, str]:
    """state, result and returncode: SCHED, RUN or INACTIVE; COMPLETED, FAILED or CANCELED;
    the script's status (143 after flux cancel's SIGTERM, -128 cancelled before it ran)."""
    if job["phase"] == "cancelled":
        return "INACTIVE", "CANCELED", "143" if job["start"] else "-128"
    if job["phase"] == "ended":
        return "INACTIVE", "COMPLETED" if kit.succeeded(job) else "FAILED", \
            str(kit.status(job))
    return ("SCHED" if job["phase"] == "pending" else "RUN"), "", ""


def jobs(argv: list[str]) -> int:
    fmt = argv[argv.index("-o") + 1] if "-o" in argv else "{id.f58} {state}"
    ids = [a for a in argv if re.fullmatch(r"[ƒf][1-9A-Za-z]+", a)]
    for jid in ids:
        job = _load(jid)
        state, result, code = _result(job) if job is not None else ("", "", "")
        purged = state == "INACTIVE" and os.environ.get("FLUX_EMULATOR_PURGE") == "1"
        if job is None or purged:
            print(f"flux-jobs: ERROR: unknown jobid {jid}", file=sys.stderr)
            return 1
        values = {"id": str(job["num"]), "id.f58": job["id"], "state": state,
                  "result": result, "returncode": code,
                  "nodelist": socket.gethostname() if job["start"] else ""}
        print(re.sub(r"\{([a-z0-9.]+)\}", lambda m, v=values: v[m.group(1)], fmt))
    return 0


def cancel(argv: list[str]) -> int:
    for jid in (a for a in argv if not a.startswith("-")):
        job = _load(jid)
        if job is None:
            print(f"flux-cancel: ERROR: {jid}: unknown job id", file=sys.stderr)
            return 1
        SPOOL.cancel(job, (signal.SIGTERM, signal.SIGKILL))
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

#!/usr/bin/env python3
"""sbatch, scontrol, sacct, scancel and sinfo as Slurm 23.02 answers them (its manual pages),
for hpcprov's Slurm executor in the backend conformance suite without root; the real proof
stays the testbed (tests/testbed/). Symlink this file under those names into a folder on
PATH; state lives in $SLURM_EMULATOR_DIR. The cluster: one node, this host, in any partition.

- `sbatch [--parsable] [-o F] [-e F] [-J NAME] [-H] SCRIPT`: `Submitted batch job N`
  (--parsable: `N`), ids from 1; #SBATCH lines before the first command are read as sbatch
  reads them (:func:`directive_args`; the prefix and the one-letter names are hpcprov's
  spelling record of Slurm, hpcprov.schedulers.spelling.SLURM), the command line wins;
  -o/-e take %j %x %u %N %% (default slurm-%j.out where it was submitted). Refused in
  sbatch's words: a missing script ("Unable to open file PATH"), one without `#!`, more
  than one node ("Requested node configuration is not available"), a directive sbatch
  cannot read (an unmatched quote).
- A job runs at once as `bash SCRIPT` (not by its #! line: a login shell's /etc/profile
  would drop this folder from PATH) in the submission folder, under a monitor
  (tests/emulator_kit.py) that records its end as RC:SIGNAL, with a one-node batch job's SLURM_*
  variables (_job_env: SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_NNODES, SLURM_NTASKS,
  SLURM_PROCID=0, ...).
- `scontrol show job [-o] ID`: the key=value record: JobState (PENDING, RUNNING, COMPLETED,
  FAILED, CANCELLED), Reason (Resources, None, NonZeroExitCode, RaisedSignal:9_Killed),
  ExitCode=RC:SIGNAL, NodeList (`(null)` while pending); an unknown id: `slurm_load_jobs
  error: Invalid job id specified`, exit 1. `scontrol show hostnames [LIST]`.
- `sacct [-n] [-X] [-P|-p] [-j IDS] [-o FIELDS]`, the fields of SACCT (`CANCELLED by UID`,
  `None assigned`), each started job's N.batch step unless -X, forgotten jobs too.
- `scancel ID`: a running job is CANCELLED at once, ExitCode=0:15; its processes (found by
  a variable each inherits, as Slurm finds them in the job's cgroup: setsid's too) get
  SIGTERM, then SIGKILL after KillWait (2 s here); a pending job: CANCELLED, 0:0; an ended
  or unknown one: `scancel: error: Kill job error on job id N: ...`, exit 1.
- `sinfo [-h] [-N] [-p PART] [-n NODES] -o FORMAT`: %N %t %T %f %P %c %D of this host.

Knobs: $SLURM_EMULATOR_HOLD=1 at sbatch: PENDING (Reason=Resources) until scancel.
$SLURM_EMULATOR_FORGET=1 at sbatch, kept with the job (the controller's setting, not the
asking command's): the controller forgets the job once it ended, as when MinJobAge passed.
$SLURM_EMULATOR_ACCOUNTING=0: sacct says `Slurm accounting storage is disabled`, exit 1.
$SLURM_EMULATOR_CTLD_DOWN=1: the controller does not answer ("Unable to contact slurm
controller"); sacct still does. $SLURM_EMULATOR_CTLD_LOST=1: the controller restarted
without its state: it knows no job, running ones neither. $SLURM_EMULATOR_NODE_STATE
(idle; down*, drain...) and $SLURM_EMULATOR_FEATURES ((null)): the node's, in sinfo.
Not emulated: srun, salloc, squeue, steps but the batch step, arrays, dependencies, time
limits, the COMPLETING state, --export, --wrap, more than one node.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emulator_kit as kit

from hpcprov.schedulers.spelling import SLURM as SPELLING

HOST = socket.gethostname()
KILL_WAIT_S = 2.0
SPOOL = kit.Spool("SLURM_EMULATOR_DIR")
# sbatch's options that take no value (by the flag the record reads them as)
FLAGS = {f"--{name}" for name in (
    "hold", "parsable", "exclusive", "requeue", "no-requeue", "overcommit", "wait", "quiet",
    "verbose", "contiguous", "test-only", "oversubscribe", "spread-job", "no-kill")}
STATES = {"pending": "PENDING", "running": "RUNNING", "cancelled": "CANCELLED"}


def _down(words: str) -> bool:
    """True (having said so, prefixed by ``words``) when the controller does not answer."""
    if os.environ.get("SLURM_EMULATOR_CTLD_DOWN") == "1":
        print(f"{words}Unable to contact slurm controller (connect failure)", file=sys.stderr)
    return os.environ.get("SLURM_EMULATOR_CTLD_DOWN") == "1"


def _load(jid: str, *, forgotten: bool = False) -> dict | None:
    """The job as the controller knows it (those it forgot too if asked), or None: its
    state and ExitCode (RC:SIGNAL) read off the kit's phase."""
    job = SPOOL.load(jid) if re.fullmatch(r"[0-9]+", jid) else None
    if job is None:
        return None
    if job["phase"] == "ended":
        job.update(state="COMPLETED" if kit.succeeded(job) else "FAILED",
                   exit=f"{job['rc']}:{job['signal']}")
    else:
        job.update(state=STATES[job["phase"]],
                   exit="0:15" if job["phase"] == "cancelled" and job["start"] else "0:0")
    ended = job["state"] not in ("PENDING", "RUNNING")
    lost = ended and job["forget"] or os.environ.get("SLURM_EMULATOR_CTLD_LOST") == "1"
    return None if lost and not forgotten else job


def _options(words: list[str]) -> tuple[dict[str, str | None], list[str]]:
    """sbatch's options (by long name) and the words after them (the script, its args)."""
    found, rest = kit.options(words, SPELLING, FLAGS)
    return {flag.removeprefix("--"): value for flag, value in found}, rest


def options(text: str) -> list[kit.Option]:
    """The options a script's #SBATCH lines give sbatch, each as (flag, value)."""
    return kit.options(directive_args(text), SPELLING, FLAGS)[0]


def sbatch_words(line: str) -> list[str]:
    """The words of one directive after its prefix, as sbatch reads them (``_get_argument``
    in Slurm's src/sbatch/opt.c): single and double quotes group, a backslash takes the next
    character literally (inside quotes too), a ``#`` outside quotes ends the line, and so
    does an empty word; an unmatched quote is an error (ValueError), as is a heterogeneous
    job (``hetjob``/``packjob`` anywhere in the line), which is not emulated."""
    if re.search(r"(?i)hetjob|packjob", line):
        raise ValueError(f"heterogeneous jobs are not emulated: {line}")
    words: list[str] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i].isspace():
            i += 1
        out: list[str] = []
        quote, escaped = "", False
        while i < n and (quote or not line[i].isspace()):
            c = line[i]
            i += 1
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
                continue
            elif quote:
                if c == quote:
                    quote = ""
                    continue
            elif c in "\"'":
                quote = c
                continue
            elif c == "#":  # the rest of the line is a comment
                i = n
                break
            out.append(c)
        if quote:
            raise ValueError(f"Unmatched `{quote}` in [{line}]")
        if not out:
            return words
        words.append("".join(out))


def directive_args(text: str) -> list[str]:
    """The words of a script's directives: the lines that start with the prefix, before the
    first command (ValueError where sbatch refuses one: :func:`sbatch_words`)."""
    return kit.directive_args(text, SPELLING, sbatch_words)


def _directives(text: str) -> dict[str, str]:
    """The #SBATCH lines before the first command, as sbatch reads them."""
    return _options(directive_args(text))[0]


def sbatch(argv: list[str]) -> int:
    cli, rest = _options(argv)
    script = Path(rest[0]) if rest else None
    if script is None or not script.is_file():
        print(f"sbatch: error: Unable to open file {script or ''}", file=sys.stderr)
        return 1
    text = script.read_text(errors="replace")
    if not text.startswith("#!"):
        print("sbatch: error: This does not look like a batch script.  The first\n"
              "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
              "sbatch: error: For instance: #!/bin/sh", file=sys.stderr)
        return 1
    try:
        opts = {**_directives(text), **cli}
    except ValueError as exc:
        print(f"sbatch: error: {script}: {exc}", file=sys.stderr)
        return 1
    if _down("sbatch: error: Batch job submission failed: "):
        return 1
    if int((opts.get("nodes") or "1").split("-")[0]) > 1:
        print("sbatch: error: Batch job submission failed: Requested node configuration is "
              "not available", file=sys.stderr)
        return 1
    job = SPOOL.new(str(SPOOL.number()), 0, name=opts.get("job-name") or script.name,
                    script=str(script.resolve()), args=rest[1:],
                    partition=opts.get("partition") or "debug", submit_dir=os.getcwd(),
                    workdir=os.path.abspath(opts.get("chdir") or os.getcwd()),
                    tasks=int(opts.get("ntasks") or opts.get("ntasks-per-node") or 1),
                    cpus_per_task=opts.get("cpus-per-task") or "",
                    forget=os.environ.get("SLURM_EMULATOR_FORGET") == "1")
    job["number"] = int(job["id"])
    names = {"j": job["id"], "x": job["name"], "u": os.environ.get("USER", ""), "N": HOST,
             "%": "%"}
    for key, default in (("output", "slurm-%j.out"), ("error", opts.get("output"))):
        name = re.sub(r"%([jxuN%])", lambda m: names[m.group(1)], opts.get(key) or default
                      or "slurm-%j.out")
        job[key] = os.path.join(job["workdir"], name)
    SPOOL.save(job)
    if os.environ.get("SLURM_EMULATOR_HOLD") != "1" and "hold" not in opts:
        SPOOL.start(job, ["bash", job["script"], *job["args"]], env=_job_env(job),
                    cwd=job["workdir"], out=job["output"], err=job["error"])
    print(job["id"] if "parsable" in opts else f"Submitted batch job {job['id']}")
    return 0


def _job_env(job: dict) -> dict[str, str]:
    tasks = str(job["tasks"])
    env = {**os.environ, "SLURM_JOB_ID": job["id"], "SLURM_JOBID": job["id"],
           "SLURM_JOB_NAME": job["name"], "SLURM_JOB_NODELIST": HOST, "SLURM_NODELIST": HOST,
           "SLURM_NNODES": "1", "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": tasks,
           "SLURM_NPROCS": tasks, "SLURM_TASKS_PER_NODE": tasks,
           "SLURM_CPUS_ON_NODE": str(os.cpu_count() or 1), "SLURM_PROCID": "0",
           "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_SUBMIT_DIR": job["submit_dir"],
           "SLURM_SUBMIT_HOST": HOST, "SLURM_JOB_PARTITION": job["partition"],
           "SLURMD_NODENAME": HOST, "SLURM_CLUSTER_NAME": "emulated"}
    return {**env, "SLURM_CPUS_PER_TASK": job["cpus_per_task"]} if job["cpus_per_task"] else env


def _elapsed(job: dict) -> str:
    secs = int((job["end"] or time.time()) - job["start"]) if job["start"] else 0
    return f"{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"


def _reason(job: dict) -> str:
    sig = int(job["exit"].split(":")[1])
    if job["state"] != "FAILED":
        return "Resources" if job["state"] == "PENDING" else "None"
    return f"RaisedSignal:{sig}_{(signal.strsignal(sig) or '').replace(' ', '_')}" if sig \
        else "NonZeroExitCode"


def _show_job(job: dict, oneline: bool) -> str:
    node = HOST if job["start"] else "(null)"
    at = {k: time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(job[k])) if job[k] else
          "Unknown" for k in ("submit", "start", "end")}
    user, uid, gid = os.environ.get("USER", "root"), os.getuid(), os.getgid()
    pairs = [
        f"JobId={job['id']} JobName={job['name']}",
        f"UserId={user}({uid}) GroupId={user}({gid}) MCS_label=N/A",
        "Priority=1 Nice=0 Account=(null) QOS=normal",
        f"JobState={job['state']} Reason={_reason(job)} Dependency=(null)",
        f"Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode={job['exit']}",
        f"RunTime={_elapsed(job)} TimeLimit=UNLIMITED TimeMin=N/A",
        f"SubmitTime={at['submit']} EligibleTime={at['submit']}",
        f"StartTime={at['start']} EndTime={at['end']} Deadline=N/A",
        f"Partition={job['partition']} AllocNode:Sid={HOST}:{os.getpid()}",
        "ReqNodeList=(null) ExcNodeList=(null)", f"NodeList={node}", f"BatchHost={node}",
        f"NumNodes=1 NumCPUs=1 NumTasks={job['tasks']} CPUs/Task={job['cpus_per_task'] or 1}",
        f"Command={job['script']}", f"WorkDir={job['workdir']}", f"StdErr={job['error']}",
        "StdIn=/dev/null", f"StdOut={job['output']}"]
    return " ".join(pairs) if oneline else "\n   ".join(pairs) + "\n"


def _expand(nodelist: str) -> list[str]:
    """A Slurm node list (gpu[01-03,07],login1) as names."""
    names = []
    for prefix, ranges, suffix in re.findall(r"([^,\[]*)(?:\[([^\]]*)\])?([^,\[]*),?",
                                            nodelist):
        for part in ranges.split(",") if ranges else [""]:
            lo, _, hi = part.partition("-")
            numbers = [str(i).zfill(len(lo)) for i in range(int(lo), int(hi or lo) + 1)] \
                if part else [""]
            names += [prefix + number + suffix for number in numbers]
    return [n for n in names if n]


def scontrol(argv: list[str]) -> int:
    words = [a for a in argv if not a.startswith("-")]
    if words[:2] == ["show", "hostnames"]:
        print("\n".join(_expand(words[2] if words[2:] else
                                os.environ.get("SLURM_JOB_NODELIST", ""))))
        return 0
    if words[:2] != ["show", "job"]:
        print(f"scontrol: emulated: no {' '.join(words)}", file=sys.stderr)
        return 1
    if _down("slurm_load_jobs error: "):
        return 1
    ids = words[2:] or [j["id"] for j in SPOOL.jobs()]
    jobs = [j for j in (_load(jid.split(".")[0]) for jid in ids) if j]
    if words[2:] and not jobs:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    oneline = "-o" in argv or "--oneliner" in argv
    print(("\n" if oneline else "\n\n").join(_show_job(j, oneline) for j in jobs)
          or "No jobs in the system")
    return 0


def scancel(argv: list[str]) -> int:
    rc = 0
    for jid in (a for a in argv if not a.startswith("-")):
        if _down(f"scancel: error: Kill job error on job id {jid}: "):
            return 1
        job = _load(jid)
        if job is None or job["state"] not in ("PENDING", "RUNNING"):
            why = "Job/step already completing or completed" if job else \
                "Invalid job id specified"
            print(f"scancel: error: Kill job error on job id {jid}: {why}", file=sys.stderr)
            rc = 1
            continue
        SPOOL.cancel(job, (signal.SIGTERM, signal.SIGKILL), KILL_WAIT_S)
    return rc


SACCT = {"JobID": lambda j, s: j["id"] + s, "JobIDRaw": lambda j, s: j["id"] + s,
         "JobName": lambda j, s: s[1:] or j["name"], "Partition": lambda j, s: j["partition"],
         "State": lambda j, s: j["state"] + (f" by {os.getuid()}"
                                             if j["state"] == "CANCELLED" else ""),
         "ExitCode": lambda j, s: j["exit"], "NNodes": lambda j, s: "1",
         "NodeList": lambda j, s: HOST if j["start"] else "None assigned",
         "AllocCPUS": lambda j, s: "1" if j["start"] else "0", "Account": lambda j, s: "",
         "Elapsed": lambda j, s: _elapsed(j)}


def sacct(argv: list[str]) -> int:
    if os.environ.get("SLURM_EMULATOR_ACCOUNTING") == "0":
        print("Slurm accounting storage is disabled", file=sys.stderr)
        return 1
    opts = {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-j", "-o")}
    fields = opts.get("-o", "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode")
    if bad := [f for f in fields.split(",") if f not in SACCT]:
        print(f'sacct: error: Invalid field requested: "{bad[0]}"', file=sys.stderr)
        return 1
    ids = opts["-j"].split(",") if "-j" in opts else \
        [j["id"] for j in SPOOL.jobs()]
    rows = [] if "-n" in argv else [fields.split(","), ["-" * 10] * len(fields.split(","))]
    for job in filter(None, (_load(jid, forgotten=True) for jid in ids)):
        for step in [""] + ([] if "-X" in argv or not job["start"] else [".batch"]):
            rows.append([SACCT[f](job, step) for f in fields.split(",")])
    for row in rows:
        if "-P" in argv or "-p" in argv:  # --parsable2, --parsable (a | after each field)
            print("|".join(row) + ("|" if "-p" in argv else ""))
        else:
            print(" ".join(f"{v if len(v) <= 10 else v[:9] + '+':>10}" for v in row))
    return 0


def sinfo(argv: list[str]) -> int:
    if _down("slurm_load_partitions: "):
        return 1
    opts = {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-p", "-n", "-o")}
    if "-n" in opts and HOST not in _expand(opts["-n"]):
        return 0
    state = os.environ.get("SLURM_EMULATOR_NODE_STATE", "idle")
    values = {"N": HOST, "t": state, "T": state.rstrip("*").upper(), "D": "1",
              "P": opts.get("-p", "debug*"), "c": str(os.cpu_count() or 1),
              "f": os.environ.get("SLURM_EMULATOR_FEATURES", "(null)")}
    heads = {"N": "NODELIST", "t": "STATE", "T": "STATE", "D": "NODES", "P": "PARTITION",
             "c": "CPUS", "f": "AVAIL_FEATURES"}
    fmt = opts.get("-o", "%N %t")
    for table in ([values] if "-h" in argv else [heads, values]):
        print(re.sub(r"%[-.0-9]*([A-Za-z])", lambda m, t=table: t.get(m.group(1), "N/A"), fmt))
    return 0


TOOLS = {"sbatch": sbatch, "scontrol": scontrol, "sacct": sacct, "scancel": scancel,
         "sinfo": sinfo}

if __name__ == "__main__":
    sys.exit(kit.main(TOOLS, sys.argv))

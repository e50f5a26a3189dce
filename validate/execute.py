"""The effect layer of a validation run: submit job scripts, poll them, collect output.

Three executors: plain processes (site without a scheduler), Slurm (sbatch, then
`scontrol show job -o` with a short backoff, never `sbatch --wait`), PBS (qsub, then
`qstat -x -f`).
A job's exit status comes from the scheduler when it knows it, else from the status file
the job script's EXIT trap wrote; a job whose status cannot be learned is an error, never a
pass. Every submission and state change is recorded in the run's events.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

TERMINAL_SLURM = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                  "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


@dataclass
class Handle:
    """A submitted job and what is known about it."""

    job_id: str
    script: Path
    output: Path
    exit_file: Path
    submitted: float
    state: str = "PENDING"
    exit_code: int | None = None
    nodes: str = ""
    started: float | None = None
    ended: float | None = None
    reason: str = ""
    bad_nodes: str = ""           # nodes the scheduler reported dead while the job ran
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.ended is not None


class Executor:
    """Base: subclasses submit and refresh; wait() is shared."""

    name = "base"

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = env
        self.events: list[dict[str, object]] = []

    def _event(self, handle: Handle, what: str) -> None:
        self.events.append({"t": time.time(), "job": handle.job_id, "event": what,
                            "state": handle.state})

    def submit(self, script: Path, output: Path, exit_file: Path) -> Handle:
        raise NotImplementedError

    def refresh(self, handles: list[Handle]) -> None:
        raise NotImplementedError

    def cancel(self, handle: Handle) -> None:
        raise NotImplementedError

    def usable_nodes(self, partition: str) -> list[str] | None:
        """The partition's nodes that can run jobs now, or None where unknown."""
        return None

    def wait(self, handles: list[Handle], timeout_s: float, pending_timeout_s: float | None
             = None) -> None:
        """Poll until every job ended or the timeout; late jobs are cancelled and marked.

        The delay starts at 20 ms and grows to 0.5 s, so a short job is noticed quickly
        and a long one costs few scheduler queries."""
        deadline = time.monotonic() + timeout_s
        delay = 0.02
        while True:
            live = [h for h in handles if not h.done]
            if not live:
                return
            self.refresh(live)
            now = time.monotonic()
            for h in live:
                if h.done:
                    self._event(h, f"ended rc={h.exit_code}")
                    continue
                stuck = (pending_timeout_s is not None and h.started is None
                         and now - h.submitted > pending_timeout_s)
                if now > deadline or stuck:
                    self.cancel(h)
                    h.state = "PENDING_TIMEOUT" if stuck else "TIMEOUT"
                    h.reason = ("still pending after " f"{pending_timeout_s:.0f} s"
                                if stuck else f"not finished after {timeout_s:.0f} s")
                    h.exit_code, h.ended = None, now
                    self._event(h, "cancelled: " + h.reason)
            if all(h.done for h in handles):
                return
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)


def _read_exit(path: Path) -> int | None:
    """The exit status the job script's EXIT trap wrote (first field), or None."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _final_state(code: int | None) -> str:
    """The state of an ended job from its exit status; no status learned is UNKNOWN."""
    return "UNKNOWN" if code is None else ("COMPLETED" if code == 0 else "FAILED")


def read_run_seconds(path: Path) -> float | None:
    """The job's own run time, from the start and end the EXIT trap wrote, or None."""
    try:
        _, start, end = path.read_text().split()[:3]
        return max(0.0, float(end) - float(start))
    except (OSError, ValueError):
        return None


class LocalExecutor(Executor):
    """Jobs as local processes (the `local` site)."""

    name = "local"

    def submit(self, script: Path, output: Path, exit_file: Path) -> Handle:
        env = dict(self.env or os.environ)
        if os.geteuid() == 0:  # Open MPI refuses root unless told (mpirun launchers)
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        with open(output, "wb") as out:
            proc = subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, env=env,
                                    cwd=script.parent)
        h = Handle(str(proc.pid), script, output, exit_file, time.monotonic(), "RUNNING",
                   nodes=os.uname().nodename, proc=proc)
        h.started = h.submitted
        self._event(h, "started")
        return h

    def refresh(self, handles: list[Handle]) -> None:
        for h in handles:
            assert h.proc is not None
            rc = h.proc.poll()
            if rc is not None:
                h.exit_code, h.ended = rc, time.monotonic()
                h.state = _final_state(rc)

    def cancel(self, handle: Handle) -> None:
        if handle.proc is not None and handle.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(handle.proc.pid, signal.SIGKILL)
            handle.proc.wait()


class SlurmExecutor(Executor):
    """sbatch, then scontrol; sacct or the status file once the controller forgot a job."""

    name = "slurm"

    def _run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def submit(self, script: Path, output: Path, exit_file: Path) -> Handle:
        proc = self._run("sbatch", "--parsable", f"--output={output}", f"--error={output}",
                         str(script))
        if proc.returncode != 0:
            from hpcprov.errors import HpcprovError

            raise HpcprovError(f"sbatch refused {script.name}: "
                               f"{(proc.stderr or proc.stdout).strip()}")
        job_id = proc.stdout.strip().split(";")[0]
        h = Handle(job_id, script, output, exit_file, time.monotonic())
        self._event(h, "submitted")
        return h

    HEALTH_EVERY_S = 2.0  # how often the nodes of running jobs are asked after

    def __init__(self, env: dict[str, str] | None = None) -> None:
        super().__init__(env)
        self._health_at = 0.0

    def refresh(self, handles: list[Handle]) -> None:
        self._refresh_jobs(handles)
        running = [h for h in handles if not h.done and h.state == "RUNNING" and h.nodes]
        now = time.monotonic()
        if running and now - self._health_at >= self.HEALTH_EVERY_S:
            self._health_at = now
            self._check_nodes(running)

    def _check_nodes(self, handles: list[Handle]) -> None:
        """A job on a node that stopped answering would hang until its time limit (its
        other ranks wait for ever): cancel it and name the node."""
        nodes = ",".join(sorted({h.nodes for h in handles}))
        dead = {n: st for n, st in node_states(nodes, self.env).items() if _dead(st)}
        if not dead:
            return
        import hostlist

        for h in handles:
            mine = [n for n in hostlist.expand_hostlist(h.nodes) if n in dead]
            if mine:
                self.cancel(h)
                h.state, h.exit_code, h.ended = "NODE_FAIL", None, time.monotonic()
                h.bad_nodes = ",".join(mine)
                h.reason = "node " + ", ".join(f"{n} stopped answering (Slurm state "
                                               f"{dead[n]})" for n in mine)
                self._event(h, "cancelled: " + h.reason)

    def usable_nodes(self, partition: str) -> list[str] | None:
        return partition_nodes(partition, self.env)

    def _refresh_jobs(self, handles: list[Handle]) -> None:
        for h in handles:
            proc = self._run("scontrol", "show", "job", "-o", h.job_id)
            info = dict(re.findall(r"(\w+)=(\S*)", proc.stdout)) if proc.returncode == 0 \
                else {}
            if not info:
                self._forgotten(h)
                continue
            state = info.get("JobState", "UNKNOWN")
            if state != h.state:
                h.state = state
                self._event(h, "state")
            if state == "RUNNING" and h.started is None:
                h.started = time.monotonic()
            if info.get("NodeList") not in (None, "(null)"):
                h.nodes = info["NodeList"]
            h.reason = info.get("Reason", "") if info.get("Reason") != "None" else ""
            if state in TERMINAL_SLURM:
                h.exit_code = _slurm_rc(info.get("ExitCode", ""))
                if h.exit_code is None:
                    h.exit_code = _read_exit(h.exit_file)
                h.ended = time.monotonic()

    def _forgotten(self, h: Handle) -> None:
        """The controller purged the job: ask accounting, else read the status file."""
        if shutil.which("sacct"):
            proc = self._run("sacct", "-n", "-X", "-P", "-j", h.job_id, "-o",
                             "State,ExitCode,NodeList")
            fields = proc.stdout.strip().split("|") if proc.returncode == 0 else []
            if len(fields) >= 2 and fields[0]:
                h.state = fields[0].split()[0]
                h.exit_code = _slurm_rc(fields[1])
                h.nodes = fields[2] if len(fields) > 2 else h.nodes
                h.ended = time.monotonic()
                return
        h.exit_code = _read_exit(h.exit_file)
        h.state = _final_state(h.exit_code)
        h.reason = "the controller forgot the job and accounting is unavailable" \
            if h.exit_code is None else ""
        h.ended = time.monotonic()

    def cancel(self, handle: Handle) -> None:
        self._run("scancel", handle.job_id)


def _slurm_rc(text: str) -> int | None:
    m = re.match(r"(\d+):(\d+)", text or "")
    if not m:
        return None
    rc, sig = int(m.group(1)), int(m.group(2))
    return rc if sig == 0 else 128 + sig


_PBS_DONE = {"F", "X"}          # finished; a finished subjob
_PBS_RUNNING = {"R", "E", "B"}  # running; exiting; an array job with subjobs running


def pbs_fields(text: str) -> dict[str, str]:
    """The attributes of one job in `qstat -f` output (`    name = value`; long values
    continue on lines that start with a tab)."""
    fields: dict[str, str] = {}
    last = None
    for line in text.splitlines():
        if line.startswith("\t") and last:
            fields[last] += line.strip()
        elif " = " in line and line.startswith("    "):
            last, _, value = line.strip().partition(" = ")
            fields[last] = value
    return fields


def pbs_exit(value: str | None) -> tuple[int | None, str]:
    """A PBS `Exit_status` as a shell-style status, and why when PBS itself failed it:
    >= 0 the script's status, > 256 killed by signal (value - 256), < 0 PBS could not run
    the job (JOB_EXEC_* codes)."""
    try:
        code = int(value or "")
    except ValueError:
        return None, ""
    if code < 0:
        return code, f"PBS could not run the job (Exit_status {code})"
    return (128 + code - 256 if code > 256 else code), ""


class PbsExecutor(Executor):
    """qsub, then `qstat -x -f` (PBS Pro / OpenPBS: -x includes finished jobs); the status
    file gives the exit code once the server has forgotten the job (job history off)."""

    name = "pbs"

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env,
                              timeout=60, stdin=subprocess.DEVNULL)

    def submit(self, script: Path, output: Path, exit_file: Path) -> Handle:
        proc = self._run("qsub", "-o", str(output), "-j", "oe", str(script))
        if proc.returncode != 0:
            from hpcprov.errors import HpcprovError

            raise HpcprovError(f"qsub refused {script.name}: "
                               f"{(proc.stderr or proc.stdout).strip()}")
        h = Handle(proc.stdout.strip(), script, output, exit_file, time.monotonic())
        self._event(h, "submitted")
        return h

    def refresh(self, handles: list[Handle]) -> None:
        for h in handles:
            proc = self._run("qstat", "-x", "-f", h.job_id)
            info = pbs_fields(proc.stdout) if proc.returncode == 0 else {}
            state = info.get("job_state", "")
            if info.get("exec_host"):
                h.nodes = ",".join(dict.fromkeys(
                    part.split("/")[0] for part in info["exec_host"].split("+")))
            if not info or state in _PBS_DONE:
                code, why = pbs_exit(info.get("Exit_status"))
                if code is None:
                    code = _read_exit(h.exit_file)
                h.exit_code, h.ended = code, time.monotonic()
                h.state = _final_state(code)
                h.reason = why or ("the server no longer knows the job and it left no status "
                                   "file" if code is None else "")
                self._event(h, "state")
            elif state in _PBS_RUNNING:
                if h.started is None:
                    h.started, h.state = time.monotonic(), "RUNNING"
                    self._event(h, "state")
            else:  # Q, H, W, T, S, U, M: not running (yet)
                h.reason = info.get("comment", "")

    def cancel(self, handle: Handle) -> None:
        self._run("qdel", handle.job_id)


def executor_for(scheduler: str, env: dict[str, str] | None = None) -> Executor:
    return {"slurm": SlurmExecutor, "pbs": PbsExecutor}.get(scheduler, LocalExecutor)(env)


def _dead(state: str) -> bool:
    """A Slurm short node state (sinfo %t) of a node that stopped: down, or not responding
    (a trailing *)."""
    return state.endswith("*") or state.startswith("down")


def _unusable(state: str) -> bool:
    """A state in which a node takes no new jobs (dead, drained, failing, booting...)."""
    return _dead(state) or state.startswith(("drain", "drng", "fail", "boot", "unk", "npc",
                                             "futr", "maint", "resv", "inval"))


def _sinfo_states(select: list[str], env: dict[str, str] | None) -> dict[str, str]:
    """node -> short state (sinfo %t) of the nodes ``select`` picks (-n LIST or -p PART)."""
    proc = subprocess.run(["sinfo", "-h", "-N", *select, "-o", "%N %t"],
                          capture_output=True, text=True, env=env, timeout=60)
    return {name: state.strip() for line in proc.stdout.splitlines()
            for name, _, state in [line.partition(" ")] if name and state}


def node_states(nodes: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """node -> short state (sinfo %t) for a node list such as gpu[01-02]."""
    return _sinfo_states(["-n", nodes], env)


def partition_nodes(partition: str, env: dict[str, str] | None = None) -> list[str]:
    """The nodes of a Slurm partition that can take jobs now (sinfo)."""
    return sorted(n for n, st in _sinfo_states(["-p", partition], env).items()
                  if not _unusable(st))

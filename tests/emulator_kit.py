"""What the scheduler emulators of the tests share (tests/*_emulator.py): the job store, a
job's process and its end, cancel, and reading a script's directives through the
scheduler's spelling record (hpcprov.schedulers.spelling).

Each emulator keeps only what its scheduler says differently: its commands, their output
and errors, its ids and its states, which it reads off the kit's phases.

* :class:`Spool`: the jobs of one emulated scheduler, one JSON record each in the folder
  its variable names (``$SLURM_EMULATOR_DIR``...), written atomically, ids numbered from 1.
  A job's phase is ``pending``, ``running``, ``ended`` (its script ended: ``rc`` and
  ``signal`` say how) or ``cancelled`` (``start`` says whether it had run).
* :meth:`Spool.start`: the job's script runs at once as ``bash SCRIPT`` in a session of its
  own, under a monitor (this file, run as ``python3 emulator_kit.py monitor``) that waits
  for it and records how it ended; every process of the job carries a variable naming it,
  as a job's cgroup holds its processes (those that called setsid too).
* :meth:`Spool.cancel`: each signal of the scheduler's sequence (Slurm: SIGTERM, then
  SIGKILL after KillWait) to every process of the job that is still there.
* :func:`directive_args` and :func:`options`: a script's directive lines, split into words by
  the scheduler's reading rule, then the options those words give as (flag, value): the
  flag as the record reads the option (:meth:`Spelling.key`, a one-letter name as its long
  one), so a planned option and what the emulator read are compared as the scheduler would.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpcprov.schedulers.spelling import Spelling

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's hpcprov

KIT = os.path.realpath(__file__)
MARKER = "HPCPROV_EMULATED_JOB"  # the variable every process of a job carries
Job = dict[str, Any]
Option = tuple[str, str | None]


# ---- directives ---------------------------------------------------------------------------

def directive_args(text: str, spelling: Spelling, split: Callable[[str], list[str]], *,
                   whole: bool = False) -> list[str]:
    """The words of a script's directives: the text after the record's prefix on each line
    that starts with it, split by the scheduler's rule (``split``; a ValueError it raises is
    the scheduler's refusal), before the first command (``whole``: in the whole script)."""
    words: list[str] = []
    for line in text.splitlines()[1:]:
        if line.startswith(spelling.prefix):
            words += split(line[len(spelling.prefix):])
        elif not whole and line.strip() and not line.startswith("#"):
            break
    return words


def key_of(spelling: Spelling, word: str) -> str:
    """The flag the scheduler reads a flag word as (:meth:`Spelling.key`): ``-J`` and
    ``--job-name`` are sbatch's ``--job-name``, ``-N`` is qsub's ``-N``."""
    named = [name for name, flag in spelling.flags.items() if flag == word]
    if named:
        return spelling.key(named[0])
    if spelling.long.strip() == spelling.long and word.startswith(spelling.long) and \
            len(word) > len(spelling.long) + 1:
        return spelling.key(word[len(spelling.long):])
    if word.startswith("-") and not word.startswith("--") and len(word) == 2:
        return spelling.key(word[1])
    return word


def options(words: Sequence[str], spelling: Spelling,
            valueless: Collection[str] = ()) -> tuple[list[Option], list[str]]:
    """The options ``words`` give (each as ``(flag, value)``, :func:`key_of`) and the words
    after them (a command line's script and its arguments). A flag in ``valueless`` (by its
    key) takes no value; one of the record's ``several`` takes the words up to the next
    flag, joined by a blank (Grid Engine's ``-pe NAME SLOTS``); ``--name=value`` and a
    record's attached flags (PBS's and Grid Engine's ``-l name=value``) give ``name``'s key;
    where the record's long flags start with ``--``, a one-dash word is getopt's
    (``-N2``, ``-J name``)."""
    out: list[Option] = []
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        word = words[i]
        i += 1
        lead = next((a for a in spelling.attached if a.endswith(" ") and word == a.strip()),
                    None)
        if lead is not None and i < len(words):  # -l name=value
            name, eq, value = words[i].partition("=")
            out.append((spelling.key(name), value if eq else None))
            i += 1
            continue
        if word.startswith("--") and "=" in word:
            name, _, value = word[2:].partition("=")
            out.append((spelling.key(name), value))
            continue
        attached = ""
        if spelling.long == "--" and not word.startswith("--") and len(word) > 2:
            word, attached = word[:2], word[2:]  # getopt: -N2
        key = key_of(spelling, word)
        if attached:
            out.append((key, attached))
        elif key in valueless or i >= len(words):
            out.append((key, None))
        elif key in spelling.several:
            taken = [words[i]]
            i += 1
            while i < len(words) and not words[i].startswith("-"):
                taken.append(words[i])
                i += 1
            out.append((key, " ".join(taken)))
        else:
            out.append((key, words[i]))
            i += 1
    return out, list(words[i:])


def planned(spelling: Spelling, opts: Sequence[Option],
            written: Callable[[str, str | None], str | None]) -> list[Option]:
    """Planned options as :func:`options` reads them back: each by its key, its value in
    the scheduler's units (``written``, the backend's)."""
    return [(spelling.key(name), written(name, value)) for name, value in opts]


# ---- the job store -------------------------------------------------------------------------

class Spool:
    """The jobs of one emulated scheduler, in the folder ``$VAR`` names."""

    def __init__(self, var: str) -> None:
        self.var = var

    @property
    def root(self) -> Path:
        d = Path(os.environ[self.var])
        d.mkdir(parents=True, exist_ok=True)
        return d

    def file(self, key: str, suffix: str) -> Path:
        """A file of the job ``key`` (its status, a host file...)."""
        return self.root / f"{key}.{suffix}"

    def number(self) -> int:
        """The next job's number, from 1."""
        counter = self.root / "counter"
        n = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(n))
        return n

    def new(self, key: str, number: int, **fields: Any) -> Job:
        """A job just submitted, pending, not yet saved."""
        return {"id": key, "number": number, "phase": "pending", "submit": time.time(),
                "start": None, "end": None, "rc": None, "signal": None, **fields}

    def save(self, job: Job) -> None:
        """Atomically: a reader sees the whole record or the one before."""
        path = self.file(job["id"], "json")
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(job))
        tmp.replace(path)

    def drop(self, key: str) -> None:
        """Forget a job (a queued one deleted, as PBS and LSF do)."""
        self.file(key, "json").unlink(missing_ok=True)

    def load(self, key: str) -> Job | None:
        """The job ``key`` (None: never submitted or dropped), ``ended`` once its script
        has: the monitor's record read in."""
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*", key):
            return None
        path = self.file(key, "json")
        if not path.exists():
            return None
        job: Job = json.loads(path.read_text())
        status = self.file(key, "status")
        if job["phase"] == "running" and status.exists():
            rc, sig, end = status.read_text().split()
            job.update(phase="ended", rc=int(rc), signal=int(sig), end=float(end))
        return job

    def jobs(self) -> list[Job]:
        """Every job it knows, in submission order."""
        found = [self.load(p.stem) for p in self.root.glob("*.json")]
        return sorted((j for j in found if j), key=lambda j: j["number"])

    def start(self, job: Job, argv: Sequence[str], *, env: Mapping[str, str], cwd: str,
              out: str | None, err: str | None = None, append: bool = False) -> None:
        """Run the job now: ``argv`` (its script) under the monitor, in a session of its
        own, with ``env`` and the job's marker, output to ``out`` (None: nowhere) and
        errors to ``err`` (None: with the output); saved as running."""
        spec = {"argv": list(argv), "cwd": cwd, "out": out or os.devnull, "err": err,
                "append": append, "status": str(self.file(job["id"], "status")),
                "marker": self.marker(job)}
        subprocess.Popen([sys.executable, KIT, "monitor", json.dumps(spec)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, env=dict(env))
        job.update(phase="running", start=time.time())
        self.save(job)

    def marker(self, job: Job) -> str:
        return f"{self.root}/{job['id']}"

    def cancel(self, job: Job, signals: Sequence[int] = (signal.SIGTERM, signal.SIGKILL),
               wait_s: float = 2.0) -> str:
        """Cancel a pending or running job: saved as cancelled (ended now), its processes
        sent each of ``signals`` while any is left, ``wait_s`` apart at most. The phase it
        was in."""
        was = job["phase"]
        if was in ("pending", "running"):
            job.update(phase="cancelled", end=time.time())
            self.save(job)
        if was == "running":
            kill(f"{MARKER}={self.marker(job)}".encode(), signals, wait_s)
        return was


def status(job: Job) -> int | None:
    """An ended job's status as a shell says it (128 + N: killed by signal N)."""
    if job["rc"] is None:
        return None
    return 128 + job["signal"] if job["signal"] else int(job["rc"])


def succeeded(job: Job) -> bool:
    return job["phase"] == "ended" and status(job) == 0


def kill(marker: bytes, signals: Sequence[int], wait_s: float) -> None:
    """Each signal to every process whose environment holds ``marker`` (this one spared: a
    job cancelling itself), the next once none is left or ``wait_s`` passed."""
    for sig in signals:
        deadline = time.monotonic() + wait_s
        while True:
            pids = []
            for env in Path("/proc").glob("[0-9]*/environ"):
                with contextlib.suppress(OSError):
                    if marker in env.read_bytes().split(b"\0"):
                        pids.append(int(env.parent.name))
            pids = [p for p in pids if p != os.getpid()]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            if not pids:
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)


def monitor(spec_text: str) -> int:
    """Run one job's script and record how it ended: ``RC SIGNAL END`` (an output file or
    working folder that cannot be had: it fails as it starts, 1)."""
    spec = json.loads(spec_text)
    mode = "ab" if spec["append"] else "wb"
    try:
        with open(spec["out"], mode) as out:
            apart = spec["err"] and spec["err"] != spec["out"]
            err = open(spec["err"], mode) if apart else out  # noqa: SIM115
            rc = subprocess.Popen(spec["argv"], stdout=out, stderr=err,
                                  stdin=subprocess.DEVNULL, cwd=spec["cwd"],
                                  env={**os.environ, MARKER: spec["marker"]}).wait()
    except OSError:
        rc = 1
    tmp = Path(spec["status"] + ".tmp")
    tmp.write_text(f"{max(rc, 0)} {max(-rc, 0)} {time.time()}")
    tmp.replace(spec["status"])
    return 0


def main(tools: Mapping[str, Callable[[list[str]], int]], argv: list[str]) -> int:
    """Run the tool an emulator was called as (the name of its link on PATH; run as itself,
    the next word)."""
    tool, args = Path(argv[0]).name, argv[1:]
    if tool not in tools and args:
        tool, args = args[0], args[1:]
    return tools[tool](args)


if __name__ == "__main__":
    sys.exit(monitor(sys.argv[2]))

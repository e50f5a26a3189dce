"""Execute a setup plan step by step: the thin effect layer behind `hpcprov setup`.

It writes the plan's script to PREFIX/.hpcprov/setup.sh (for the user to read and rerun by
hand) and runs each pending step as `bash /dev/fd/N STEP`, N a sealed copy of those very
bytes that hpcprov holds open (:func:`script_fd`): the script is never read back by path, so
nobody who could swap or edit setup.sh between steps changes what runs. A run executes
exactly the text that `--dry-run` prints. Around that:
a lock on the prefix, a journal of finished steps (resume after a failure or Ctrl-C, nothing
to do after success), one log per step, and the manifest, written only when every step is
done: without a manifest a prefix is not ready.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import os
import re
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from hpcprov.core import fsutil
from hpcprov.core.errors import HpcprovError
from hpcprov.provision.diagnose import BuildErrors, diagnose
from hpcprov.provision.journal import Journal, StepRecord
from hpcprov.provision.plan import Plan, fingerprints, render_script
from hpcprov.provision.progress import Reporter


class SetupFailed(HpcprovError):
    """A step failed or was interrupted; the prefix is not ready."""

    def __init__(self, message: str, step: str, exit_code: int, log: Path | None) -> None:
        super().__init__(message)
        self.step, self.log = step, log
        self.exit_code = exit_code


class Interrupted(Exception):
    """SIGTERM or SIGINT reached the runner."""


@dataclass
class SetupResult:
    status: str                      # ready | nothing-to-do | stopped
    prefix: Path
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    manifest: Path | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {"status": self.status, "prefix": str(self.prefix), "ran": self.ran,
                "skipped": self.skipped, "manifest": str(self.manifest or ""),
                "seconds": round(self.seconds, 3)}


def state_dir(prefix: Path) -> Path:
    return prefix / ".hpcprov"


def trust_state(state: Path) -> None:
    """Refuse a prefix whose state folder (PREFIX/.hpcprov: the setup script setup runs,
    its lock, journal and logs) another user could write or swap: the setup script runs
    as whoever runs setup, so a group member who can rename a file there (a group-writable
    prefix or folder above it) would run code as them. The rule of every folder hpcprov
    writes code into (:func:`fsutil.code_folder`): checked before anything is created, so a
    refused prefix leaves nothing behind; a missing one is made writable by you alone."""
    fsutil.code_folder(state, "the setup script", "setup")


_SEALS = ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE")


@contextlib.contextmanager
def script_fd(text: str, folder: Path) -> Iterator[int]:
    """A file descriptor holding ``text`` that no path leads to, so nobody can swap it: an
    anonymous memory file (memfd) sealed against any change, else a temporary file in
    ``folder`` (this user's alone: :func:`trust_state`) unlinked at once. Each step runs it
    as ``bash /dev/fd/N`` (on Linux, opened afresh at offset 0 for every step). Closed
    after the last step."""
    data = text.encode("utf-8")
    try:
        fd = os.memfd_create("hpcprov-setup.sh", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        sealed = True
    except (AttributeError, OSError):  # no memfd here (not Linux, an old kernel)
        import tempfile

        fd, name = tempfile.mkstemp(prefix=".setup.", suffix=".sh", dir=folder)
        os.unlink(name)
        sealed = False
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sealed and hasattr(fcntl, "F_ADD_SEALS"):
            seals = 0
            for seal in _SEALS:
                seals |= getattr(fcntl, seal, 0)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        yield fd
    finally:
        os.close(fd)


def prefix_lock(prefix: Path) -> contextlib.AbstractContextManager[int]:
    """An exclusive lock on the prefix; the fd is passed to the steps, so an orphaned step
    keeps holding it after its runner died."""
    path = state_dir(prefix) / "lock"
    return fsutil.exclusive_lock(path, lambda holder: _held_by(prefix, path, holder))


FULL_MIB = 64  # less free space than this under the prefix after a failure: a full disk


def _full_disk(prefix: Path) -> str | None:
    """Why a step failed when its output does not say but the disk is (nearly) full: tools
    such as ensurepip report only an exit status when a write fails with ENOSPC."""
    try:
        free = shutil.disk_usage(prefix).free // 2**20
    except OSError:
        return None
    if free >= FULL_MIB:
        return None
    return (f"the disk under the prefix is full ({free} MiB free under {prefix}): free space "
            "or choose another --prefix, then run the same command again to resume")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _held_by(prefix: Path, path: Path, holder: str) -> str:
    """Who holds the lock, from what the holder wrote into it: a live runner, or a step
    whose runner is gone (killed with -9: its step inherited the lock and runs on)."""
    runner = re.search(r"^(\d+) since", holder)
    step = re.search(r"^step (\S+) pid (\d+)", holder, re.M)
    if runner and step and not _alive(int(runner.group(1))) and _alive(int(step.group(2))):
        return (f"{prefix} is locked by step {step.group(1)} (pid {step.group(2)}), left "
                f"running by an hpcprov (pid {runner.group(1)}) that is gone: wait for it "
                f"or stop it (kill -- -{step.group(2)}), then run the same command again")
    who = runner.group(1) if runner else "?"
    return (f"{prefix} is being set up by another hpcprov (lock {path}: pid {who}); wait for "
            "it to finish, or stop it and run again")


def _note_step(lock_fd: int, step_id: str, pid: int) -> None:
    """Add the running step to the lock file (after the runner's own line)."""
    with contextlib.suppress(OSError):
        first = os.pread(lock_fd, 200, 0).decode(errors="replace").split("\n", 1)[0]
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, f"{first}\nstep {step_id} pid {pid}\n".encode(), 0)


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM, SIGINT and SIGHUP become Interrupted while a step runs."""
    def handler(signum: int, frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a step and everything it started (its own process group)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


class Runner:
    """Runs one plan in one prefix."""

    def __init__(self, plan: Plan, reporter: Reporter,
                 manifest_writer: Callable[[Path, Journal], None] | None = None,
                 env: dict[str, str] | None = None, prefix_path: Path | None = None) -> None:
        self.plan = plan
        self.prefix = prefix_path or Path(plan.prefix)
        self.state = state_dir(self.prefix)
        self.reporter = reporter
        self.manifest_writer = manifest_writer
        self.env = env

    @property
    def manifest_path(self) -> Path:
        return self.state / "manifest.json"

    def _unready(self) -> None:
        """From the first step run until the manifest is written, the prefix is not ready."""
        for path in (self.manifest_path, self.prefix / "activate"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def run(self, until: str | None = None, redo: bool = False) -> SetupResult:
        """Run the pending steps. Whatever the caller's umask (002 in a group project), what
        setup makes (the state, the logs, the environment, activate, images) is made with no
        write for group or others (fsutil.no_write_for_others; each step's bash also starts
        with ``umask go-w``): what a later shell, job or doctor runs is the owner's alone."""
        try:
            with fsutil.no_write_for_others():
                return self._run(until, redo)
        except OSError as exc:  # hpcprov's own files (journal, lock, manifest) under the prefix
            raise HpcprovError(f"{exc.strerror} while writing under {self.state}"
                               f"{' (' + exc.filename + ')' if exc.filename else ''}: free "
                               "space or fix permissions there, or choose another --prefix; "
                               "then run the same command again") from None

    def _complete(self) -> bool:
        """The prefix is ready and every step current: nothing to write, not even the lock
        (a finished prefix on a read-only file system answers "nothing to do")."""
        journal = Journal.load(self.state / "journal.json")
        return self.manifest_path.is_file() and not journal.pending(fingerprints(self.plan))

    def _run(self, until: str | None, redo: bool) -> SetupResult:
        start = time.monotonic()
        if not redo and until is None and self._complete():
            done = list(fingerprints(self.plan))
            return SetupResult("nothing-to-do", self.prefix, [], done, self.manifest_path,
                               time.monotonic() - start)
        trust_state(self.state)  # checked before it is made: a refusal creates nothing
        prints = fingerprints(self.plan)
        with prefix_lock(self.prefix) as lock_fd:
            journal = Journal.load(self.state / "journal.json")
            if redo:
                journal.steps.clear()
            journal.site = self.plan.site
            pending = journal.pending(prints)
            done = [s for s in prints if s not in pending]
            if until is not None:
                ids = list(prints)
                pending = [s for s in pending if ids.index(s) <= ids.index(until)]
            if not pending and until is None and self.manifest_path.is_file():
                return SetupResult("nothing-to-do", self.prefix, [], done,
                                   self.manifest_path, time.monotonic() - start)
            if pending:
                self._unready()
                if done:
                    self.reporter.note(f"resuming at step {pending[0]} "
                                       f"({len(done)} step(s) already done)")
            script = self.state / "setup.sh"
            text = render_script(self.plan)
            try:  # a new file renamed over it: a link planted there is replaced, not followed
                fsutil.write_code(script, text, what="the setup script", runs="setup")
            except OSError as exc:
                raise HpcprovError(f"cannot write {script}: {exc.strerror}; free space under "
                                   f"{self.prefix} or choose another --prefix") from None
            total = len(prints)
            ids = list(prints)
            with script_fd(text, self.state) as code_fd:  # what runs: never setup.sh re-read
                for step_id in pending:
                    step = self.plan.step(step_id)
                    trust_state(self.state)  # still nobody else's, as each step begins
                    self._run_step(step, ids.index(step_id) + 1, total, prints[step_id],
                                   journal, code_fd, lock_fd)
            result = SetupResult("stopped", self.prefix, pending, done, None,
                                 time.monotonic() - start)
            if until is None and not journal.pending(prints):
                if self.manifest_writer is not None:
                    self.manifest_writer(self.prefix, journal)
                result.status, result.manifest = "ready", self.manifest_path
            result.seconds = time.monotonic() - start
            return result

    def _save(self, journal: Journal) -> None:
        """Record the journal; on a full disk the previous journal stays (the next run then
        repeats the step, which is safe)."""
        try:
            journal.save()
        except OSError as exc:
            self.reporter.note(f"hpcprov: warning: cannot write the journal ({exc.strerror}); "
                               "the next run repeats this step")

    def _run_step(self, step, index: int, total: int, fingerprint: str,
                  journal: Journal, code_fd: int, lock_fd: int) -> None:
        logs = self.state / "logs"
        log_path = logs / f"{index:02d}-{step.id}.log"
        rec = StepRecord("running", fingerprint, time.time(), log=str(log_path))
        journal.steps[step.id] = rec
        self._save(journal)
        self.reporter.begin(index, total, step)
        t0 = time.monotonic()
        tail: collections.deque[str] = collections.deque(maxlen=400)
        first_errors = BuildErrors()  # the build's first errors, wherever they are
        log_error: OSError | None = None
        proc: subprocess.Popen[bytes] | None = None
        try:
            log: BinaryIO | None = _open_log(logs, log_path)
        except OSError as exc:
            log, log_error = None, exc
        try:
            with _signals_raise():
                os.lseek(code_fd, 0, os.SEEK_SET)  # where /dev/fd/N shares the offset (BSD)
                proc = subprocess.Popen(
                    ["bash", f"/dev/fd/{code_fd}", step.id], stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, pass_fds=(lock_fd, code_fd), env=self.env)
                _note_step(lock_fd, step.id, proc.pid)
                assert proc.stdout is not None
                for raw in proc.stdout:
                    text = raw.decode(errors="replace").rstrip("\n")
                    tail.append(text)
                    first_errors.feed(text)
                    if log is not None:
                        try:
                            log.write(raw)
                            log.flush()
                        except OSError as exc:  # a full disk: keep going, keep the tail
                            _close(log)
                            log_error, log = exc, None
                    self.reporter.line(text)
                code = proc.wait()
        except Interrupted as exc:
            if proc is not None:
                _stop(proc)
            _close(log)
            rec.status, rec.seconds = "interrupted", time.monotonic() - t0
            self._save(journal)
            self.reporter.end(step, rec.seconds, False)
            raise SetupFailed(
                f"interrupted ({exc}) during step {step.id}; the prefix is not ready. "
                f"Run the same command again to resume at {step.id}", step.id, 130,
                log_path) from None
        _close(log)
        rec.seconds = time.monotonic() - t0
        rec.exit_code = code
        rec.status = "done" if code == 0 else "failed"
        self._save(journal)
        self.reporter.end(step, rec.seconds, code == 0)
        if log_error is not None:
            tail.append(f"hpcprov: could not write the log {log_path}: {log_error.strerror}")
        if code != 0:
            lines = list(tail)
            if not any("hpcprov: error: " in ln for ln in lines[-15:]):
                self.reporter.note("    last lines of the output:")
                for ln in lines[-15:]:
                    self.reporter.note("    | " + ln)
            why = (diagnose("\n".join(lines), first_errors.found) or _full_disk(self.prefix)
                   or "see the log")
            raise SetupFailed(
                f"step {step.id} failed (exit {code}): {why}\n"
                f"log: {log_path}\n"
                f"the prefix is not ready; after fixing, run the same command again: it "
                f"resumes at {step.id}", step.id, 1, log_path)


def _open_log(folder: Path, path: Path) -> BinaryIO:
    """The step's log, new: never through a link planted at its name or its folder's, and
    never a FIFO or device there (opened without blocking, then removed: a new file is
    made in its place)."""
    if not folder.is_dir() or folder.is_symlink():
        if folder.is_symlink():
            folder.unlink()
        folder.mkdir(mode=0o755, exist_ok=True)
    try:  # O_NONBLOCK: a FIFO there with no reader is ENXIO, not a wait for one
        fd = fsutil.open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            raise
        fd = -1
    if fd < 0 or not stat.S_ISREG(os.fstat(fd).st_mode):
        if fd >= 0:
            os.close(fd)
        path.unlink()
        fd = fsutil.open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.ftruncate(fd, 0)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "wb")  # closed by _close


def _close(log: BinaryIO | None) -> None:
    if log is not None:
        with contextlib.suppress(OSError):
            log.close()

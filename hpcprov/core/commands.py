"""Running one external command (a scheduler's, a module system's, doctor's probe): its status
and output, or why it did not run; never an exception for a command that failed, hung or is
missing.

One runner, :func:`run_in_session`, serves every caller: the executors' scheduler commands
(through :func:`run_command`), `site draft`'s discovery commands and doctor's probe. A
command runs in a session of its own, stdin from a file or /dev/null, its output through
pipes (no terminal: a tool that sees one may start a pager and wait; Lmod did), so

* the terminal's Ctrl-C reaches hpcprov alone, which then ends what it started (a second
  Ctrl-C cannot kill the ``scancel`` that cancels a validation's jobs);
* when the command ends, hangs past its timeout, or hpcprov is interrupted (the exception
  goes on), its whole process group is killed: nothing it started (``sleep 600 &`` in an
  activate script, a hung daemon's helper) outlives it, and a child that keeps its output
  open does not keep hpcprov waiting;
* its output is read up to a bound (:class:`OutputTooLarge` past it, never a MemoryError),
  its stderr kept only in part.

``sh`` ran these commands before: it signals only the command itself on a timeout and waits
for its pipes to close, which a hung command's children can hold forever, and it reads any
amount of output; what is needed here is a bounded read on one selector loop, so the
standard library does it.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

# the most a command's stdout may hold unless told (bytes); more is OutputTooLarge, never a
# result that lacks what did not fit (1.5 GB of `scontrol show node` once ended in a
# MemoryError)
OUTPUT_CAP = 64 * 1024 * 1024
ERRORS_KEPT = 64 * 1024  # the most of a command's stderr that is kept (the rest is dropped)
_CHUNK = 1 << 16
_DRAIN_S = 2.0  # after the group is killed: how long its pipes may stay open (held by a
#                 process that left the session, beyond reach)


class Completed(NamedTuple):
    """What a command answered: its status (124 when it hung: then it was killed with all it
    started; 127 not found; 126 not runnable; 128 + N killed by signal N) and output."""

    returncode: int
    stdout: str
    stderr: str


class SessionResult(NamedTuple):
    """What a command run by :func:`run_in_session` printed, and its status (None: it did
    not finish within the timeout and was killed, with everything it started)."""

    returncode: int | None
    stdout: str
    stderr: str


class OutputTooLarge(Exception):
    """A command printed more than its cap on stdout (``cap``: that bound, in bytes); it
    and all it started were killed."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"output too large (over {size_words(cap)})")
        self.cap = cap


def size_words(count: int) -> str:
    """A byte count in words (``64 MiB``, ``1000 bytes``)."""
    return f"{count / 2**20:g} MiB" if count >= 2**20 else f"{count} bytes"


def _kill_group(pid: int) -> None:
    """SIGKILL every process of the session's group (its leader's pid is the group's id)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class _Reader:
    """stdout (bounded by ``cap``: OutputTooLarge past it) and the start of stderr."""

    def __init__(self, proc: subprocess.Popen[bytes], cap: int) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc, self.cap = proc, cap
        self.out, self.err = bytearray(), bytearray()
        self.sel = selectors.DefaultSelector()
        self.sel.register(proc.stdout, selectors.EVENT_READ, self.out)
        self.sel.register(proc.stderr, selectors.EVENT_READ, self.err)

    @property
    def open(self) -> bool:
        return bool(self.sel.get_map())

    def read(self, wait_s: float) -> None:
        """Take what the pipes have within ``wait_s`` seconds."""
        for key, _ in self.sel.select(max(wait_s, 0.0)):
            chunk = os.read(key.fd, _CHUNK)
            if not chunk:
                self.sel.unregister(key.fileobj)
            elif key.data is self.out:
                if len(self.out) + len(chunk) > self.cap:
                    raise OutputTooLarge(self.cap)
                self.out += chunk
            elif len(self.err) < ERRORS_KEPT:
                self.err += chunk[:ERRORS_KEPT - len(self.err)]

    def drain(self, within_s: float) -> None:
        """What is left in the pipes, for at most ``within_s`` seconds."""
        deadline = time.monotonic() + within_s
        while self.open and time.monotonic() < deadline:
            self.read(deadline - time.monotonic())

    def close(self) -> None:
        self.sel.close()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def run_in_session(argv: list[str], timeout: float, env: dict[str, str] | None = None, *,
                   stdin: Path | None = None, cap: int = OUTPUT_CAP) -> SessionResult:
    """Run ARGV (a path or a name on ``env``'s PATH) in a session of its own; see the module.

    ``returncode`` is None when the command did not end within ``timeout`` seconds (the
    output is then what it printed until then). :class:`OutputTooLarge` when stdout passes
    ``cap`` bytes; any exception (an interrupt) goes on after the group is killed. OSError
    when it cannot be started."""
    with open(stdin, "rb") if stdin is not None else contextlib.nullcontext() as fh:
        proc = subprocess.Popen(argv, stdin=fh if fh is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True)
    reader = _Reader(proc, cap)
    deadline = time.monotonic() + timeout
    code: int | None = None
    try:
        while True:
            code = proc.poll()
            if code is not None or time.monotonic() >= deadline:
                break  # ended (a child may still hold its output), or hung
            if not reader.open:  # both pipes closed: only the exit is left to wait for
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = proc.wait(max(deadline - time.monotonic(), 0.0))
                break
            reader.read(min(0.25, deadline - time.monotonic()))
        _kill_group(proc.pid)  # whatever it left running, or all of it when hung
        reader.drain(_DRAIN_S)
    except BaseException:  # too much output, Ctrl-C, SIGTERM as an exception
        _kill_group(proc.pid)
        raise
    finally:
        reader.close()
        proc.wait()
    if code is not None and code < 0:
        code = 128 - code  # killed by signal N: 128 + N, as shells say
    return SessionResult(code, reader.out.decode(errors="replace"),
                         reader.err.decode(errors="replace"))


def run_command(argv: list[str], env: dict[str, str] | None, timeout: float,
                stdin: Path | None = None, cap: int = OUTPUT_CAP) -> Completed:
    """Run a command found on ``env``'s PATH (:func:`run_in_session`): its status and
    output, or why it did not run (a result, never an exception, but OutputTooLarge)."""
    env = dict(os.environ) if env is None else env
    exe = shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if exe is None:
        return Completed(127, "", f"{argv[0]}: command not found on PATH")
    try:
        ran = run_in_session([exe, *argv[1:]], timeout, env, stdin=stdin, cap=cap)
    except OSError as exc:
        return Completed(126, "", f"{argv[0]}: cannot run it: {exc.strerror or exc}")
    if ran.returncode is None:
        return Completed(124, ran.stdout, f"{argv[0]} did not answer within {timeout:g} s "
                                          f"(command: {' '.join(argv)})")
    return Completed(ran.returncode, ran.stdout, ran.stderr)

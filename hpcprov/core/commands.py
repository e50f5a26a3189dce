"""Running one external command (a scheduler's, a module system's): its status and output, or
why it did not run; never an exception for a command that failed, hung or is missing.

:func:`run_in_session` runs a probe (a shell that sources a prefix's ``activate``, say) in a
session of its own: when it ends, hangs past its timeout or hpcprov is interrupted, its whole
process group is killed, so nothing it started (``sleep 600 &`` in an activate script)
outlives hpcprov."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import NamedTuple


class Completed(NamedTuple):
    """What a scheduler command answered."""

    returncode: int
    stdout: str
    stderr: str


def run_command(argv: list[str], env: dict[str, str] | None, timeout: float,
                stdin: Path | None = None) -> Completed:
    """Run a command found on ``env``'s PATH; its status and output, or why it did not run."""
    import sh  # ~0.1 s to import: only where jobs are submitted

    env = dict(os.environ) if env is None else env
    exe = shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if exe is None:
        return Completed(127, "", f"{argv[0]}: command not found on PATH")
    # no terminal on stdout: a tool that sees one may start a pager and wait (Lmod did); a
    # session of its own: a Ctrl-C at the terminal reaches hpcprov alone, which then cancels
    # what it started (a second Ctrl-C cannot kill the scancel doing that)
    try:
        with open(stdin, "rb") if stdin is not None else contextlib.nullcontext() as fh:
            proc = sh.Command(exe)(*argv[1:], _env=env, _timeout=timeout, _in=fh,
                                   _tty_out=False, _ok_code=range(256), _return_cmd=True,
                                   _new_session=True)
    except sh.TimeoutException:
        return Completed(124, "", f"{argv[0]} did not answer within {timeout:.0f} s "
                                  f"(command: {' '.join(argv)})")
    except sh.SignalException as exc:
        return Completed(128 + abs(exc.exit_code), "", f"{argv[0]} was killed by a signal")
    out, err = proc.stdout, proc.stderr
    return Completed(proc.exit_code, out.decode(errors="replace"), err.decode(errors="replace"))


class SessionResult(NamedTuple):
    """What a command run by :func:`run_in_session` printed, and its status (None: it did
    not finish within the timeout and was killed, with everything it started)."""

    returncode: int | None
    stdout: str
    stderr: str


_SLICE = 0.25  # how often a wait looks whether the command itself has ended (seconds)
_DRAIN = 5.0  # after the kill: how long its pipes may stay open (held outside its session)


def _kill_group(pid: int) -> None:
    """SIGKILL every process of the session's group (its leader's pid is the group's id)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _drain(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """The rest of the output once the group is killed, reaping the command; nothing more
    when something outside the session still holds its pipes."""
    try:
        out, err = proc.communicate(timeout=_DRAIN)
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
        return b"", b""
    return out or b"", err or b""


def run_in_session(argv: list[str], timeout: float, env: dict[str, str] | None = None
                   ) -> SessionResult:
    """Run ARGV in a session of its own (``start_new_session``), stdin from /dev/null, stdout
    and stderr captured (no terminal: nothing waits in a pager or for a password).

    When the command ends, when ``timeout`` seconds pass (then ``returncode`` is None and the
    output is what it printed until then), and when hpcprov is interrupted (the exception
    goes on), its whole process group is killed: what it started in the background, however
    deep, dies with it (a child that left the session itself is beyond reach). A command
    that ended while a child of its own still holds its output open is not waited for."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout
    code: int | None = None
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=max(0.0, min(_SLICE,
                                                                 deadline - time.monotonic())))
                code = proc.returncode
                break
            except subprocess.TimeoutExpired:
                code = proc.poll()
                if code is not None or time.monotonic() >= deadline:
                    # ended, leaving children that hold its output; or hung: end them all
                    _kill_group(proc.pid)
                    out, err = _drain(proc)
                    break
    except BaseException:  # Ctrl-C, SIGTERM turned into an exception: nothing left behind
        _kill_group(proc.pid)
        _drain(proc)
        raise
    _kill_group(proc.pid)  # whatever it left running in the background
    return SessionResult(code, out.decode(errors="replace"), err.decode(errors="replace"))

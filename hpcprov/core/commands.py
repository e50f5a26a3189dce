"""Running one external command (a scheduler's, a module system's): its status and output, or
why it did not run; never an exception for a command that failed, hung or is missing."""

from __future__ import annotations

import contextlib
import os
import shutil
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
    # no terminal on stdout: a tool that sees one may start a pager and wait (Lmod did)
    try:
        with open(stdin, "rb") if stdin is not None else contextlib.nullcontext() as fh:
            proc = sh.Command(exe)(*argv[1:], _env=env, _timeout=timeout, _in=fh,
                                   _tty_out=False, _ok_code=range(256), _return_cmd=True)
    except sh.TimeoutException:
        return Completed(124, "", f"{argv[0]} did not answer within {timeout:.0f} s "
                                  f"(command: {' '.join(argv)})")
    except sh.SignalException as exc:
        return Completed(128 + abs(exc.exit_code), "", f"{argv[0]} was killed by a signal")
    out, err = proc.stdout, proc.stderr
    return Completed(proc.exit_code, out.decode(errors="replace"), err.decode(errors="replace"))

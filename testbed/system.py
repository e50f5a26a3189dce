"""Small wrappers over this machine: commands, pid files, /proc, ports and mounts.

Nothing here knows about Slurm or the testbed's layout.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .errors import TestbedError

T = TypeVar("T")


def run(cmd: list[str], *, check: bool = True, env: dict[str, str] | None = None,
        input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` with its output captured; failures become one-line TestbedErrors."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, input=input,
                              timeout=timeout)
    except FileNotFoundError as exc:
        raise TestbedError(f"command not found: {cmd[0]}") from exc
    except subprocess.TimeoutExpired as exc:
        raise TestbedError(f"timed out after {timeout:.0f}s: {' '.join(cmd)}") from exc
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        last = err[-1] if err else f"exit status {proc.returncode}"
        raise TestbedError(f"{' '.join(cmd[:3])} failed: {last}")
    return proc


def sbin_path() -> str:
    """PATH plus the sbin/bin directories that daemons live in, where missing."""
    path = os.environ.get("PATH", "")
    extra = [d for d in ("/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/bin",
                         "/bin") if d not in path.split(":")]
    return ":".join([p for p in [path, *extra] if p])


# -- processes and pid files ----------------------------------------------------


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def written_pid(path: Path) -> int | None:
    """The pid in ``path`` once the daemon has written it whole, else None.

    Slurm's daemons create the file (empty) and write ``"<pid>\\n"`` a moment later,
    so an empty or unterminated file means "not written yet", not "dead".
    """
    try:
        text = path.read_text()
    except OSError:
        return None
    if not re.fullmatch(r"\d+\n", text):
        return None
    return int(text)


def read_pid(path: Path) -> int | None:
    """The live process named in ``path`` (None when there is none, or not yet)."""
    pid = written_pid(path)
    return pid if pid is not None and pid_alive(pid) else None


def log_tail(log: Path, lines: int = 3) -> str:
    """The last ``lines`` lines of ``log``, one line, for an error message."""
    try:
        tail = log.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return " | ".join(line.strip() for line in tail)


def all_pids() -> list[str]:
    """Every process id in /proc."""
    return [p for p in os.listdir("/proc") if p.isdigit()]


def proc_text(pid: str, name: str) -> str:
    """/proc/PID/NAME with NULs as spaces ("" if unreadable)."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def ns_inode(path: str | Path) -> int | None:
    """Inode of a namespace file (e.g. /run/netns/NAME), None if there is none."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def proc_ns(pid: str, kind: str) -> int | None:
    """Inode of process ``pid``'s namespace of ``kind`` ("net", "mnt", ...)."""
    try:
        link = os.readlink(f"/proc/{pid}/ns/{kind}")  # e.g. "net:[4026532281]"
    except OSError:
        return None
    return int(link[link.index("[") + 1:-1])


def kill_and_wait(pids: set[int], timeout: float = 3.0) -> None:
    """SIGTERM, then SIGKILL whatever is still there after ``timeout``."""
    me = os.getpid()
    pids = {p for p in pids if p != me}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = {p for p in pids if pid_alive(p)}
            if not pids:
                return
            time.sleep(0.02)


def wait_for(what: str, predicate: Callable[[], T], timeout: float,
             log: Path | None = None) -> T:
    """Poll ``predicate`` until it returns something true, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            hint = f" (see {log})" if log else ""
            raise TestbedError(f"timed out after {timeout:.0f}s waiting for {what}{hint}")
        time.sleep(0.02)


# -- ports and mounts -------------------------------------------------------------


def port_open(addr: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``addr:port``."""
    try:
        with socket.create_connection((addr, port), timeout=0.5):
            return True
    except OSError:
        return False


def port_free(port: int, addr: str = "0.0.0.0") -> bool:
    """Whether ``port`` can be bound on ``addr``."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, port))
        except OSError:
            return False
    return True


def mounts() -> list[str]:
    """Mount points of this mount namespace, from /proc/self/mountinfo."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            points.append(point.replace("\\040", " "))
    return points

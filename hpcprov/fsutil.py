"""Where hpcprov keeps its own files, and how it writes and trusts them.

* :func:`cache_dir`, :func:`config_dir`, :func:`data_dir`: the XDG base directories
  (``$XDG_CACHE_HOME`` etc., else their defaults under ``~``) with ``hpcprov`` appended.
* :func:`trusted_dir`: a directory hpcprov keeps private data in must be a real directory
  (not a symlink), owned by this user and writable by nobody else; one somebody else
  created is not used (it could hold planted entries or symlinks).
* :func:`read_owned`: the bytes of a file of this user's that nobody else can write.
* :func:`atomic_write`: write to a new temporary file beside the target (``O_EXCL`` and
  ``O_NOFOLLOW``: a planted symlink is never followed), then rename it over the target
  (the rename replaces a symlink at the target, never the file it points to).

Imports nothing beyond the standard library: every command's start-up runs it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _xdg(var: str, default: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / default) / "hpcprov"


def cache_dir(name: str) -> Path:
    """``$XDG_CACHE_HOME/hpcprov/NAME`` (default ``~/.cache/hpcprov/NAME``); not checked."""
    return _xdg("XDG_CACHE_HOME", ".cache") / name


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/hpcprov`` (default ``~/.config/hpcprov``)."""
    return _xdg("XDG_CONFIG_HOME", ".config")


def data_dir() -> Path:
    """``$XDG_DATA_HOME/hpcprov`` (default ``~/.local/share/hpcprov``)."""
    return _xdg("XDG_DATA_HOME", ".local/share")


def owned(st: os.stat_result) -> bool:
    """True when the file or directory ``st`` describes is this user's and nobody else may
    write it."""
    return st.st_uid == os.geteuid() and not st.st_mode & _OTHERS_WRITE


def trusted_dir(path: Path, create: bool = False) -> bool:
    """True when ``path`` is a real directory (not a symlink) of this user's that nobody
    else may write. With ``create``, it is made first when missing (mode 0700, as is a
    missing ``.../hpcprov`` above it). Never raises."""
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            path.mkdir(exist_ok=True, mode=0o700)
        st = os.lstat(path)
        return stat.S_ISDIR(st.st_mode) and owned(st)
    except OSError:
        return False


def read_owned(path: Path) -> bytes | None:
    """The content of ``path`` when it is a regular file (not a symlink) of this user's
    that nobody else may write, else None. Never raises."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        try:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode) or not owned(st):
                return None
            return fh.read()
        except OSError:
            return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: bytes | str, private: bool = True) -> None:
    """Replace ``path`` with ``data`` in one step: readers see the old file or the new one.

    The temporary file is created by :func:`tempfile.mkstemp` in the target's directory
    (``O_CREAT | O_EXCL | O_NOFOLLOW``, a random name), so nothing planted there is
    followed or overwritten; it is renamed over ``path``. ``private``: mode 0600, else
    0666 less the umask (what ``open()`` would give). OSError on failure (the temporary
    file is removed)."""
    import tempfile  # not at import: every command's start-up imports this module

    blob = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if not private:
                os.fchmod(fh.fileno(), 0o666 & ~_umask())
            fh.write(blob)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

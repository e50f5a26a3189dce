"""Where hpcprov keeps its own files, and how it writes and trusts them.

* :func:`cache_dir`, :func:`config_dir`, :func:`data_dir`: the XDG base directories
  (``$XDG_CACHE_HOME`` etc., else their defaults under ``~``) with ``hpcprov`` appended.
* :func:`trusted_dir`: a directory hpcprov keeps private data in must be a real directory
  (not a symlink), owned by this user and writable by nobody else, below folders nobody
  else can write (or sticky ones, :func:`safe_above`); one somebody else created, or could
  swap, is not used (it could hold planted entries or symlinks, or be replaced by one).
* :func:`read_owned`: the bytes of a file of this user's that nobody else can write
  (through :func:`read_regular`: bounded, and a FIFO there is never waited on).
* :func:`read_regular`: the bytes of a regular file, at most a given size; a FIFO, a device,
  a socket or a directory is refused without blocking or reading from it.
* :func:`atomic_write`: write to a new temporary file beside the target (``O_EXCL`` and
  ``O_NOFOLLOW``: a planted symlink is never followed), then rename it over the target
  (the rename replaces a symlink at the target, never the file it points to).
* :func:`code_folder` and :func:`write_code`: the one rule for every file that something
  later executes (a setup script, a validation's programs and job scripts, an allocation's
  pilot and steps): its folder is refused when another user could write or swap it (or a
  folder above it), made without group or other write, and the file is written whole, under
  a new name renamed into place, with an explicit mode whatever the umask.

Imports nothing beyond the standard library: every command's start-up runs it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _xdg(var: str, default: str) -> Path:
    """``$VAR/hpcprov``, else ``~/DEFAULT/hpcprov``. A relative ``$VAR`` is ignored, as the
    XDG base directory specification asks: it would depend on the current directory (a
    folder of profiles there could shadow the user's own)."""
    value = os.environ.get(var, "")
    return (Path(value) if os.path.isabs(value) else Path.home() / default) / "hpcprov"


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


def safe_above(path: Path) -> bool:
    """True when no other user can rename, remove or replace ``path`` through a folder
    above it: each folder from ``/`` down to ``path``'s parent is this user's or root's, and
    one that others may write is sticky (as ``/tmp``: there only an entry's owner may rename
    it). A symlink on the way must be this user's or root's, and its target passes the same
    test. Checked on every use, so no folder can be swapped for another between the check
    and a write: nobody else may write any folder on the way. Never raises."""
    return _unsafe_way(Path(os.path.abspath(path)).parent, missing_ok=False) is None


def _unsafe_way(start: Path, missing_ok: bool, also: int | None = None) -> str | None:
    """Why another user could rename, remove or replace ``start`` or a folder above it
    (the rule of :func:`safe_above`), None when nobody can. A symlink on the way is checked
    itself, then its target's way, and the folders above the link go on being checked.
    ``missing_ok``: a folder not made yet is passed over (the folder above it decides).
    ``also``: a user trusted beside this one and root (a shared prefix's owner)."""
    me, todo, links = os.geteuid(), [start], 0
    trusted = {me, 0, me if also is None else also}
    while todo:
        below = todo.pop()
        for folder in (below, *below.parents):
            try:
                st = os.lstat(folder)
            except FileNotFoundError:
                if missing_ok:
                    continue
                return f"{folder} does not exist"
            except OSError as exc:
                return f"{folder} cannot be checked ({exc.strerror})"
            link = stat.S_ISLNK(st.st_mode)
            if st.st_uid not in trusted:
                return (f"{folder} is a symbolic link of user {st.st_uid}" if link
                        else f"{folder} belongs to user {st.st_uid}")
            if link:
                links += 1
                if links > 40:  # a loop, or a chain no system would follow
                    return f"{folder}: more than 40 symbolic links on the way"
                todo.append(Path(os.path.realpath(folder)))
            elif st.st_mode & _OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
                return f"{folder} may be written by {_who(st.st_mode)}"
    return None


def why_untrusted(path: Path) -> str | None:
    """Why another user could write or swap ``path`` (a folder): ``path`` is not this
    user's, or a folder on its way (``path`` itself, then those above, as
    :func:`safe_above` checks them) is not this user's or root's, or its group or others
    may write it without the sticky bit; None when there is none."""
    here = Path(os.path.abspath(path))
    try:
        st = os.lstat(here)
    except OSError:
        st = None  # not made yet, or unreadable: the way decides (and names it)
    if st is not None and not stat.S_ISLNK(st.st_mode) and st.st_uid != os.geteuid():
        return f"{here} belongs to user {st.st_uid}, not to you"
    return _unsafe_way(here, missing_ok=True)


def shared_safe_mkdir(path: Path) -> None:
    """Create ``path`` and the folders missing above it (each mode 0755 less the umask,
    never writable by group or others, whatever the umask); an existing folder is left as
    it is (:func:`why_untrusted` then says whether it can be trusted)."""
    for folder in _missing(path):
        folder.mkdir(mode=0o755, exist_ok=True)
        os.chmod(folder, 0o755 & ~_umask() & ~_OTHERS_WRITE)


def _missing(path: Path) -> list[Path]:
    """The folders to create for ``path`` to exist, the highest first."""
    missing = []
    while not os.path.lexists(path) and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing[::-1]


@contextlib.contextmanager
def exclusive_lock(path: Path, held: Callable[[str], str]) -> Iterator[int]:
    """An exclusive lock (``flock``) on PATH for the block, its fd given: the file is opened
    without following a link planted at its name (created 0644), and the holder writes
    ``PID since TIME`` into it. When another holds it: HpcprovError with ``held(what the
    holder wrote)``, one line that says who and what to do."""
    from hpcprov.core.errors import HpcprovError

    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HpcprovError(held(os.pread(fd, 400, 0).decode(errors="replace"))) from None
        with contextlib.suppress(OSError):  # the holder's pid is only for the message
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
                      .encode(), 0)
        yield fd
    finally:
        os.close(fd)


def open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that never follows a symlink at ``path`` itself (ELOOP instead): a link
    planted where hpcprov writes its lock or a log is not followed to its target."""
    return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)


def _make_private(path: Path) -> None:
    """Create ``path`` and the folders missing above it, each mode 0700, each only where
    the folders above it pass :func:`safe_above`."""
    for folder in _missing(path):
        if not safe_above(folder):
            return
        folder.mkdir(mode=0o700, exist_ok=True)


def trusted_dir(path: Path, create: bool = False) -> bool:
    """True when ``path`` is a real directory (not a symlink) of this user's that nobody
    else may write, and nobody else can swap for another (:func:`safe_above`). With
    ``create``, it is made first when missing (mode 0700, as is a missing ``.../hpcprov``
    above it), and only below folders that pass that test. Never raises."""
    try:
        if create:
            _make_private(path)
        st = os.lstat(path)
        return stat.S_ISDIR(st.st_mode) and owned(st) and safe_above(path)
    except OSError:
        return False


OWNED_LIMIT = 64 << 20  # what read_owned reads at most unless told (a stored run: far less)


def read_owned(path: Path, limit: int = OWNED_LIMIT) -> bytes | None:
    """The content of ``path`` when it is a regular file (not a symlink) of this user's
    that nobody else may write, and holds at most ``limit`` bytes; else None. Read through
    :func:`read_regular` (a FIFO or a device planted there is refused, never waited on).
    Never raises."""
    try:
        return read_regular(path, limit, follow=False, owned_only=True)
    except OSError:
        return None


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words ("a regular file", "a FIFO (named
    pipe)", "a character device"...)."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


class NotRegularFile(OSError):
    """The path is something other than a regular file (``kind`` says what, in words)."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(f"{path} is {kind}, not a regular file")
        self.path, self.kind = str(path), kind

    def __str__(self) -> str:
        return f"{self.path} is {self.kind}, not a regular file"


class TooLarge(OSError):
    """The file holds more than the limit (``size``: its size, or more than the limit
    when it grew while read)."""

    def __init__(self, path: Path, size: int, limit: int) -> None:
        super().__init__(f"{path} is {size} bytes; the limit is {limit}")
        self.path, self.size, self.limit = str(path), size, limit

    def __str__(self) -> str:
        return f"{self.path} is {self.size} bytes; the limit is {self.limit}"


def regular_file(path: Path) -> str | None:
    """None when ``path`` (symlinks followed) is a regular file, else what it is in words
    ("no such file", "a directory", "a FIFO (named pipe)"...). Never blocks, never
    raises."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    return None if stat.S_ISREG(mode) else kind_of(mode)


def read_regular(path: Path, limit: int, *, follow: bool = True,
                 owned_only: bool = False) -> bytes:
    """The bytes of the regular file ``path`` (symlinks followed), at most ``limit``.

    Opened without blocking (``O_NONBLOCK``: opening a FIFO would wait for a writer) and
    without becoming the controlling terminal; anything but a regular file is refused
    before a byte is read (:class:`NotRegularFile`), and no more than ``limit + 1`` bytes
    are ever read (:class:`TooLarge`: /dev/zero, or a file that grew). ``follow=False``: a
    symlink at ``path`` is refused (ELOOP), not followed; ``owned_only``: a file that is not
    this user's, or that others may write, is refused (:class:`NotOwned`). Other problems
    are the OSError ``open`` or ``read`` raised."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, kind_of(st.st_mode))
        if owned_only and not owned(st):
            raise NotOwned(path)
        if st.st_size > limit:
            raise TooLarge(path, st.st_size, limit)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb", buffering=0) as fh:
        chunks, total = [], 0
        while total <= limit:
            chunk = fh.read(min(1 << 16, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    if total > limit:
        raise TooLarge(path, total, limit)
    return b"".join(chunks)


class NotOwned(OSError):
    """The file is not this user's, or others may write it (:func:`owned`)."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path} is not a file of yours that only you may write")
        self.path = str(path)

    def __str__(self) -> str:
        return f"{self.path} is not a file of yours that only you may write"


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


def write_output(path: str, text: str) -> None:
    """Write a file the user named (``--output``): any failure is one UsageError line
    naming the file."""
    from hpcprov.core.errors import UsageError

    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


CODE_FIX = ("use a folder only you can write (e.g. a folder of your own in the project space, "
            "chmod 755), or make the shared folder sticky (chmod +t)")


def untrusted_code(why: str, folder: Path, what: str, runs: str = "a job") -> str:
    """The one line that refuses a folder for code (:func:`code_folder`): what is wrong,
    what another user could do, and the fix. The prefix's setup says the same."""
    return (f"{why}: someone else could replace {what} under {folder} and have {runs} run it "
            f"as you; {CODE_FIX}: files hpcprov writes to be run must be writable by you alone")


def code_folder(folder: Path, what: str, runs: str = "a job") -> Path:
    """Make ``folder`` fit to hold files that something later executes, or refuse it.

    Checked before anything is created (:func:`why_untrusted`: the folder, if there, is this
    user's; every folder from ``/`` down is this user's or root's and not writable by its
    group or others unless sticky); missing folders are made 0755 less the umask, never
    group- or other-writable (:func:`shared_safe_mkdir`); then checked again. HpcprovError,
    one line (:func:`untrusted_code`), when another user could write or swap it."""
    from hpcprov.core.errors import HpcprovError

    folder = Path(os.path.abspath(folder))
    why = why_untrusted(folder)
    if why is None:
        try:
            shared_safe_mkdir(folder)
        except OSError as exc:
            raise HpcprovError(f"cannot create {folder}: {exc.strerror}; choose another "
                               "folder") from None
        why = why_untrusted(folder)
        if why is None and not os.path.isdir(folder):
            why = f"{folder} is not a folder"
    if why is not None:
        raise HpcprovError(untrusted_code(why, folder, what, runs))
    return folder


# The writers of code (what a job, a step or a pilot executes): every one goes through
# write_code (tests/test_code_writes.py walks the source and fails on one that does not).
def write_code(path: Path, data: str | bytes, mode: int = 0o644, what: str | None = None,
               runs: str = "a job") -> None:
    """Write ``path``, a file that something later executes, by the one rule: its folder
    passes :func:`code_folder` (checked now, not only when made), and the file is written
    under a new random name (``O_EXCL | O_NOFOLLOW``), given ``mode`` whatever the umask
    (never group- or other-writable), synced, and renamed over ``path``: a link planted at
    the name is replaced, never followed, and a reader sees the old file or the whole new
    one. HpcprovError (one line) for a folder another user could write or swap; OSError
    when the write fails."""
    import tempfile

    folder = code_folder(path.parent, what or f"{path.name}", runs)
    blob = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode & ~_OTHERS_WRITE & 0o7777)
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, folder / path.name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---- what a later job, shell or doctor runs from a prefix (issue 41) -----------------------

@contextlib.contextmanager
def no_write_for_others() -> Iterator[int]:
    """Inside, this process (and what it starts) creates nothing its group or others may
    write, whatever the caller's umask: group and other write are added to the umask (a
    stricter one is kept), the caller's comes back after. Yields the umask in force."""
    before = os.umask(0o022)
    os.umask(before | _OTHERS_WRITE)
    try:
        yield before | _OTHERS_WRITE
    finally:
        os.umask(before)


# folders of a prefix that nothing runs or imports from after setup (conda's package cache:
# the envs hard-link its files, whose modes the envs' own entries show; the installer's
# download; Horovod's build folder, whose sources keep their archive's owners)
PASSIVE = ("miniconda3/pkgs", "downloads", "build")
# where setup keeps container images: each image (a file, or a directory image's root) is
# checked, not what a directory image holds (an image's own /tmp is 1777 by design)
IMAGES = "images"
ENV_FIX = ("make it writable by its owner alone (chmod -R go-w {prefix}, or set it up again: "
           "hpcprov setup never leaves a file others may write) and a shared folder above it "
           "sticky (chmod +t)")


def others_can_change(prefix: Path) -> str | None:
    """Why someone other than this user, root or the prefix's owner could change what a
    shell, a job or doctor runs from the provisioned ``prefix`` (its ``activate``, an
    environment's ``bin/`` and ``site-packages/``, its images): an entry of the prefix (but
    symlinks, :data:`PASSIVE` folders and what a directory image holds) that its group or
    others may write or that another user owns, or a folder above the prefix that they could
    swap (another user's, or writable by others without the sticky bit). None when nobody
    can. Never raises. hpcprov/jobs/env_trust.sh makes the same test in every job."""
    real = Path(os.path.realpath(prefix))
    try:
        top = os.lstat(real)
    except OSError as exc:
        return f"{real} cannot be checked ({exc.strerror})"
    trusted = {os.geteuid(), 0, top.st_uid}

    def why(path: str, st: os.stat_result) -> str | None:
        if st.st_uid not in trusted:
            return f"{path} belongs to user {st.st_uid}"
        if st.st_mode & _OTHERS_WRITE:
            return f"{path} may be written by {_who(st.st_mode)}"
        return None

    above = _unsafe_way(real.parent, missing_ok=False, also=top.st_uid)  # safe_above's rule
    if above is not None:
        return above
    skip = {str(real / p) for p in PASSIVE}
    images = str(real / IMAGES)
    for here, dirs, files in os.walk(real):
        names = [here, *(os.path.join(here, f) for f in files)]
        if here == images:  # each image itself, not what a directory image holds
            names += [os.path.join(here, d) for d in dirs]
            dirs[:] = []
        dirs[:] = [d for d in dirs if os.path.join(here, d) not in skip]
        for name in names:
            try:
                st = os.lstat(name)
            except OSError:
                continue  # gone meanwhile
            found = None if stat.S_ISLNK(st.st_mode) else why(name, st)  # a link's own mode
            if found:                                                    # means nothing
                return found
    return None


def _who(mode: int) -> str:
    if mode & stat.S_IWGRP and mode & stat.S_IWOTH:
        return "its group and everyone"
    return "its group" if mode & stat.S_IWGRP else "everyone"


def untrusted_env(prefix: Path, why: str, runs: str) -> str:
    """The one line that refuses a prefix others could change (:func:`others_can_change`)."""
    return (f"{why}: someone else could change what {runs} runs from {prefix} and have it run "
            f"as you; {ENV_FIX.format(prefix=prefix)}")

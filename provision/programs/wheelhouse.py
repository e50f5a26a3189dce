"""hpcprov's Horovod wheelhouse: verify an entry before its wheel is used, publish safely.

Run by the setup script's hpcprov_wheelhouse_get and hpcprov_wheelhouse_put (this file
verbatim, written to $STATE/programs/) with the environment's Python:

    python wheelhouse.py get WHEELHOUSE KEY KEYFILE DEST [TRUSTED...]
    python wheelhouse.py put WHEELHOUSE KEY KEYFILE WHEEL [TRUSTED...]

`get` uses the entry WHEELHOUSE/KEY only when it is a real folder (not a symlink) and it
and its files (the one horovod-*.whl, horovod-key.txt, SHA256SUMS) are owned by a trusted
publisher and writable by nobody else: trusted are you, root, and the users and @groups
named in TRUSTED and in $HPCPROV_WHEELHOUSE_TRUST (space- or comma-separated; a member of
a trusted group is a trusted publisher, and files of that group may be group-writable).
Its horovod-key.txt must equal KEYFILE, and the wheel's SHA-256 the one SHA256SUMS
recorded at publishing. The wheel is copied into the folder DEST while it is hashed, from
file descriptors opened without following links, so what is installed (the copy, whose
path is printed) is what was checked. Exit status: 0 a verified copy, 1 no entry, 2 an
entry refused (one line on stderr says why).

`put` publishes WHEEL under WHEELHOUSE/KEY: a new folder from mkdtemp (a name nobody can
guess), files created without following links and given explicit modes (0644, the folder
0755), SHA256SUMS written from the bytes copied, then one rename into place. The result is
checked (the folder at KEY is the one written) before "cached" is printed; an entry
already there is kept when it verifies, replaced when it is your own and does not, and left
alone (not cached) otherwise.

Written for any Python 3.6 or newer: the environment's Python runs it.
"""

import errno
import grp
import hashlib
import os
import pwd
import re
import secrets
import shutil
import stat
import sys
import tempfile

KEY = re.compile(r"^[0-9a-f]{16}$")
SUM = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")
NOFOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
SMALL = 1 << 20
CHUNK = 1 << 20


class Refused(Exception):
    """The entry exists but must not be used; the message says why."""


def _name(table, ident):
    """A user or group name for a message (the number when it has none)."""
    try:
        return table(ident)[0]
    except KeyError:
        return str(ident)


class Trust:
    """Who may publish: this user, root, and the users and @groups named."""

    def __init__(self, names):
        self.uids = {os.geteuid(), 0}
        self.gids = set()
        for name in names:
            if name.startswith("@"):
                self.gids.add(self._id(name[1:], grp.getgrnam, "gr_gid"))
            elif name:
                self.uids.add(self._id(name, pwd.getpwnam, "pw_uid"))
        self.gids.discard(None)
        self.uids.discard(None)

    @staticmethod
    def _id(name, lookup, field):
        if name.isdigit():
            return int(name)
        try:
            return getattr(lookup(name), field)
        except KeyError:
            return None  # an unknown name trusts nobody

    def owner_trusted(self, uid):
        if uid in self.uids:
            return True
        if not self.gids:
            return False
        try:
            user = pwd.getpwuid(uid)
        except KeyError:
            return False
        return bool(self.gids.intersection(os.getgrouplist(user.pw_name, user.pw_gid)))

    def check(self, st, what):
        """Refuse a file or folder not owned by a trusted publisher, or writable by
        others than trusted publishers."""
        if not self.owner_trusted(st.st_uid):
            owner = _name(pwd.getpwuid, st.st_uid)
            raise Refused(f"{what} is owned by {owner}, not by you or a trusted publisher "
                          "(see HPCPROV_WHEELHOUSE_TRUST)")
        if st.st_mode & stat.S_IWOTH:
            raise Refused(f"{what} is writable by everyone")
        if st.st_mode & stat.S_IWGRP and st.st_gid not in self.gids:
            group = _name(grp.getgrgid, st.st_gid)
            raise Refused(f"{what} is writable by group {group}, which is not trusted (see "
                          "HPCPROV_WHEELHOUSE_TRUST)")


def trust(extra):
    """The trusted publishers: TRUSTED arguments and $HPCPROV_WHEELHOUSE_TRUST."""
    names = re.split(r"[\s,]+", os.environ.get("HPCPROV_WHEELHOUSE_TRUST", ""))
    return Trust([n for n in [*names, *extra] if n])


def open_entry(wfd, key):
    """The key folder's descriptor, or None when there is no entry."""
    try:
        return os.open(key, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=wfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused("it is a symlink or not a folder") from None
        raise


def open_file(dfd, name, tr, what):
    """A regular file in the entry, checked, opened without following links."""
    try:
        fd = os.open(name, NOFOLLOW, dir_fd=dfd)
    except FileNotFoundError:
        raise Refused(f"it has no {name}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"its {name} is a symlink") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Refused(f"its {name} is not a regular file")
    try:
        tr.check(st, what)
    except Refused:
        os.close(fd)
        raise
    return fd


def read_small(dfd, name, tr):
    fd = open_file(dfd, name, tr, "its " + name)
    with os.fdopen(fd, "rb") as f:
        return f.read(SMALL)


def wheel_of(dfd):
    wheels = sorted(n for n in os.listdir(dfd) if n.startswith("horovod-")
                    and n.endswith(".whl"))
    if len(wheels) != 1:
        raise Refused(f"it holds {len(wheels)} wheels, not one")
    return wheels[0]


def recorded_sha(sums, wheel):
    for line in sums.decode("utf-8", "replace").splitlines():
        found = SUM.match(line)
        if found and found.group(2) == wheel:
            return found.group(1)
    raise Refused(f"its SHA256SUMS has no line for {wheel}")


def verify(dfd, tr, keytext):
    """(wheel name, recorded SHA-256) of an entry that passes every check but the hash."""
    tr.check(os.fstat(dfd), "it")
    wheel = wheel_of(dfd)
    if read_small(dfd, "horovod-key.txt", tr) != keytext:
        raise Refused("its horovod-key.txt is not this environment's key text")
    return wheel, recorded_sha(read_small(dfd, "SHA256SUMS", tr), wheel)


def private_dir(path):
    """DEST, a folder of this user's that nobody else can write, emptied of files."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError(f"{path} is not a folder of yours")
    os.chmod(path, 0o700)
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if not os.path.isdir(full) or os.path.islink(full):
            os.unlink(full)
    return path


NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW


def write_hashed(fd, chunks):
    """Write chunks into the new file fd (then mode 0644, synced); return their SHA-256."""
    h = hashlib.sha256()
    with os.fdopen(fd, "wb") as f:
        for chunk in chunks:
            h.update(chunk)
            f.write(chunk)
        f.flush()
        os.fchmod(f.fileno(), 0o644)
        os.fsync(f.fileno())
    return h.hexdigest()


def copy_hashed(src_fd, dst):
    """Copy an open file to dst (created anew, 0644), returning the SHA-256 of the bytes."""
    with os.fdopen(src_fd, "rb") as src:
        return write_hashed(os.open(dst, NEW_FILE, 0o600), iter(lambda: src.read(CHUNK), b""))


def get(wh, key, keyfile, dest, extra):
    """Verify WHEELHOUSE/KEY and copy its wheel into DEST; print the copy's path."""
    if not KEY.match(key):
        raise SystemExit(f"hpcprov: error: not a wheelhouse key: {key!r}")
    with open(keyfile, "rb") as f:
        keytext = f.read()
    try:
        wfd = os.open(wh, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return 1
    where = os.path.join(wh, key)
    try:
        dfd = open_entry(wfd, key)
        if dfd is None:
            return 1
        tr = trust(extra)
        wheel, want = verify(dfd, tr, keytext)
        fd = open_file(dfd, wheel, tr, "its wheel " + wheel)
        copy = os.path.join(private_dir(dest), wheel)
        got = copy_hashed(fd, copy + ".part")
        if got != want:
            os.unlink(copy + ".part")
            raise Refused(f"its wheel's SHA-256 is {got}, but SHA256SUMS recorded {want}")
        os.rename(copy + ".part", copy)
    except (Refused, OSError) as exc:
        print(f"hpcprov: warning: wheelhouse entry {where} not used: {exc}",
              file=sys.stderr)
        return 2
    print(copy)
    return 0


def write_new(dfd, name, data=None, src_fd=None):
    """Create NAME in the folder dfd (never through a link), mode 0644; return its SHA-256."""
    chunks = [data] if src_fd is None else iter(lambda: os.read(src_fd, CHUNK), b"")
    return write_hashed(os.open(name, NEW_FILE, 0o600, dir_fd=dfd), chunks)


def existing(wfd, key, tr, keytext):
    """What is at WHEELHOUSE/KEY already: 'none', 'good', 'mine' (yours, not usable), or
    the reason it is someone else's and not usable."""
    try:
        dfd = open_entry(wfd, key)
    except Refused as exc:
        st = os.stat(key, dir_fd=wfd, follow_symlinks=False)
        return "mine" if st.st_uid == os.geteuid() else str(exc)
    if dfd is None:
        return "none"
    try:
        wheel, want = verify(dfd, tr, keytext)
        fd = open_file(dfd, wheel, tr, "its wheel")
        h = hashlib.sha256()
        with os.fdopen(fd, "rb") as f:
            for chunk in iter(lambda: f.read(CHUNK), b""):
                h.update(chunk)
        if h.hexdigest() != want:
            raise Refused("its wheel does not match SHA256SUMS")
        return "good"
    except Refused as exc:
        return "mine" if os.fstat(dfd).st_uid == os.geteuid() else str(exc)
    finally:
        os.close(dfd)


def put(wh, key, keyfile, wheel, extra):
    """Publish WHEEL under WHEELHOUSE/KEY (see the module's docstring)."""
    if not KEY.match(key):
        raise SystemExit(f"hpcprov: error: not a wheelhouse key: {key!r}")
    with open(keyfile, "rb") as f:
        keytext = f.read()
    where = os.path.join(wh, key)
    tmp = None
    try:
        src = os.open(wheel, os.O_RDONLY)
        os.makedirs(wh, mode=0o755, exist_ok=True)
        wfd = os.open(wh, os.O_RDONLY | os.O_DIRECTORY)
        tmp = os.path.basename(tempfile.mkdtemp(prefix=".tmp-" + key + "-", dir=wh))
        dfd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=wfd)
        mine = os.fstat(dfd)
        # the permission bits only: in a setgid wheelhouse (as sites are told to make it)
        # the new folder inherits the setgid bit, 02700
        if mine.st_uid != os.geteuid() or mine.st_mode & 0o777 != 0o700:
            raise OSError(f"the new folder {tmp} is not the one made")
        name = os.path.basename(wheel)
        sums = f"{write_new(dfd, name, src_fd=src)}  {name}\n"
        os.close(src)
        sums += f"{write_new(dfd, 'horovod-key.txt', keytext)}  horovod-key.txt\n"
        write_new(dfd, "SHA256SUMS", sums.encode())
        os.fchmod(dfd, 0o755)
        os.fsync(dfd)
    except OSError as exc:
        if tmp is not None:
            shutil.rmtree(os.path.join(wh, tmp), ignore_errors=True)
        print(f"hpcprov: warning: cannot write the wheelhouse {wh} ({exc}); not cached",
              file=sys.stderr)
        return 0
    return place(wh, wfd, tmp, dfd, key, trust(extra), keytext, where)


def place(wh, wfd, tmp, dfd, key, tr, keytext, where):
    """Rename the new folder to KEY; check that KEY is now that folder."""
    old = None
    there = existing(wfd, key, tr, keytext)
    if there == "good":
        shutil.rmtree(os.path.join(wh, tmp))
        print(f"hpcprov: the wheelhouse has a verified wheel for key {key} already")
        return 0
    if there not in ("none", "mine"):
        shutil.rmtree(os.path.join(wh, tmp))
        print(f"hpcprov: warning: not cached: {where} holds an entry that is not yours and is "
              f"not used ({there}): its owner or the wheelhouse's admin can remove it",
              file=sys.stderr)
        return 0
    try:
        if there == "mine":  # your own entry that does not verify (older hpcprov, broken)
            old = ".old-" + key + "-" + secrets.token_hex(8)
            os.rename(key, old, src_dir_fd=wfd, dst_dir_fd=wfd)
        os.rename(tmp, key, src_dir_fd=wfd, dst_dir_fd=wfd)
    except OSError as exc:
        shutil.rmtree(os.path.join(wh, tmp), ignore_errors=True)
        print(f"hpcprov: warning: not cached: cannot rename into {where} ({exc})",
              file=sys.stderr)
        return 0
    finally:
        if old is not None:
            shutil.rmtree(os.path.join(wh, old), ignore_errors=True)
    try:
        placed = open_entry(wfd, key)
    except Refused:
        placed = None
    if placed is None or os.fstat(placed).st_ino != os.fstat(dfd).st_ino:
        print(f"hpcprov: warning: not cached: {where} is not the folder written (something "
              "moved it)", file=sys.stderr)
        return 0
    print(f"hpcprov: cached in the wheelhouse: {where}")
    return 0


def main(argv):
    if len(argv) < 5 or argv[0] not in ("get", "put"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 3
    command, wh, key, keyfile, target = argv[:5]
    run = get if command == "get" else put
    return run(wh, key, keyfile, target, argv[5:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

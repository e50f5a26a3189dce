"""The cache of validated site profiles: commands skip YAML parsing and validation.

One JSON file per profile path under ``$XDG_CACHE_HOME/hpcprov/profiles/`` (default
``~/.cache/hpcprov/profiles/``), two lines: a header, then the validated site in its JSON
form (:func:`hpcprov.site.codec.dump`: dicts, lists and scalars, read back into the same
classes by :func:`hpcprov.site.codec.load`, so loading it needs no pydantic).
The header records the SHA-256 of every file the profile was built from (itself and what it
extends), how each ``extends`` was resolved on the search path, and hpcprov's code
fingerprint (:func:`fingerprint`: each source file's size and mtime, which the "already set
up" cache of :mod:`hpcprov.provision.quick` uses too). An entry is used only when all of
these are still the same and its values pass the model's single-line check again (value by
value unless the entry is printable ASCII with no escape: that holds no control character);
a changed, moved or shadowed file, another search path, other code, or an entry that is
corrupt, unreadable, not the user's own or in a folder that is not
(:mod:`hpcprov.core.fsutil`) is a miss, and the profile is read and validated as if there
were no cache. Writing is best effort (a read-only home
loses only the speed). ``HPCPROV_NO_CACHE=1`` turns the cache off.

This module imports neither PyYAML nor pydantic. The entry holds one form of the site, the
one every command reads: ``hpcprov sites`` and detection read it as a planning command
(``jobscript``, ``setup --dry-run``) does.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcprov.core import fsutil

if TYPE_CHECKING:
    from hpcprov.site.loader import Layer
    from hpcprov.site.types import Site

FORMAT = 5  # 5: the site as plain JSON (4 was tagged); 3 had a summary; 2 was binary
MAX_ENTRIES = 256
# printable ASCII less the backslash (JSON's escape)
_PLAIN_BYTES = bytes(range(0x20, 0x7F)).replace(b"\\", b"")


def enabled() -> bool:
    return os.environ.get("HPCPROV_NO_CACHE", "") in ("", "0")


@functools.cache
def fingerprint() -> str:
    """hpcprov's code fingerprint: each source file of the hpcprov and hpcprov.provision
    packages and their subpackages (with the Horovod patches) by its path, size and
    modification time, Python's version, and which pydantic is installed. Anything cached
    from a run of other code is not used.

    The files are compared as Python compares a module with its bytecode cache (size and
    mtime, not content): code that Python would run anew is code this cache does not trust,
    and no file is read (reading and hashing them all cost every warm start about 2 ms)."""
    provision = find_spec("hpcprov.provision")
    assert provision is not None and provision.submodule_search_locations
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # hpcprov/
    code = code_state(package, provision.submodule_search_locations[0])
    h = hashlib.sha256(f"{FORMAT}|{sys.version}|{code}".encode())
    for dist in ("pydantic", "pydantic_core"):
        spec = find_spec(dist)
        origin = spec.origin if spec else None
        st = os.stat(origin) if origin else None
        h.update(f"|{dist}:{origin}:{st and st.st_mtime_ns}:{st and st.st_size}".encode())
    return h.hexdigest()


def code_state(*roots: str) -> str:
    """Each source file under ``roots`` (:func:`_sources`) by its path, size and mtime."""
    seen: set[str] = set()
    out = []
    for root in roots:
        for name in _sources(root):
            path = os.path.join(root, name)
            if path not in seen:  # in a wheel, provision/ lies inside hpcprov/
                seen.add(path)
                st = os.stat(path)
                out.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return "\0".join(out)


def _sources(root: str) -> list[str]:
    """The source files under ``root`` (``*.py`` at any depth, ``patches/*.patch``), as
    sorted paths relative to it."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(folder, root)
        for name in files:
            if name.endswith(".py") or (name.endswith(".patch")
                                        and os.path.basename(folder) == "patches"):
                found.append(name if rel == "." else f"{rel}/{name}")
    return sorted(found)


def _entry(path: Path) -> Path:
    key = hashlib.sha256(f"{fingerprint()}|{os.path.abspath(path)}".encode()).hexdigest()
    return fsutil.cache_dir("profiles") / f"{key[:32]}.json"


def _sha256(file: str) -> str:
    """The digest of a file an entry was built from, read as the loader reads profiles (a
    FIFO or device put in its place is refused, never waited on: the entry is a miss)."""
    from hpcprov.site.loader import MAX_BYTES

    return hashlib.sha256(fsutil.read_regular(Path(file), MAX_BYTES)).hexdigest()


def _current(head: dict[str, Any], path: Path) -> bool:
    """True when the entry is for ``path``, made by this code, and every file and `extends`
    link it was built from is unchanged (each link still resolves to the same parent on
    today's search path: not shadowed, not resolved elsewhere)."""
    from hpcprov.site.loader import find_profile

    if head.get("format") != FORMAT or head.get("fingerprint") != fingerprint() \
            or head.get("path") != os.path.abspath(path):
        return False
    if any(_sha256(file) != digest for file, digest in head["files"].items()):
        return False
    for child, ref, parent in head["links"]:
        found = find_profile(ref, relative_to=Path(child), skip=Path(child))
        if os.path.abspath(found) != parent:
            return False
    return True


def _read(path: Path) -> tuple[dict[str, Any], bytes] | None:
    """(header, the site's JSON) of a current entry, else None. Never raises."""
    if not enabled() or not fsutil.trusted_dir(fsutil.cache_dir("profiles")):
        return None
    data = fsutil.read_owned(_entry(path))
    if data is None:
        return None
    try:
        end = data.index(b"\n")
        head = json.loads(data[:end])
        if type(head) is not dict or not _current(head, path):
            return None
        return head, data[end + 1:]
    except Exception:
        return None


def load(path: Path) -> Site | None:
    """The validated site of a current entry, else None (also when a value fails the
    model's single-line check: an entry is never trusted further than the model)."""
    found = _read(path)
    if found is None:
        return None
    from hpcprov.site.codec import load as decode
    from hpcprov.site.types import Site

    body = found[1]
    try:
        # json.dumps escapes every control character (and all that is not ASCII): JSON that
        # is printable ASCII with no backslash holds none, in any string of the site
        plain = body.translate(None, _PLAIN_BYTES) in (b"", b"\n")
        site: Site = decode(Site, json.loads(body), plain=plain)
        return site
    except Exception:
        return None


def store(path: Path, layer: Layer, site: Site) -> None:
    """Record a validated site (best effort: errors are ignored)."""
    if not enabled():
        return
    from hpcprov.site.codec import dump

    try:
        files = {os.path.abspath(f): d for f, d in layer.digests.items()}
        head = {
            "format": FORMAT, "fingerprint": fingerprint(), "path": os.path.abspath(path),
            "files": files,
            "links": [[os.path.abspath(c), ref, os.path.abspath(p)] for c, ref, p in layer.links],
        }
        if set(files) != {os.path.abspath(f) for f in layer.files}:
            return  # a layer not read by read_yaml (no digests): nothing to check it by
        folder = fsutil.cache_dir("profiles")
        if not fsutil.trusted_dir(folder, create=True):
            return
        text = json.dumps(head) + "\n" + json.dumps(dump(site), separators=(",", ":"))
        fsutil.atomic_write(_entry(path), text + "\n")
        _prune(folder)
    except Exception:
        return


def _prune(folder: Path) -> None:
    """Keep the newest MAX_ENTRIES entries; remove those of format 2 (``*.entry``)."""
    for old in folder.glob("*.entry"):
        old.unlink(missing_ok=True)
    entries = list(folder.glob("*.json"))
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda p: p.stat().st_mtime)
    for old in entries[: len(entries) - MAX_ENTRIES]:
        old.unlink(missing_ok=True)

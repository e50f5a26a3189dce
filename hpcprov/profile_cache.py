"""A cache of validated site profiles: commands skip YAML parsing and validation.

One file per profile path under ``$XDG_CACHE_HOME/hpcprov/profiles/`` (default
``~/.cache/hpcprov/profiles/``): a JSON header line, then the pickled
snapshot of the validated site (:mod:`hpcprov.site_view`: plain objects, so loading it
needs no pydantic). The header records the SHA-256 of every file the profile was
built from (itself and what it extends), how each ``extends`` was resolved on the search
path, and a fingerprint of the code that validated it (hpcprov's version and model/loader
source, pydantic, Python). An entry is used only when all of these are still the same; a
changed, moved or shadowed file, another search path, other code, or an entry that is
corrupt, unreadable or not the user's own is a miss, and the profile is read and validated
as if there were no cache. Writing is best effort (a read-only home loses only the speed).
``HPCPROV_NO_CACHE=1`` turns the cache off (and the snapshots shipped for the bundled
profiles, :mod:`hpcprov.shipped`, which answer a first run before this cache has an entry).

This module imports neither PyYAML nor pydantic: ``hpcprov sites`` answers from the
headers alone, and a planning command (``jobscript``, ``setup --dry-run``) from the snapshot.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpcprov.loader import Layer
    from hpcprov.model import Site
    from hpcprov.site_view import SiteView

FORMAT = 2  # 2: a snapshot (hpcprov.site_view), no longer the pickled model
MAX_ENTRIES = 256
_CODE = ("__init__.py", "model.py", "kinds.py", "site_view.py", "loader.py", "profiles.py",
         "errors.py", "profile_cache.py", "shipped.py")


def enabled() -> bool:
    return os.environ.get("HPCPROV_NO_CACHE", "") in ("", "0")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hpcprov" / "profiles"


@functools.cache
def fingerprint() -> str:
    """What validated an entry: hpcprov's model and loader code, pydantic, Python."""
    from importlib.util import find_spec

    h = hashlib.sha256(f"{FORMAT}|{sys.version}".encode())
    here = Path(__file__).parent
    for name in _CODE:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    for dist in ("pydantic", "pydantic_core"):
        spec = find_spec(dist)
        origin = spec.origin if spec else None
        st = os.stat(origin) if origin else None
        h.update(f"|{dist}:{origin}:{st and st.st_mtime_ns}:{st and st.st_size}".encode())
    return h.hexdigest()


def _entry(path: Path) -> Path:
    key = hashlib.sha256(f"{fingerprint()}|{os.path.abspath(path)}".encode()).hexdigest()
    return cache_dir() / f"{key[:32]}.entry"


def _sha256(file: str) -> str:
    with open(file, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def unchanged(files: dict[str, str], links: list[list[str]]) -> bool:
    """True when every file (absolute path -> SHA-256) still has its digest and every
    `extends` link (child, ref, parent, absolute paths) still resolves to the same parent
    on today's search path (not shadowed, not resolved elsewhere)."""
    from hpcprov.loader import find_profile

    for file, digest in files.items():
        if _sha256(file) != digest:
            return False
    for child, ref, parent in links:
        found = find_profile(ref, relative_to=Path(child), skip=Path(child))
        if os.path.abspath(found) != parent:
            return False
    return True


def _current(head: dict[str, Any], path: Path) -> bool:
    """True when every file and `extends` link the entry was built from is unchanged."""
    if head.get("format") != FORMAT or head.get("fingerprint") != fingerprint() \
            or head.get("path") != os.path.abspath(path):
        return False
    return unchanged(head["files"], head["links"])


def _read(path: Path) -> tuple[dict[str, Any], bytes] | None:
    """(header, pickled site) of a current entry, else None. Never raises."""
    if not enabled():
        return None
    try:
        with open(_entry(path), "rb") as fh:
            st = os.fstat(fh.fileno())
            if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o022):
                return None  # written by someone else: not trusted
            data = fh.read()
        end = data.index(b"\n")
        head = json.loads(data[:end])
        if not isinstance(head, dict) or not _current(head, path):
            return None
        return head, data[end + 1:]
    except Exception:  # noqa: BLE001 - a missing, corrupt or stale entry is just a miss
        return None


def header(path: Path) -> dict[str, Any] | None:
    """The summary of a current entry (scheduler, partitions, description, login_hosts)."""
    found = _read(path)
    return found[0] if found else None


def load(path: Path) -> SiteView | None:
    """The snapshot of the validated site of a current entry, else None."""
    found = _read(path)
    if found is None:
        return None
    import pickle

    from hpcprov.site_view import SiteView

    try:
        site = pickle.loads(found[1])
    except Exception:  # noqa: BLE001 - a corrupt entry is a miss
        return None
    return site if type(site) is SiteView else None


def store(path: Path, layer: Layer, site: Site) -> None:
    """Record a validated site (best effort: errors are ignored)."""
    if not enabled():
        return
    import pickle

    try:
        head = {
            "format": FORMAT, "fingerprint": fingerprint(), "path": os.path.abspath(path),
            "files": {os.path.abspath(f): d for f, d in layer.digests.items()},
            "links": [[os.path.abspath(c), ref, os.path.abspath(p)] for c, ref, p in layer.links],
            "summary": {"scheduler": site.scheduler.value, "partitions": len(site.partitions),
                        "description": site.description},
            "login_hosts": layer.data.get("login_hosts"),
        }
        if set(head["files"]) != {os.path.abspath(f) for f in layer.files}:
            return  # a layer not read by read_yaml (no digests): nothing to check it by
        from hpcprov.site_view import snapshot

        blob = json.dumps(head).encode() + b"\n" + pickle.dumps(snapshot(site), protocol=5)
        target = _entry(path)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, target)
        _prune(target.parent)
    except Exception:  # noqa: BLE001 - unwritable or full: the cache is only an accelerator
        return


def _prune(folder: Path) -> None:
    """Keep the newest MAX_ENTRIES entries."""
    entries = list(folder.glob("*.entry"))
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda p: p.stat().st_mtime)
    for old in entries[: len(entries) - MAX_ENTRIES]:
        old.unlink(missing_ok=True)

"""The fast answer to "is this already set up?", without building the site model.

A finished setup records its request (profile text after `extends`, command-line options,
hpcprov's own source, the environment variables the paths use) under a key in
~/.cache/hpcprov/ready/. The same request later finds the prefix there; when its manifest is
present and its journal has every step done, `hpcprov setup` can say "nothing to do" after
reading a few small files (no pydantic, no plan): well under a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
ALWAYS = ("HOME", "USER", "HPCPROV_WHEELHOUSE")


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hpcprov" / "ready"


def _source_digest() -> bytes:
    """hpcprov's own code and patches: a new version may plan differently."""
    import hpcprov.provision

    import hpcprov

    h = hashlib.sha256()
    for root in (Path(hpcprov.__file__).parent, Path(hpcprov.provision.__file__).parent):
        for path in sorted([*root.glob("*.py"), *root.glob("patches/*.patch")]):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.digest()


def request_key(site_ref: str, options: dict[str, object]) -> str | None:
    """The key of a setup request, or None when the profile cannot be read cheaply."""
    from hpcprov.loader import find_profile, resolve

    try:
        path = find_profile(site_ref)
        layer = resolve(path)
    except Exception:  # noqa: BLE001 - the slow path reports profile errors properly
        return None
    data = json.dumps([str(path), layer.data, options], sort_keys=True, default=str)
    names = set(_VAR.findall(json.dumps(layer.data.get("paths", {}), default=str)))
    h = hashlib.sha256(_source_digest() + data.encode())
    for name in sorted(names.union(ALWAYS)):
        h.update(f"{name}={os.environ.get(name, '')}\0".encode())
    return h.hexdigest()[:32]


def ready_prefix(key: str) -> Path | None:
    """The prefix this request finished in, if it is still complete."""
    try:
        prefix = Path((_cache_dir() / key).read_text(encoding="utf-8").strip())
        state = prefix / ".hpcprov"
        if not (state / "manifest.json").is_file():
            return None
        steps = json.loads((state / "journal.json").read_text(encoding="utf-8"))["steps"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not steps or any(rec.get("status") != "done" for rec in steps.values()):
        return None
    return prefix


def remember(key: str, prefix: Path) -> None:
    """Record a finished request (best effort: a read-only home only loses the fast path)."""
    try:
        folder = _cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.tmp"
        tmp.write_text(str(prefix) + "\n", encoding="utf-8")
        os.replace(tmp, folder / key)
    except OSError:
        pass

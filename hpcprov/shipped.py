"""Snapshots of the bundled profiles, shipped in the package: a first run needs no pydantic.

``sites/snapshots.json`` holds, for every bundled profile, the validated site as a tagged
JSON encoding of its :mod:`hpcprov.site_view` snapshot, the SHA-256 of every file it was
built from, how each ``extends`` was resolved, and a hash of the model code that validated
it. :func:`lookup` answers with it only while all of that is still true here (the profile is
the bundled file itself, not shadowed, unchanged, extending the same bundled files, and the
code is the same); anything else, ``HPCPROV_NO_CACHE=1`` included, is a miss and the
profile is read and validated as usual. After editing a bundled profile or the model, run
``python -m hpcprov.shipped`` (a test checks the committed file is current).

This module imports neither PyYAML nor pydantic unless :func:`write` is called.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any

from hpcprov import kinds, loader, profile_cache
from hpcprov.site_view import SiteView, View

FORMAT = 1
FILE = "snapshots.json"
# the code a snapshot depends on: what validates a profile and what the snapshot is made of
CODE = ("model.py", "kinds.py", "site_view.py", "loader.py", "profiles.py", "shipped.py")
_TAGS = ("__view__", "__site__", "__enum__", "__tuple__", "__dict__")


# ------------------------------------------------------------------ the encoding


def encode(value: Any) -> Any:
    """A JSON-native form of a snapshot (or a part of one), tagged so :func:`decode` gives
    back the same types: views, enum members of :mod:`hpcprov.kinds`, tuples."""
    kind = type(value)
    if kind is SiteView or kind is View:
        tag = "__site__" if kind is SiteView else "__view__"
        return {tag: {name: encode(v) for name, v in value.__dict__.items()}}
    if isinstance(value, Enum):
        if getattr(kinds, kind.__name__, None) is not kind:
            raise TypeError(f"enum {kind.__qualname__} is not one of hpcprov.kinds")
        return {"__enum__": kind.__name__, "value": encode(value.value)}
    if kind is tuple:
        return {"__tuple__": [encode(v) for v in value]}
    if kind is list:
        return [encode(v) for v in value]
    if kind is dict:
        out = {}
        for key, v in value.items():
            if type(key) is not str:
                raise TypeError(f"dict key {key!r} is not a str")
            out[key] = encode(v)
        # a plain dict that could be read as a tag is wrapped
        return {"__dict__": out} if any(k.startswith("__") for k in out) else out
    if value is None or kind in (str, int, float, bool):
        return value
    raise TypeError(f"cannot encode a {kind.__qualname__} in a snapshot")


def _enum(name: Any, value: Any) -> Enum:
    cls = getattr(kinds, name, None) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, Enum) and cls.__module__ == kinds.__name__):
        raise ValueError(f"unknown enum class {name!r}")
    return cls(value)


def _fields(obj: Any) -> dict[str, Any]:
    if type(obj) is not dict:
        raise ValueError("a view's fields must be an object")
    return {name: _decode(v) for name, v in obj.items()}


def _decode(obj: Any) -> Any:
    kind = type(obj)
    if kind is list:
        return [_decode(v) for v in obj]
    if kind is dict:
        if not any(k.startswith("__") for k in obj):
            return {k: _decode(v) for k, v in obj.items()}
        if set(obj) == {"__enum__", "value"}:
            return _enum(obj["__enum__"], obj["value"])
        if len(obj) == 1:
            ((tag, inner),) = obj.items()
            if tag == "__site__":
                return SiteView(_fields(inner))
            if tag == "__view__":
                return View(_fields(inner))
            if tag == "__dict__" and type(inner) is dict:
                return {k: _decode(v) for k, v in inner.items()}
            if tag == "__tuple__" and type(inner) is list:
                return tuple(_decode(v) for v in inner)
        raise ValueError(f"unknown tag in {sorted(obj)!r}")
    if obj is None or kind in (str, int, float, bool):
        return obj
    raise ValueError(f"cannot decode a {kind.__qualname__}")


def decode(obj: Any) -> SiteView:
    """The snapshot :func:`encode` was given (ValueError/TypeError for anything else)."""
    site = _decode(obj)
    if type(site) is not SiteView:
        raise ValueError("not an encoded site")
    return site


# ------------------------------------------------------------------ reading


@functools.cache
def code_hash() -> str:
    """SHA-256 over the source of the modules in CODE (as this process runs them)."""
    h = hashlib.sha256(f"{FORMAT}".encode())
    here = Path(__file__).parent
    for name in CODE:
        h.update(b"\0" + name.encode() + b"\0" + (here / name).read_bytes())
    return h.hexdigest()


def snapshots_file() -> Path:
    """Where the shipped snapshots are read from (and written to by default)."""
    return loader.bundled_site_dir() / FILE


@functools.cache
def _load(file: str) -> dict[str, Any] | None:
    """The parsed snapshots file, read once per process; None when missing or corrupt."""
    try:
        with open(file, encoding="utf-8") as fh:
            doc = json.load(fh)
    except Exception:  # noqa: BLE001 - missing or corrupt: no snapshots
        return None
    if type(doc) is not dict or doc.get("format") != FORMAT or type(doc.get("sites")) is not dict:
        return None
    return doc


def _entry(path: Path) -> dict[str, Any] | None:
    """The entry for the profile file ``path`` while it is current, else None."""
    if not profile_cache.enabled():
        return None
    bundled = loader.bundled_site_dir()
    if path.suffix != ".yaml" or \
            os.path.realpath(path.parent) != os.path.realpath(bundled):
        return None
    doc = _load(str(snapshots_file()))
    if doc is None or doc.get("code") != code_hash():
        return None
    entry = doc["sites"].get(path.stem)
    if type(entry) is not dict or path.name not in entry["files"]:
        return None
    def here(rel: str) -> str:
        return os.path.abspath(bundled / rel)

    files = {here(rel): digest for rel, digest in entry["files"].items()}
    links = [[here(child), ref, here(parent)] for child, ref, parent in entry["links"]]
    return entry if profile_cache.unchanged(files, links) else None


def header(path: Path) -> dict[str, Any] | None:
    """{"summary": ..., "login_hosts": ...} of a current entry (no decoding), else None."""
    try:
        entry = _entry(path)
        if entry is None:
            return None
        return {"summary": dict(entry["summary"]), "login_hosts": entry.get("login_hosts")}
    except Exception:  # noqa: BLE001 - anything unexpected is a miss
        return None


def lookup(path: Path) -> tuple[dict[str, Any], SiteView] | None:
    """(summary, snapshot) of the bundled profile ``path`` while its shipped snapshot is
    current, else None. Never raises."""
    try:
        entry = _entry(path)
        if entry is None:
            return None
        return dict(entry["summary"]), decode(entry["site"])
    except Exception:  # noqa: BLE001 - a damaged entry or an unknown tag is a miss
        return None


# ------------------------------------------------------------------ writing


@contextmanager
def _bundled_only() -> Iterator[None]:
    """The search path holding only the bundled profiles (no user directories)."""
    import tempfile

    saved = {k: os.environ.get(k) for k in ("HPCPROV_SITES_PATH", "XDG_CONFIG_HOME")}
    with tempfile.TemporaryDirectory() as empty:
        os.environ["HPCPROV_SITES_PATH"] = ""
        os.environ["XDG_CONFIG_HOME"] = empty
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _relative(file: str, bundled: Path) -> str | None:
    """``file``'s name when it lies directly in the bundled folder, else None."""
    if os.path.dirname(os.path.abspath(file)) != os.path.abspath(bundled):
        return None
    return os.path.basename(file)


def build() -> dict[str, Any]:
    """The snapshots document for the bundled profiles, validated now (no cache read)."""
    from hpcprov.profiles import validate_layer
    from hpcprov.site_view import snapshot

    bundled = loader.bundled_site_dir()
    sites: dict[str, Any] = {}
    with _bundled_only():
        for path in sorted(bundled.glob("*.yaml")):
            layer = loader.resolve(path)
            site = validate_layer(layer)
            files = {_relative(f, bundled): d for f, d in layer.digests.items()}
            links = [[_relative(c, bundled), ref, _relative(p, bundled)]
                     for c, ref, p in layer.links]
            if None in files or any(None in link for link in links) \
                    or set(files) != {os.path.basename(f) for f in layer.files}:
                continue  # built from something outside the bundled folder
            sites[path.stem] = {
                "files": dict(sorted(files.items())),
                "links": links,
                "login_hosts": layer.data.get("login_hosts"),
                "site": encode(snapshot(site)),
                "summary": {"description": site.description,
                            "partitions": len(site.partitions),
                            "scheduler": site.scheduler.value},
            }
    return {"code": code_hash(), "format": FORMAT, "sites": dict(sorted(sites.items()))}


def render(doc: dict[str, Any]) -> str:
    """The file's text. Deterministic: the document's own keys are inserted sorted; a
    snapshot keeps its order (field order and partition order are part of the site)."""
    return json.dumps(doc, indent=1) + "\n"


def write(target: Path | None = None) -> Path:
    """Regenerate the shipped snapshots (default: sites/snapshots.json)."""
    target = target or snapshots_file()
    text = render(build())
    target.write_text(text, encoding="utf-8")
    _load.cache_clear()
    return target


if __name__ == "__main__":
    written = write(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    doc = json.loads(written.read_text(encoding="utf-8"))
    print(f"{written}: {len(doc['sites'])} profiles ({', '.join(doc['sites'])})")

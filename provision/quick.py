"""The fast answer to "is this already set up?", without building the site model.

A finished setup records its request (profile text after `extends`, command-line options,
the environment variables the paths use, hpcprov's code fingerprint) under a key in
``~/.cache/hpcprov/ready/`` (``$XDG_CACHE_HOME``): a JSON file naming the prefix it made.
The same request later finds the prefix there; when its manifest is present and its journal
has every step done, `hpcprov setup` can say "nothing to do" after reading a few small files
(no pydantic, no plan): well under a second.

An entry is believed only when it and its folder are the user's own and writable by nobody
else (:mod:`hpcprov.core.fsutil`), it was written by this code for this key, and the prefix it
names is the one asked for (``--prefix A`` is never answered with another prefix).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import NamedTuple

from hpcprov.core import fsutil
from hpcprov.provision.journal import MAX_JOURNAL_BYTES
from hpcprov.site.cache import fingerprint

_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
ALWAYS = ("HOME", "USER", "HPCPROV_WHEELHOUSE")
FORMAT = 1


class Request(NamedTuple):
    """A setup request: its key, and the prefix asked for (None: the site's own)."""

    key: str
    prefix: str | None


def request_key(site_ref: str, options: dict[str, object]) -> Request | None:
    """The request of a setup (``options["prefix"]`` is the prefix asked for), or None when
    the profile cannot be read cheaply."""
    from hpcprov.site.loader import find_profile, resolve

    try:
        path = find_profile(site_ref)
        layer = resolve(path)
    except Exception:
        return None
    data = json.dumps([str(path), layer.data, options], sort_keys=True, default=str)
    names = set(_VAR.findall(json.dumps(layer.data.get("paths", {}), default=str)))
    h = hashlib.sha256(f"{fingerprint()}\0{data}".encode())
    for name in sorted(names.union(ALWAYS)):
        h.update(f"{name}={os.environ.get(name, '')}\0".encode())
    prefix = options.get("prefix")
    return Request(h.hexdigest()[:32], None if prefix is None else str(prefix))


def _entry(request: Request) -> Path:
    return fsutil.cache_dir("ready") / f"{request.key}.json"


def _asked(request: Request) -> str | None:
    """The prefix asked for, as a path here (None: the site's own, or not expandable)."""
    if request.prefix is None:
        return None
    expanded = os.path.expandvars(os.path.expanduser(request.prefix))
    return None if "$" in expanded else os.path.abspath(expanded)


def _recorded(request: Request) -> Path | None:
    """The prefix a trusted entry for this request names, else None."""
    if not fsutil.trusted_dir(fsutil.cache_dir("ready")):
        return None
    data = fsutil.read_owned(_entry(request))
    try:
        entry = json.loads(data) if data is not None else None
    except ValueError:
        return None
    if type(entry) is not dict or entry.get("format") != FORMAT \
            or entry.get("key") != request.key or entry.get("fingerprint") != fingerprint() \
            or entry.get("asked") != request.prefix or type(entry.get("prefix")) is not str:
        return None
    prefix = entry["prefix"]
    if request.prefix is not None and prefix != _asked(request):
        return None  # recorded for another prefix than the one asked for
    return Path(prefix)


def ready_prefix(request: Request) -> Path | None:
    """The prefix this request finished in, if it is still complete."""
    prefix = _recorded(request)
    if prefix is None:
        return None
    state = prefix / ".hpcprov"
    if fsutil.regular_file(state / "manifest.json") is not None:
        return None
    try:  # a regular file of a journal's size: a FIFO or /dev/zero there is not ready
        raw = fsutil.read_regular(state / "journal.json", MAX_JOURNAL_BYTES)
        steps = json.loads(raw.decode("utf-8"))["steps"]
        done = bool(steps) and all(rec.get("status") == "done" for rec in steps.values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return prefix if done else None


def remember(request: Request, prefix: Path) -> None:
    """Record a finished request (best effort: a read-only home only loses the fast path)."""
    folder = fsutil.cache_dir("ready")
    if not fsutil.trusted_dir(folder, create=True):
        return
    entry = {"format": FORMAT, "key": request.key, "fingerprint": fingerprint(),
             "asked": request.prefix, "prefix": str(prefix)}
    with contextlib.suppress(OSError):
        fsutil.atomic_write(_entry(request), json.dumps(entry) + "\n")

"""The manifest of a provisioned prefix: what was built, with what, and how long it took.

Written by the runner from the facts the `record` step gathered inside the environment and
from the journal, as PREFIX/.hpcprov/manifest.json. Its presence means "ready".
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hpcprov import __version__
from hpcprov.core import fsutil
from hpcprov.jobs.checkbuild import expected_check_build, parse_check_build
from hpcprov.jobs.layout import manifest_file
from hpcprov.provision.compat import for_site
from hpcprov.provision.journal import Journal

if TYPE_CHECKING:
    from hpcprov.site.model import Site

FRAMEWORK_DISTS = {"torch": ("torch",),
                   "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"),
                   "horovod": ("horovod",)}


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _kv(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def parse_freeze(text: str) -> dict[str, str]:
    """`pip freeze` lines -> {normalised name: version} (direct URLs and -e lines kept)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if "==" in line:
            name, version = line.split("==", 1)
        elif " @ " in line:  # installed from a file: the version is in the wheel's name
            name, url = line.split(" @ ", 1)
            wheel = re.search(r"/[^/]+?-([^-/]+)-[^/]*\.whl", url)
            version = wheel.group(1) if wheel else url
        else:
            continue
        out[name.strip().lower().replace("_", "-")] = version.strip()
    return out


def framework_versions(freeze: dict[str, str]) -> dict[str, str]:
    found = {}
    for key, names in FRAMEWORK_DISTS.items():
        for name in names:
            if name in freeze:
                found[key] = freeze[name]
                break
    return found


def build_manifest(site: Site, profile: str, prefix: Path, journal: Journal) -> dict[str, object]:
    state = prefix / ".hpcprov"
    facts = state / "facts"
    freeze_text = _read(facts / "pip-freeze.txt")
    freeze = parse_freeze(freeze_text)
    cb_text = _read(state / "check-build.txt")
    return {
        "hpcprov": __version__,
        "site": site.name,
        "profile": profile,
        "prefix": str(prefix),
        "backend": site.python.backend,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": _read(facts / "host.txt").strip(),
        "python": _read(facts / "python.txt").strip(),
        "activate": str(prefix / "activate"),
        "modules": {"build": site.modules.build.load, "runtime": site.modules.runtime.load,
                    "loaded": _read(facts / "modules.txt").split()},
        "versions": framework_versions(freeze),
        "pip_freeze": freeze_text.splitlines(),
        # a profile that installs no Horovod (horovod.source: none) expects nothing of -cb:
        # doctor then checks no Horovod import either
        "check_build": {"output": cb_text, "found": parse_check_build(cb_text),
                        "expected": expected_check_build(site.horovod)
                        if site.horovod.source != "none" else {}},
        "horovod_wheel": _kv(_read(state / "horovod-wheel.txt")),
        "horovod_key_inputs": _read(state / "horovod-key.txt").splitlines(),
        "compatibility": [{"rule": m.rule.id, "verdict": m.rule.verdict,
                           "message": m.message()} for m in for_site(site)],
        "steps": [{"id": k, "status": r.status, "seconds": round(r.seconds, 2),
                   "log": r.log} for k, r in journal.steps.items()],
        "site_profile": site.model_dump(mode="json"),
    }


def write_manifest(data: dict[str, object], prefix: Path) -> Path:
    path = manifest_file(prefix)
    fsutil.atomic_write(path, json.dumps(data, indent=2) + "\n", private=False)
    return path


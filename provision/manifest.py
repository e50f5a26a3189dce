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

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hpcprov import __version__
from hpcprov.core import fsutil
from hpcprov.core.errors import HpcprovError
from hpcprov.jobs.checkbuild import expected_check_build, parse_check_build
from hpcprov.jobs.layout import manifest_file
from hpcprov.provision.compat import for_site
from hpcprov.provision.journal import Journal
from hpcprov.site.gpu_vendors import DEFAULT_VENDOR, VENDORS, Vendor
from hpcprov.site.types import Gpus, Modules

if TYPE_CHECKING:
    from hpcprov.site.types import Site

FRAMEWORK_DISTS = {"torch": ("torch",),
                   "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"),
                   "horovod": ("horovod",)}


MAX_FACT_BYTES = 4 << 20  # a fact file (pip freeze of a large environment: far less)


def _read(path: Path) -> str:
    """A fact file the record step wrote; "" where there is none, as where it is not a
    regular file (a FIFO there is never waited on) or holds more than MAX_FACT_BYTES
    (/dev/zero): no fact hpcprov recorded."""
    try:
        return fsutil.read_regular(path, MAX_FACT_BYTES).decode("utf-8", errors="replace")
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


def build_manifest(site: Site, profile: str, prefix: Path,
                   journal: Journal) -> dict[str, object]:
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
        "site_profile": site.profile_data(),
        "container": _container_record(site, prefix),
    }


def _container_record(site: Site, prefix: Path) -> dict[str, str] | None:
    """Where a container site's jobs read the image setup prepared (none: a runtime's own
    store), its runtime and the module providing it, for doctor; None for another site."""
    from hpcprov.jobs.layout import Layout
    from hpcprov.site.image_refs import PULLED_SUFFIX, STORE_READERS, registry_reference

    spec = site.python.container
    if site.python.backend != "container" or spec is None:
        return None
    c = site.containers
    entry = c.images.get(spec.image)
    if c.runtime in STORE_READERS:
        image = ""
    elif entry is not None and not registry_reference(entry):
        image = entry
    else:
        image = str(Layout.of(site, str(prefix)).pulled_image(
            spec.image, PULLED_SUFFIX.get(c.runtime, ".sif")))
    return {"runtime": c.runtime or "singularity", "module": c.module or "", "image": image}


# ------------------------------------------------------------------ the typed read-back
#
# What doctor and setup read back of a manifest, typed: every field hpcprov wrote, with
# defaults where an older hpcprov wrote none; the recorded profile only as far as doctor
# needs it (its module system, Python stack and partitions' GPUs). Anything else is not
# read (extra keys are ignored), and a manifest that does not fit is one error naming the
# file and the fix.

MAX_MANIFEST_BYTES = 64 << 20  # pip freeze and -cb output of a large environment: far less


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class RecordedFramework(_Record):
    installer: str = "pip"
    module: str | None = None


class RecordedConda(_Record):
    module: str | None = None


class RecordedPython(_Record):
    backend: str = "venv"
    conda: RecordedConda = Field(default_factory=RecordedConda)
    frameworks: dict[str, RecordedFramework] = Field(default_factory=dict)


class RecordedPartition(_Record):
    gpus: Gpus = Field(default_factory=Gpus)  # the profile's own section, as it validates it


class RecordedProfile(_Record):
    """The parts of the site profile a manifest recorded that doctor reads."""

    modules: Modules | None = None  # validated as the profile's own section
    python: RecordedPython = Field(default_factory=RecordedPython)
    partitions: dict[str, RecordedPartition] = Field(default_factory=dict)


class RecordedModules(_Record):
    build: list[str] = Field(default_factory=list)
    runtime: list[str] = Field(default_factory=list)
    loaded: list[str] = Field(default_factory=list)


class RecordedCheckBuild(_Record):
    output: str = ""
    # as parse_check_build and expected_check_build give them: typed, so that a manifest
    # holding `frameworks: 5` is one line naming the field, not a traceback in doctor
    found: dict[str, list[str] | str | None] = Field(default_factory=dict)
    expected: dict[str, list[str]] = Field(default_factory=dict)


class RecordedStep(_Record):
    id: str
    status: str
    seconds: float = 0.0
    log: str = ""


class RecordedContainer(_Record):
    """A container site's image as setup left it (:func:`_container_record`)."""

    runtime: str = "singularity"
    module: str = ""
    image: str = ""  # the path the jobs read ("": the runtime's own store)


class Manifest(_Record):
    """A manifest as setup wrote it (:func:`build_manifest`), read back typed."""

    site: str
    profile: str = ""
    prefix: str = ""
    backend: str = "venv"
    created: str = "?"
    host: str = "?"
    python: str = ""
    activate: str = ""
    hpcprov: str = "?"
    modules: RecordedModules = Field(default_factory=RecordedModules)
    versions: dict[str, str] = Field(default_factory=dict)
    pip_freeze: list[str] = Field(default_factory=list)
    check_build: RecordedCheckBuild = Field(default_factory=RecordedCheckBuild)
    horovod_wheel: dict[str, str] = Field(default_factory=dict)
    horovod_key_inputs: list[str] = Field(default_factory=list)
    steps: list[RecordedStep] = Field(default_factory=list)
    site_profile: RecordedProfile = Field(default_factory=RecordedProfile)
    container: RecordedContainer | None = None  # a container site's image

    def gpus_of(self, partition: str) -> int:
        """GPUs a node of ``partition`` has, by the recorded profile (one message for a
        name it lacks, the same as a loaded site's)."""
        from hpcprov.site.checks import no_partition

        parts = self.site_profile.partitions
        if partition not in parts:
            raise no_partition(self.site, partition, parts)
        return parts[partition].gpus.count

    @property
    def gpu_vendor(self) -> Vendor:
        """The vendor of the recorded profile's GPUs (one per profile; the default without)."""
        parts = self.site_profile.partitions.values()
        return VENDORS[next((p.gpus.vendor for p in parts if p.gpus.count), DEFAULT_VENDOR)]


class ManifestError(HpcprovError):
    """A manifest hpcprov cannot read (the message names the file and the fix)."""


def parse_manifest(data: object, where: str = "manifest") -> Manifest:
    """Typed read-back of manifest JSON data; ManifestError (one line) when it does not fit."""
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        at = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise ManifestError(f"{where}: {at}: {err['msg']}: not a manifest hpcprov wrote; run "
                            "hpcprov setup --redo") from None


def read_manifest(prefix: Path) -> Manifest | None:
    """The manifest of a provisioned prefix, typed; None where there is none. A manifest
    that is not a regular file, too large, not JSON or not of the shape setup writes is a
    ManifestError naming the file and the fix (run setup --redo)."""
    path = manifest_file(prefix)
    if fsutil.regular_file(path) == "no such file":
        return None
    try:
        raw = fsutil.read_regular(path, MAX_MANIFEST_BYTES)
        data = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ManifestError(f"{path}: {why}: not a manifest hpcprov can read; run hpcprov "
                            "setup --redo") from None
    return parse_manifest(data, str(path))


def write_manifest(data: dict[str, object], prefix: Path) -> Path:
    path = manifest_file(prefix)
    fsutil.atomic_write(path, json.dumps(data, indent=2) + "\n", private=False)
    return path


"""Container image references: a registry reference (an image a runtime pulls from a
registry) against a path (a file or a directory the jobs read where it lies), each runtime's
spelling of a reference, and where the image of a profile's reference ends up.

A registry reference is written as any of the runtimes write one: with a scheme
(``docker://nvcr.io/nvidia/pytorch:24.01-py3``, ``oras://...``, ``library://...``), in
enroot's and pyxis's form (``docker://nvcr.io#nvidia/pytorch:24.01-py3`` or without the
scheme), Shifter's (``docker:nvcr.io/nvidia/pytorch:24.01-py3``) or as a bare name with a
tag or digest (``nvcr.io/nvidia/pytorch:24.01-py3``, ``debian:12``). Each runtime gets its
own spelling of the same image: Apptainer/Singularity ``docker://REGISTRY/IMAGE:TAG``, enroot
``docker://REGISTRY#IMAGE:TAG``, Shifter ``docker:REGISTRY/IMAGE:TAG``, podman-hpc the
qualified name ``REGISTRY/IMAGE:TAG`` (its ``run`` finds no image under a transport).

Where the jobs read such an image (``containers.images.NAME`` a reference): the runtimes
that read a file (singularity/apptainer: a SIF file; pyxis and edf: enroot's SquashFS file)
read the one setup pulled once into the prefix, ``PREFIX/images/NAME.sif`` (``.sqsh``),
not the reference (every rank, or every job, would pull it again); Shifter and podman-hpc
read the name setup pulled into their own store; Charliecloud runs directory images and
pulls none. :func:`image_problems` is the profile's side of these rules, each problem
located at its key (the model refuses them at their lines).

A text written as a registry reference (a scheme, Shifter's ``docker:``, a name with a tag)
is one exactly as written, or refused (:class:`BadReference`): setup pulls a reference as
one quoted word while a job's shell would expand a ``$VAR`` or a backquote in it, take
``*``, ``?`` or ``[`` as a pattern of file names in the job's folder, and a runtime's
command would read a part starting with ``-`` as an option. A Docker/OCI image must also be
one by its grammar: ``[REGISTRY[:PORT]/]NAME[:TAG][@DIGEST]``, or enroot's
``[USER@][REGISTRY#]NAME[:TAG]``, NAME in lowercase.

Pure and free of pydantic: the model, setup's plan and the jobs' image words read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hpcprov.core.errors import UsageError

# a name with a tag or digest and no path before it (nvcr.io/nvidia/pytorch:24.01-py3,
# localhost:5000/torch@sha256:..., debian:12), not a path
_NAME_WITH_TAG = r"[A-Za-z0-9][\w.-]*(:[0-9]+)?(/[\w.-]+)*(:\w[\w.-]*|@sha256:[0-9a-f]{64})"
# enroot's and pyxis's form: [USER@]REGISTRY#IMAGE[:TAG]
_ENROOT_FORM = (r"([\w.-]+@)?[A-Za-z0-9][\w.-]*(:[0-9]+)?#[\w.-]+(/[\w.-]+)*"
                r"(:\w[\w.-]*|@sha256:[0-9a-f]{64})?")
_SCHEME = r"(?s)([A-Za-z][A-Za-z0-9+.-]*)://(.*)"

# the grammar of a Docker/OCI image reference (the distribution project's reference
# grammar, ASCII only): a registry host[:port], path components in lowercase joined by
# '.', '_', '__' or dashes, a tag of at most 128 characters, a sha256 or sha512 digest
_HOST_PART = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_REGISTRY = rf"{_HOST_PART}(?:\.{_HOST_PART})*(?::[0-9]{{1,5}})?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}"
_IMAGE = rf"{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@(?:{_DIGEST}))?"
_USER = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"  # enroot's USER@ (the credentials' login)
DOCKER_GRAMMAR = ("[REGISTRY[:PORT]/]NAME[:TAG][@sha256:DIGEST] (enroot's form: "
                  "[USER@]REGISTRY#NAME[:TAG]), NAME of lowercase letters and digits in parts "
                  "joined by '/', '.', '_', '__' or '-', TAG at most 128 letters, digits, "
                  "'_', '.' and '-' (not first), DIGEST 64 lowercase hex digits")

# the schemes each tool pulls from (apptainer pull, singularity pull, enroot import)
APPTAINER_SCHEMES = ("docker", "oras", "library", "shub", "http", "https")
ENROOT_SCHEMES = ("docker", "dockerd", "podman")

# the runtimes jobs read a pulled file with, by the file's suffix
FILE_READERS = {"singularity": ".sif", "apptainer": ".sif", "pyxis": ".sqsh", "edf": ".sqsh"}
# the runtimes whose own store keeps the pulled image, under the name it was pulled as
STORE_READERS = ("shifter", "podman-hpc")
# containers.runtime (setup's tool) -> the suffix of the file it pulls (None: the default
# tool, singularity)
PULLED_SUFFIX = {None: ".sif", "singularity": ".sif", "apptainer": ".sif", "enroot": ".sqsh"}


@dataclass(frozen=True)
class Reference:
    """A parsed registry reference. A Docker/OCI image (scheme ``docker``, also written
    without one) has its registry (None: Docker Hub), its image (repository and tag or
    digest) and enroot's optional user; another scheme keeps what follows ``://``."""

    scheme: str
    rest: str = ""
    registry: str | None = None
    image: str = ""
    user: str | None = None

    @property
    def docker(self) -> bool:
        return self.scheme == "docker"


def _docker(text: str) -> Reference:
    user = None
    if "#" in text:
        head, _, image = text.partition("#")
        if "@" in head:
            user, _, head = head.partition("@")
        return Reference("docker", registry=head or None, image=image, user=user)
    first, _, remainder = text.partition("/")
    if remainder and ("." in first or ":" in first or first == "localhost"):
        return Reference("docker", registry=first, image=remainder)
    return Reference("docker", image=text)


class BadReference(UsageError, ValueError):
    """A text written as a registry reference that is none as written: the shell of a job
    would change it, a runtime's command would read part of it as an option, or it is no
    Docker/OCI image name. One line that names it, why, and what to write instead."""


def _shown(ref: str) -> str:
    """``ref`` for a message: quoted, escaped (repr) and bounded."""
    return repr(ref) if len(ref) <= 120 else repr(ref[:120]) + "..."


def _refusal(ref: str, body: str, docker: bool) -> str | None:
    """Why the registry reference ``ref`` (``body``: what follows its scheme) is refused,
    or None: characters a job's shell would change (every form), a part a command would
    take for an option, and a Docker/OCI image that is none by its grammar."""
    odd = next((c for c in ref if c.isspace() or not c.isprintable()), None)
    if odd is not None:
        return (f"it holds {odd!r} (whitespace or a control character), which no image "
                "name has: write the reference without it")
    odd = next((c for c in ref if c in "$`"), None)
    if odd is not None:
        return (f"it holds {odd!r}: a registry reference is pulled as written, while a "
                "job's shell would expand it: write the reference itself (no variable or "
                "command substitution)")
    odd = next((c for c in ref if c in "*?["), None)
    if odd is not None:
        return (f"it holds {odd!r}, which a job's shell would take as a pattern of file names "
                "in the job's folder: name one image exactly (its tag or digest)")
    parts = re.split(r"[/#@]", body) if docker else [body]
    if any(part.startswith("-") for part in parts):
        return ("a part of it starts with '-', which the runtime's command (enroot import, "
                "podman-hpc pull...) would read as an option: no registry, user or image "
                "name starts with '-'")
    if not body:
        return "it names no image after its scheme"
    if docker and not _docker_grammar(body):
        return f"it is no Docker/OCI image name: write {DOCKER_GRAMMAR}"
    return None


def _docker_grammar(body: str) -> bool:
    """Whether ``body`` (a Docker/OCI reference less its scheme) is one by its grammar."""
    if "#" in body:  # enroot's [USER@][REGISTRY#]IMAGE
        head, _, image = body.partition("#")
        user, at, host = head.rpartition("@")
        return bool((not at or re.fullmatch(_USER, user))
                    and (not host or re.fullmatch(_REGISTRY, host))
                    and re.fullmatch(_IMAGE, image))
    r = _docker(body)
    return bool((r.registry is None or re.fullmatch(_REGISTRY, r.registry))
                and re.fullmatch(_IMAGE, r.image))


def _checked(ref: str, body: str, docker: bool) -> str:
    why = _refusal(ref, body, docker)
    if why is not None:
        raise BadReference(f"image {_shown(ref)} is refused as a registry reference: {why}")
    return body


def parse(ref: str) -> Reference | None:
    """The reference ``ref`` names, or None where it is a path. A text written as a
    registry reference that is none as written raises :class:`BadReference`."""
    m = re.fullmatch(_SCHEME, ref)
    if m:
        scheme = m.group(1).lower()
        body = _checked(ref, m.group(2), scheme == "docker")
        return _docker(body) if scheme == "docker" else Reference(scheme, body)
    if ref.startswith("docker:") and len(ref) > len("docker:"):  # Shifter's IMAGETYPE:NAME
        return _docker(_checked(ref, ref[len("docker:"):], True))
    if re.fullmatch(_ENROOT_FORM, ref) or re.fullmatch(_NAME_WITH_TAG, ref):
        return _docker(_checked(ref, ref, True))
    return None


def registry_reference(ref: str) -> bool:
    """Whether an image ``ref`` names an image in a registry rather than a path."""
    return parse(ref) is not None


def relative_path(ref: str) -> bool:
    """Whether ``ref`` is a path relative to a working directory (not /..., $VAR/..., ~)."""
    return parse(ref) is None and not ref.startswith(("/", "$", "~"))


def _qualified(ref: Reference) -> str:
    """REGISTRY/IMAGE:TAG, Docker Hub's images named in full (docker.io/library/debian:12)."""
    if ref.registry:
        return f"{ref.registry}/{ref.image}"
    return "docker.io/" + ("" if "/" in ref.image else "library/") + ref.image


def spelled(ref: str, runtime: str | None) -> str | None:
    """``ref`` as ``runtime`` takes it (None: the default tool, singularity; enroot, pyxis
    and edf take enroot's form), or None where that runtime pulls no such reference."""
    r = parse(ref)
    if r is None:
        return None
    if runtime in (None, "singularity", "apptainer"):
        if r.docker:
            return "docker://" + (f"{r.registry}/" if r.registry else "") + r.image
        return f"{r.scheme}://{r.rest}" if r.scheme in APPTAINER_SCHEMES else None
    if runtime in ("enroot", "pyxis", "edf"):
        if r.docker:
            return ("docker://" + (f"{r.user}@" if r.user else "")
                    + (f"{r.registry}#" if r.registry else "") + r.image)
        return f"{r.scheme}://{r.rest}" if r.scheme in ENROOT_SCHEMES else None
    if runtime == "shifter":
        return "docker:" + (f"{r.registry}/" if r.registry else "") + r.image if r.docker \
            else None
    if runtime == "podman-hpc":
        return _qualified(r) if r.docker else None
    return None  # charliecloud: directory images, nothing pulled


def same_image(a: str, b: str) -> bool:
    """Whether two references name one image, however each is spelled."""
    ra, rb = parse(a), parse(b)
    if ra is None or rb is None:
        return a == b
    if ra.docker and rb.docker:
        return _qualified(ra) == _qualified(rb)
    return (ra.scheme, ra.rest) == (rb.scheme, rb.rest)


def job_runtime(site: Any, launcher: Any) -> str | None:
    """The runtime a launcher's ranks start in the image with (None: not in an image)."""
    if launcher.runtime:
        return str(launcher.runtime)
    kind = getattr(launcher.kind, "value", launcher.kind)
    return site.containers.runtime if kind == "container" else None


TOOL_FOR = {".sif": "singularity or apptainer", ".sqsh": "enroot"}
SETUP_RUNTIME = {"singularity": "apptainer", "apptainer": "apptainer", "pyxis": "enroot",
                 "edf": "enroot", "shifter": "shifter", "podman-hpc": "podman-hpc"}


def _pulls_for(setup_runtime: str | None, reader: str) -> bool:
    """Whether setup's tool (containers.runtime) puts an image where ``reader`` reads it."""
    if reader in FILE_READERS:
        return PULLED_SUFFIX.get(setup_runtime) == FILE_READERS[reader]
    return setup_runtime == reader


CHARLIECLOUD = ("Charliecloud runs directory images and setup pulls none: build or convert "
                "the image first (ch-image pull or build, then ch-convert IMAGE DIR) and name "
                "DIR in python.container.source and containers.images.{name}")

Problem = tuple[tuple[str, ...], str]


_APPTAINER_TAKES = "docker://, oras://, library://, shub://, http(s)://"
# containers.runtime -> setup's command pulling an image, and what it takes
PULLERS = {
    None: ("singularity pull", _APPTAINER_TAKES),
    "singularity": ("singularity pull", _APPTAINER_TAKES),
    "apptainer": ("apptainer pull", _APPTAINER_TAKES),
    "enroot": ("enroot import", "docker://[USER@][REGISTRY#]IMAGE[:TAG], dockerd://, podman://"),
    "shifter": ("shifterimg pull", "Docker registry images: docker:REGISTRY/IMAGE:TAG"),
    "podman-hpc": ("podman-hpc pull", "Docker registry images: REGISTRY/IMAGE:TAG"),
}


def _unpullable(ref: str, runtime: str | None) -> str:
    tool, takes = PULLERS.get(runtime, (f"{runtime}", "no registry reference"))
    return (f"{ref!r} is a registry reference {tool} cannot pull (it takes {takes}): name "
            "an image of a registry it pulls from, or set containers.runtime to a runtime that "
            "pulls this one")


def _source_problems(site: Any) -> list[Problem]:
    """What setup could not pull or put where the jobs read it, in a container setup."""
    spec, c = site.python.container, site.containers
    runtime = c.runtime
    key = ("containers", "images", spec.image)
    entry = c.images.get(spec.image)
    src = ("python", "container", "source")
    if runtime == "charliecloud":
        reason = ("is a registry reference, but " + CHARLIECLOUD.format(name=spec.image))
        return [(loc, f"{ref!r} {reason}") for loc, ref in ((src, spec.source), (key, entry))
                if ref is not None and registry_reference(ref)]
    out: list[Problem] = []
    if entry is not None and relative_path(entry):
        suffix = PULLED_SUFFIX.get(runtime)
        pulled = (f" (a registry reference there: setup pulls python.container.source into "
                  f"$PREFIX/images/{spec.image}{suffix}, which the jobs read)" if suffix else "")
        out.append((key, f"{entry!r} is a relative path: relative to which folder? setup "
                         "runs in one and every job in its own: write an absolute path (or "
                         f"one under a variable, $SCRATCH/...){pulled}"))
    if registry_reference(spec.source):
        if spelled(spec.source, runtime) is None:
            out.append((src, _unpullable(spec.source, runtime)))
        elif entry is not None and registry_reference(entry) \
                and not same_image(entry, spec.source):
            where = (f"into $PREFIX/images/{spec.image}{PULLED_SUFFIX[runtime]}, the file the "
                     "jobs read for it" if runtime in PULLED_SUFFIX else
                     f"into {runtime}'s store, and the jobs run containers.images."
                     f"{spec.image}")
            out.append((key, f"{entry!r} is another image than python.container.source "
                             f"{spec.source!r}, which setup pulls {where}: name one image in "
                             "both"))
    elif runtime in STORE_READERS:
        out.append((src, f"{spec.source!r} is a path, but {runtime} runs images from its own "
                         "store: name the registry reference setup pulls into it"))
    elif entry is not None and registry_reference(entry):
        out.append((key, f"{entry!r} is a registry reference, but python.container.source "
                         f"{spec.source!r} is a path, so setup pulls nothing: name the image "
                         f"file here too, or the registry reference in both"))
    if runtime in STORE_READERS and entry is not None and not registry_reference(entry) \
            and not relative_path(entry):
        out.append((key, f"{entry!r} is a path, but {runtime} runs images from its own "
                         "store: name the registry reference setup pulls into it (as in "
                         "python.container.source)"))
    return out


def _default_image_problems(site: Any) -> list[Problem]:
    """The site's default image, where it is a registry reference: each launcher that runs
    its ranks in it must read what setup pulls (containers.runtime's tool)."""
    c = site.containers
    name = c.default_image
    ref = c.images.get(name) if name else None
    if ref is None or not registry_reference(ref):
        return []
    key = ("containers", "images", name)
    for lname, launcher in site.launchers.items():
        reader = job_runtime(site, launcher)
        if reader is None or reader not in (*FILE_READERS, *STORE_READERS, "charliecloud"):
            continue
        if reader == "charliecloud":
            return [(key, f"{ref!r} is a registry reference, but launcher {lname} runs it "
                          "with " + CHARLIECLOUD.format(name=name))]
        if not _pulls_for(c.runtime, reader):
            what = (f"the {FILE_READERS[reader]} file setup pulls with "
                    f"{TOOL_FOR[FILE_READERS[reader]]} into $PREFIX/images/{name}"
                    f"{FILE_READERS[reader]}" if reader in FILE_READERS else
                    f"the image setup pulls into {reader}'s store")
            return [(key, f"{ref!r} is a registry reference: launcher {lname} runs it with "
                          f"{reader}, which reads {what}, but containers.runtime is "
                          f"{c.runtime or 'unset'}: set containers.runtime: "
                          f"{SETUP_RUNTIME[reader]}, or name an image file here")]
        if spelled(ref, reader) is None:
            return [(key, _unpullable(ref, c.runtime))]
    return []


def _refused_references(site: Any) -> list[Problem]:
    """Each image of the profile written as a registry reference that is none as written
    (:class:`BadReference`), at its key."""
    spec = site.python.container
    refs = [] if spec is None else [(("python", "container", "source"), spec.source)]
    refs += [(("containers", "images", name), ref)
             for name, ref in site.containers.images.items() if ref is not None]
    out: list[Problem] = []
    for loc, ref in refs:
        try:
            parse(ref)
        except BadReference as e:
            out.append((loc, str(e)))
    return out


def image_problems(site: Any) -> list[Problem]:
    """Each registry reference of the profile that setup could not pull, or not into the
    place the jobs read, and each relative image path setup would write: (the key's path,
    why). ``site``: the typed site (:class:`hpcprov.site.types.Site`). A reference that is
    none as written is refused first, alone (the rules below read what it names)."""
    refused = _refused_references(site)
    if refused:
        return refused
    out = _source_problems(site) if site.python.backend == "container" \
        and site.python.container is not None else []
    seen = {loc for loc, _ in out}
    return out + [p for p in _default_image_problems(site) if p[0] not in seen]

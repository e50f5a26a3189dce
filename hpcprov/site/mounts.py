"""What a container sees of the host: the profile's ``containers.mounts`` (``SRC[:DST[:OPTS]]``)
and the folders each runtime mounts by itself, and the container rules of a profile that
``site check`` holds it to.

Every runtime hpcprov starts ranks with takes the profile's mounts, each in its own
spelling (:mod:`hpcprov.jobs.launchers.images` writes them): Singularity/Apptainer ``-B
SRC[:DST[:OPTS]]``, podman-hpc ``-v SRC:DST[:OPTS]``, Shifter ``--volume=SRC:DST[;...]``,
Charliecloud ``--bind=SRC[:DST]``, pyxis ``--container-mounts=SRC[:DST],...``, an EDF
engine the file's ``mounts``. A folder of the host is seen in the container at its own path
where a mount's source is the folder or one above it and its destination is the same path,
or where the runtime mounts it by itself (:data:`RUNTIME_MOUNTS`, the runtimes' documented
defaults; a site's own configuration says otherwise in ``containers.runtime_mounts``).

Pure: the environment a ``$VAR`` is read from is an argument.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any

# runtime -> the host folders it mounts in every container at their own path by itself, as
# its documentation says of an unchanged installation: Singularity/Apptainer bind $HOME,
# /tmp and /var/tmp (and the working directory, which is the scheduler's choice for a job,
# so not counted); Charliecloud mounts the host's $TMPDIR (or /tmp) at /tmp and $HOME only
# with --home; enroot (pyxis, edf), Shifter and podman-hpc mount what their site's
# configuration says (none known here)
RUNTIME_MOUNTS: dict[str, tuple[str, ...]] = {
    "singularity": ("$HOME", "/tmp", "/var/tmp"),
    "apptainer": ("$HOME", "/tmp", "/var/tmp"),
    "charliecloud": (),
    "pyxis": (),
    "edf": (),
    "shifter": (),
    "podman-hpc": (),
}

Located = tuple[tuple[str | int, ...], str]  # (the key's path in the profile, why)

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def split_mount(mount: str) -> tuple[str, str, str]:
    """(source, destination, options) of ``SRC[:DST[:OPTS]]``; the destination is the
    source where none is given."""
    src, _, rest = mount.partition(":")
    dst, _, opts = rest.partition(":")
    return src, dst or src, opts


def with_destination(mount: str) -> str:
    """``SRC:DST[:OPTS]``: a mount written as ``SRC`` alone made ``SRC:SRC`` (podman and
    Shifter take no mount without its destination: podman would make an anonymous volume)."""
    src, dst, opts = split_mount(mount)
    return ":".join([src, dst, *([opts] if opts else [])])


def expanded(text: str, env: Mapping[str, str]) -> str | None:
    """``text`` with its ``$NAME``/``${NAME}`` (and a leading ``~``) read from ``env``, as a
    normal path; None where a variable is not set there."""
    missing = False

    def value(m: re.Match[str]) -> str:
        nonlocal missing
        name = m.group(1) or m.group(2)
        if name not in env:
            missing = True
            return ""
        return env[name]

    if text == "~" or text.startswith("~/"):
        text = "$HOME" + text[1:]
    out = _VAR.sub(value, text)
    if missing or not out.startswith("/"):
        return None
    return posixpath.normpath(out)


def _under(folder: str, top: str) -> bool:
    return folder == top or folder.startswith(top.rstrip("/") + "/")


def runtime_mounts(site: Any, runtime: str) -> tuple[str, ...]:
    """The folders ``runtime`` mounts by itself at this site: the profile's
    ``containers.runtime_mounts`` where it says them, else the runtime's defaults."""
    said = site.containers.runtime_mounts
    return tuple(said) if said is not None else RUNTIME_MOUNTS.get(runtime, ())


def unseen(site: Any, runtime: str, folder: str, env: Mapping[str, str],
           real: str | None = None) -> tuple[str, bool] | None:
    """Why the container of ``runtime`` does not see the host's ``folder`` (an absolute
    path; ``real``: the same with its links resolved) at its own path, and whether that is
    sure (False: a mount names a variable ``env`` lacks, which may hold the folder), or
    None where a mount (the profile's, or the runtime's own) is the folder or above it."""
    candidates = {posixpath.normpath(folder), *([posixpath.normpath(real)] if real else [])}
    own = runtime_mounts(site, runtime)
    unread: list[str] = []
    tops: list[str] = []
    for mount in [*site.containers.mounts, *own]:
        src, dst, _ = split_mount(mount)
        if dst != src:  # seen at another path: the jobs name the folder by its own
            continue
        top = expanded(src, env)
        if top is None:
            unread.append(src)
        else:
            tops.append(top)
    if any(_under(c, top) for c in candidates for top in tops):
        return None
    said = ("containers.runtime_mounts" if site.containers.runtime_mounts is not None
            else f"{runtime}'s own mounts")
    have = ", ".join(own) or "none"
    more = (f"; {', '.join(unread)} is not set here" if unread else "")
    return (f"{runtime} containers do not see {folder}: no containers.mounts entry is it or "
            f"a folder above it at the same path ({said}: {have}{more})", not unread)


def container_problems(site: Any) -> list[Located]:
    """The profile's container settings no job or setup could honour, each at its key:
    a container launcher with no runtime to start its ranks with, and
    ``python.container.add_horovod`` where setup cannot install into the image."""
    from hpcprov.site.image_refs import job_runtime

    out: list[Located] = []
    runtimes = ("singularity, apptainer, pyxis, edf, shifter, podman-hpc, charliecloud")
    for name, launcher in site.launchers.items():
        if getattr(launcher.kind, "value", launcher.kind) != "container":
            continue
        runtime = job_runtime(site, launcher)
        if runtime is None:
            out.append((("launchers", name), f"launcher {name} (container) has no runtime to "
                        "start its ranks in the image: set containers.runtime, or "
                        f"launchers.{name}.runtime ({runtimes})"))
        elif runtime == "enroot":
            out.append((("launchers", name), f"launcher {name} (container) would start its "
                        "ranks with containers.runtime enroot, setup's tool, which starts no "
                        f"ranks: set launchers.{name}.runtime: pyxis (srun --container-image) "
                        "or edf"))
    used = {site.containers.runtime, *(job_runtime(site, lr) for lr in site.launchers.values())}
    if "charliecloud" in used:  # ch-run --bind=SRC[:DST]: no options
        out += [(("containers", "mounts", i), f"{mount!r}: charliecloud's ch-run binds "
                 "SRC[:DST] and takes no mount options: drop the third part (the image's "
                 "folder is as writable as the host's)")
                for i, mount in enumerate(site.containers.mounts) if split_mount(mount)[2]]
    spec = site.python.container
    if spec is not None and spec.add_horovod and site.containers.runtime != "enroot":
        out.append((("python", "container", "add_horovod"),
                    "add_horovod: setup installs Horovod into the image only with "
                    "containers.runtime: enroot (enroot start --rw, then export); with "
                    f"{site.containers.runtime or 'singularity'} build an image that has "
                    "Horovod and name it in python.container.source, or set "
                    "containers.runtime: enroot"))
    return out


def host_python_launchers(site: Any) -> list[Located]:
    """``site check``'s warnings: each launcher that runs its ranks with the host's
    Python on a site whose Python lives only in the image (``python.backend: container``)."""
    from hpcprov.site.image_refs import job_runtime
    from hpcprov.site.launcher_kinds import kind_of

    if site.python.backend != "container":
        return []
    out: list[Located] = []
    for name, launcher in site.launchers.items():
        if job_runtime(site, launcher) is not None:
            continue
        kind = str(getattr(launcher.kind, "value", launcher.kind))
        fix = (f"set launchers.{name}.runtime (apptainer, singularity, shifter, podman-hpc, "
               "charliecloud) to start each rank in the image (where it starts a container "
               "launcher's tasks, it still does)"
               if "runtime" in kind_of(kind).keys else
               f"a {kind} launcher cannot start its ranks in the image: use a launcher of "
               "kind container, or remove this one")
        out.append((("launchers", name), f"launchers.{name} ({kind}) runs its ranks with the "
                    "host's python, but this site's Python and torch live only in the image "
                    f"(python.backend: container): {fix}"))
    return out

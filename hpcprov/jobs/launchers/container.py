"""The container launcher: srun starts each rank in the site's image, through the
runtime's command line (Singularity/Apptainer, pyxis, Shifter, podman-hpc)."""

from __future__ import annotations

from dataclasses import replace

from hpcprov.core.errors import UsageError
from hpcprov.core.shell import Template, join
from hpcprov.jobs.launchers.common import PY, Context, Launch, rank_command, srun_prefix
from hpcprov.request.job import JobRequest


def _image(req: JobRequest) -> str:
    containers = req.site.containers
    name = req.image or containers.default_image
    if not name:
        raise UsageError(
            f"site {req.site.name} has no default container image; pass --image NAME|PATH "
            f"(images: {', '.join(containers.images) or 'none'})"
        )
    return containers.images.get(name, name)


def unbuffered(req: JobRequest, command: tuple[object, ...]) -> tuple[object, ...]:
    """``python -u ...`` where the container launcher asks for unbuffered output."""
    out = list(command)
    if req.launch.unbuffered and out and PY.match(str(out[0])) and "-u" not in out[1:2]:
        out.insert(1, "-u")
    return tuple(out)


def build(req: JobRequest, context: Context) -> Launch:
    launcher, containers = req.launch, req.site.containers
    runtime = launcher.runtime or containers.runtime
    image = _image(req)
    req = replace(req, command=unbuffered(req, req.command))
    # each rank in the container starts through the rank contract (its wrapper included)
    command = list(rank_command(req, tuple(req.command)))
    if launcher.wrap_in_bash:
        command = list(rank_command(req, ("/bin/bash", "-c", join(req.command))))
    srun, setup = srun_prefix(req, context)
    srun = [*srun, *launcher.srun_args]
    # the host's Python must not reach into the container's (its packages, its home)
    setup = [*setup, "unset PYTHONPATH PYTHONHOME PYTHONUSERBASE VIRTUAL_ENV"]
    if runtime == "pyxis":
        argv = [*srun, Template(f"--container-image={image}")]
        if containers.mounts:
            argv.append(Template("--container-mounts=" + ",".join(containers.mounts)))
        argv.append("--no-container-entrypoint")
        if launcher.per_task_output:
            argv.append(f"--output={launcher.per_task_output}")
        argv += launcher.args
        return Launch([*argv, *command], setup)
    if runtime in ("singularity", "apptainer"):
        argv = [*srun, runtime, *(launcher.args or ["exec"])]
        if containers.gpu_flag and req.gpus > 0:
            argv.append(containers.gpu_flag)
        return Launch([*argv, Template(image), *command], setup)
    if runtime == "shifter":  # HPE/Cray sites (NERSC): the image is a shifterimg name
        return Launch([*srun, "shifter", Template(f"--image={image}"), *launcher.args,
                       *command], setup)
    if runtime == "podman-hpc":  # each rank a container: --gpu passes the node's GPUs in
        argv = [*srun, "podman-hpc", *(launcher.args or ["run", "--rm"])]
        if req.gpus > 0:
            argv.append(containers.gpu_flag or "--gpu")
        return Launch([*argv, Template(image), *command], setup)
    raise UsageError(f"launcher {req.launcher_name!r}: container runtime {runtime!r} is unknown")

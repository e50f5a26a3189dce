"""The container launcher: the job's task starter starts each rank in the site's image,
through the runtime's command line (Singularity/Apptainer, Shifter, podman-hpc,
Charliecloud's ch-run) or srun's own options (pyxis, an EDF-based engine). The task starter
is the scheduler's own (srun, flux run), else the site's MPI launcher (PBS: mpiexec or
mpirun; LSF: jsrun, lrun or an MPI): :mod:`hpcprov.jobs.launchers.tasks`."""

from __future__ import annotations

from dataclasses import replace

from hpcprov.core.errors import UsageError
from hpcprov.core.shell import Raw, Template, join
from hpcprov.jobs.launchers.common import PY, Context, Launch, rank_command, rank_shim_line
from hpcprov.jobs.launchers.images import (
    EDF_VAR,
    HOST_PYTHON_OUT,
    SRUN_RUNTIMES,
    edf_lines,
    image,
    image_word,
    runtime_words,
)
from hpcprov.jobs.launchers.tasks import srun_args, task_starter
from hpcprov.request.job import JobRequest


def unbuffered(req: JobRequest, command: tuple[str, ...]) -> tuple[str, ...]:
    """``python -u ...`` where the container launcher asks for unbuffered output."""
    out = list(command)
    if req.launch.unbuffered and out and PY.match(str(out[0])) and "-u" not in out[1:2]:
        out.insert(1, "-u")
    return tuple(out)


def build(req: JobRequest, context: Context) -> Launch:
    launcher, containers = req.launch, req.site.containers
    runtime = launcher.runtime or containers.runtime
    image(req)  # the launcher needs one: named now, before anything else
    req = replace(req, command=unbuffered(req, req.command))
    # each rank in the container starts through the rank contract (its wrapper included)
    command = list(rank_command(req, tuple(req.command)))
    if launcher.wrap_in_bash:
        command = list(rank_command(req, ("/bin/bash", "-c", join(req.command))))
    start = task_starter(req, context)
    srun = [*start.argv, *srun_args(req, start)]
    # the rank contract's shim, reading the variables of the starter of the job's tasks
    setup = [rank_shim_line(launcher.kind, start.starters), *start.setup]
    if runtime in SRUN_RUNTIMES and not start.srun:
        raise UsageError(f"launcher {req.launcher_name!r}: runtime {runtime} is an option of "
                         f"srun, and {start.name} starts this site's tasks: name a runtime "
                         "with a command line (apptainer, singularity, shifter, podman-hpc, "
                         "charliecloud)")
    # the host's Python must not reach into the container's (its packages, its home)
    setup = [*setup, HOST_PYTHON_OUT]
    if runtime == "pyxis":
        resolve, path = image_word(req, "--container-image=")
        setup = [*setup, *resolve]
        argv = [*srun, path]
        if containers.mounts:
            argv.append(Template("--container-mounts=" + ",".join(containers.mounts)))
        argv.append("--no-container-entrypoint")
        if launcher.per_task_output:
            argv.append(f"--output={launcher.per_task_output}")
        argv += launcher.args
        return Launch([*argv, *command], setup)
    if runtime == "edf":  # an EDF-based engine: the job writes its environment file
        argv = [*srun, Raw(f'--environment="${EDF_VAR}"'), *launcher.args]
        return Launch([*argv, *command], [*setup, *edf_lines(req)])
    resolve, words = runtime_words(req, str(runtime), list(launcher.args))
    return Launch([*srun, *words, *command], [*setup, *resolve])

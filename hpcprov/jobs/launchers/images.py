"""The site's image around a rank's command, for any launcher kind.

A launcher of the container kind (srun starting each rank in the image) or of another kind
with a ``runtime`` (mpiexec, mpirun, ibrun, jsrun or srun starting each rank through the
runtime's command line) runs its ranks in the site's image: Singularity/Apptainer
(``exec IMAGE``), Shifter (``--image=IMAGE``) or podman-hpc (``run --rm IMAGE``). pyxis and
an EDF-based engine are options of srun itself (``--container-image``, ``--environment``):
only the container kind says them. The host's Python variables stay out of the image.
"""

from __future__ import annotations

from hpcprov.core.errors import UsageError
from hpcprov.core.shell import Raw, Template, join
from hpcprov.request.job import JobRequest

# the host's Python must not reach into the image's (its packages, its home)
HOST_PYTHON_OUT = "unset PYTHONPATH PYTHONHOME PYTHONUSERBASE VIRTUAL_ENV"
# runtimes that are srun's own options, not a command line around the rank's
SRUN_RUNTIMES = frozenset({"pyxis", "edf"})


def image(req: JobRequest) -> str:
    """The image a job runs in: ``--image``, else the site's default (a name of
    ``containers.images`` becomes its path)."""
    containers = req.site.containers
    name = req.image or containers.default_image
    if not name:
        raise UsageError(
            f"site {req.site.name} has no default container image; pass --image NAME|PATH "
            f"(images: {', '.join(containers.images) or 'none'})"
        )
    return containers.images.get(name, name)


def runtime_words(req: JobRequest, runtime: str, verbs: list[str]) -> list[object]:
    """The words before a rank's command that start it in the image with ``runtime``
    (``verbs``: the runtime's own verb and flags, where the profile gives them)."""
    path, containers = image(req), req.site.containers
    gpu = [containers.gpu_flag] if containers.gpu_flag and req.gpus > 0 else []
    if runtime in ("singularity", "apptainer"):
        return [runtime, *(verbs or ["exec"]), *gpu, Template(path)]
    if runtime == "shifter":  # HPE/Cray sites (NERSC): the image is a shifterimg name
        return ["shifter", Template(f"--image={path}"), *verbs]
    if runtime == "podman-hpc":  # each rank a container: --gpu passes the node's GPUs in
        flag = [containers.gpu_flag or "--gpu"] if req.gpus > 0 else []
        return ["podman-hpc", *(verbs or ["run", "--rm"]), *flag, Template(path)]
    if runtime in SRUN_RUNTIMES:
        raise UsageError(f"launcher {req.launcher_name!r}: {runtime} is an option of srun: "
                         "say it on a launcher of kind container")
    raise UsageError(f"launcher {req.launcher_name!r}: container runtime {runtime!r} is unknown")


EDF_VAR = "hpcprov_edf"


def edf_lines(req: JobRequest) -> list[str]:
    """Lines writing the job's environment definition file (TOML: image, mounts, workdir,
    [env], [annotations] from the profile's containers section) for ``srun
    --environment="$hpcprov_edf"``. Paths are expanded by the job's shell ($SCRATCH) and
    written as TOML literal strings; keys are names the model checked, so each format string
    holds nothing the shell or printf would read."""
    c = req.site.containers
    rows: list[tuple[str, list[object]]] = [("image = '%s'", [Template(image(req))])]
    if c.mounts:
        rows.append(("mounts = [" + ", ".join(["'%s'"] * len(c.mounts)) + "]",
                     [Template(m) for m in c.mounts]))
    if c.workdir:
        rows.append(("workdir = '%s'", [Template(c.workdir)]))
    for table, values in (("env", c.env), ("annotations", c.annotations)):
        if values:
            rows.append((f"[{table}]", []))
            rows += [(f"{key} = '%s'", [value]) for key, value in values.items()]
    printed = [join(["printf", Raw(f'"{fmt}\\n"'), *args]) for fmt, args in rows]
    return [f'{EDF_VAR}="$PWD/.hpcprov-edf-${{SLURM_JOB_ID:-$$}}.toml"',
            "{", *(f"  {line}" for line in printed), f'}} > "${EDF_VAR}"']

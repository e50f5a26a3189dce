"""The site's image around a rank's command, for any launcher kind.

A launcher of the container kind (srun starting each rank in the image) or of another kind
with a ``runtime`` (mpiexec, mpirun, ibrun, jsrun, lrun or srun starting each rank through the
runtime's command line) runs its ranks in the site's image: Singularity/Apptainer
(``exec IMAGE``), Shifter (``--image=IMAGE``), podman-hpc (``run --rm IMAGE``) or
Charliecloud (``ch-run --bind=MOUNT --cd=DIR IMAGE --``, a directory image). pyxis and
an EDF-based engine are options of srun itself (``--container-image``, ``--environment``):
only the container kind says them. The host's Python variables stay out of the image.
"""

from __future__ import annotations

import re
from pathlib import Path

from hpcprov.core.errors import UsageError
from hpcprov.core.shell import Raw, Template, fragment, join, quote
from hpcprov.jobs.layout import Layout
from hpcprov.request.job import JobRequest
from hpcprov.site.image_refs import (
    CHARLIECLOUD,
    FILE_READERS,
    STORE_READERS,
    registry_reference,
    spelled,
)
from hpcprov.site.mounts import with_destination

# the host's Python must not reach into the image's (its packages, its home)
HOST_PYTHON_OUT = "unset PYTHONPATH PYTHONHOME PYTHONUSERBASE VIRTUAL_ENV"
# runtimes that are srun's own options, not a command line around the rank's
SRUN_RUNTIMES = frozenset({"pyxis", "edf"})
# the verbs of singularity/apptainer that run a command in an image (args naming none are
# flags of exec)
SINGULARITY_VERBS = frozenset({"exec", "run"})
# ch-run refuses to start without $USER, which a batch job may lack
CH_RUN_USER = 'export USER="${USER:-$(id -un)}"'
CH_RUN_CD = "hpcprov_cd"


def ch_run_cd_line(mounts: list[str]) -> str:
    """The line setting ``$hpcprov_cd``, where ch-run starts the rank: the job's directory
    as the image sees it, where a mount holds it (as Singularity keeps it), else the image's
    / (ch-run's own default: it fails on a directory the image lacks)."""
    arms = []
    for mount in mounts:
        src, _, dst = mount.partition(":")
        src, dst = quote(Template(src.rstrip("/"))), quote(Template((dst or src).rstrip("/")))
        arms.append(f'{src}/*) {CH_RUN_CD}={dst}"${{PWD#{src}}}" ;;')
    return f"{CH_RUN_CD}=/" + (f"; case $PWD/ in {' '.join(arms)} esac" if arms else "")


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


GLOB = re.compile(r"([*?])")
IMAGES_VAR = "hpcprov_images"


def job_image(req: JobRequest) -> tuple[str, list[str]]:
    """(the image the job's runtime reads, lines that stop the job where it is missing).
    An image of ``containers.images`` named by a registry reference is read where setup
    put it: singularity/apptainer, pyxis and edf read the file setup pulled into the
    prefix (``PREFIX/images/NAME.sif``, ``.sqsh``: enroot's), not the reference (every
    rank, or every job, would pull it again), and a job finding no file there stops at
    once, naming the setup that pulls it; Shifter and podman-hpc read the name setup
    pulled into their stores (spelled as setup spelled it). Charliecloud runs directory
    images: a reference is refused. A reference given with ``--image`` is used as written
    (each job pulls it)."""
    c = req.site.containers
    path = image(req)
    if not registry_reference(path):
        return path, []
    name = req.image or c.default_image or ""
    runtime = req.launch.runtime or c.runtime
    if runtime == "charliecloud":
        raise UsageError(f"image {path!r} is a registry reference, but "
                         + CHARLIECLOUD.format(name=name if name in c.images else "NAME"))
    if runtime in STORE_READERS:
        return spelled(path, runtime) or path, []
    if runtime not in FILE_READERS or name not in c.images:
        return path, []
    pulled = Layout.of(req.site, req.prefix).pulled_image(name, FILE_READERS[runtime])
    spec = req.site.python.container
    own = req.site.python.backend == "container" and spec is not None and spec.image == name
    setup = ["hpcprov", "setup", "--site", req.site.name, *([] if own else ["--container", name]),
             *(["--prefix", req.prefix] if req.prefix else [])]
    why = join(["echo", f"hpcprov: no image at {pulled}: containers.images.{name} is the "
                f"registry reference {path}, which setup pulls there once and the jobs read "
                f"({' '.join(setup)})"])
    return pulled, [f"[ -r {quote(Template(pulled))} ] || {{ {why} >&2; exit 1; }}"]


def image_word(req: JobRequest, prefix: str = "") -> tuple[list[str], str]:
    """(setup lines, shell word) of the job's image, after ``prefix`` (``--image=``). A path
    with ``*`` or ``?`` is a glob the job's shell resolves when it runs (the last match in
    name order: the newest of versioned names); none matching stops the job, naming it. A
    registry reference is read where setup put it (:func:`job_image`)."""
    path, check = job_image(req)
    setup, word = resolved_image(path)
    if not setup:
        return check, Template(prefix + path)
    return setup, Raw(f"{quote(prefix)}{word}" if prefix else word)


def resolved_image(path: str) -> tuple[list[str], str]:
    """(lines, shell word) of an image path: none and the quoted path, or, for a glob,
    the lines resolving it (the last match by name; none matching stops, naming it) and
    the word of that match."""
    if not GLOB.search(path):
        return [], quote(Template(path))
    word = "".join(piece if piece in ("*", "?") else quote(Template(piece))
                   for piece in GLOB.split(path) if piece)
    last = f"${{{IMAGES_VAR}[-1]}}"
    why = join(["echo", f"hpcprov: no container image matches {path}"])
    return [f"{IMAGES_VAR}=({word})", f'[ -e "{last}" ] || {{ {why} >&2; exit 1; }}'], \
        f'"{last}"'


def runtime_words(req: JobRequest, runtime: str, verbs: list[str]
                  ) -> tuple[list[str], list[str]]:
    """(setup lines, words) before a rank's command that start it in the image with
    ``runtime`` (``verbs``: the runtime's own verb and flags, where the profile gives
    them)."""
    containers = req.site.containers
    gpu = [containers.gpu_flag] if containers.gpu_flag and req.gpus > 0 else []
    mounts = containers.mounts
    if runtime in ("singularity", "apptainer"):
        setup, path = image_word(req)
        # args without a verb are flags of exec (the default verb), kept
        verb = [] if set(verbs) & SINGULARITY_VERBS else ["exec"]
        binds = [word for mount in mounts for word in ("-B", Template(mount))]
        return setup, [runtime, *verb, *verbs, *binds, *gpu, path]
    if runtime == "shifter":  # HPE/Cray sites (NERSC): the image is a shifterimg name
        setup, path = image_word(req, "--image=")
        # one --volume: SRC:DST[:FLAGS] joined by ';' (each with its destination)
        volume = [Template("--volume=" + ";".join(with_destination(m) for m in mounts))] \
            if mounts else []
        return setup, ["shifter", path, *volume, *verbs]
    if runtime == "podman-hpc":  # each rank a container: --gpu passes the node's GPUs in
        flag = [containers.gpu_flag or "--gpu"] if req.gpus > 0 else []
        setup, path = image_word(req)
        # args are flags of run --rm unless they say the verb themselves
        verb = [] if "run" in verbs else ["run", "--rm"]
        volumes = [word for m in mounts for word in ("-v", Template(with_destination(m)))]
        return setup, ["podman-hpc", *verb, *verbs, *volumes, *flag, path]
    if runtime == "charliecloud":  # a directory image; ch-run passes the environment on
        setup, path = image_word(req)
        # ch-run binds containers.mounts (SRC[:DST], onto directories the image has)
        binds = [Template(f"--bind={mount}") for mount in containers.mounts]
        return [CH_RUN_USER, ch_run_cd_line(containers.mounts), *setup], \
            ["ch-run", *verbs, *binds, Raw(f'--cd="${CH_RUN_CD}"'), path, "--"]
    if runtime in SRUN_RUNTIMES:
        raise UsageError(f"launcher {req.launcher_name!r}: {runtime} is an option of srun: "
                         "say it on a launcher of kind container")
    raise UsageError(f"launcher {req.launcher_name!r}: container runtime {runtime!r} is unknown")


EDF_VAR = "hpcprov_edf"
EDF_WRITER = Path(__file__).parent.with_name("edf.sh")  # hpcprov_toml, the new file


def edf_lines(req: JobRequest) -> list[str]:
    """Lines writing the job's environment definition file (TOML: image, mounts, workdir,
    [env], [annotations] from the profile's containers section) for ``srun
    --environment="$hpcprov_edf"``. The file is new (``mktemp``: mode 0600, a random name,
    so a link planted in the job's folder is never followed) in a folder only the user may
    write (refused in one line otherwise); values are expanded by the job's shell
    ($SCRATCH, an image glob's match) and then written as TOML basic strings, escaped
    whatever they hold (edf.sh's ``hpcprov_toml``), so no value can add a line or a key;
    keys are names the model checked, written by hpcprov's own format strings."""
    c = req.site.containers
    resolve, path = image_word(req)
    rows: list[tuple[str, list[str]]] = [("image = %s", [path])]
    if c.mounts:
        rows.append(("mounts = [" + ", ".join(["%s"] * len(c.mounts)) + "]",
                     [Template(with_destination(m)) for m in c.mounts]))
    if c.workdir:
        rows.append(("workdir = %s", [Template(c.workdir)]))
    for table, values in (("env", c.env), ("annotations", c.annotations)):
        if values:
            rows.append((f"[{table}]", []))
            rows += [(f"{key} = %s", [value]) for key, value in values.items()]
    printed = [join(["hpcprov_edf_row", fmt, *args]) for fmt, args in rows]
    return [*resolve, *fragment(EDF_WRITER),
            "{", *(f"  {line}" for line in printed), f'}} > "${EDF_VAR}"']

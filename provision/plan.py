"""The provisioning plan: ordered steps as pure data, rendered to one runnable bash script.

The script defines one function per step and runs all of them, or only the steps named
on its command line (``bash setup.sh build-horovod``): the runner executes the very same
text step by step, so ``--dry-run`` and a real run never differ. A step's lines are calls;
the bash they call is the shell library (provision/scripts/*.sh), carried verbatim, and
the programs and patches they write are files carried verbatim (provision/library.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from hpcprov.core.errors import UsageError
from hpcprov.core.shell import Raw, Template, assign, env_prefix, join
from hpcprov.jobs.launchers.common import site_network_env
from hpcprov.jobs.launchers.images import CH_RUN_USER, HOST_PYTHON_OUT, resolved_image
from hpcprov.jobs.layout import Layout
from hpcprov.jobs.modules import env_lines, init_lines, load_lines
from hpcprov.provision import horovod_steps as hs
from hpcprov.provision import library
from hpcprov.provision.horovod import pip_spec, site_build_env
from hpcprov.provision.library import Embedded
from hpcprov.provision.pip_args import (
    framework_install_lines,
    pip_index_args,
    pip_install,
    pip_settings_line,
)
from hpcprov.site.arch import conda_installer_url
from hpcprov.site.conda_channels import tos_channels
from hpcprov.site.image_refs import PULLED_SUFFIX, image_problems, registry_reference, spelled

if TYPE_CHECKING:
    from hpcprov.site.types import Site

Where = Literal["login", "compute"]


@dataclass(frozen=True)
class Step:
    """One resumable unit of work."""

    id: str
    title: str
    lines: tuple[str, ...]
    needs_network: bool = False
    modules: Literal["build", "runtime"] | None = None
    in_env: bool = False
    in_stack: bool = False  # runs inside the site's uenv (uenv run), where it has one

    @property
    def function(self) -> str:
        return "step_" + self.id.replace("-", "_")


@dataclass(frozen=True)
class Plan:
    """A setup plan: its variables, steps, the functions it generates from the profile
    (``functions``: name -> body lines), and what it carries verbatim: the library functions
    the steps call (``library``: name -> text) and the programs and patches they write
    (``files``: function name -> file)."""

    site: str
    backend: str
    prefix: str
    runs_on: Where
    variables: dict[str, str]
    functions: dict[str, tuple[str, ...]]
    steps: tuple[Step, ...] = field(default_factory=tuple)
    library: dict[str, str] = field(default_factory=dict)
    files: dict[str, Embedded] = field(default_factory=dict)

    def step(self, step_id: str) -> Step:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        for step, raw in zip(data["steps"], self.steps, strict=True):
            step["function"] = raw.function
        return data


def _vars(site: Site, prefix: str, runs_on: Where = "login") -> dict[str, str]:
    lay = Layout.of(site, "$PREFIX")
    out: dict[str, str] = {"PREFIX": Template(prefix), "STATE": lay.state_dir,
                           "ENV_DIR": lay.env_dir,
                           "WHEELHOUSE": Template(site.paths.wheelhouse)}
    if site.python.backend == "conda" and not site.python.conda.module:
        out["CONDA_ROOT"] = lay.conda_root
        out["INSTALLER"] = Template("$PREFIX/downloads/" + _installer_name(site))
    if site.python.backend == "container":
        out["IMAGES"] = lay.images
    if site.uenv is not None:
        out.update(HPCPROV_UENV=site.uenv.image, HPCPROV_UENV_VIEW=site.uenv.view or "",
                   HPCPROV_UENV_MOUNT=site.uenv.mount)
    proxy = site.policies.proxy
    # downloads go through the site's proxy (pip, conda, curl, uv) where it works: its scope
    if proxy is not None and proxy.scope in (runs_on, "both"):
        for name, value in (("http_proxy", proxy.http), ("https_proxy", proxy.https or
                                                          proxy.http),
                            ("no_proxy", ",".join(proxy.no_proxy) or None)):
            if value:
                out[name] = out[name.upper()] = Template(value)
    return out


def _installer_name(site: Site) -> str:
    url = site.python.conda.installer_file or conda_installer_url(site)
    return url.rstrip("/").rsplit("/", 1)[-1] or "Miniconda3.sh"


IMPORT_NAMES = {"pytorch": "torch"}  # a framework's import name, where it is not its own


def _framework_steps(site: Site) -> list[Step]:
    """conda frameworks one by one; the pip frameworks and packages in one resolver run (of
    pip or uv, as the profile says), or two where the frameworks name their own index (the
    packages then come from pip's own: :func:`framework_install_lines`), with the profile's
    build-only variables (python.install_env) set for this step alone, without
    byte-compiling (--no-compile: the modules a process imports
    are compiled then, which halves torch's install time; check-build's imports compile
    what jobs use)."""
    py = site.python
    lines: list[str] = []
    network = False
    pip_specs: list[str] = []
    for name, fw in py.frameworks.items():
        specs = fw.packages or [f"{'torch' if name == 'pytorch' else name}=={fw.version}"]
        if fw.installer == "module":  # the site's module has it: check what it gives
            lines.append(join(["hpcprov_module_framework", IMPORT_NAMES.get(name, name),
                               fw.version, fw.module or ""]))
        elif fw.installer == "conda":
            channels = conda_channel_args(site, [fw.channel] if fw.channel else [])
            lines.append(join(["conda", "install", "-y", *channels, *specs]))
            network = True
        else:
            pip_specs += specs
    if pip_specs or py.packages:
        lines.append(pip_settings_line(site))
        lines += framework_install_lines(site, pip_specs, list(py.packages))
        network = network or not site.python.venv.no_index
    if not lines:
        return []
    # the profile's build-only variables (MPICC, PIP_NO_BINARY...): this step's alone
    scoped = [f"local -x {assign(name, Template(value))}"
              for name, value in py.install_env.items()]
    return [Step("install-frameworks", "Install the frameworks", (*scoped, *lines), network,
                 modules="build", in_env=True)]


def _horovod_steps(site: Site) -> list[Step]:
    hvd = site.horovod
    if hvd.source in ("none", "container"):
        return []
    # where horovodrun over Gloo starts the proof, check-build's interpreter runs it too
    # (with the frameworks imported once); else it is a step of its own
    proves = hs.proves_in_check(site)
    title = "Check the Horovod build (horovodrun -cb)" + (
        " and prove it: a 2-process allreduce" if proves else "")
    checks = [Step("check-build", title, tuple(hs.check_build_lines(site)), modules="runtime",
                   in_env=True)]
    if not proves:
        checks.append(Step("prove-allreduce", "Prove it: a 2-process allreduce",
                           tuple(hs.prove_lines(site)), modules="runtime", in_env=True))
    if hvd.source == "module":
        return checks
    if hvd.source == "wheelhouse":
        offline = site.python.venv.no_index and site.python.backend == "venv"
        cmd = pip_install(site, pip_spec(hvd), extra=tuple(hvd.pip_args))
        install = Step("install-horovod", "Install Horovod from the site's wheelhouse",
                       (pip_settings_line(site), cmd), needs_network=not offline,
                       modules="build", in_env=True)
        return [install, *checks]
    offline = site.python.venv.no_index and site.python.backend == "venv"
    build = Step("build-horovod", "Build Horovod against the site's modules (or reuse the "
                 "wheelhouse)", tuple(hs.build_lines(site)), needs_network=not offline,
                 modules="build", in_env=True)
    return [build, *checks]


def conda_channel_args(site: Site, first: list[str]) -> list[str]:
    """``--override-channels -c A -c B ...``: exactly the profile's channels (after
    ``first``, a framework's own), so neither a ``.condarc`` nor conda's defaults add one the
    profile did not name; nothing where the profile names none (the installer's own)."""
    # a channel may use the node's variables ($NAME, ${NAME}): expanded, nothing else is
    named = [Template(c) for c in dict.fromkeys([*first, *site.python.conda.channels])]
    if not site.python.conda.channels:
        return [w for c in named for w in ("-c", c)]
    return ["--override-channels", *(w for c in named for w in ("-c", c))]


def _accept_tos_lines(site: Site, conda: Raw) -> list[str]:
    """``conda tos accept`` for the channels under Anaconda's Terms of Service, which the
    profile accepted (the model refuses a profile that uses them without accept_tos)."""
    tos = tos_channels(site.python)
    return ([join(["hpcprov_conda_accept_tos", conda, *map(Template, tos)])] if tos
            else [])


def _module_conda_steps(site: Site) -> list[Step]:
    """The site's conda (python.conda.module, loaded with the build modules) creates the
    environment in the prefix; nothing is downloaded or installed."""
    conda = site.python.conda
    accept = _accept_tos_lines(site, Raw('"$(command -v conda)"'))
    py = [f"python={conda.python}"] if conda.python else []
    return [Step("create-env", f"Create the conda environment with module {conda.module}", (
        'eval "$(conda shell.bash hook)"', *accept,
        join(["conda", "create", "-y", "-p", Raw('"$ENV_DIR"'),
              *conda_channel_args(site, []), *py]),
    ), needs_network=True, modules="build")]


def _conda_steps(site: Site) -> list[Step]:
    conda = site.python.conda
    if conda.module:
        return _module_conda_steps(site)
    steps: list[Step] = []
    part = Raw('"$INSTALLER.part"')
    if conda.installer_file:
        fetch = join(["cp", Template(conda.installer_file), part])
        network = False
    else:
        # the profile's installer, else Miniconda's for the partitions' architecture
        urls = [u for u in (conda.mirror_url, conda_installer_url(site)) if u]
        fetch = join(["hpcprov_download", part, *urls])
        network = True
    if conda.installer_sha256:
        verify = join(["hpcprov_check_installer", part, conda.installer_sha256])
    else:
        verify = join(["echo", "hpcprov: warning: no installer_sha256 in the profile; not "
                       "verified"]) + " >&2"
    steps.append(Step("download-installer", "Download the Miniconda installer",
                      ('mkdir -p "$PREFIX/downloads"', fetch, verify,
                       'mv -f "$INSTALLER.part" "$INSTALLER"'), needs_network=network))
    accept = _accept_tos_lines(site, Raw('"$CONDA_ROOT/bin/conda"'))
    steps.append(Step("install-conda", "Install Miniconda (silent, -b -p)", (
        'bash "$INSTALLER" -b -u -p "$CONDA_ROOT"',
        '"$CONDA_ROOT/bin/conda" config --set auto_activate_base false',
        *accept,
    )))
    py = [f"python={conda.python}"] if conda.python else []
    steps.append(Step("create-env", "Create the conda environment", (
        'source "$CONDA_ROOT/etc/profile.d/conda.sh"',
        join(["conda", "create", "-y", "-n", site.python.env_name,
              *conda_channel_args(site, []), *py]),
    ), needs_network=True))
    return steps


def _venv_steps(site: Site) -> list[Step]:
    venv = site.python.venv
    ssp = ["--system-site-packages"] if venv.system_site_packages else []
    if venv.creator == "virtualenv":
        create = join(["virtualenv", "--no-download", *ssp, Raw('"$ENV_DIR"')])
    elif venv.creator == "uv":
        create = join(["uv", "venv", "--python", venv.python, *ssp, Raw('"$ENV_DIR"')])
    else:
        create = join([venv.python, "-m", "venv", *ssp, Raw('"$ENV_DIR"')])
    # an old pip (< 23) cannot install today's wheels; a recent one is kept (saves ~8 s)
    python = Raw('"$ENV_DIR/bin/python"')
    upgrade = join(["hpcprov_ensure_pip", python, python, "-m", "pip", "install", "--upgrade",
                    *pip_index_args(site), "pip"])
    # python.conda.module: the module's conda base environment is the Python it is built on
    base = (('eval "$(conda shell.bash hook)"', "conda activate")
            if site.python.conda.module else ())
    return [Step("create-env", "Create the virtual environment",
                 ('rm -rf "$ENV_DIR"', 'mkdir -p "$(dirname "$ENV_DIR")"', *base, create,
                  upgrade), needs_network=not venv.no_index, modules="build")]


def container_target(site: Site) -> str:
    """Where a container setup puts the image (or finds it), the place the jobs read:
    ``containers.images.NAME`` where it is a path; where it is a registry reference (or
    missing), the file setup pulls into the prefix (``PREFIX/images/NAME.sif``, ``.sqsh``
    with enroot), which the jobs read instead of the reference (that every rank would
    pull)."""
    spec = site.python.container
    assert spec is not None
    entry = site.containers.images.get(spec.image)
    if entry is not None and not registry_reference(entry):
        return entry
    suffix = PULLED_SUFFIX.get(site.containers.runtime, ".sif")
    return Layout.of(site, "$PREFIX").pulled_image(spec.image, suffix)


def _refuse_unpullable(site: Site) -> None:
    """The profile's own images were refused at their lines (the model); ``--container
    NAME`` (an image of containers.images as the source) is refused here, by the same
    rules, naming the key."""
    for loc, why in image_problems(site):
        raise UsageError(f"{'.'.join(loc)}: {why}")


def _container_steps(site: Site) -> list[Step]:
    spec = site.python.container
    assert spec is not None
    runtime = site.containers.runtime
    _refuse_unpullable(site)
    target = container_target(site)
    pulled = registry_reference(spec.source)
    source = (spelled(spec.source, runtime) or spec.source) if pulled else spec.source
    steps: list[Step] = []
    if runtime == "enroot":
        base = Template("$IMAGES/" + spec.image + "-base.sqsh") if spec.add_horovod else None
        out = base or Template(target)
        # enroot's form: docker://[USER@][REGISTRY#]IMAGE[:TAG] (docker://nvcr.io/x:y would
        # be Docker Hub's image nvcr.io/x)
        steps.append(Step("import-image", "Import the container image with enroot", (
            'mkdir -p "$IMAGES"',
            join(["hpcprov_mkdir_parent", Template(target)]),
            join(["enroot", "import", "-o", out, source]),
        ), needs_network=True))
        name = f"hpcprov-{spec.image}"
        if base is not None:  # spec.add_horovod: Horovod goes into the imported base image
            env = site_build_env(site)
            inner = env_prefix(env) + join(["pip", "install", *site.horovod.pip_args,
                                             pip_spec(site.horovod)])
            steps.append(Step("add-horovod", "Install Horovod inside the image", (
                join(["hpcprov_enroot_remove", name]),
                join(["enroot", "create", "--name", name, base]),
                join(["enroot", "start", "--rw", name, "sh", "-c", inner]),
                join(["enroot", "export", "-f", "-o", Template(target), name]),
                join(["enroot", "remove", "-f", name]),
            ), needs_network=True))
        check = f"{name}-check"
        cb = image_check(site)
        steps.append(Step("check-build", cb.title, (
            join(["hpcprov_enroot_remove", check]),
            join(["enroot", "create", "--name", check, Template(target)]),
            cb.line(join(["enroot", "start", check])),
            join(["enroot", "remove", "-f", check]),
        )))
        return steps
    load = (["hpcprov_modules_init", join(["module", "load", site.containers.module])]
            if site.containers.module else [])
    if runtime == "charliecloud":
        return steps + _charliecloud_steps(site, load)
    if runtime in ("shifter", "podman-hpc"):
        return steps + _registry_image_steps(site, runtime, source, load)
    binary = runtime or "singularity"
    if pulled:  # once, into the file the jobs read
        steps.append(Step("pull-image", f"Pull the image with {binary}", (
            *load,
            join(["hpcprov_mkdir_parent", Template(target)]),
            join([binary, "pull", Template(target), source]),
        ), needs_network=True))
    # the site may keep the image (Neuron's /apps/.../*.sif), its path perhaps a glob of
    # versioned names (the newest, resolved when the step runs, as a job does)
    resolve, word = resolved_image(target)
    if not pulled:  # use it where it is
        steps.append(Step("check-image", "Check the site's image is readable", (
            *resolve, f"hpcprov_check_image {word} "
            + join([f"containers.images.{spec.image}"]),
        )))
    gpu = [site.containers.gpu_flag] if site.containers.gpu_flag else []
    cb = image_check(site)
    steps.append(Step("check-build", cb.title, (
        *load, *resolve, cb.line(f"{join([binary, 'exec', *gpu])} {word}"))))
    return steps


# what a framework of the profile is imported as
FRAMEWORK_IMPORTS = {"pytorch": "torch", "tensorflow": "tensorflow"}


@dataclass(frozen=True)
class ImageCheck:
    """The step proving an image: its title, the command run inside the image, and the
    library function printing the program that command reads on its standard input (the
    image need not see the host's files), where it reads one."""

    title: str
    inside: tuple[str, ...]
    stdin: str | None = None

    def line(self, runner: str) -> str:
        """The step's line: ``runner`` (shell text: the runtime's words up to the command)
        and the command, fed its program where it reads one."""
        command = f"{runner} {join(list(self.inside))}"
        return f"{self.stdin} | {command}" if self.stdin else command


def image_check(site: Site) -> ImageCheck:
    """The step proving an image: horovodrun -cb where Horovod is in it; where the profile
    says there is none (horovod.source: none, an image with the frameworks only), that the
    frameworks import (frameworks_import.py, on the image's Python's standard input)."""
    if site.horovod.source != "none":
        return ImageCheck("Check Horovod in the image (horovodrun -cb)", ("horovodrun", "-cb"))
    modules = [FRAMEWORK_IMPORTS.get(name, name) for name in site.python.frameworks] or ["torch"]
    return ImageCheck("Check the frameworks import in the image", ("python", "-", *modules),
                      library.file_function("frameworks_import.py"))


def _charliecloud_steps(site: Site, load: list[str]) -> list[Step]:
    """Charliecloud runs an image where it lies, a directory (or a SquashFS file): setup
    pulls nothing (a registry reference was refused, at its line: ``ch-image`` builds or
    pulls it, and ``ch-convert`` turns it into a directory), checks the image is readable,
    then runs the image check in it with ch-run as a job does (the mounts bound, the host's
    Python variables out, ``$USER`` set)."""
    spec = site.python.container
    assert spec is not None
    target = site.containers.images.get(spec.image, f"$PREFIX/images/{spec.image}")
    resolve, word = resolved_image(target)
    binds = [Template(f"--bind={mount}") for mount in site.containers.mounts]
    cb = image_check(site)
    return [
        Step("check-image", "Check the site's image is a readable directory (Charliecloud)",
             (*resolve, f"hpcprov_check_ch_image {word} "
              + join([f"containers.images.{spec.image}"]))),
        Step("check-build", cb.title, (
            *load, *resolve, HOST_PYTHON_OUT, CH_RUN_USER,
            cb.line(f"{join(['ch-run', *binds])} {word} --"))),
    ]


def _registry_image_steps(site: Site, runtime: str, source: str, load: list[str]
                          ) -> list[Step]:
    """Shifter and podman-hpc keep images in their own stores, named like the registry's:
    pull ``source`` (spelled for the runtime: docker:REGISTRY/IMAGE:TAG for Shifter, the
    qualified REGISTRY/IMAGE:TAG for podman-hpc, as the jobs name it) there, then check the
    image with it."""
    cb = image_check(site)
    if runtime == "shifter":
        pull = join(["shifterimg", "pull", source])
        check = cb.line(join(["shifter", f"--image={source}"]))
    else:  # podman-hpc passes standard input on only with -i
        pull = join(["podman-hpc", "pull", source])
        check = cb.line(join(["podman-hpc", "run", "--rm", *(["-i"] if cb.stdin else []),
                              source]))
    return [Step("pull-image", f"Pull the image with {runtime}", (*load, pull),
                 needs_network=True),
            Step("check-build", cb.title, (*load, check))]


def activate_lines(site: Site, prefix: str) -> list[str]:
    """What `source PREFIX/activate` runs: modules, then the Python environment."""
    lines = ["# Generated by hpcprov: loads the runtime modules and the Python environment.",
             "# shellcheck disable=SC1090,SC1091"]
    stack = site.uenv
    if stack is not None:  # built inside the stack: it must be mounted
        start = join(["uenv", "start", *([f"--view={stack.view}"] if stack.view else []),
                      stack.image])
        lines += [f"if [ ! -e {join([stack.mount + '/meta'])} ]; then",
                  "  " + join(["echo", f"hpcprov: this environment lives in uenv "
                               f"{stack.image}: start it first ({start}); the jobs of "
                               "hpcprov mount it themselves"]) + " >&2",
                  "  return 1 2>/dev/null || exit 1", "fi"]
    lines += init_lines(site.modules)
    lines += load_lines(site.modules, site.modules.runtime)
    lines += Layout.of(site, prefix).python_activation()
    # the site's variables, then the network ones every partition sets alike (a job script
    # exports its own partition's again)
    lines += env_lines({**site.env, **site_network_env(site)})
    return lines


def _activate_step(site: Site, prefix: str) -> Step:
    body = activate_lines(site, prefix)
    return Step("write-activate", "Write the activation script PREFIX/activate", (
        join(["hpcprov_write_lines", Raw('"$PREFIX/activate"'), *body]),
        'echo "hpcprov: activate with: source $PREFIX/activate"',
    ))


def build_plan(site: Site, prefix: str | None = None, runs_on: Where = "login") -> Plan:
    """The provisioning plan for a site. Pure: nothing is touched."""
    prefix = prefix or site.prefix()
    backend = site.python.backend
    steps = [Step("prepare", "Create the prefix", ('mkdir -p "$PREFIX" "$STATE"',)),
             Step("preflight", "Check modules, tools and free disk space",
                  tuple(hs.preflight_lines(site, hs.estimate_mb(site))))]
    if backend == "conda":
        steps += _conda_steps(site)
    elif backend == "venv":
        steps += _venv_steps(site)
    else:
        steps += _container_steps(site)
    if backend != "container":
        steps += _framework_steps(site)
        steps += _horovod_steps(site)
        steps.append(_activate_step(site, prefix))
        steps.append(Step("record", "Record what was installed (for the manifest)",
                          tuple(hs.record_lines(site)), modules="runtime", in_env=True))
    if site.uenv is not None:  # the stack first; every step after it runs inside it
        steps.insert(1, Step("pull-uenv", f"Pull the uenv {site.uenv.image}",
                             ("hpcprov_uenv_pull",), needs_network=True))
        steps[2:] = [replace(s, in_stack=True) for s in steps[2:]]
    if site.env:  # the site's variables in every step: those without modules export them
        steps = [s if s.modules else replace(s, lines=("hpcprov_site_env", *s.lines))
                 for s in steps]
    mods = site.modules
    functions = {
        "hpcprov_modules_init": tuple(init_lines(mods)),
        # the site's variables (e.g. MPICC) hold for the steps that install and build too
        "hpcprov_modules_build": (*init_lines(mods), *load_lines(mods, mods.build),
                                  *env_lines(site.env)),
        "hpcprov_modules_runtime": (*init_lines(mods), *load_lines(mods, mods.runtime),
                                    *env_lines(site.env)),
        "hpcprov_activate_env": tuple(Layout.of(site, "$PREFIX").python_activation()),
        **({"hpcprov_site_env": tuple(env_lines(site.env))} if site.env else {}),
    }
    texts = [*("\n".join(_step_block(s)) for s in steps),
             *("\n".join(b) for b in functions.values())]
    names = library.used(texts, {**library.functions(), **library.files()})
    return Plan(site.name, backend, prefix, runs_on, _vars(site, prefix, runs_on), functions,
                tuple(steps),
                {n: library.functions()[n] for n in names if n in library.functions()},
                {n: library.files()[n] for n in names if n in library.files()})


def _definitions(plan: Plan) -> dict[str, str]:
    """Every function the script defines besides the steps, name -> its text."""
    out = dict(plan.library)
    out.update({name: "\n".join(_function(name, body)) for name, body in plan.functions.items()})
    out.update({name: "\n".join(library.render_file(name, f)) for name, f in plan.files.items()})
    return out


def _function(name: str, body: tuple[str, ...]) -> list[str]:
    return [f"{name}() {{", *(f"  {line}" for line in body or (":",)), "}"]


def _step_block(step: Step) -> list[str]:
    pre = []
    if step.modules:
        pre.append(f"hpcprov_modules_{step.modules}")
    if step.in_stack:
        pre.insert(0, join(["hpcprov_in_uenv", step.id]) + ' || return "$HPCPROV_UENV_RC"')
    if step.in_env:
        pre.append("hpcprov_activate_env")
    net = " (needs network)" if step.needs_network else ""
    return [f"# {step.id}: {step.title}{net}", f"{step.function}() {{",
            *(f"  {line}" for line in (*pre, *step.lines)), "}"]


def fingerprints(plan: Plan) -> dict[str, str]:
    """Per step, a hash of its text, of the helper functions it calls, of the variables and
    of every step before it: a step whose fingerprint changed must run again, and so must
    every step after it."""
    h = hashlib.sha256()
    h.update(json.dumps(plan.variables, sort_keys=True).encode())
    defined = _definitions(plan)
    out = {}
    for step in plan.steps:
        block = "\n".join(_step_block(step))
        used = {name: defined[name] for name in library.used([block], defined)}
        h.update(json.dumps(used, sort_keys=True).encode() + block.encode())
        out[step.id] = h.copy().hexdigest()[:20]
    return out


def dispatcher() -> list[str]:
    """The definition of ``hpcprov_run``, the setup script's dispatcher, from the shell
    library (provision/scripts/common.sh) without its comment: the script's last line calls
    it with the steps named, else every step."""
    text = library.functions()["hpcprov_run"]
    return text[text.index("hpcprov_run() {"):].split("\n")


def render_script(plan: Plan) -> str:
    """The complete, runnable bash script of a plan."""
    out = [
        "#!/bin/bash",
        "# shellcheck disable=SC1090,SC1091  # sourced files exist only when the steps run",
        f"# hpcprov setup plan for site {plan.site} (backend {plan.backend}), "
        f"runs on the {plan.runs_on} node.",
        "# Run every step:  bash THIS_FILE      Run some steps:  bash THIS_FILE STEP...",
        "# Steps: " + " ".join(s.id for s in plan.steps),
        "set -eo pipefail",
        "",
    ]
    out += [assign(k, v) for k, v in plan.variables.items()]
    out.append("export " + " ".join(plan.variables))
    if plan.library:
        out += ["", "# hpcprov's shell library (provision/scripts/*.sh): the functions this plan "
                "calls, verbatim"]
    for text in plan.library.values():
        out += ["", text]
    for name, body in plan.functions.items():
        out += ["", *_function(name, body)]
    for name, embedded in plan.files.items():
        out += ["", *library.render_file(name, embedded)]
    for step in plan.steps:
        out += ["", *_step_block(step)]
    out += [
        "",
        "HPCPROV_STEPS=(" + " ".join(s.id for s in plan.steps) + ")",
        *dispatcher(),
        'if [ "$#" -gt 0 ]; then hpcprov_run "$@"; else hpcprov_run "${HPCPROV_STEPS[@]}"; fi',
        "",
    ]
    return "\n".join(out)

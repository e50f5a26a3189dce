"""Plan steps around Horovod: preflight, build (through the wheelhouse), proof, record.

Every line here is a call: of a library function (provision/scripts/*.sh), of a function
that prints a program or patch verbatim (provision/library.py), or of a tool, with every
value from the profile an argument rendered by hpcprov.core.shell. The build runs in the
activated environment with the site's build modules loaded, as the seed tutorials do it
by hand.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from hpcprov.core.shell import Raw, env_prefix, join
from hpcprov.jobs.checkbuild import CB_SECTIONS, expected_check_build
from hpcprov.provision.compat import patches_for
from hpcprov.provision.horovod import gpu_vendor, pip_spec, site_build_env
from hpcprov.provision.library import file_function, program_file
from hpcprov.provision.pip_args import install_lines, pip_index_args, pip_settings_line
from hpcprov.site.gpu_vendors import DEFAULT_VENDOR, VENDORS
from hpcprov.site.image_refs import registry_reference
from hpcprov.site.kinds import ModuleSystem

if TYPE_CHECKING:
    from hpcprov.site.types import Site

# Installed before the build, which runs with --no-build-isolation so that it works offline
# and sees the environment's torch/TensorFlow (Horovod's setup needs these to run).
BUILD_REQUIREMENTS = ("setuptools", "wheel", "packaging", "cffi", "cloudpickle", "psutil",
                      "pyyaml")
# Horovod's gloo fails to configure with CMake 4; 3.x (Debian's 3.25, PyPI's cmake<4) works.
# Where cmake is missing or newer, the build installs cmake<4 for itself (hpcprov_cmake_below).
CMAKE_MAX_MAJOR = 3
# the proof program of each framework (provision/programs/)
PROOFS = {"pytorch": "allreduce_pytorch.py", "tensorflow": "allreduce_tensorflow.py"}
APT_HINT = "install it (Debian/Ubuntu: apt-get install {pkg}) or load a module that has it"


def builds_horovod(site: Site) -> bool:
    return site.horovod.source == "pip" and site.python.backend != "container"


def estimate_mb(site: Site) -> int:
    """Free space the setup needs under the prefix, in MiB (generous, not exact)."""
    gpu = any(p.gpus.count for p in site.partitions.values())
    need = 100
    if site.python.backend == "conda":
        need += 800
    if site.python.backend == "container":  # an image pulled or imported under the prefix
        return need + (20000 if pulls_image(site) else 0)
    frameworks = site.python.frameworks
    if "pytorch" in frameworks:
        need += 4500 if gpu else 1200
    if "tensorflow" in frameworks:
        need += 2500 if gpu else 1500
    if builds_horovod(site):
        need += 600
    return need


def _tool(tool: str, why: str, pkg: str | None = None, hint: str | None = None) -> str:
    return join(["hpcprov_require_tool", tool, why, hint or APT_HINT.format(pkg=pkg or tool)])


def pulls_image(site: Site) -> bool:
    """A container setup that brings the image under the prefix (a registry pull, an enroot
    import, Shifter's or podman-hpc's store), not one that uses the site's image where it
    lies (a path)."""
    spec = site.python.container
    if spec is None:
        return False
    return registry_reference(spec.source) or site.containers.runtime in (
        "enroot", "shifter", "podman-hpc")


def module_check_lines(site: Site) -> list[str]:
    """Check that every module setup and the jobs load exists, naming the missing: the
    build and runtime sets; in a container setup (nothing is built), the runtime set and
    the runtime's module."""
    mods = site.modules
    if mods.system == ModuleSystem.none:
        return []
    if site.python.backend == "container":
        wanted = [*mods.runtime.load, *([site.containers.module] if site.containers.module
                                         else [])]
    else:
        wanted = [*mods.build.load, *mods.runtime.load]
    names = list(dict.fromkeys(wanted))
    return [join(["hpcprov_check_modules", site.name, *names])] if names else []


def _build_tool_lines(site: Site) -> list[str]:
    lines = [
        _tool("tar", "unpacks the Horovod sdist"),
        _tool("patch", "applies the Horovod patches of hpcprov"),
        _tool("make", "builds Horovod"),
        "hpcprov_check_cxx",
        join(["hpcprov_check_cmake", str(CMAKE_MAX_MAJOR)]),
    ]
    if "mpi" in site.horovod.controllers:
        lines.append(_tool("mpicc", "builds the MPI controller of Horovod",
                           hint="load the MPI module of the site (modules.build) or install "
                                "libopenmpi-dev"))
    return lines


def preflight_lines(site: Site, need_mb: int) -> list[str]:
    """Fail early and clearly: modules, tools, CMake version, disk space."""
    lines = ["hpcprov_modules_init", *module_check_lines(site)]
    if site.modules.system != ModuleSystem.none and site.python.backend != "container":
        lines.append("hpcprov_modules_build")  # a container setup builds nothing
    conda = site.python.conda
    if site.python.backend in ("conda", "venv") and conda.module:  # loaded by
        # hpcprov_modules_build; a venv is created with its base environment's Python
        what = "creates the environment" if site.python.backend == "conda" else \
            "activates the base environment the venv is created with"
        lines.append(_tool("conda", f"{what} (python.conda.module: {conda.module})",
                           hint=f"check that module {conda.module} puts conda on the PATH"))
    elif site.python.backend == "conda" and not conda.installer_file:
        lines.append(_tool("curl", "downloads the Miniconda installer"))
    venv = site.python.venv
    if site.python.backend == "venv" and "uv" in (venv.creator, venv.installer):
        lines.append(_tool("uv", f"venv.{'creator' if venv.creator == 'uv' else 'installer'}"
                                 ": uv in the profile",
                           hint="load the site's uv module or python3 -m pip install --user "
                                "uv, or name pip/venv in the profile"))
    if builds_horovod(site):
        lines += _build_tool_lines(site)
    lines.append(join(["hpcprov_check_disk", str(need_mb)]))
    return lines


def patch_digest(site: Site) -> str:
    """One hash of the patches applied (their names and texts), part of the wheel key."""
    h = hashlib.sha256()
    patches = patches_for(site)
    for p in patches:
        # a conditional patch counts with its condition; whether it applied follows from the
        # toolchain facts the key records beside it (cxx=, stdlib=, python=)
        when = " ".join(p.when) if p.when else ""
        h.update(p.name.encode() + b"\0" + p.text.encode() + b"\0" + when.encode() + b"\0")
    return h.hexdigest()[:16] if patches else "none"


def key_line(site: Site) -> str:
    """Print the key's inputs (hpcprov_horovod_key) into $STATE/horovod-key.txt, with the
    build variables set (an NCCL the profile names is read from its HOROVOD_NCCL_HOME)."""
    hvd = site.horovod
    env = site_build_env(site)
    line = env_prefix(env) + join(["hpcprov_horovod_key", hvd.version or "latest",
                                   patch_digest(site), env_prefix(env).strip(),
                                   Raw('"$STATE/programs/abi_facts.py"')]
                                  ) + ' > "$STATE/horovod-key.txt"'
    # a framework from a site module is another build than pip's of the same version: the
    # key says where it came from (nothing is added where every framework is installed)
    sources = [f"{name}=module:{fw.module}" for name, fw in site.python.frameworks.items()
               if fw.installer == "module"]
    if sources:
        line += " && " + join(["printf", "from=%s\\n", " ".join(sources)]) \
            + ' >> "$STATE/horovod-key.txt"'
    return line


def links_wheel_nccl(site: Site) -> bool:
    """The build uses NCCL and the profile names none: look for PyTorch's (nccl_home.py).
    A CUDA build only: RCCL comes with ROCm, not a pip wheel."""
    hvd = site.horovod
    return ("nccl" in (hvd.gpu_operations, hvd.gpu_allreduce) and builds_cuda(site)
            and "HOROVOD_NCCL_HOME" not in site_build_env(site))


def _compile_lines(site: Site) -> list[str]:
    """Download the sdist, patch it, build the wheel, publish it (the wheelhouse's miss)."""
    hvd = site.horovod
    idx = pip_index_args(site)
    lines = [
        "hpcprov_horovod_workdir",
        join(["python", "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
              "--no-build-isolation", *idx, pip_spec(hvd), "-d", Raw('"$PREFIX/build/horovod"')]),
        "hpcprov_horovod_unpack",
    ]
    for p in patches_for(site):
        apply = join([file_function(p.name)]) + " | " + join(["hpcprov_horovod_patch", p.name])
        if p.when:
            lines += [f"if {join(['hpcprov_at_least', *p.when])}; then", f"  {apply}", "fi"]
        else:
            lines.append(apply)
    lines.append(join(["hpcprov_cmake_below", str(CMAKE_MAX_MAJOR + 1), *idx]))
    if "pytorch" in hvd.frameworks and any(p.name.endswith("cxx-standard.patch")
                                           for p in patches_for(site)):
        lines.append("hpcprov_torch_cxx_standard")
    lines += [
        env_prefix(site_build_env(site))
        + join(["python", "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                *hvd.pip_args, *idx, "-w", Raw('"$PREFIX/build/horovod/dist"'),
                Raw('"$HPCPROV_SRC"')]),
        join(["hpcprov_wheelhouse_put", *site.paths.wheelhouse_trust]),
    ]
    return lines


def _nccl_lines(site: Site) -> list[str]:
    if not links_wheel_nccl(site):
        return []
    write, path = program_file("nccl_home.py")
    return [write, join(["hpcprov_nccl_home", path])]


def builds_cuda(site: Site) -> bool:
    """A GPU build with CUDA (NVIDIA): it compiles with the CUDA toolkit (hpcprov_cuda_home)."""
    hvd = site.horovod
    vendor = VENDORS[gpu_vendor(site) or DEFAULT_VENDOR]
    return bool(hvd.gpu_operations or hvd.gpu_allreduce) and vendor.cuda_arches


def build_lines(site: Site) -> list[str]:
    """Build Horovod (or install it from the wheelhouse when this ABI was built before)."""
    return [
        pip_settings_line(site),
        # with the profile's installer (uv where it has it: a second of pip's start-up and
        # resolution on every setup, a wheelhouse hit's too), not the frameworks' index
        *install_lines(site, *BUILD_REQUIREMENTS, frameworks=False),
        'mkdir -p "$STATE/programs"',
        program_file("abi_facts.py")[0],
        *(["hpcprov_cuda_home"] if builds_cuda(site) else []),
        *_nccl_lines(site),
        key_line(site),
        "if ! " + join(["hpcprov_wheelhouse_get", *site.paths.wheelhouse_trust]) + "; then",
        *(f"  {line}" for line in _compile_lines(site)),
        "fi",
        *install_lines(site, Raw('"$HPCPROV_WHEEL"'), frameworks=False,
                       pip_extra=("--no-deps", "--force-reinstall"),
                       uv_extra=("--no-deps", "--reinstall")),
        "hpcprov_horovod_record",
    ]


# what each framework Horovod builds for is imported as
FRAMEWORK_MODULES = {"pytorch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet"}
# what a training process of that framework imports later, on first use (compiled at setup:
# a job that cannot write bytecode would compile it in every process)
LAZY_MODULES = {"pytorch": ("torch._dynamo",)}


def proves_in_check(site: Site) -> bool:
    """Whether the proof runs in check-build's interpreter (check_build.py --prove): where
    horovodrun over Gloo starts it, which that interpreter can run with the frameworks
    already imported; an MPI starter (mpirun, mpiexec) runs in a step of its own."""
    return proof_starter(site)[0] == "horovodrun"


def check_build_lines(site: Site) -> list[str]:
    """`horovodrun -cb`, run by check_build.py with the built frameworks imported first (its
    checking processes are forks: they inherit the imports instead of repeating them), and
    every entry the profile builds expected in its output; where :func:`proves_in_check`,
    then the proof from the same interpreter (:func:`prove_lines` otherwise)."""
    frameworks = site.horovod.frameworks
    modules = [FRAMEWORK_MODULES[f] for f in frameworks if f in FRAMEWORK_MODULES]
    warm = [m for f in frameworks for m in LAZY_MODULES.get(f, ())]
    proofs = _proof_files(site) if proves_in_check(site) else []
    # the frameworks were installed --no-compile: let these imports write the bytecode
    write, program = program_file("check_build.py")
    lines = ["unset PYTHONDONTWRITEBYTECODE", 'mkdir -p "$STATE/programs"', write]
    if proofs:
        lines.append('mkdir -p "$STATE/proof"')
        lines += [join([file_function(name)]) + " > " + path for name, path in proofs]
    lines.append(join(["python", program, "--output", Raw('"$STATE/check-build.txt"'),
                       *modules, *(("--warm", *warm) if warm else ()),
                       *(("--prove", *(path for _, path in proofs)) if proofs else ())]))
    want = expected_check_build(site.horovod)
    for key, names in want.items():
        title = CB_SECTIONS[key][0]
        lines += [join(["hpcprov_expect_cb", title, name]) for name in names]
    lines.append(join(["echo", "hpcprov: horovodrun -cb shows everything the profile builds"]))
    if proofs:
        lines.append(join(["echo", "hpcprov: 2-process allreduce ok"]))
    return lines


def _proof_files(site: Site) -> list[tuple[str, Raw]]:
    """(program, its path under $STATE/proof) of each built framework's proof."""
    return [(PROOFS[fw], Raw(f'"$STATE/proof/{PROOFS[fw]}"')) for fw in site.horovod.frameworks
            if fw in PROOFS]


def prove_lines(site: Site) -> list[str]:
    """A 2-process allreduce per built framework, through Gloo when built, else MPI."""
    lines = ['mkdir -p "$STATE/proof"']
    for program, path in _proof_files(site):
        lines.append(join([file_function(program)]) + " > " + path)
        lines.append(join([*proof_starter(site), "python", path]))
    lines.append(join(["echo", "hpcprov: 2-process allreduce ok"]))
    return lines


def proof_starter(site: Site) -> list[str]:
    """What starts the 2-process proof where setup runs: horovodrun over Gloo when Horovod
    has it (check_build.py's PROOF_STARTER); else the MPI starter of the site's launchers
    (mpirun, or mpiexec as its flavor spells it), the default launcher's first."""
    if "gloo" in site.horovod.controllers:
        return ["horovodrun", "--gloo", "-np", "2", "-H", "localhost:2"]
    names = [site.default_launcher, *site.launchers]
    for name in names:
        launcher = site.launchers[name]
        if launcher.kind == "mpiexec":
            return ["mpiexec", "-n", "2", "-ppn" if launcher.flavor == "hydra" else "--ppn", "2"]
        if launcher.kind in ("mpirun", "horovodrun"):
            return ["mpirun", "-np", "2"]
    return ["mpirun", "-np", "2"]


def record_lines(site: Site) -> list[str]:
    """Facts for the manifest, gathered in the environment itself."""
    lines = ["hpcprov_record_facts"]
    if site.modules.system != ModuleSystem.none:
        lines.append("hpcprov_record_modules")
    return lines

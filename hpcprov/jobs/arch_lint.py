"""``hpcprov site check``'s findings about the nodes' architecture and what setup installs
for it: the conda installer against the partitions' ``arch``, torch's wheels against the
GPUs they must drive, partitions of another architecture than the environment's, and
Horovod's build inputs against what the profile installs.

Each finding is located at its key in the profile: :func:`arch_errors` (the profile is
refused), :func:`arch_warnings` (it stays ok: a draft, whose frameworks are a question,
still passes). Pure: the profile is read, nothing run.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from hpcprov.site.arch import (
    env_arch,
    named_arch,
    names_other_system,
    other_arch_partitions,
    torch_wheel_problem,
)
from hpcprov.site.gpu_vendors import VENDORS

if TYPE_CHECKING:
    from hpcprov.site.types import Site

Located = tuple[tuple[str | int, ...], str]  # (key path in the profile, problem)

# what each of Horovod's frameworks imports, and the pip names that install it
_HOROVOD_NEEDS = {"pytorch": ("torch", ("torch",)),
                  "tensorflow": ("tensorflow", ("tensorflow", "tensorflow-gpu",
                                                "tensorflow-cpu", "tensorflow-rocm",
                                                "tf-nightly", "intel-tensorflow")),
                  "mxnet": ("mxnet", ("mxnet",)),
                  "keras": ("keras", ("keras",))}
_SPEC_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _spec_name(spec: str) -> str:
    m = _SPEC_NAME.match(spec)
    return m.group(1).lower().replace("_", "-") if m else ""


def _builds_env(site: Site) -> bool:
    """Whether setup builds a Python environment on the nodes (not a container image)."""
    return site.python.backend in ("conda", "venv")


def installer_findings(site: Site) -> list[Located]:
    """The conda installer (installer_url, mirror_url, installer_file) naming another
    architecture than the environment's, or another system than Linux."""
    conda = site.python.conda
    if site.python.backend != "conda" or conda.module:
        return []
    arch = env_arch(site)
    out: list[Located] = []
    for key in ("installer_url", "mirror_url", "installer_file"):
        value = getattr(conda, key)
        if not value:
            continue
        where = f"python.conda.{key}"
        named = named_arch(value)
        if names_other_system(value):
            out.append((("python", "conda", key), f"{where}: {value} is not a Linux "
                        f"installer: name the Linux-{arch} one (or remove {key}: setup then "
                        f"downloads Miniconda3-latest-Linux-{arch}.sh)"))
        elif named is not None and named != arch:
            out.append((("python", "conda", key), f"{where}: {value} is for {named}, but "
                        f"the environment is built for {arch} ({_arch_source(site)}): name "
                        f"the Linux-{arch} installer (or remove {key}: setup then downloads "
                        f"Miniconda3-latest-Linux-{arch}.sh)"))
    return out


def _arch_source(site: Site) -> str:
    """Why the environment is for its architecture, in words."""
    if not other_arch_partitions(site):
        return "the partitions' arch"
    pname, _ = site.partition(None)
    return f"the default partition {pname}'s arch"


def horovod_input_findings(site: Site) -> list[Located]:
    """Horovod built (or installed from the wheelhouse) with a framework the profile
    installs nowhere: its build (HOROVOD_WITH_<FRAMEWORK>=1) fails, and so does its import."""
    hvd, py = site.horovod, site.python
    if hvd.source not in ("pip", "wheelhouse") or not _builds_env(site):
        return []
    installed = {_spec_name(spec) for spec in py.packages}
    for framework, fw in py.frameworks.items():
        installed.add(_HOROVOD_NEEDS[framework][0])
        installed.update(_spec_name(spec) for spec in fw.packages)
    out: list[Located] = []
    for i, name in enumerate(hvd.frameworks):
        module, pip_names = _HOROVOD_NEEDS[name]
        if installed & set(pip_names) or (name == "keras" and "tensorflow" in installed):
            continue
        fix = (f"add python.frameworks.{name} (installer pip or conda, or module: the site's "
               f"module that provides it)" if name in ("pytorch", "tensorflow") else
               f"add {pip_names[0]} to python.packages")
        out.append((("horovod", "frameworks", i), f"horovod.frameworks: Horovod is built "
                    f"with {name} (HOROVOD_WITH_{name.upper()}=1), but the profile installs "
                    f"no {module}: the build fails without it; {fix}, or drop {name} from "
                    "horovod.frameworks"))
    return out


def arch_errors(site: Site) -> list[Located]:
    """``site check``'s errors: a conda installer of another architecture or system."""
    return installer_findings(site)


def mixed_arch_findings(site: Site) -> list[Located]:
    """Partitions whose nodes are of another architecture than the one environment setup
    builds (its Python and wheels run on the environment's architecture only)."""
    if not _builds_env(site):
        return []
    arch = env_arch(site)
    return [(("partitions", p, "arch"), f"partitions.{p}.arch: {site.partitions[p].arch} "
             f"nodes cannot run the environment setup builds for {arch} "
             f"({_arch_source(site)}): describe them in a profile of their own (extends: "
             f"this one, a partition of that arch the default) set up in its own prefix")
            for p in other_arch_partitions(site)]


def torch_wheel_findings(site: Site) -> list[Located]:
    """pip's torch without GPU support for GPU partitions of the environment's
    architecture: a CPU-only spec or index, PyPI's torch on aarch64 or ppc64le, PyTorch's
    ROCm wheels elsewhere than on x86_64."""
    fw = site.python.frameworks.get("pytorch")
    if fw is None or fw.installer != "pip" or not _builds_env(site):
        return []
    arch = env_arch(site)
    gpu = [(p, part) for p, part in site.partitions.items()
           if part.gpus.count and part.arch == arch]
    out: list[Located] = []
    for vendor in dict.fromkeys(str(part.gpus.vendor) for _, part in gpu):
        problem = torch_wheel_problem(arch, vendor, fw.index_url, list(fw.extra_index_urls),
                                      list(fw.packages))
        if problem is None:
            continue
        names = [p for p, part in gpu if part.gpus.vendor == vendor]
        cpu_spec = next((i for i, s in enumerate(fw.packages) if "+cpu" in s), None)
        loc: tuple[str | int, ...] = (
            ("python", "frameworks", "pytorch", "packages", cpu_spec) if cpu_spec is not None
            else ("python", "frameworks", "pytorch", "index_url"))
        out.append((loc, f"python.frameworks.pytorch: {problem}; the {vendor} GPUs of "
                    f"{', '.join(names)} ({arch}) need a torch built for them: name the "
                    "index of such builds in index_url, or take torch from the site's "
                    "module (installer: module) or conda"))
    return out


def cpu_horovod_findings(site: Site) -> list[Located]:
    """Horovod built without GPU operations for a site with GPUs it has a build for: its
    collectives then go through host memory (CPU-only)."""
    hvd = site.horovod
    if hvd.source not in ("pip", "wheelhouse") or hvd.gpu_operations or hvd.gpu_allreduce:
        return []
    gpu = [p for p, part in site.partitions.items() if part.gpus.count
           and VENDORS[part.gpus.vendor].horovod_env is not None]
    if not gpu:
        return []
    return [(("horovod", "gpu_operations"), f"horovod: no gpu_operations (nor gpu_allreduce): "
             f"Horovod is built CPU-only, and its collectives on the GPUs of "
             f"{', '.join(gpu)} go through host memory: set horovod.gpu_operations: nccl")]


def arch_warnings(site: Site) -> list[Located]:
    """``site check``'s warnings (the profile stays ok): partitions of another
    architecture, torch without GPU support for the GPU partitions, Horovod built with a
    framework the profile does not install (a draft leaves the frameworks a question) or
    CPU-only for GPUs."""
    return (mixed_arch_findings(site) + torch_wheel_findings(site)
            + horovod_input_findings(site) + cpu_horovod_findings(site))

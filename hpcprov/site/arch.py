"""The CPU architecture of a site's nodes (``partitions.*.arch``), as a fact that setup and
``site check`` use: the architecture one environment is built for, the conda installer for
it, the architecture (and system) a file name names, and whether a pip index holds torch
wheels for the GPUs of that architecture.

Plain data and pure functions only: no pydantic, nothing run.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from hpcprov.site.types import Site

# the default installer: Miniconda's latest for Linux on ARCH (all three are published)
MINICONDA = "https://repo.anaconda.com/miniconda/Miniconda3-latest-Linux-{arch}.sh"

# the spellings of an architecture in installer and wheel names (Linux's names first)
_SPELLED = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64",
            "ppc64le": "ppc64le", "s390x": "s390x"}
_ARCH_WORD = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(_SPELLED) + r")(?![A-Za-z0-9])",
                        re.IGNORECASE)
_OTHER_SYSTEM = re.compile(r"MacOSX|Windows|\.exe$|\.pkg$", re.IGNORECASE)


def env_arch(site: Site) -> str:
    """The architecture the environment setup builds is for: its partitions' one; where they
    differ, the default partition's (one environment serves one architecture: ``site check``
    warns of the partitions of another)."""
    arches = {str(p.arch) for p in site.partitions.values()}
    if len(arches) == 1:
        return arches.pop()
    return str(site.partition(None)[1].arch)


def other_arch_partitions(site: Site) -> list[str]:
    """The partitions whose nodes are not of the environment's architecture."""
    arch = env_arch(site)
    return [name for name, p in site.partitions.items() if p.arch != arch]


def conda_installer_url(site: Site) -> str:
    """The conda installer setup downloads: the profile's, else Miniconda's latest for the
    environment's architecture."""
    return site.python.conda.installer_url or MINICONDA.format(arch=env_arch(site))


def named_arch(location: str) -> str | None:
    """The architecture a file name (or URL) names: ``Miniconda3-latest-Linux-aarch64.sh``,
    ``torch-2.5.1-cp311-cp311-manylinux_2_28_aarch64.whl`` (arm64 and amd64 as Linux calls
    them); None where it names none."""
    name = location.rstrip("/").rsplit("/", 1)[-1]
    m = _ARCH_WORD.search(name)
    return _SPELLED[m.group(1).lower()] if m else None


def names_other_system(location: str) -> bool:
    """Whether a file name (or URL) names an installer for another system than Linux."""
    return bool(_OTHER_SYSTEM.search(location.rstrip("/").rsplit("/", 1)[-1]))


# ------------------------------------------------------------------ torch's wheels

PYTORCH_INDEX_HOST = "download.pytorch.org"  # PyTorch's own wheel indexes: /whl/<build>
CUDA_INDEX_EXAMPLE = "https://download.pytorch.org/whl/cu128"


def _pytorch_build(url: str) -> str | None:
    """The build a PyTorch wheel index serves (cpu, cu121, rocm6.2...), None for another
    index."""
    parts = urlsplit(url)
    if parts.hostname != PYTORCH_INDEX_HOST:
        return None
    segments = [s for s in parts.path.split("/") if s]
    return segments[-1].lower() if len(segments) >= 2 and segments[0] == "whl" else None


def _gpu_build(build: str | None) -> bool:
    return build is not None and (build.startswith("cu") or build.startswith("rocm")
                                  or build.startswith("xpu"))


def torch_wheel_problem(arch: str, vendor: str, index_url: str | None,
                        extra_index_urls: list[str], specs: list[str]) -> str | None:
    """Why pip would install no GPU build of torch for the GPUs of ``vendor`` on ``arch``
    nodes from these indexes (None: the profile's own index, or a build with GPU support):
    a CPU-only spec (+cpu) or index (PyTorch's /whl/cpu), PyPI's torch on aarch64 (CPU-only)
    or ppc64le (no wheel at all), PyTorch's ROCm wheels (x86_64 only) elsewhere."""
    cpu_spec = next((s for s in specs if re.search(r"\+cpu\b", s)), None)
    if cpu_spec:
        return f"{cpu_spec} is a CPU-only build of torch"
    build = _pytorch_build(index_url) if index_url else None
    if build is not None and build.startswith("cpu"):
        return f"{index_url} is PyTorch's index of CPU-only builds"
    if index_url and build is None:
        return None  # the site's own index: what it holds is its own
    if arch == "ppc64le":
        return ("neither PyPI nor PyTorch's indexes have a torch wheel for ppc64le (pip "
                "would try to build it from source)")
    if build is not None and build.startswith("rocm") and arch != "x86_64":
        return f"PyTorch's ROCm wheels ({index_url}) are built for x86_64 only, not {arch}"
    if build is None and any(_gpu_build(_pytorch_build(u)) for u in extra_index_urls):
        return None  # a GPU build from an extra index
    if build is None and arch == "aarch64" and vendor == "nvidia":
        return ("PyPI's torch for aarch64 is a CPU-only build (PyTorch's CUDA wheels for "
                f"aarch64 are on its own index, e.g. {CUDA_INDEX_EXAMPLE})")
    return None

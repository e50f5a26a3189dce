"""The CUDA architectures a Horovod build needs, and whether the build's CUDA can target them.

Without ``HOROVOD_BUILD_CUDA_CC_LIST`` Horovod compiles its CUDA kernels for every
architecture the installed nvcc knows: slow, and an old nvcc lacks the newest GPUs. The
compute capabilities are NVIDIA's (developer.nvidia.com/cuda-gpus); a model this table does
not know leaves the list to nvcc's default, and the plan says so with a warning.

Every CUDA release targets a window of architectures: CUDA 12 dropped Kepler (sm_35/37),
CUDA 13 dropped Maxwell, Pascal and Volta (below sm_75), and the newest GPUs need a recent
release (sm_90 from 11.8). :func:`cuda_findings` refuses, before anything is built, a GPU
partition whose architecture the build's CUDA cannot target: the CUDA a partition builds with
is read from the version in its build modules (``cuda/11.4``, ``CUDA/12.1.1``), else from the
nvcc at hand (``nvcc --list-gpu-arch``, probed by :func:`probe_nvcc`, the one effect here,
called by the command layer only).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpcprov.site.gpu_vendors import VENDORS

if TYPE_CHECKING:
    from hpcprov.site.types import Site

# (pattern on the profile's gpus.model, compute capability without the dot); first match wins
CAPABILITIES: tuple[tuple[str, str], ...] = (
    (r"GB200|B200|B100", "100"),
    (r"GH200|H200|H100|H800", "90"),
    (r"L40|L4\b|RTX ?40\d0|RTX ?[0-9]+ ?Ada", "89"),
    (r"A100|A800|A30\b", "80"),
    (r"A40\b|A10\b|A16\b|A2\b|RTX ?A[0-9]+|RTX ?30\d0", "86"),
    (r"T4\b|RTX ?20\d0|Quadro RTX", "75"),
    (r"V100|Titan V", "70"),
    (r"P100", "60"),
    (r"P40|P4\b|GTX ?10\d0", "61"),
)

# (first CUDA release, lowest and highest compute capability its nvcc targets), newest first:
# NVIDIA's CUDA toolkit release notes (the "deprecated/dropped architectures" and "new
# architectures" sections). Here: `nvcc --list-gpu-arch` of CUDA 13.0.88 lists compute_75 ..
# compute_121, which the row for 13.0 agrees with (tests/test_cuda_arch.py).
CUDA_TARGETS: tuple[tuple[tuple[int, int], int, int], ...] = (
    ((13, 0), 75, 121),
    ((12, 9), 50, 121),
    ((12, 8), 50, 120),
    ((12, 0), 50, 90),
    ((11, 8), 35, 90),
    ((11, 4), 35, 87),
    ((11, 1), 35, 86),
    ((11, 0), 35, 80),
    ((10, 0), 30, 75),
    ((9, 0), 30, 72),
)
# a module named for CUDA and its version: cuda/11.4, ARM_cuda/11.4, CUDA/12.1.1 (EasyBuild),
# cudatoolkit/12.2, cuda-12.4 (not cudampi/openmpi-4.1.1: an MPI built with CUDA)
_CUDA_MODULE = re.compile(r"(?:^|[/_-])cuda(?:toolkit)?[/-]v?(\d+)\.(\d+)", re.IGNORECASE)


def capability(model: str) -> str | None:
    """The compute capability of an NVIDIA GPU model name, or None when unknown."""
    for pattern, cc in CAPABILITIES:
        if re.search(pattern, model, re.IGNORECASE):
            return cc
    return None


def builds_here(site: Site, pname: str) -> bool:
    """Whether the site's one Horovod build (its build modules) serves this partition: a
    partition with build modules of its own is built with those, by a setup of its own."""
    part = site.partitions[pname]
    return part.modules is None or part.modules.build == site.modules.build


def cc_list(site: Site) -> tuple[list[str], list[str]]:
    """(capabilities to build for, sorted; GPU models this table does not know), over the
    GPU partitions that the site's build serves (:func:`builds_here`)."""
    found: set[str] = set()
    unknown: list[str] = []
    for pname, part in site.partitions.items():
        model = part.gpus.model
        if not part.gpus.count or not model or not builds_here(site, pname):
            continue
        cc = capability(model)
        if cc is None:
            unknown.append(model)
        else:
            found.add(cc)
    return sorted(found, key=int), sorted(set(unknown))


@dataclass(frozen=True)
class CudaTargets:
    """What one CUDA can target: its version, its lowest and highest architecture, and
    where that was read (a module name, or nvcc itself)."""

    version: str
    low: int
    high: int
    source: str

    def covers(self, cc: int) -> bool:
        return self.low <= cc <= self.high


def targets_of(major: int, minor: int, source: str) -> CudaTargets | None:
    """The window of a CUDA release from the table (None before CUDA 9)."""
    for first, low, high in CUDA_TARGETS:
        if (major, minor) >= first:
            return CudaTargets(f"{major}.{minor}", low, high, source)
    return None


def cuda_of_modules(names: list[str]) -> CudaTargets | None:
    """The CUDA a module set loads, from the version in a CUDA module's name."""
    for name in names:
        m = _CUDA_MODULE.search(name)
        if m:
            return targets_of(int(m[1]), int(m[2]), f"module {name}")
    return None


def parse_nvcc(version_text: str, arch_text: str) -> CudaTargets | None:
    """The targets of an nvcc from what `nvcc --version` and `nvcc --list-gpu-arch` print."""
    v = re.search(r"release (\d+)\.(\d+)", version_text)
    archs = [int(a) for a in re.findall(r"compute_(\d+)", arch_text)]
    if not v or not archs:
        return None
    return CudaTargets(f"{v[1]}.{v[2]}", min(archs), max(archs), "nvcc on PATH")


def probe_nvcc(timeout: float = 20) -> CudaTargets | None:
    """The nvcc at hand (on PATH), asked what it targets; None without one (an effect: the
    command layer calls it and hands the answer to the pure checks)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    try:
        out = [subprocess.run([nvcc, flag], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL).stdout[:100_000]
               for flag in ("--version", "--list-gpu-arch")]
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvcc(*out)


def _loads(site: Site, pname: str) -> list[str]:
    """The build modules a partition builds with (its own, else the site's); none without
    a module system."""
    mods = site.modules_for(pname)
    return [] if str(getattr(mods.system, "value", mods.system)) == "none" else \
        list(mods.build.load)


def _cuda_for(site: Site, pname: str, nvcc: CudaTargets | None) -> CudaTargets | None:
    """The CUDA a partition builds with: named by its build modules; else, where it loads
    no build modules at all, the nvcc at hand (``nvcc``); else unknown (a toolchain module
    whose CUDA this cannot read, e.g. fosscuda-2018b)."""
    loads = _loads(site, pname)
    return cuda_of_modules(loads) if loads else nvcc


def needs_nvcc_probe(site: Site) -> bool:
    """Whether a CUDA GPU build of this site loads no build modules, so that the nvcc at
    hand (on PATH) is the build's and is worth asking."""
    return builds_for_cuda(site) and any(
        not _loads(site, p) for p, part in site.partitions.items() if part.gpus.count)


def builds_for_cuda(site: Site) -> bool:
    """The site builds Horovod itself with CUDA operations (NVIDIA GPUs)."""
    hvd = site.horovod
    if hvd.source not in ("pip", "wheelhouse") or not (hvd.gpu_operations or hvd.gpu_allreduce):
        return False
    return any(p.gpus.count and VENDORS[p.gpus.vendor].cuda_arches
               for p in site.partitions.values())


def _fix(cc: int, cuda: CudaTargets) -> str:
    """Which CUDA to load instead: the newest release that still targets sm_CC when the
    CUDA is too new for it, else the first release that knows it."""
    if cc < cuda.low:
        fits = [f for f, low, high in CUDA_TARGETS if low <= cc <= high]
        newest = max(fits) if fits else None
        return (f"build with CUDA {newest[0]}.x or older (load a CUDA {newest[0]} module in "
                "the build modules)" if newest else "no CUDA release this table knows "
                "targets it")
    first = min((f for f, low, high in CUDA_TARGETS if low <= cc <= high), default=None)
    return (f"build with CUDA {first[0]}.{first[1]} or newer (load such a CUDA module in the "
            "build modules)" if first else "no CUDA release this table knows targets it")


def cuda_findings(site: Site, nvcc: CudaTargets | None = None, this_build: bool = False
                  ) -> list[tuple[tuple[str, ...], str, str]]:
    """(key path, problem, fix) for each GPU partition whose architecture the CUDA it is
    built with cannot target. The CUDA is read from the partition's build modules (its own,
    else the site's), else, where it loads none, it is ``nvcc`` (the nvcc at hand); unknown:
    not checked.
    ``this_build``: only the partitions the site's own build serves (setup's question)."""
    if not builds_for_cuda(site):
        return []
    out: list[tuple[tuple[str, ...], str, str]] = []
    for pname, part in site.partitions.items():
        if this_build and not builds_here(site, pname):
            continue
        if not part.gpus.count or not VENDORS[part.gpus.vendor].cuda_arches \
                or not part.gpus.model:
            continue
        cc = capability(part.gpus.model)
        cuda = _cuda_for(site, pname, nvcc)
        if cc is None or cuda is None or cuda.covers(int(cc)):
            continue
        problem = (f"partitions.{pname}: its GPUs ({part.gpus.model}, sm_{cc}) cannot be "
                   f"targeted by CUDA {cuda.version} ({cuda.source}), which builds for sm_"
                   f"{cuda.low} to sm_{cuda.high}: the Horovod build would fail (nvcc fatal: "
                   f"Unsupported gpu architecture 'compute_{cc}')")
        out.append((("partitions", pname, "gpus", "model"), problem, _fix(int(cc), cuda)))
    return out

"""What a Horovod build needs: its HOROVOD_* variables and its pip spec."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcprov.site.cuda_arch import cc_list
from hpcprov.site.gpu_vendors import DEFAULT_VENDOR, VENDORS

if TYPE_CHECKING:
    from hpcprov.site.types import HorovodBuild, Site

FRAMEWORK_FLAGS = {"tensorflow": "TENSORFLOW", "pytorch": "PYTORCH", "mxnet": "MXNET"}
CONTROLLER_FLAGS = {"mpi": "MPI", "gloo": "GLOO"}


def build_env(hvd: HorovodBuild) -> dict[str, str]:
    """HOROVOD_* build variables, in a stable order, from the profile's build section."""
    env: dict[str, str] = {}
    if hvd.gpu_operations:
        env["HOROVOD_GPU_OPERATIONS"] = hvd.gpu_operations.upper()
    if hvd.gpu_allreduce:
        env["HOROVOD_GPU_ALLREDUCE"] = hvd.gpu_allreduce.upper()
    if hvd.gpu_broadcast:
        env["HOROVOD_GPU_BROADCAST"] = hvd.gpu_broadcast.upper()
    for name, flag in FRAMEWORK_FLAGS.items():
        on = name in hvd.frameworks
        env[f"HOROVOD_WITH{'' if on else 'OUT'}_{flag}"] = "1"
    for name, flag in CONTROLLER_FLAGS.items():
        on = name in hvd.controllers
        env[f"HOROVOD_WITH{'' if on else 'OUT'}_{flag}"] = "1"
    env.update(hvd.env)
    return env


def pip_spec(hvd: HorovodBuild) -> str:
    """`horovod==X` (or plain `horovod` when the profile leaves the version open)."""
    return f"horovod=={hvd.version}" if hvd.version else "horovod"


def gpu_vendor(site: Site) -> str | None:
    """The vendor of the site's GPUs (one per profile, the model checks), None without."""
    return next((p.gpus.vendor for p in site.partitions.values() if p.gpus.count), None)


def site_build_env(site: Site) -> dict[str, str]:
    """The build variables for a site: the profile's, plus the CUDA architectures of its GPU
    partitions (HOROVOD_BUILD_CUDA_CC_LIST) when Horovod is built for GPUs and the profile
    does not set them itself. Part of the wheelhouse key and so of the manifest."""
    env = build_env(site.horovod)
    if not site.horovod.debug_info:  # read by the build-type patch; harmless without it
        env.setdefault("HOROVOD_CMAKE_BUILD_TYPE", "Release")
    gpu = site.horovod.gpu_operations or site.horovod.gpu_allreduce
    vendor = VENDORS[gpu_vendor(site) or DEFAULT_VENDOR]
    if gpu:  # the vendor's build variables (ROCm: HOROVOD_GPU=ROCM, RCCL under NCCL's name)
        for key, value in (vendor.horovod_env or {}).items():
            env.setdefault(key, value)
    if not vendor.cuda_arches:  # its builds name no CUDA architectures
        return env
    if gpu in ("nccl", "mpi") and "HOROVOD_BUILD_CUDA_CC_LIST" not in env:
        ccs, _ = cc_list(site)
        if ccs:
            env["HOROVOD_BUILD_CUDA_CC_LIST"] = ",".join(ccs)
    return env

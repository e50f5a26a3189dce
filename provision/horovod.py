"""What a Horovod build needs: its HOROVOD_* variables and its pip spec."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpcprov.model import HorovodBuild

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

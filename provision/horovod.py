"""What a Horovod build needs (variables, pip spec) and what `horovodrun -cb` should show."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpcprov.model import HorovodBuild

FRAMEWORK_FLAGS = {"tensorflow": "TENSORFLOW", "pytorch": "PYTORCH", "mxnet": "MXNET"}
CONTROLLER_FLAGS = {"mpi": "MPI", "gloo": "GLOO"}
CB_NAMES = {"tensorflow": "TensorFlow", "pytorch": "PyTorch", "mxnet": "MXNet",
            "mpi": "MPI", "gloo": "Gloo", "nccl": "NCCL", "ddl": "DDL", "ccl": "CCL"}


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


# The sections of `horovodrun -cb`, in order: key -> (title, entries).
CB_SECTIONS = {
    "frameworks": ("Available Frameworks", ["TensorFlow", "PyTorch", "MXNet"]),
    "controllers": ("Available Controllers", ["MPI", "Gloo"]),
    "tensor_operations": ("Available Tensor Operations", ["NCCL", "DDL", "CCL", "MPI", "Gloo"]),
}


def expected_check_build(hvd: HorovodBuild) -> dict[str, list[str]]:
    """Entries that must be [X] in `horovodrun -cb`, by section."""
    tensor_ops = [CB_NAMES[c] for c in hvd.controllers]
    gpu = hvd.gpu_operations or hvd.gpu_allreduce
    if gpu:
        tensor_ops.insert(0, CB_NAMES[gpu])
    return {
        "frameworks": [CB_NAMES[f] for f in hvd.frameworks if f in CB_NAMES],
        "controllers": [CB_NAMES[c] for c in hvd.controllers],
        "tensor_operations": sorted(set(tensor_ops), key=tensor_ops.index),
    }


def render_check_build(hvd: HorovodBuild) -> list[str]:
    """The `horovodrun -cb` output a build from this profile should print."""
    want = expected_check_build(hvd)
    out = [f"Horovod v{hvd.version or '?'}:"]
    for key, (title, names) in CB_SECTIONS.items():
        out += ["", f"{title}:", *(f"    [{'X' if n in want[key] else ' '}] {n}" for n in names)]
    return out


def parse_check_build(text: str) -> dict[str, object]:
    """`horovodrun -cb` output -> {"version": "0.28.1", section key: [names marked [X]]}."""
    titles = {title: key for key, (title, _) in CB_SECTIONS.items()}
    out: dict[str, object] = {key: [] for key in CB_SECTIONS}
    out["version"] = None
    section: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if line.startswith("Horovod v") and stripped.endswith(":"):
            out["version"] = stripped[len("Horovod v"):-1]
        elif stripped.endswith(":") and stripped[:-1] in titles:
            section = titles[stripped[:-1]]
        elif section and stripped.startswith("[X] "):
            out[section].append(stripped[4:].strip())  # type: ignore[union-attr]
    return out

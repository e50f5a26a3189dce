"""What `horovodrun -cb` shows: the entries a build from a profile must mark [X], the
text such a build prints, and a parser for the real output. Shared by the provisioner (the
proof and the manifest), the validation suite (the env check) and the guide."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpcprov.site.types import HorovodBuild

CB_NAMES = {"tensorflow": "TensorFlow", "pytorch": "PyTorch", "mxnet": "MXNet",
            "mpi": "MPI", "gloo": "Gloo", "nccl": "NCCL", "ddl": "DDL", "ccl": "CCL"}

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


def parse_check_build(text: str) -> dict[str, list[str] | str | None]:
    """`horovodrun -cb` output -> {section key: [names marked [X]], "version": "0.28.1"}
    (None where no version line was printed)."""
    titles = {title: key for key, (title, _) in CB_SECTIONS.items()}
    marked: dict[str, list[str]] = {key: [] for key in CB_SECTIONS}
    version: str | None = None
    section: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if line.startswith("Horovod v") and stripped.endswith(":"):
            version = stripped[len("Horovod v"):-1]
        elif stripped.endswith(":") and stripped[:-1] in titles:
            section = titles[stripped[:-1]]
        elif section and stripped.startswith("[X] "):
            marked[section].append(stripped[4:].strip())
    return {**marked, "version": version}

"""The GPU vendors hpcprov knows, each one's facts as data.

A partition names its GPUs' vendor (``gpus: {vendor: amd}``). This module says, for each
vendor, what every part of hpcprov needs: the variable that limits a process's GPUs, the
command that counts a node's GPUs (doctor, ``validate``'s environment check) and the one
that names their model (``site draft``), the torch device and distributed backend
``validate`` runs on them, how Horovod is built for them (or why it cannot be), and whether
the CUDA architecture lint applies.

Adding a vendor is one :data:`VENDORS` entry (the validation programs take the device and
backend as arguments; doctor, draft and the build read the entry).

Plain data and pure functions only: no pydantic, nothing run.
"""

from __future__ import annotations

from typing import NamedTuple


class Query(NamedTuple):
    """A read-only command and how to read its output: ``pattern`` (a regular expression,
    which a count's must also be as grep -E reads it: no \\d) matches once per GPU; its
    first group, where it has one, is the GPU's model."""

    argv: tuple[str, ...]
    pattern: str


class Vendor(NamedTuple):
    summary: str
    """one line for the profile reference"""
    visible_devices: str
    """the variable that limits the GPUs a process sees"""
    counter: Query
    """counts the GPUs of this node as torch sees them (doctor, validate's env check)"""
    models: Query
    """names the GPUs' models (``site draft``: group 1 of ``pattern``)"""
    torch_device: str
    """torch's device type (``torch.<device>``: cuda also on ROCm)"""
    dist_backend: str
    """torch.distributed's backend on these GPUs"""
    fallback_backend: str | None = None
    """``NAME:MODULE``: an older stack's backend where the first is missing, after
    importing the bindings that register it"""
    horovod_env: dict[str, str] | None = None
    """Horovod's build variables for these GPUs beyond gpu_operations' (None: Horovod has no
    build for them: a profile that asks for one is refused with :attr:`horovod_refusal`)"""
    horovod_refusal: str = ""
    cuda_arches: bool = False
    """the CUDA compute capabilities of its models are known, built for and linted"""
    bound_visible_devices: dict[str, str] | None = None
    """starter -> the variable that starter's per-task GPU binding sets where it is not
    :attr:`visible_devices` (``slurm``: srun's --gpus-per-task and --gpu-bind; None: every
    starter sets visible_devices)"""

    def visible_for(self, starter: str | None) -> str:
        """The variable that limits a rank's GPUs where ``starter`` binds it per task."""
        return (self.bound_visible_devices or {}).get(starter or "", self.visible_devices)


VENDORS: dict[str, Vendor] = {
    "nvidia": Vendor(
        "CUDA, NCCL", "CUDA_VISIBLE_DEVICES",
        Query(("nvidia-smi", "-L"), r"^GPU ([0-9]+):"),
        Query(("nvidia-smi", "--query-gpu=name", "--format=csv,noheader"), r"^\s*(\S.*?)\s*$"),
        "cuda", "nccl", horovod_env={}, cuda_arches=True),
    # ROCm's torch is torch.cuda; RCCL speaks NCCL's API and reads the NCCL_* variables
    "amd": Vendor(
        "ROCm, RCCL: Horovod is built for ROCm (HOROVOD_GPU=ROCM; gpu_operations: nccl "
        "then means RCCL)", "HIP_VISIBLE_DEVICES",
        Query(("rocm-smi", "--showid"), r"^GPU\[([0-9]+)\]"),
        Query(("rocm-smi", "--showproductname"),
              r"^GPU\[\d+\]\s*:\s*Card [Ss]eries:\s*(\S.*?)\s*$"),
        "cuda", "nccl", horovod_env={"HOROVOD_GPU": "ROCM"},
        # Slurm's gres/gpu plugin binds AMD GPUs through ROCm's lower variable
        bound_visible_devices={"slurm": "ROCR_VISIBLE_DEVICES"}),
    # Level Zero devices as SYCL lists them: with the FLAT hierarchy (the default of recent
    # drivers) each tile of a GPU Max card is a device, as torch.xpu counts them
    "intel": Vendor(
        "Level Zero, oneCCL: torch.xpu over xccl (ccl with oneccl_bindings_for_pytorch on "
        "older stacks); each tile is a device (FLAT hierarchy); Horovod has no Intel GPU build",
        "ZE_AFFINITY_MASK",
        Query(("sycl-ls",), r"^\[level_zero:gpu\]\[level_zero:([0-9]+)\]"),
        Query(("sycl-ls",),
              r"^\[level_zero:gpu\]\[level_zero:\d+\][^,]*,\s*(\S.*?)\s+\d+\.\d+\s+\["),
        "xpu", "xccl", fallback_backend="ccl:oneccl_bindings_for_pytorch",
        horovod_refusal="Horovod has no build for Intel GPUs (its oneCCL GPU operations are "
        "in Intel's own fork): leave horovod.gpu_operations and gpu_allreduce unset (Horovod "
        "then runs on the CPU), or horovod.source: none; validate runs torch.distributed "
        "over xccl on the GPUs"),
}

DEFAULT_VENDOR = "nvidia"


def read(query: Query, text: str) -> list[str]:
    """What ``query``'s pattern finds in its command's output, a line at a time: group 1 of
    each match where the pattern has a group, else the matched text."""
    import re

    pattern = re.compile(query.pattern)
    found = (pattern.search(line) for line in text.splitlines())
    return [(m.group(1) if pattern.groups else m.group(0)).strip() for m in found if m]


def count(query: Query, text: str) -> int:
    """How many GPUs ``query``'s output lists: its distinct matches."""
    return len(set(read(query, text)))

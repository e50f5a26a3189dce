"""The CUDA architectures a Horovod build needs, from the GPU models of the site's partitions.

Without ``HOROVOD_BUILD_CUDA_CC_LIST`` Horovod compiles its CUDA kernels for every
architecture the installed nvcc knows: slow, and an old nvcc lacks the newest GPUs. The
compute capabilities are NVIDIA's (developer.nvidia.com/cuda-gpus); a model this table does
not know leaves the list to nvcc's default, and the plan says so with a warning.
"""

from __future__ import annotations

import re
from typing import Any

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


def capability(model: str) -> str | None:
    """The compute capability of an NVIDIA GPU model name, or None when unknown."""
    for pattern, cc in CAPABILITIES:
        if re.search(pattern, model, re.IGNORECASE):
            return cc
    return None


def cc_list(site: Any) -> tuple[list[str], list[str]]:
    """(capabilities to build for, sorted; GPU models this table does not know)."""
    found: set[str] = set()
    unknown: list[str] = []
    for part in site.partitions.values():
        model = part.gpus.model
        if not part.gpus.count or not model:
            continue
        cc = capability(model)
        if cc is None:
            unknown.append(model)
        else:
            found.add(cc)
    return sorted(found, key=int), sorted(set(unknown))

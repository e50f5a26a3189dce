"""Which Horovod x PyTorch x TensorFlow combinations build and work, and what each needs.

One table, read three ways: `hpcprov setup` refuses the known-bad rows and applies the patches
of the rows that need one; the caveats reach the user's guide; docs/compatibility.md is
generated from it. Every row says how it is known.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from hpcprov.site.types import Site


Verdict = Literal["ok", "patch", "caveat", "bad"]
LAST_HOROVOD = "0.28.1"
# Facts of the build's toolchain that only the build step can know (the site's modules decide
# them), each with how the step reads it (provision/scripts/horovod.sh, hpcprov_build_fact).
BUILD_FACTS = {
    "libstdc++": "the C++ standard library's release (_GLIBCXX_RELEASE from $CXX, else c++)",
    "python": "the environment's Python (major.minor)",
    "torch-cxx": "the C++ standard the environment's PyTorch headers demand (the "
    "__cplusplus check of torch/all.h: 201703L is C++17, 202002L C++20)",
}


@dataclass(frozen=True)
class Rule:
    """A row: when every given spec matches, the verdict applies."""

    id: str
    verdict: Verdict
    horovod: str
    explanation: str
    evidence: str
    torch: str | None = None
    tensorflow: str | None = None
    gpu: bool | None = None          # None: either; True/False: only GPU / only CPU builds
    patch: str | None = None         # file in provision/patches applied inside the build step
    # (BUILD_FACTS name, minimum): the patch is applied only when the build step finds that
    # fact at least that version (a compiler or Python the plan cannot know in advance)
    when: tuple[str, str] | None = None

    def condition(self) -> str:
        """The build-time condition in words ('' when there is none)."""
        return f"{self.when[0]} >= {self.when[1]}" if self.when else ""


RULES: tuple[Rule, ...] = (
    Rule("unknown-horovod", "bad", f">{LAST_HOROVOD}",
         f"Horovod {LAST_HOROVOD} is the last release; no later version exists to build",
         "PyPI release history"),
    Rule("old-horovod-torch2", "bad", "<0.28.0", torch=">=2.0",
         explanation="Horovod before 0.28.0 predates PyTorch 2 and does not build against it; "
         f"use Horovod {LAST_HOROVOD} (hpcprov patches it for newer PyTorch)",
         evidence="Horovod 0.28.0 release notes (PyTorch 2.0 support)"),
    Rule("cxx-standard", "patch", "==0.28.1", torch=">=2.1",
         explanation="PyTorch's headers need C++17 from 2.1 and C++20 from 2.14 (they use "
         "std::strong_ordering; torch/all.h stops any compile below the standard it needs), "
         "Horovod 0.28.1 asks for C++14: the patch raises CMakeLists.txt to 17 and lets "
         "horovod/torch/CMakeLists.txt take HOROVOD_TORCH_CXX_STANDARD, which the build step "
         "reads from the PyTorch it builds against (the __cplusplus check of torch/all.h), CPU "
         "and GPU builds alike; CXXFLAGS cannot do it, the CMake files strip -std=",
         evidence="built here: torch 2.13.0 (C++17), g++ 12, Open MPI 4.1.4, CMake 3.25: -cb "
         "shows PyTorch, MPI, Gloo; torch 2.14.1+cu130 (C++20) with CUDA 13.0 and NCCL "
         "2.30.7 (CI until 2026-11-28); torch 2.15.0+cu132 (C++20, its CUDA 13.2 runtime "
         "wheels) against the CUDA 13.0 toolkit and NCCL 2.30.7, every CI run since: -cb "
         "shows PyTorch, Gloo, NCCL, the 2-rank proof passes (as reported when the gap was "
         "found, C++17 stops at 94%: "
         "'strong_ordering' in namespace 'std' does not name a type)",
         patch="horovod-0.28.1-cxx-standard.patch"),
    Rule("tf-xla-cpu", "patch", "==0.28.1", tensorflow=">=2.6", gpu=False,
         explanation="xla_mpi_ops.cc includes XLA headers that need highwayhash, which the "
         "TensorFlow wheel lacks; its XLA ops only exist with GPUs, so compile them only "
         "when HAVE_GPU",
         evidence="built here with tensorflow-cpu 2.21.0 + torch 2.13.0: -cb shows "
         "TensorFlow and PyTorch",
         patch="horovod-0.28.1-tf-xla-cpu.patch"),
    Rule("std-includes", "patch", "==0.28.1", when=("libstdc++", "13"),
         explanation="GCC 13's libstdc++ no longer includes <string> and <stdexcept> "
         "through other headers: group_table.h ('string' in namespace 'std' does not name a "
         "type) and common.h ('logic_error' is not a member of 'std') fail to compile; the "
         "patch includes what they use",
         evidence="reported on one H100 node (GCC 13.3, CUDA 13.0, Python 3.12, torch "
         "2.11.0+cu130): with the two includes the NCCL build succeeded and -cb showed "
         "PyTorch, MPI, Gloo, NCCL; the patch applies to the 0.28.1 sdist (tested here)",
         patch="horovod-0.28.1-std-includes.patch"),
    Rule("cuda-std14", "patch", "==0.28.1", gpu=True, when=("libstdc++", "14"),
         explanation="GCC 14's headers no longer compile as C++11 under nvcc, and Horovod "
         "compiles its CUDA kernels as C++11: the patch raises CMAKE_CUDA_STANDARD to 14 "
         "(accepted by every CUDA >= 9; proposed upstream in Horovod pull request #4313)",
         evidence="not built here (no GCC 14 + CUDA machine); the patch applies to the "
         "0.28.1 sdist (tested here)",
         patch="horovod-0.28.1-cuda-std14.patch"),
    Rule("build-type", "patch", "==0.28.1",
         explanation="Horovod 0.28.1 always compiles with debug information (RelWithDebInfo: "
         "-O3 -g), a quarter of the compile time of its framework extensions and most of "
         "the wheel's size; the patch lets HOROVOD_CMAKE_BUILD_TYPE choose, and hpcprov "
         "builds Release (same -O3, no -g) unless horovod.debug_info is true",
         evidence="here: one PyTorch extension unit compiles in 34 s without -g against 46 s "
         "with it, its object 0.6 MB against 22 MB; the Release build passes -cb and the "
         "2-rank allreduce proof",
         patch="horovod-0.28.1-build-type.patch"),
    Rule("no-distutils", "patch", "==0.28.1", when=("python", "3.12"),
         explanation="Python 3.12 has no distutils, which Horovod 0.28.1 imports twice: "
         "horovod/runner/js_run.py (distutils.spawn.find_executable: horovodrun and -cb fail) "
         "and horovod/torch/CMakeLists.txt:37 (distutils.sysconfig for Python's include "
         "folder: the PyTorch extension fails at 97% with 'Python.h: No such file'), where "
         "setuptools' shim is not in the environment (a module-provided setuptools); the "
         "patch uses shutil.which and sysconfig",
         evidence="reported on one H100 node with Python 3.12.3 (check-build failed with "
         "No module named 'distutils'); here: the patched js_run imports with distutils "
         "blocked, the unpatched one does not; a GPU build on pyenv's Python 3.12.1 with "
         "setuptools only on PYTHONPATH compiles and passes -cb with the patch",
         patch="horovod-0.28.1-no-distutils.patch"),
    Rule("keras3", "caveat", "<=0.28.1", tensorflow=">=2.16",
         explanation="TensorFlow >= 2.16 ships Keras 3: horovod.tensorflow.keras."
         "DistributedOptimizer runs but never averages gradients (ranks drift apart "
         "silently) and BroadcastGlobalVariablesCallback crashes. Use horovod.tensorflow "
         "with the models' tf.Variables: hvd.DistributedGradientTape(tape).gradient(loss, "
         "[v.value for v in model.trainable_variables]) and hvd.broadcast_variables("
         "[v.value for v in model.variables], 0) (Keras 3 variables themselves fail with "
         "AttributeError: 'Variable' object has no attribute 'ref')",
         evidence="Horovod issue #4290; here with tensorflow-cpu 2.21.0 (Keras 3.15), 2 ranks "
         "over Gloo: the Keras optimizer left the ranks' weights 0.23 apart after 8 steps; "
         "the tape with v.value kept them identical (difference 0.0)"),
    Rule("untested-torch", "caveat", "==0.28.1", torch=">=2.16",
         explanation="newer than any PyTorch this table has built against (2.15.0); "
         "the cxx-standard patch is applied, but the build is untested",
         evidence="none yet"),
    Rule("untested-tensorflow", "caveat", "==0.28.1", tensorflow=">2.21",
         explanation="newer than any TensorFlow this table has built against; untested",
         evidence="none yet"),
)

# What the build step does about its tools and libraries, listed with the table in the docs.
BUILD_NOTES: tuple[tuple[str, str], ...] = (
    ("CMake 4",
     "Horovod 0.28.1's gloo fails to configure with CMake 4 (PyPI's cmake 4.x, or a new "
     "system one). Where the cmake on PATH is 4.x or missing, the build step installs "
     "`cmake>=3.13,<4` with pip for itself (into PREFIX/build/cmake, first on PATH for the "
     "build only), from the profile's index or wheelhouse; it fails, naming the fix, only when "
     "pip cannot get one. Verified here: the TensorFlow-variant build test runs with PyPI's "
     "CMake 4 first on PATH."),
    ("NCCL from PyTorch's wheel",
     "PyTorch's CUDA wheels load NCCL from the nvidia-nccl wheel, which has `nccl.h` and "
     "`libnccl.so.2` but no `libnccl.so`, so Horovod's FindNCCL cannot find it. When a build "
     "uses NCCL and the profile names none (HOROVOD_NCCL_HOME in horovod.env or from a "
     "module), the build step makes an NCCL home of links to that wheel under "
     "PREFIX/.hpcprov/nccl and links Horovod against exactly the NCCL PyTorch uses (two NCCLs "
     "in one process can hang); without such a wheel, a module's NCCL_HOME, else Horovod's "
     "search of the CUDA toolkit. Verified here against a wheel-shaped folder; the H100 run "
     "that found the gap made the same home by hand."),
)

# What a GPU build does about CUDA itself (provision/scripts/horovod.sh, hpcprov/site/cuda_arch.py)
BUILD_NOTES += (
    ("The CUDA toolkit, found as the toolkit is",
     "A GPU build takes CUDA_HOME, else CUDA_PATH, else follows the nvcc on PATH to its "
     "toolkit (`nvcc -v --dryrun` names its TOP: a wrapper script or symlink outside the "
     "toolkit, as /usr/local/bin/nvcc on this project's machines, leads there too), and "
     "exports it as CUDA_HOME/CUDA_PATH (PyTorch's extension machinery, CMake's "
     "FindCUDAToolkit) and HOROVOD_CUDA_HOME (Horovod's CMake), with its bin/ first on PATH, "
     "for the build only. Before this, the wrapper's prefix (/usr/local) was taken for the "
     "CUDA root: `Could NOT find CUDAToolkit`, then `FOUND_LIB_cudart NOTFOUND`. Verified "
     "every CI run with the CUDA 13.0 toolkit behind such a wrapper."),
    ("CUDA's architecture window",
     "Each CUDA release targets a window of GPU architectures (CUDA 12 dropped sm_35/37, "
     "CUDA 13 dropped everything below sm_75; sm_90 needs CUDA >= 11.8). `hpcprov site "
     "check` and `hpcprov setup` refuse a GPU partition outside the window of the CUDA it "
     "is built with before anything is built, naming the CUDA to load instead. The CUDA is "
     "the version in the partition's build modules (cuda/11.4, CUDA/12.1.1), else, where "
     "it loads no build modules, what the nvcc at hand lists (`nvcc --list-gpu-arch`); the "
     "windows are in the table below."),
)

# Not a build question but a launch one, listed in the same table for the docs.
LAUNCH_NOTES = (
    ("horovodrun --mpi with Open MPI 5",
     "broken: horovodrun passes '-bind-to none' with one dash, which Open MPI 5 rejects; "
     "use horovodrun --gloo or mpirun directly. Open MPI 4.1 works (verified here with "
     "Debian's 4.1.4; the Open MPI 5 failure is reported, not reproduced here). "
     "`hpcprov doctor` warns when the environment's mpirun is Open MPI 5."),
)


@dataclass(frozen=True)
class Match:
    rule: Rule
    versions: dict[str, str]

    def message(self) -> str:
        given = ", ".join(f"{k} {v}" for k, v in self.versions.items())
        when = self.rule.condition()
        return f"{given}{f' (when {when})' if when else ''}: {self.rule.explanation}"


_RELEASE = re.compile(r"\d+(?:\.\d+)*")  # a plain release: 2.13.0
_CLAUSE = re.compile(r"\s*(<=|>=|==|!=|<|>)\s*([0-9][0-9A-Za-z.+!-]*)\s*")
_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
        "==": operator.eq, "!=": operator.ne}


def _release(text: str) -> tuple[int, ...]:
    """A plain release as PEP 440 compares it (trailing zeros do not count: 2.13 == 2.13.0)."""
    parts = [int(p) for p in text.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _pep440(text: str):
    """Any other version, by packaging (imported only then: it compiles a large regex)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


def _version(text: str | None) -> str | None:
    """The version to compare (without a local part such as +cpu), None when it is none."""
    if not text:
        return None
    text = text.split("+", 1)[0]
    return text if _RELEASE.fullmatch(text) or _pep440(text) is not None else None


def _compare(op: str, a: str, b: str) -> bool:
    if _RELEASE.fullmatch(a) and _RELEASE.fullmatch(b):
        return _OPS[op](_release(a), _release(b))
    x, y = _pep440(a), _pep440(b)
    return x is not None and y is not None and _OPS[op](x, y)


def _matches(spec: str | None, version: str | None) -> bool:
    """`version` satisfies every clause of `spec` (comma-separated `OP VERSION`).

    The rules' specifiers are plain comparisons, so they are evaluated without
    packaging.specifiers (it imports packaging.tags: logging, subprocess), and plain
    releases without packaging at all; pre-, post- and dev releases go to
    packaging.version. Tests check this agrees with SpecifierSet on every rule."""
    if spec is None:
        return True
    if version is None:
        return False
    for clause in spec.split(","):
        m = _CLAUSE.fullmatch(clause)
        if not m or not _compare(m.group(1), version, m.group(2)):
            return False
    return True


def versions_of(site: Site) -> dict[str, str]:
    """The versions the profile asks for (only those it pins)."""
    out: dict[str, str] = {}
    if site.horovod.version:
        out["horovod"] = site.horovod.version
    pinned: tuple[tuple[Literal["pytorch", "tensorflow"], str], ...] = (
        ("pytorch", "torch"), ("tensorflow", "tensorflow"))
    for name, key in pinned:
        fw = site.python.frameworks.get(name)
        if fw and fw.version:
            out[key] = fw.version
    return out


def evaluate(horovod: str | None, torch: str | None = None, tensorflow: str | None = None,
             gpu: bool = False) -> list[Match]:
    """Every rule that applies to this combination, in table order."""
    hv, tv, tfv = _version(horovod), _version(torch), _version(tensorflow)
    found = []
    for rule in RULES:
        if hv is None or not _matches(rule.horovod, hv):
            continue
        if not _matches(rule.torch, tv) or not _matches(rule.tensorflow, tfv):
            continue
        if rule.gpu is not None and rule.gpu != gpu:
            continue
        given = {"horovod": horovod or "?"}
        if rule.torch:
            given["torch"] = torch or "?"
        if rule.tensorflow:
            given["tensorflow"] = tensorflow or "?"
        found.append(Match(rule, given))
    return found


def for_site(site: Site) -> list[Match]:
    """The rules that apply to what the site builds (nothing when it builds no Horovod)."""
    if site.horovod.source not in ("pip", "wheelhouse"):
        return []
    v = versions_of(site)
    hvd = site.horovod
    torch = v.get("torch") if "pytorch" in hvd.frameworks else None
    tf = v.get("tensorflow") if "tensorflow" in hvd.frameworks else None
    gpu = bool(hvd.gpu_operations or hvd.gpu_allreduce)
    return evaluate(v.get("horovod"), torch, tf, gpu)


@dataclass(frozen=True)
class Patch:
    """A patch the build may apply: its file name and text, and the build-time condition
    (BUILD_FACTS name, minimum) under which it applies (None: always)."""

    name: str
    text: str
    when: tuple[str, str] | None = None


def patches_for(site: Site) -> list[Patch]:
    """The patches the site's Horovod build applies (some only under a build-time
    condition), in table order."""
    if site.horovod.source != "pip":
        return []
    rules = [m.rule for m in for_site(site) if m.rule.patch]
    # beside this module (importlib.resources would cost ~20 ms of start-up here)
    folder = Path(__file__).with_name("patches")
    return [Patch(r.patch, (folder / r.patch).read_text(), r.when)
            for r in rules if r.patch]

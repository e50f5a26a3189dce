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
    from hpcprov.model import Site


Verdict = Literal["ok", "patch", "caveat", "bad"]
LAST_HOROVOD = "0.28.1"


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


RULES: tuple[Rule, ...] = (
    Rule("unknown-horovod", "bad", f">{LAST_HOROVOD}",
         f"Horovod {LAST_HOROVOD} is the last release; no later version exists to build",
         "PyPI release history"),
    Rule("old-horovod-torch2", "bad", "<0.28.0", torch=">=2.0",
         explanation="Horovod before 0.28.0 predates PyTorch 2 and does not build against it; "
         f"use Horovod {LAST_HOROVOD} (hpcprov patches it for newer PyTorch)",
         evidence="Horovod 0.28.0 release notes (PyTorch 2.0 support)"),
    Rule("cxx17", "patch", "==0.28.1", torch=">=2.1",
         explanation="PyTorch >= 2.1 headers need C++17, Horovod 0.28.1 asks for C++14: raise "
         "CMAKE_CXX_STANDARD to 17 in CMakeLists.txt and horovod/torch/CMakeLists.txt "
         "(the torch one alone fails at link time; CXXFLAGS cannot do it, the CMake files "
         "strip -std=)",
         evidence="built here with torch 2.13.0, g++ 12, Open MPI 4.1.4, CMake 3.25: "
         "-cb shows PyTorch, MPI, Gloo",
         patch="horovod-0.28.1-cxx17.patch"),
    Rule("tf-xla-cpu", "patch", "==0.28.1", tensorflow=">=2.6", gpu=False,
         explanation="xla_mpi_ops.cc includes XLA headers that need highwayhash, which the "
         "TensorFlow wheel lacks; its XLA ops only exist with GPUs, so compile them only "
         "when HAVE_GPU",
         evidence="built here with tensorflow-cpu 2.21.0 + torch 2.13.0: -cb shows "
         "TensorFlow and PyTorch",
         patch="horovod-0.28.1-tf-xla-cpu.patch"),
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
    Rule("untested-torch", "caveat", "==0.28.1", torch=">2.13",
         explanation="newer than any PyTorch this table has built against; "
         "the cxx17 patch is applied, but the build is untested",
         evidence="none yet"),
    Rule("untested-tensorflow", "caveat", "==0.28.1", tensorflow=">2.21",
         explanation="newer than any TensorFlow this table has built against; untested",
         evidence="none yet"),
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
        return f"{given}: {self.rule.explanation}"


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
    for name, key in (("pytorch", "torch"), ("tensorflow", "tensorflow")):
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


def patches_for(site: Site) -> list[tuple[str, str]]:
    """(file name, text) of the patches the site's Horovod build applies, in order."""
    if site.horovod.source != "pip":
        return []
    names = [m.rule.patch for m in for_site(site) if m.rule.patch]
    # beside this module (importlib.resources would cost ~20 ms of start-up here)
    folder = Path(__file__).with_name("patches")
    return [(name, (folder / name).read_text()) for name in names]

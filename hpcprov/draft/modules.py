"""The module system and the module sets of a draft profile, from what `module` offers.

Pure: the shell lines that ask `module` (run by :mod:`hpcprov.draft.run`), the parsers of
their answers (``module -t avail``/``spider`` listings, Lmod and Environment Modules), and
the choice of one module per kind (compiler, CUDA, MPI, NCCL, CMake, Python) with the
alternatives it was chosen from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# init files that define `module` where the shell has no module function yet
INIT_FILES = ("/etc/profile.d/lmod.sh", "/usr/share/lmod/lmod/init/bash",
              "/etc/profile.d/z00_lmod.sh", "/etc/profile.d/modules.sh",
              "/usr/share/Modules/init/bash", "/opt/apps/lmod/lmod/init/bash")
# Lmod writes a user spider cache when building it takes longer than this many seconds:
# the draft writes nothing, so it asks for a day; and no pager (the commands run with a
# terminal on stdout, where Lmod would start `less` and wait for a key)
ENV = {"LMOD_SHORT_TIME": "86400", "LMOD_PAGER": "none", "MODULES_PAGER": ""}

_FIND = (
    'src=; if ! type module >/dev/null 2>&1; then for f in ' + " ".join(INIT_FILES) +
    '; do if [ -r "$f" ]; then . "$f" >/dev/null 2>&1; src=$f; '
    'type module >/dev/null 2>&1 && break; fi; done; fi; '
    'type module >/dev/null 2>&1 || { echo "no module command in this shell or its init '
    'files" >&2; exit 127; }; '
)
PROBE = _FIND + (
    'echo "lmod=${LMOD_VERSION:-}"; echo "modules=${MODULES_VERSION:-}"; '
    'for f in "${LMOD_PKG:-/nonexistent}/init/bash" "${MODULESHOME:-/nonexistent}/init/bash" '
    '"$src"; do if [ -n "$f" ] && [ -r "$f" ]; then echo "init=$f"; break; fi; done'
)
AVAIL = _FIND + "module -t avail 2>&1 | cat"
SPIDER = _FIND + "module -t spider 2>&1 | cat"

_MARK = re.compile(r"\s*(\([^()]*\)|<[^<>]*>)\s*$")


@dataclass(frozen=True)
class Module:
    """One module as ``module -t avail`` lists it."""

    name: str            # gcc/10.2.0
    default: bool = False

    @property
    def family(self) -> str:
        """The part before the first slash, lower case (``gcc``)."""
        return self.name.split("/", 1)[0].lower()

    @property
    def version(self) -> tuple[int, ...]:
        """The numbers after the family, for ordering (``openmpi-4.1.1`` -> 4, 1, 1)."""
        rest = self.name.split("/", 1)[1] if "/" in self.name else ""
        # ASCII digits in runs of at most 15 (\d takes other scripts' digits; int()
        # refuses more than 4300 of them)
        return tuple(int(n) for n in re.findall(r"[0-9]{1,15}", rest)[:6])


@dataclass(frozen=True)
class System:
    """The module system: lmod, tcl (Environment Modules) or none; its version and the
    file that defines `module` in a non-login shell."""

    kind: str = "none"
    version: str = ""
    init: str | None = None


def parse_probe(text: str) -> System:
    """The probe's ``lmod=``/``modules=``/``init=`` lines."""
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if values.get("lmod"):
        return System("lmod", values["lmod"], values.get("init") or None)
    if values.get("modules") or values.get("init"):
        return System("tcl", values.get("modules", ""), values.get("init") or None)
    return System()


def parse_listing(text: str) -> list[Module]:
    """``module -t avail`` or ``module -t spider`` output: one module a line, under
    ``/path:`` headings; ``gcc/`` directory lines are skipped; ``(default)``, ``(D)`` and
    ``<...>`` marks are read and dropped. Lines with spaces (messages) are not modules."""
    out: dict[str, Module] = {}
    for raw in text.splitlines():
        line, marks = raw.strip(), []
        while m := _MARK.search(line):
            marks.append(m.group(1).strip("()<>"))
            line = line[:m.start()]
        if not line or line.endswith((":", "/")) or re.search(r"\s", line):
            continue
        default = any(mark in ("D", "default") or mark.startswith("default")
                      for mark in marks)
        out[line] = Module(line, default or (line in out and out[line].default))
    return list(out.values())


# kind -> (title, family pattern, loaded at build, loaded at run time, needs GPUs)
KINDS: dict[str, tuple[str, str, bool, bool, bool]] = {
    "compiler": ("compiler", r"gcc|gnu|intel|intel-oneapi-compilers|oneapi|nvhpc|pgi|aocc|"
                 r"llvm|clang", True, True, False),
    "cuda": ("CUDA", r"cuda|cudatoolkit|cuda-toolkit|nvidia-cuda", True, True, True),
    "mpi": ("MPI", r"mpi|.*(openmpi|ompi|mvapich|mpich|impi|intel-?mpi|hpcx|spectrum-mpi|"
            r"cudampi).*", True, True, False),
    "nccl": ("NCCL", r"nccl(?!-tests).*", True, True, True),
    "cmake": ("CMake", r"cmake", True, False, False),
    "python": ("Python", r"python|python3|cray-python", True, True, False),
}
# offered, named in the draft, never loaded by it (its Python stack is a venv)
OTHERS: dict[str, tuple[str, str]] = {
    "pytorch": ("PyTorch", r"pytorch|torch"),
    "tensorflow": ("TensorFlow", r"tensorflow.*"),
    "conda": ("conda", r"anaconda|anaconda3|miniconda|miniconda3|conda|miniforge|miniforge3|"
              r"mamba|mambaforge"),
}
_PREFERRED = {"compiler": ["gcc", "gnu"], "mpi": ["openmpi", "ompi", "hpcx", "mvapich",
                                                  "mpich"]}


def cuda_aware(module: Module) -> bool:
    """An MPI whose name says it is built for CUDA (cudampi, openmpi/4.1-cuda, -gdr)."""
    return bool(re.search(r"cuda|gdr|gpu", module.name.lower()))


@dataclass
class Choice:
    """The module picked for one kind, why, and what else was offered."""

    kind: str
    title: str
    chosen: str | None
    why: str = ""
    alternatives: list[str] = field(default_factory=list)
    spider_only: list[str] = field(default_factory=list)


def _family_rank(kind: str, module: Module) -> int:
    """Position of the module's family among the preferred ones (lower is better)."""
    prefs = _PREFERRED.get(kind, [])
    return next((i for i, p in enumerate(prefs) if p in module.name.lower()), len(prefs))


def _cuda_match(module: Module, cuda: Module | None) -> bool:
    """The module's name mentions the chosen CUDA's major.minor (nccl/2.9-cuda11-3)."""
    if cuda is None or len(cuda.version) < 2:
        return False
    m = re.search(r"cuda[-_]?([0-9]{1,9})[.-]([0-9]{1,9})", module.name.lower())
    return m is not None and (int(m.group(1)), int(m.group(2))) == cuda.version[:2]


def _order(kind: str, mods: list[Module], gpus: bool, cuda: Module | None) -> list[Module]:
    """Best first: CUDA-aware MPI where there are GPUs (plain MPI where not), a name that
    matches the chosen CUDA, the preferred family, the default, the highest version."""
    def key(m: Module) -> tuple[object, ...]:
        aware = cuda_aware(m) if kind == "mpi" else False
        return (aware != gpus if kind == "mpi" else False, not _cuda_match(m, cuda),
                _family_rank(kind, m), not m.default, tuple(-v for v in m.version))
    return sorted(mods, key=key)


def _why(kind: str, best: Module, gpus: bool, cuda: Module | None) -> str:
    """Why the first module won, in words."""
    reasons = []
    if kind == "mpi":
        reasons.append("CUDA-aware by its name" if cuda_aware(best) else "not CUDA-aware by "
                       "its name" + (" (no CUDA-aware MPI is offered)" if gpus else ""))
    if _cuda_match(best, cuda):
        reasons.append(f"built for {cuda.name if cuda else ''}")
    reasons.append("the default" if best.default else "the highest version")
    return ", ".join(reasons)


def matching(pattern: str, mods: list[Module]) -> list[Module]:
    """The modules whose family matches a pattern (the whole family name)."""
    return [m for m in mods if re.fullmatch(pattern, m.family)]


def choose(kind: str, avail: list[Module], spider: list[Module], gpus: bool,
           cuda: Module | None = None) -> Choice:
    """One module of a kind from ``module -t avail``, best first (see :func:`_order`);
    modules only ``module spider`` finds (they need others loaded first) are named."""
    title, pattern = KINDS[kind][0], KINDS[kind][1]
    mods = _order(kind, matching(pattern, avail), gpus, cuda)
    seen = {m.name for m in avail}
    hidden = [m.name for m in matching(pattern, spider) if m.name not in seen]
    if not mods:
        return Choice(kind, title, None, "not offered by module -t avail",
                      spider_only=hidden)
    return Choice(kind, title, mods[0].name, _why(kind, mods[0], gpus, cuda),
                  [m.name for m in mods[1:]], hidden)


@dataclass
class ModulePlan:
    """The module system, the build and run-time sets, and every choice behind them."""

    system: System
    build: list[str] = field(default_factory=list)
    runtime: list[str] = field(default_factory=list)
    choices: list[Choice] = field(default_factory=list)
    others: dict[str, list[str]] = field(default_factory=dict)  # title -> offered modules


def plan_modules(system: System, avail: list[Module], spider: list[Module],
                 gpus: bool) -> ModulePlan:
    """The module sets for a cluster with (``gpus``) or without GPUs: a compiler, CUDA
    and NCCL where there are GPUs, an MPI, CMake (build only) and Python, in load order."""
    plan = ModulePlan(system)
    cuda: Module | None = None
    for kind, (_, _, at_build, at_run, needs_gpus) in KINDS.items():
        if needs_gpus and not gpus:
            continue
        choice = choose(kind, avail, spider, gpus, cuda)
        plan.choices.append(choice)
        if choice.chosen is None:
            continue
        if kind == "cuda":
            cuda = next(m for m in avail if m.name == choice.chosen)
        if at_build:
            plan.build.append(choice.chosen)
        if at_run:
            plan.runtime.append(choice.chosen)
    for title, pattern in OTHERS.values():
        found = sorted({m.name for m in matching(pattern, avail + spider)})
        if found:
            plan.others[title] = found
    return plan


def offered(name: str, listing: list[Module]) -> bool:
    """A profile's module (``gcc/10.2.0``, or ``gcc`` for the default) is in the listing."""
    return any(m.name == name or (("/" not in name) and m.family == name.lower())
               for m in listing)


def same_family(name: str, listing: list[Module]) -> list[str]:
    """What the listing offers of a module's family (``gcc/10.2.0`` -> the gcc modules)."""
    fam = name.split("/", 1)[0].lower()
    return [m.name for m in listing if m.family == fam]

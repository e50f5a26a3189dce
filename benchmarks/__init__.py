"""hpcprov's benchmarks: measurements (medians over repeated runs), not timed tests.

``python -m benchmarks`` runs every ``bench_*.py`` module here, stores each module's raw
results in ``benchmarks/results/<NAME>.json`` and regenerates ``docs/performance.md`` from all
stored results, so running only some benchmarks keeps the sections measured earlier.

A benchmark module defines ``NAME``, ``TITLE``, ``METHOD`` (Markdown prose: what is measured
and how) and ``run(ctx: Context) -> list[Result]``.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
ORDER = ("provision", "cli", "fidelity", "scale")  # sections first in this order, then A-Z


class BenchError(Exception):
    """A measurement could not be taken (the command failed, a tool is missing)."""


@dataclass
class Result:
    """One measurement: its repeated runs, and the target it is judged against (if any)."""

    name: str
    unit: str  # "s" for seconds; anything else is a count (jobs, rounds, modules)
    runs: list[float] = field(default_factory=list)
    target: float | None = None
    op: str = "<="  # how the judged statistic compares with the target: <=, >=, ==
    on: str = "median"  # the judged statistic: "median" or "max" (worst case)
    note: str = ""
    status: str = ""  # instead of a number: "not available: ...", "pending: ..."

    @property
    def median(self) -> float | None:
        return statistics.median(self.runs) if self.runs else None

    @property
    def judged(self) -> float | None:
        if not self.runs:
            return None
        return max(self.runs) if self.on == "max" else self.median

    @property
    def passed(self) -> bool | None:
        """True/False against the target; None without a target or a number."""
        value = self.judged
        if self.target is None or value is None:
            return None
        return {"<=": value <= self.target, ">=": value >= self.target,
                "==": value == self.target}[self.op]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "median": self.median, "passed": self.passed}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass
class Context:
    """What a benchmark module gets: how many runs, where to cache tools, where to note."""

    repeat: int = 7
    quick: bool = False
    root: Path = ROOT
    cache: Path = ROOT / ".bench-cache"
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        """A sentence for the section's prose (e.g. an analysis of what was measured)."""
        self.notes.append(text)

    def log(self, text: str) -> None:
        print(f"benchmarks: {text}", file=sys.stderr, flush=True)


def part_rows(label: str, runs: list[dict[str, float]], kind: str = "") -> list[Result]:
    """One row per part of a measurement (a setup step, a job), its seconds in each run (0
    in a run without it), named "LABEL: KIND PART", in the order the parts first appear."""
    names = list(dict.fromkeys(name for run in runs for name in run))
    return [Result(f"{label}: {kind}{name}", "s", [run.get(name, 0.0) for run in runs])
            for name in names]


def time_call(fn: Callable[[], object], repeat: int, warmup: int = 1) -> list[float]:
    """Wall seconds of ``fn()`` per run (perf_counter), after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return runs


@dataclass
class Process:
    """A command to time as a whole process; ``before()`` runs untimed before every run."""

    argv: list[str]
    env: dict[str, str] | None = None
    before: Callable[[], object] | None = None
    timeout: float = 300.0

    def once(self) -> float:
        if self.before is not None:
            self.before()
        t0 = time.perf_counter()
        proc = subprocess.run(self.argv, env=self.env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              timeout=self.timeout)
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0:
            tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise BenchError(f"{' '.join(self.argv)}: exit {proc.returncode}: "
                             f"{' / '.join(tail)}")
        return elapsed


def time_processes(cases: dict[str, Process], repeat: int,
                   warmup: int = 1) -> dict[str, list[float]]:
    """Wall seconds of whole processes (start, imports, work, exit) per run.

    The cases are interleaved (run 1 of every case, then run 2, ...), so a change in the
    machine's load during the measurement affects every case alike and side-by-side
    comparisons stay fair. A run that exits non-zero raises BenchError.
    """
    runs: dict[str, list[float]] = {label: [] for label in cases}
    for i in range(warmup + repeat):
        for label, case in cases.items():
            elapsed = case.once()
            if i >= warmup:
                runs[label].append(elapsed)
    return runs


# ------------------------------------------------------------------ the run's circumstances


def _first(path: str, key: str) -> str | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine() -> dict[str, Any]:
    """CPU, cores, memory, kernel, Python, and the load when the run started."""
    mem_kb = _first("/proc/meminfo", "MemTotal")
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "cpu": _first("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        "cores": os.cpu_count(), "usable_cores": usable,
        "memory_gib": round(int(mem_kb.split()[0]) / 2**20, 1) if mem_kb else None,
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "load": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }


def git_commit(root: Path = ROOT) -> str:
    """The commit measured, with '+ uncommitted changes' when the tree differs from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              timeout=30).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD") or "unknown"
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                    ":!benchmarks/results", ":!docs/performance.md")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit} + uncommitted changes" if dirty else commit


def describe_machine(m: dict[str, Any], load: bool = True) -> str:
    cores = f"{m['cores']} cores"
    if m.get("usable_cores") and m["usable_cores"] != m["cores"]:
        cores += f" ({m['usable_cores']} usable)"
    at = f"; load average {' / '.join(str(x) for x in m['load'])} at start" \
        if load and m.get("load") else ""
    return (f"{m['cpu']}, {cores}, {m['memory_gib']} GiB memory, {m['kernel']}, "
            f"{m['python']}{at}")


# ------------------------------------------------------------------ storage and Markdown


def save(name: str, section: dict[str, Any], results_dir: Path = RESULTS) -> Path:
    import json

    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{name}.json"
    path.write_text(json.dumps(section, indent=2) + "\n", encoding="utf-8")
    return path


def load_all(results_dir: Path = RESULTS) -> list[dict[str, Any]]:
    """Every stored section, in document order."""
    import json

    sections = [json.loads(p.read_text(encoding="utf-8"))
                for p in sorted(results_dir.glob("*.json"))]

    def rank(s: dict[str, Any]) -> tuple[int, str]:
        return (ORDER.index(s["name"]) if s["name"] in ORDER else len(ORDER), s["name"])

    return sorted(sections, key=rank)


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if unit == "s":
        if value < 1:
            return f"{value * 1000:.3g} ms"
        return f"{value:.3g} s"
    if float(value).is_integer():
        return f"{int(value)} {unit[:-1] if value == 1 and unit.endswith('s') else unit}"
    return f"{value:.3g} {unit}"


def _row(r: Result) -> str:
    if r.status:
        return f"| {r.name} | {r.status} | | | | |"
    spread = f"{fmt(min(r.runs), r.unit)} – {fmt(max(r.runs), r.unit)}" if len(r.runs) > 1 \
        else ""
    target = "" if r.target is None else \
        f"{r.op} {fmt(r.target, r.unit)}{' (worst case)' if r.on == 'max' else ''}"
    met = {True: "yes", False: "**no**", None: ""}[r.passed]
    return f"| {r.name} | {fmt(r.median, r.unit)} | {spread} | {len(r.runs)} | {target} | {met} |"


def render(sections: list[dict[str, Any]]) -> str:
    """docs/performance.md from the stored sections (the newest run's machine on top)."""
    newest = max(sections, key=lambda s: s["run"]["date"]) if sections else None
    out = ["# Performance", "",
           "Generated by `python -m benchmarks` from `benchmarks/results/*.json`; do not edit "
           "by hand (see [benchmarks/README.md](../benchmarks/README.md)). Every number is the "
           "median over repeated runs, with the spread; the targets come from issue 6. These "
           "are measurements, not tests: nothing fails when a target is missed.", ""]
    if newest:
        run = newest["run"]
        out += [f"Latest run: {run['date']}, commit {run['commit']}, on "
                f"{describe_machine(run['machine'])}. A section measured in another run says "
                "when and where.", ""]
    for s in sections:
        run = s["run"]
        out += [f"## {s['title']} (`{s['name']}`)", ""]
        where = "" if newest and run["machine"]["cpu"] == newest["run"]["machine"]["cpu"] \
            and run["machine"]["cores"] == newest["run"]["machine"]["cores"] \
            else f" on {describe_machine(run['machine'], load=False)}"
        quick = " (a `--quick` run)" if run.get("quick") else ""
        again = f"python -m benchmarks --only {s['name']}" + (" --quick" if run.get("quick")
                                                               else "")
        out += [f"Measured {run['date']} at commit {run['commit']}{where}{quick}; load average "
                f"at the start {' / '.join(str(x) for x in run['machine'].get('load') or [])}. "
                f"Reproduce with `{again}`.", "", s["method"].strip(), ""]
        out += ["| measurement | median | min – max | runs | target | met? |",
                "|---|---|---|---|---|---|"]
        results = [Result.from_json(r) for r in s["results"]]
        out += [_row(r) for r in results]
        notes = [f"- {r.name}: {r.note}" for r in results if r.note]
        if notes:
            out += ["", *notes]
        if s.get("notes"):
            out += ["", *s["notes"]]
        out.append("")
    return "\n".join(out).rstrip() + "\n"

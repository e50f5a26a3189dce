"""Hostile cases tried and held (issue 14): the table in docs/security.md.

    python -m benchmarks.reliability                 # run the cases; the table as Markdown
    python -m benchmarks.reliability --json          # the same counts as JSON
    python -m benchmarks.reliability --collect-only  # count the cases without running them

The counts come from a run, not from a hand-kept list: pytest runs the files in RULES (tests
marked slow or testbed left out) with ``--junitxml``, and every test case (each parameter
set is one case) is put in a category by the first rule that matches its file and test
name. A case that passed held; one that failed or errored did not; an expected failure
(``xfail``: a known hole, its reason says which) was tried and did not hold; a skipped one
(no root, no runuser...) was not tried. Tests marked slow (they build a real environment
for minutes) are only collected (``pytest --collect-only``): their row gives how many cases
there are and says they were not run here. Tests of the listed files that match no rule are
controls or plain behaviour (a cache that hits, a verified wheel used): not counted, and
listed under ``"not_counted"`` in the JSON.

Not a benchmark of the ``python -m benchmarks`` runner (no timing): a script beside them.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import git_commit  # noqa: E402

BAD = "Bad profiles: syntax, YAML bombs, cycles, sizes, numbers"
ESC = "Terminal escapes and control characters"
SEARCH = "Search path and site detection"
SPECIAL = "Special files: FIFOs, /dev/zero, sockets, directories"
SHELL = "Shell injection into generated scripts"
CACHE = "Caches and symlinks: profile cache, ready cache, prefix state"
WHEEL = "Wheelhouse trust: owner, modes, hashes, symlinks, races"
SECOND = "A real second user (runuser): wheelhouse and caches"
OUTPUT = "Output errors: unwritable, read-only, full disk, closed pipe"
FAULTS = "Provisioner faults: dead runner's lock, read-only prefix, full disk, bad journal"
REAL = "Provisioner for real: Ctrl-C, kill -9 and resume, full disk, bad download (slow)"
# round three (issue 27)
PREFIX = "The prefix itself: group-writable folders, swapped setup.sh, planted links, FIFOs"
PREFIX_RACE = "A real second user (runuser) swapping setup.sh in a loop during setup"
SIGNALS = "Interrupted validations: SIGINT, SIGTERM, SIGHUP cancel what was started"
VERDICT = "Verdicts: compare files, history, report paths, run folders, result records"
NUMBERS = "Numbers and long values: statuses, walltimes, 5000 digits, other digits"
DRAFT = "site draft on hostile scheduler output: numbers, host lists, sizes, hangs"
GEOMETRY = "Geometry by -o: nodes, tasks, GPUs, time, queue, select/place spellings"
PROBES = "Commands it runs: an activate or scheduler command that hangs or leaves children"
# round four (issue 33)
CODE = ("Files a job runs: one rule (write_code), run folders, programs changed after "
        "submission")
CODE_RACE = "A real second user (runuser) changing what a validation job runs"
EDF_FILE = "The EDF file: hostile values, glob matches, quotes, planted links, shared folders"
ROUND4 = "JUnit of any output, typed manifests, env value lines, a uenv mounted elsewhere"
# round five (issue 41)
UMASK = ("Umask 002: what setup makes, what jobs write and hpcprov reads, a prefix others "
         "could change")
UMASK_RACE = ("A real second user (runuser) under umask 002, bytecode on: setup, validate, "
              "doctor")
FLUX = "Flux directives as flux-core's own parser reads them (RFC 36)"
REFS = "Registry references and job ids: what the shell or a site notice would change"


@dataclass(frozen=True)
class Rule:
    """Test cases of FILE whose function name matches PATTERN (re.search) are CATEGORY."""

    file: str
    pattern: str
    category: str
    slow: bool = False  # only collected, never run here


RULES = [
    Rule("tests/test_loader_errors.py", "", BAD),
    Rule("tests/test_hostile.py", "", SHELL),
    Rule("tests/test_hostile_input.py", "fifo|dev_zero|special_files|read_regular|directory",
         SPECIAL),
    Rule("tests/test_hostile_input.py", "output|stdout", OUTPUT),
    Rule("tests/test_hostile_input.py", "escape|free_text_with|c1_controls|cached_free_text",
         ESC),
    Rule("tests/test_hostile_input.py", "relative|catch_all|several_matches", SEARCH),
    Rule("tests/test_hostile_input.py", "merge_does_work|twenty_thousand|numbers|"
         "standard_json|bad_utf8|nameless|long_extends|self_extension|walltime", BAD),
    Rule("tests/test_profile_cache.py", "errors_are_the_same_with_and_without_libyaml", BAD),
    Rule("tests/test_profile_cache.py", "fifo", SPECIAL),
    Rule("tests/test_profile_cache.py", "damaged|unwritable|refuses|cannot_carry|"
         "newline_injected|pickle|symlink|atomic_write|another_user|others_can_change|"
         "private|ready_entry|other_code|prefix_state_files|shadowed|broken_profile", CACHE),
    Rule("tests/test_provision_wheelhouse.py", "", WHEEL),
    Rule("tests/test_second_user.py", "umask_002", UMASK_RACE),
    Rule("tests/test_second_user.py", "setup_sh", PREFIX_RACE),
    Rule("tests/test_second_user.py", "validation_job", CODE_RACE),
    Rule("tests/test_second_user.py", "", SECOND),
    Rule("tests/test_provision_unit.py", "malformed_journal|without_writing|dead_runner|"
         "full_disk", FAULTS),
    Rule("tests/test_provision_real.py", "interrupt_crash|full_disk|checksum", REAL,
         slow=True),
    Rule("tests/test_prefix_trust.py", "", PREFIX),
    Rule("tests/test_interrupts.py", "", SIGNALS),
    Rule("tests/test_verdicts.py", "status|walltime|long_value", NUMBERS),
    Rule("tests/test_verdicts.py", "raw", ESC),
    Rule("tests/test_verdicts.py", "", VERDICT),
    Rule("tests/test_validate_unit.py", "never_share_a_run_folder", VERDICT),
    Rule("tests/test_draft_hostile.py", "", DRAFT),
    Rule("tests/test_geometry_flags.py", "refuse|judged", GEOMETRY),
    Rule("tests/test_probe_session.py", "", PROBES),
    Rule("tests/test_schedulers.py", "hung|leaves_a_child", PROBES),
    Rule("tests/test_state_readers.py", "escapes", ESC),
    Rule("tests/test_state_readers.py", "", SPECIAL),
    Rule("tests/test_code_writes.py", "", CODE),
    Rule("tests/test_edf_file.py", "", EDF_FILE),
    Rule("tests/test_round_four.py", "", ROUND4),
    Rule("tests/test_uenv.py", "mounted_elsewhere|private_file", ROUND4),
    Rule("tests/test_group_umask.py", "", UMASK),
    Rule("tests/test_flux_directives.py", "", FLUX),
    Rule("tests/test_image_refs_hostile.py", "refused_at|refused_in|refused_for|refuse_a_|"
         "refuses_it|shown_bounded", REFS),
    Rule("tests/test_job_ids.py", "", REFS),
]
ORDER = [BAD, ESC, SEARCH, SPECIAL, SHELL, OUTPUT, CACHE, WHEEL, SECOND, FAULTS, REAL,
         PREFIX, PREFIX_RACE, SIGNALS, VERDICT, NUMBERS, DRAFT, GEOMETRY, PROBES,
         CODE, CODE_RACE, EDF_FILE, ROUND4, UMASK, UMASK_RACE, FLUX, REFS]


def function_name(name: str) -> str:
    """A test case's function name (its parameters dropped): test_x[a-b] -> test_x."""
    return name.split("[", 1)[0]


def category(file: str, name: str) -> Rule | None:
    """The first rule matching a test case of FILE named NAME, else None."""
    for rule in RULES:
        if rule.file == file and re.search(rule.pattern, function_name(name)):
            return rule
    return None


@dataclass
class Row:
    category: str
    tried: int = 0
    held: int = 0
    not_held: list[str] = field(default_factory=list)  # "file::name: why"
    skipped: list[str] = field(default_factory=list)  # "file::name: why"
    collected: int = 0  # slow rows: collected, not run
    files: set[str] = field(default_factory=set)

    def to_json(self) -> dict[str, object]:
        return {"category": self.category, "tried": self.tried, "held": self.held,
                "not_held": self.not_held, "skipped": self.skipped,
                "collected_only": self.collected, "files": sorted(self.files)}


def outcome(case: ET.Element) -> tuple[str, str]:
    """(passed | failed | xfailed | skipped, message) of a JUnit testcase element."""
    for tag in ("failure", "error"):
        found = case.find(tag)
        if found is not None:
            return "failed", (found.get("message") or tag).splitlines()[0][:500]
    skipped = case.find("skipped")
    if skipped is not None:
        kind = "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
        return kind, ((skipped.get("message") or "").splitlines() or [""])[0][:500]
    return "passed", ""


def cases_from_junit(path: Path) -> Iterable[tuple[str, str, str, str]]:
    """(file, test name, outcome, message) per test case of a JUnit XML report."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "")
        file = module.replace(".", "/") + ".py"
        key = (file, case.get("name", ""))
        result = outcome(case)
        if key not in seen or result[0] == "failed":  # a teardown error is reported apart
            seen[key] = result
    for (file, name), (kind, message) in seen.items():
        yield file, name, kind, message


def tally(cases: Iterable[tuple[str, str, str, str]], collected: Iterable[str],
          everything: bool = False) -> tuple[list[Row], list[str]]:
    """The rows (ORDER) from the cases run and the node ids only collected (those of slow
    rules; with ``everything``, of every rule); and the cases that no rule counts."""
    rows = {name: Row(name) for name in ORDER}
    uncounted = []
    for file, name, kind, message in cases:
        rule = category(file, name)
        if rule is None or rule.slow:
            uncounted.append(f"{file}::{name}")
            continue
        row = rows[rule.category]
        row.files.add(file)
        if kind == "skipped":
            row.skipped.append(f"{file}::{name}: {message}")
            continue
        row.tried += 1
        if kind == "passed":
            row.held += 1
        else:
            row.not_held.append(f"{file}::{name}: {kind}: {message}")
    for node in collected:
        file, _, name = node.partition("::")
        rule = category(file, name)
        if rule is None:
            uncounted.append(node)
        elif rule.slow or everything:
            rows[rule.category].collected += 1
            rows[rule.category].files.add(file)
    return [r for r in rows.values() if r.tried or r.skipped or r.collected], uncounted


def pytest(args: list[str], timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts=", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def collect(files: list[str], marks: str) -> list[str]:
    """The node ids pytest collects from FILES with -m MARKS."""
    proc = pytest(["--collect-only", "-m", marks, *files])
    if proc.returncode not in (0, 5):  # 5: nothing collected
        raise SystemExit(f"pytest --collect-only failed:\n{proc.stdout[-3000:]}{proc.stderr}")
    return [line for line in proc.stdout.splitlines() if "::" in line]


def run(files: list[str]) -> list[tuple[str, str, str, str]]:
    """Run FILES (not slow, not testbed) and read back every case's outcome."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        proc = pytest([f"--junitxml={report}", "-m", "not slow and not testbed", *files])
        if not report.exists():
            raise SystemExit(f"pytest wrote no report:\n{proc.stdout[-3000:]}{proc.stderr}")
        return list(cases_from_junit(report))


def markdown(rows: list[Row], meta: dict[str, str]) -> str:
    lines = [f"Counted on {meta['date']} at commit {meta['commit']} with "
             f"`{meta['command']}` ({meta['seconds']} s).", "",
             "| Hostile cases | Tried | Held | Not held | Skipped | Run | Tests |",
             "|---|---:|---:|---:|---:|---|---|"]
    total = Row("**Total**")
    for r in rows:
        files = ", ".join(f"`{Path(f).name}`" for f in sorted(r.files))
        if r.collected:
            why = " (slow: each builds an environment; CI's full run runs them)" \
                if r.category == REAL else ""
            lines.append(f"| {r.category} | {r.collected} | - | - | - | collected only{why} "
                         f"| {files} |")
            continue
        lines.append(f"| {r.category} | {r.tried} | {r.held} | {len(r.not_held)} | "
                     f"{len(r.skipped)} | run | {files} |")
        total.tried += r.tried
        total.held += r.held
        total.not_held += r.not_held
        total.skipped += r.skipped
    lines.append(f"| **Total run** | **{total.tried}** | **{total.held}** | "
                 f"**{len(total.not_held)}** | **{len(total.skipped)}** | | |")
    for title, cases in (("Not held", total.not_held), ("Skipped", total.skipped)):
        if cases:
            lines += ["", f"{title}:", ""]
            lines += [f"* `{case.split(': ', 1)[0]}`: {case.split(': ', 1)[1]}"
                      for case in cases]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reliability",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON, not Markdown")
    parser.add_argument("--collect-only", action="store_true",
                        help="count the cases without running them (every row 'collected')")
    args = parser.parse_args(argv)
    start = time.monotonic()
    fast = sorted({r.file for r in RULES if not r.slow})
    slow = sorted({r.file for r in RULES if r.slow})
    if args.collect_only:
        rows, uncounted = tally([], collect(fast + slow, "not testbed"), everything=True)
    else:
        rows, uncounted = tally(run(fast), collect(slow, "slow"))
    command = "python -m benchmarks.reliability" + (" --collect-only" if args.collect_only
                                                    else "")
    meta = {"date": time.strftime("%Y-%m-%d"), "commit": git_commit(), "command": command,
            "seconds": f"{time.monotonic() - start:.0f}"}
    if args.json:
        print(json.dumps({**meta, "rows": [r.to_json() for r in rows],
                          "not_counted": uncounted}, indent=2))
    else:
        print(markdown(rows, meta), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The command line's entry point (hpcprov.app.entry): the imports of a fresh process run
with the garbage collector paused and end frozen; the command runs with it, and a program
that imports the command line as a library keeps its collector as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import gc, json, sys
if sys.argv[1] == "entry":
    from hpcprov.app.entry import main
else:
    from hpcprov.app.cli import main
rc = main(["sites", "--json"])
print(json.dumps({"rc": rc, "enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}))
"""


def _probe(how: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, how], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_a_fresh_command_freezes_its_imports_and_runs_with_the_collector() -> None:
    got = _probe("entry")
    assert got["rc"] == 0 and got["enabled"]
    assert got["frozen"] > 10_000  # the imported modules' objects


def test_the_command_line_as_a_library_leaves_the_collector_alone() -> None:
    got = _probe("library")
    assert got["rc"] == 0 and got["enabled"] and got["frozen"] == 0


def test_both_ways_of_starting_use_the_entry_point() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["hpcprov"] == "hpcprov.app.entry:main"
    assert "from hpcprov.app.entry import main" in (ROOT / "hpcprov" / "__main__.py").read_text()
    proc = subprocess.run([sys.executable, "-m", "hpcprov", "sites", "--json"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and json.loads(proc.stdout)

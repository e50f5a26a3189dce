"""A checkout tests its own code or does not start (issue 42): in a second clone, with this
checkout the installed one, ``python3 -m pytest -q`` would import ``hpcprov`` from the
clone and ``hpcprov.provision`` through the install, from here; tests/this_checkout.py
stops it before any test, in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprov_tests import REPO

TINY = '''
import hpcprov.provision


def test_the_code_of_this_clone() -> None:
    assert hpcprov.provision.__file__.startswith({clone!r}), hpcprov.provision.__file__
'''


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A git clone of this repository, with this working tree's test guard and its
    pyproject.toml (what the guard reads), and a tiny test of its own."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and this checkout's .git")
    target = tmp_path / "second"
    subprocess.run(["git", "clone", "-q", str(REPO), str(target)],
                   check=True, capture_output=True, timeout=300)
    for name in ("tests/this_checkout.py", "tests/conftest.py", "pyproject.toml"):
        shutil.copy(REPO / name, target / name)
    (target / "tests" / "test_tiny.py").write_text(TINY.format(clone=str(target)))
    return target


@pytest.mark.parametrize("args", [["--collect-only"], ["tests/test_tiny.py"]],
                         ids=["the-suite", "one-file"])
def test_a_second_clone_stops_in_one_line(clone: Path, args: list[str]) -> None:
    """Here every hpcprov package loads from this checkout (else this session had stopped):
    in the clone, ``python3 -m pytest -q`` stops at once with one line naming the package
    that would load from here, and runs no test (the whole suite is only collected, so that
    a guard that failed would not run it)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *args], cwd=clone, capture_output=True, text=True, timeout=300)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"hpcprov: the tests of {clone} would not test its code: "), line
    assert f"from {REPO}" in line and f"not from {clone}" in line, line
    assert f"pip install -e {clone}" in line, line


def test_this_checkout_passes_its_own_check() -> None:
    """The same check, run on this checkout from a fresh interpreter, finds every package
    here (the mapped folders and hpcprov/'s own)."""
    probe = (f"import sys\nsys.path.insert(0, {str(REPO / 'tests')!r})\n"
             "import this_checkout as t\n"
             "print(t.why_not_this_checkout())\nprint(sorted(t.packages()))\n")
    proc = subprocess.run([sys.executable, "-c", probe], cwd="/", capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    why, names = proc.stdout.splitlines()
    assert why == "None"
    for name in ("hpcprov", "hpcprov.provision", "hpcprov.validate", "hpcprov.sites",
                 "hpcprov.testbed", "hpcprov.site", "hpcprov.app"):
        assert repr(name) in names

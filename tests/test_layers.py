"""The layering CI checks (.ci/lint, import-linter): hpcprov is a few folders whose arrows
point one way, with no import cycle anywhere, annotations (TYPE_CHECKING imports) included.

The contracts are run here on an installed copy of the package, as .ci/lint does, once as
it is (kept) and once with an arrow planted that each contract must refuse. Where
import-linter's ``lint-imports`` is not on PATH those tests skip, saying so, unless
``HPCPROV_REQUIRE_LINT_TOOLS=1`` (CI), where they fail instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parent.parent
REQUIRE = "HPCPROV_REQUIRE_LINT_TOOLS"


def lint_imports_tool(environ: Mapping[str, str]) -> str:
    """import-linter's ``lint-imports`` on ``environ``'s PATH; where it is missing, skip the
    test saying so, or fail it where ``environ`` requires the tool (CI: .ci/lint runs it, so
    a suite that skipped these tests would pass there without the layers checked)."""
    found = shutil.which("lint-imports", path=environ.get("PATH", ""))
    if found:
        return found
    why = "import-linter's lint-imports is not on PATH (pip install -e '.[dev]')"
    if environ.get(REQUIRE) == "1":
        pytest.fail(f"{why}, and {REQUIRE}=1 requires it", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="module")
def lint_imports() -> str:
    return lint_imports_tool(os.environ)


def _layers() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"]
                    if c["type"] == "layers")
    return [m.strip() for layer in contract["layers"] for m in layer.split("|")]


@pytest.fixture(scope="module")
def installed(lint_imports: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("installed")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(copy), str(REPO)], check=True,
                   capture_output=True)
    return copy


def _lint(tool: str, copy: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool, str(REPO / "pyproject.toml")], cwd=copy,
                          env={"PYTHONPATH": str(copy),
                               "PATH": f"/usr/bin:/bin:{Path(tool).parent}"},
                          capture_output=True, text=True)


def _planted(installed: Path, tmp_path: Path, module: str, target: str) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(installed, copy)
    path = copy / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                    f"    import {target}\n")
    return copy


def test_a_missing_lint_imports_skips_here_and_fails_where_required(tmp_path: Path) -> None:
    """The tool missing (PATH holds nothing) skips these tests with the reason, except
    under HPCPROV_REQUIRE_LINT_TOOLS=1 (.ci/run), where it fails them."""
    empty = {"PATH": str(tmp_path)}
    with pytest.raises(pytest.skip.Exception, match="lint-imports is not on PATH"):
        lint_imports_tool(empty)
    with pytest.raises(pytest.skip.Exception):
        lint_imports_tool({**empty, REQUIRE: "0"})
    with pytest.raises(pytest.fail.Exception, match=f"{REQUIRE}=1 requires it"):
        lint_imports_tool({**empty, REQUIRE: "1"})
    with pytest.raises(pytest.fail.Exception):
        lint_imports_tool({REQUIRE: "1"})  # no PATH at all
    tool = tmp_path / "lint-imports"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert lint_imports_tool({**empty, REQUIRE: "1"}) == str(tool)


def test_every_folder_of_hpcprov_is_a_layer() -> None:
    folders = {p.name for p in (REPO / "hpcprov").iterdir() if (p / "__init__.py").exists()}
    mapped = {"provision", "validate"}  # top-level folders, hpcprov.provision/.validate
    assert set(_layers()) == folders | mapped


def test_the_tree_keeps_the_contracts(lint_imports: str, installed: Path) -> None:
    proc = _lint(lint_imports, installed)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize(("module", "target", "said"), [
    # an annotation pointing up a layer (core may import nothing above it)
    ("hpcprov.core.fsutil", "hpcprov.jobs.lint", "hpcprov.core is not allowed to import"),
    # a cycle inside one folder, through an annotation only (kinds <- model already)
    ("hpcprov.site.kinds", "hpcprov.site.model", "No cycles are allowed in hpcprov.site"),
    # the model typed against a backend (the knot issue 25 untied)
    ("hpcprov.site.model", "hpcprov.schedulers.base", "hpcprov.site is not allowed to import"),
])
def test_a_planted_arrow_breaks_a_contract(lint_imports: str, installed: Path, tmp_path: Path,
                                           module: str, target: str, said: str) -> None:
    proc = _lint(lint_imports, _planted(installed, tmp_path, module, target))
    assert proc.returncode != 0
    assert said in proc.stdout, proc.stdout


def test_planning_a_job_loads_no_discovery_code() -> None:
    """The three concerns of a backend: planning and its executor load with the backend;
    what `site draft` asks of a scheduler (hpcprov.schedulers.discovery, the facts it
    reports) loads only for a draft."""
    code = ("import sys\nfrom hpcprov.app.cli import main\n"
            "main(['jobscript', '--site', 'neuron', '-N', '2', '--', 'true'])\n"
            "main(['jobscript', '--site', 'sockeye', '-N', '2', '--', 'true'])\n"
            "main(['jobscript', '--site', 'lsf-example', '-N', '2', '--', 'true'])\n"
            "loaded = sorted(m for m in sys.modules if 'discovery' in m or m.endswith('.facts'))\n"
            "print('LOADED', loaded, file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stderr, proc.stderr

"""The layering CI checks (.ci/lint, import-linter): hpcprov is a few folders whose arrows
point one way, with no import cycle anywhere, annotations (TYPE_CHECKING imports) included.

The contracts are run here on an installed copy of the package, as .ci/lint does, once as
it is (kept) and once with an arrow planted that each contract must refuse."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("lint-imports") is None,
                                reason="import-linter is not installed (pip install -e '.[dev]')")


def _layers() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"]
                    if c["type"] == "layers")
    return [m.strip() for layer in contract["layers"] for m in layer.split("|")]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("installed")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(copy), str(REPO)], check=True,
                   capture_output=True)
    return copy


def _lint(copy: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["lint-imports", str(REPO / "pyproject.toml")], cwd=copy,
                          env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin:" +
                               str(Path(shutil.which("lint-imports") or "").parent)},
                          capture_output=True, text=True)


def _planted(installed: Path, tmp_path: Path, module: str, target: str) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(installed, copy)
    path = copy / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                    f"    import {target}\n")
    return copy


def test_every_folder_of_hpcprov_is_a_layer() -> None:
    folders = {p.name for p in (REPO / "hpcprov").iterdir() if (p / "__init__.py").exists()}
    mapped = {"provision", "validate"}  # top-level folders, hpcprov.provision/.validate
    assert set(_layers()) == folders | mapped


def test_the_tree_keeps_the_contracts(installed: Path) -> None:
    proc = _lint(installed)
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
def test_a_planted_arrow_breaks_a_contract(installed: Path, tmp_path: Path, module: str,
                                           target: str, said: str) -> None:
    proc = _lint(_planted(installed, tmp_path, module, target))
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

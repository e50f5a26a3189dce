"""The layering CI checks (.ci/lint, import-linter): hpcprov is a few folders whose arrows
point one way, with no import cycle anywhere, annotations (TYPE_CHECKING imports) included.

The contracts are run here as .ci/lint runs them, on the source tree as it is (.ci/tree.py
tells import-linter that provision/ is hpcprov.provision, and so on, from pyproject.toml's
package-dir; nothing installed), on a copy of the tree: once as it is (kept) and once with an
arrow planted that each contract must refuse, in hpcprov/ and in a mapped folder. Where
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


def _package_dir() -> dict[str, str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    return mapping


def _source_tree(into: Path) -> Path:
    """A copy of what the checks read: the folders of the import package, pyproject.toml
    and .ci/tree.py."""
    ignore = shutil.ignore_patterns("__pycache__")
    for folder in set(_package_dir().values()):
        shutil.copytree(REPO / folder, into / folder, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", into)
    (into / ".ci").mkdir()
    shutil.copy(REPO / ".ci" / "tree.py", into / ".ci")
    return into


@pytest.fixture(scope="module")
def tree(lint_imports: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _source_tree(tmp_path_factory.mktemp("tree"))


def _lint(tool: str, copy: Path) -> subprocess.CompletedProcess[str]:
    """.ci/lint's import-linter step in ``copy``, with no PYTHONPATH and cwd elsewhere on
    sys.path: no installed hpcprov is read, only the tree."""
    return subprocess.run([sys.executable, ".ci/tree.py", "lint-imports", "--no-cache",
                           "pyproject.toml"], cwd=copy,
                          env={"PATH": f"/usr/bin:/bin:{Path(tool).parent}"},
                          capture_output=True, text=True)


def _module_file(root: Path, module: str) -> Path:
    """The file of ``module`` in the tree (``hpcprov.provision.plan``: provision/plan.py)."""
    package = max((name for name in _package_dir()
                   if module == name or module.startswith(name + ".")), key=len)
    rest = module[len(package):].lstrip(".").replace(".", "/")
    return root / _package_dir()[package] / (rest + ".py")


def _planted(tree: Path, tmp_path: Path, module: str, target: str) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(tree, copy)
    path = _module_file(copy, module)
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


def test_the_tree_keeps_the_contracts(lint_imports: str, tree: Path) -> None:
    proc = _lint(lint_imports, tree)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout
    # every module of the import package was read, the mapped folders' included: each .py
    # file whose folder and every folder above it, up to the mapped one, is a package
    files = sum(1 for folder in set(_package_dir().values())
                for path in (tree / folder).rglob("*.py")
                if all((d / "__init__.py").is_file()
                       for d in [path.parent, *path.parent.parents]
                       if d.is_relative_to(tree / folder)))
    assert f"Analyzed {files} files" in proc.stdout, proc.stdout


@pytest.mark.parametrize(("module", "target", "said"), [
    # an annotation pointing up a layer (core may import nothing above it)
    ("hpcprov.core.fsutil", "hpcprov.jobs.lint", "hpcprov.core is not allowed to import"),
    # a cycle inside one folder, through an annotation only (kinds <- model already)
    ("hpcprov.site.kinds", "hpcprov.site.model", "No cycles are allowed in hpcprov.site"),
    # the model typed against a backend (the knot issue 25 untied)
    ("hpcprov.site.model", "hpcprov.schedulers.base", "hpcprov.site is not allowed to import"),
    # in a mapped folder (provision/ is hpcprov.provision): setup typed against validate
    ("hpcprov.provision.plan", "hpcprov.validate.plan",
     "hpcprov.provision is not allowed to import hpcprov.validate"),
])
def test_a_planted_arrow_breaks_a_contract(lint_imports: str, tree: Path, tmp_path: Path,
                                           module: str, target: str, said: str) -> None:
    proc = _lint(lint_imports, _planted(tree, tmp_path, module, target))
    assert proc.returncode != 0
    assert said in proc.stdout, proc.stdout


def test_the_static_checks_install_nothing_and_link_nothing() -> None:
    """.ci/lint and .ci/typecheck check the tree as it is: no installed copy for
    import-linter, no folder of links for mypy (issue 42); .ci/tree.py names the modules."""
    lint = (REPO / ".ci" / "lint").read_text(encoding="utf-8")
    typecheck = (REPO / ".ci" / "typecheck").read_text(encoding="utf-8")
    assert "pip install" not in lint and "ln -s" not in typecheck
    assert "python3 .ci/tree.py lint-imports" in lint
    assert "python3 .ci/tree.py mypy" in typecheck


def test_mypy_reads_the_tree_under_the_installed_names() -> None:
    """.ci/typecheck (.ci/tree.py mypy) checks the tree as it is: every Python file of
    hpcprov/, provision/, validate/ and sites/ is a source, each under the name it has once
    installed (provision/plan.py is hpcprov.provision.plan), and the validation programs'
    runtime also as the ``runtime`` they import; no folder of links, nothing installed."""
    pytest.importorskip("mypy")
    probe = ("import sys\nsys.path.insert(0, '.ci')\nimport tree\n"
             "sources, _, _ = tree.mypy_sources([])\n"
             "print('\\n'.join(f'{s.module} {s.path}' for s in sources))\n")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    found = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert found["hpcprov.provision.plan"] == "provision/plan.py"
    assert found["hpcprov.validate.judge"] == "validate/judge.py"
    assert found["hpcprov.sites"] == "sites/__init__.py"
    assert found["hpcprov.site.profiles"] == "hpcprov/site/profiles.py"
    assert found["runtime"] == found["hpcprov.validate.programs.runtime"]
    mapped = {"provision", "validate", "sites"}
    assert not [m for m in found if m.split(".")[0] in mapped], found
    files = {str(p.relative_to(REPO)) for folder in ("hpcprov", *mapped)
             for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts}
    assert files == set(found.values())


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

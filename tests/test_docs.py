"""The generated docs are current, and the README's commands exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpcprov.app.cli import cli
from hpcprov.app.docgen import compatibility, reference, site_page
from hpcprov.site.loader import bundled_site_dir

ROOT = Path(__file__).resolve().parent.parent


def test_reference_is_current() -> None:
    committed = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    assert committed == reference(), "run: python -m hpcprov.app.docgen docs"


def test_reference_documents_every_model_section() -> None:
    text = reference()
    for section in ("Site", "Partition", "Launcher", "HorovodBuild", "PythonStack", "Policies"):
        assert f"## {section}\n" in text


def test_a_page_per_bundled_site_is_current() -> None:
    names = sorted(p.stem for p in bundled_site_dir().glob("*.yaml"))
    assert {"neuron", "taurus", "sockeye", "sockeye-slurm", "cc", "technion", "local"} <= set(names)
    for name in names:
        page = ROOT / "docs" / "sites" / f"{name}.md"
        assert page.read_text(encoding="utf-8") == site_page(name), (
            f"{page} is stale: run python -m hpcprov.app.docgen docs"
        )


def test_readme_commands_are_real_subcommands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    used = set(re.findall(r"^hpcprov ([a-z]+)", readme, flags=re.M))
    used |= set(re.findall(r"&& hpcprov ([a-z]+)", readme))
    assert used, "README shows no hpcprov command"
    assert used <= set(cli.commands), used - set(cli.commands)
    assert "bash .ci/run" in readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 -m pytest -q" in ci and "python3 -m pytest -q" in readme


def test_compatibility_page_is_current() -> None:
    committed = (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")
    assert committed == compatibility(), "run: python -m hpcprov.app.docgen docs"


def test_the_walks_are_current_and_every_example_passes_site_check(
        capsys: pytest.CaptureFixture[str]) -> None:
    """docs/walks.md walks a site of each kind issue 26 names (PBS+PALS, Slurm+containers,
    MPI-started torchrun, EDF, uenv, Intel GPUs) from its example profile to what hpcprov
    generates: regenerated here, so every line is what hpcprov writes today."""
    from hpcprov_tests import cli

    from hpcprov.app.docgen import WALKS, walks

    examples = ROOT / "docs" / "examples"
    assert sorted(p.stem for p in examples.glob("*.yaml")) == sorted(WALKS)
    assert (ROOT / "docs" / "walks.md").read_text(encoding="utf-8") == walks(examples), (
        "run: python -m hpcprov.app.docgen docs")
    res = cli(capsys, "site", "check", *(str(examples / f"{n}.yaml") for n in WALKS))
    assert res.rc == 0, res.out + res.err
    assert "walks.md" in (ROOT / "docs" / "onboarding.md").read_text(encoding="utf-8")


def test_onboarding_sets_up_between_the_draft_and_the_first_job() -> None:
    text = (ROOT / "docs" / "onboarding.md").read_text(encoding="utf-8")
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    order = [line.split()[1] for line in block.strip().splitlines()]
    assert order == ["site", "site", "setup", "jobscript"], order

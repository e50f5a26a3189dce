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


# ------------------------------------------------ the docs' claims about the code (issue 42)

HAND_WRITTEN = sorted({ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
                       ROOT / "benchmarks" / "README.md"}
                      - {ROOT / "docs" / name for name in
                         ("reference.md", "compatibility.md", "walks.md")})
PLACEHOLDER = re.compile(r"[A-Z]{3,}")  # schedulers/NAME.py, jobs/launchers/KIND.py


def _project_folders() -> set[str]:
    top = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    return top | {".ci"} | {p.name for p in (ROOT / "hpcprov").iterdir() if p.is_dir()}


def test_no_doc_names_a_file_of_the_project_that_does_not_exist() -> None:
    """A path into the project (``site/types.py``, ``hpcprov/jobs/rank_env.sh``,
    ``.ci/tree.py``) in a hand-written doc names a file that exists, from the top or
    from hpcprov/; docs/architecture.md's bare module names (``(view.py)``) too."""
    folders = _project_folders()
    names = {p.name for p in ROOT.rglob("*") if p.suffix in (".py", ".sh")
             and not {".git", ".ci-cache", ".bench-cache"} & set(p.parts)}
    missing = []
    for doc in HAND_WRITTEN:
        text = doc.read_text(encoding="utf-8")
        for token in re.findall(r"(?<![\w/.$~-])([\w.-]*/[\w./-]*[\w-]\.(?:py|sh))\b", text):
            if PLACEHOLDER.search(token) or token.split("/")[0] not in folders:
                continue
            if not any((base / token).is_file() for base in (ROOT, ROOT / "hpcprov")):
                missing.append(f"{doc.name}: {token}")
        if doc.name == "architecture.md":  # a module by its name alone: (view.py), `facts.py`
            missing += [f"{doc.name}: {token}" for token in
                        re.findall(r"[(`]([\w-]+\.(?:py|sh))[)`,:;]", text) if token not in names]
    assert not missing, missing


def test_the_docs_say_what_quotes_shell_text() -> None:
    """Not "nothing else quotes": every module of the package that quotes a value for a
    shell (``shlex.quote``) is named in architecture.md's row for values becoming shell
    text."""
    docs = [doc.read_text(encoding="utf-8") for doc in HAND_WRITTEN]
    assert not [d for d in docs if "nothing else quotes" in d]
    arch = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    row = next(line for line in arch.splitlines()
               if line.startswith("| values becoming shell text |"))
    quoting = sorted(str(p.relative_to(ROOT)) for folder in ("hpcprov", "provision", "validate")
                     for p in (ROOT / folder).rglob("*.py")
                     if "shlex.quote" in p.read_text(encoding="utf-8"))
    assert "hpcprov/core/shell.py" in quoting
    assert [m for m in quoting if f"`{m}`" not in row] == [], row


def test_the_readme_names_every_scheduler_and_tool() -> None:
    """The README's layout lists every registered scheduler's backend, its first screen
    names them, and it names every development tool of pyproject.toml's dev extra."""
    from hpcprov.schedulers import all_backends

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = re.search(r"one backend per scheduler: ([^)]*)\)", readme)
    assert layout, "README's layout lists no schedulers"
    titles = {b.title for b in all_backends() if b.name != "none"}
    listed = " ".join(layout.group(1).split())  # one line, however wrapped
    assert all(title in listed for title in titles | {"none"}), layout.group(1)
    first = " ".join("\n".join(readme.splitlines()[:45]).split())
    assert all(title in first for title in titles), titles
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    tools = [re.split(r"[<>=;\[ ]", req)[0] for req in
             config["project"]["optional-dependencies"]["dev"]]
    assert "mypy" in tools
    assert [t for t in tools if t != "hpcprov" and t not in readme] == []


def test_the_readme_says_sh_is_not_used_and_nothing_imports_it() -> None:
    """``sh`` is no dependency and no module imports it; the README says so rather than
    describing it at work."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert not [d for d in config["project"]["dependencies"] if re.match(r"sh\b", d)]
    importing = [p for folder in ("hpcprov", "provision", "validate", "testbed")
                 for p in (ROOT / folder).rglob("*.py")
                 if re.search(r"^\s*(import sh\b|from sh import)", p.read_text(), re.M)]
    assert importing == []
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    said = [s for s in re.split(r"(?<=\.)\s", readme) if "**sh**" in s]
    assert said and all("not used" in s for s in said), said


def test_the_readme_first_screen_and_where_ci_timings_went() -> None:
    """The README's first screen says what hpcprov does and for whom, gives the two
    commands and what each prints; CI's recorded timings are in docs/speed.md."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = "\n".join(readme.splitlines()[:45])
    for said in ("hpcprov setup --site local && hpcprov validate --site local",
                 "bash .ci/run", "support", "users", "is ready", "PASS",
                 "time per phase"):
        assert said in first, said
    speed = (ROOT / "docs" / "speed.md").read_text(encoding="utf-8")
    for figure in ("1008 s at a502cd0", "38.9 min in all", "6.0 min and the tests 26.8 min"):
        assert figure in speed and figure not in readme, figure

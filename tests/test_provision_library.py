"""The shell library (provision/scripts/*.sh) and the files scripts carry verbatim
(provision/programs/*.py, provision/patches/*.patch): checked as files, carried byte for
byte, only what a plan calls, and a step's fingerprint covering exactly what it calls."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprov_tests import BUNDLED, REPO, needs_shellcheck

from hpcprov.provision import library
from hpcprov.provision.plan import build_plan, fingerprints, render_script
from hpcprov.site.profiles import load_site

SCRIPTS = sorted((REPO / "provision" / "scripts").glob("*.sh"))


@needs_shellcheck
@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_every_library_file_passes_shellcheck(path: Path) -> None:
    """As a file, at shellcheck's default severity (style and up), for bash."""
    proc = subprocess.run(["shellcheck", "-s", "bash", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_library_files_hold_only_commented_functions(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    found = library.parse(text, path.name)
    assert found, "no functions"
    defined = re.findall(r"^(\w+)\(\) \{$", text, flags=re.M)
    assert list(found) == defined
    for name, body in found.items():
        assert body.startswith(f"# {name}"), f"{name}: its comment starts with how it is called"


@pytest.mark.parametrize("text", [
    "# header\n\necho top-level\n",
    "# header\n\nhpcprov_x() {\n  :\n}\n",                      # no comment
    "# header\n\n# a comment\n\nhpcprov_x() {\n  :\n}\n",       # a stray comment
    "# header\n\n# f\nhpcprov_x() { :; }\n",                     # one-line definition
])
def test_a_library_file_with_anything_but_commented_functions_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="x.sh:"):
        library.parse(text, "x.sh")


def test_every_carried_file_prints_itself_byte_for_byte(tmp_path: Path) -> None:
    files = library.files()
    assert {e.source for e in files.values()} >= {
        "provision/programs/abi_facts.py", "provision/programs/allreduce_pytorch.py",
        "provision/programs/allreduce_tensorflow.py", "provision/programs/doctor_probe.py",
        "provision/patches/horovod-0.28.1-cxx-standard.patch"}
    for name, embedded in files.items():
        script = "\n".join([*library.render_file(name, embedded), name]) + "\n"
        proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == (REPO / embedded.source).read_text(encoding="utf-8"), name


def test_a_file_holding_the_heredoc_delimiter_cannot_be_carried() -> None:
    bad = library.Embedded("x.py", f"print(1)\n{library.DELIMITER}\nrm -rf ~\n")
    with pytest.raises(ValueError, match="cannot be carried"):
        library.render_file("hpcprov_file_x_py", bad)


@pytest.mark.parametrize("site", BUNDLED)
def test_a_script_carries_exactly_the_library_functions_its_steps_call(site: str) -> None:
    plan = build_plan(load_site(site), "/p")
    script = render_script(plan)
    steps = [line for step in plan.steps for line in step.lines]
    every = {**library.functions(), **library.files()}
    called = library.used(steps, every)
    assert list(plan.library) == [n for n in called if n in library.functions()]
    assert list(plan.files) == [n for n in called if n in library.files()]
    defined = set(re.findall(r"^(hpcprov_\w+)\(\) \{$", script, flags=re.M))
    assert defined == {*plan.library, *plan.files, *plan.functions, "hpcprov_run"}
    for text in plan.library.values():
        assert "\n" + text + "\n" in script  # verbatim, comment included


@pytest.mark.parametrize("site", BUNDLED)
def test_step_lines_are_calls_not_programs(site: str) -> None:
    """No Python in strings and no printf of quoted lines: a program or patch reaches the
    script only as its verbatim file."""
    for step in build_plan(load_site(site), "/p").steps:
        for line in step.lines:
            assert "\n" not in line, (step.id, line)
            assert "python -c" not in line and "printf" not in line, (step.id, line)


def test_changing_a_library_function_reruns_only_the_steps_that_call_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    site = load_site("local")
    before = fingerprints(build_plan(site, "/p"))
    changed = dict(library.functions())
    changed["hpcprov_expect_cb"] = changed["hpcprov_expect_cb"].replace("return 1",
                                                                        "return 2")
    monkeypatch.setattr(library, "functions", lambda: changed)
    after = fingerprints(build_plan(site, "/p"))
    steps = list(before)
    first = steps.index("check-build")
    assert [s for s in steps if before[s] == after[s]] == steps[:first]
    # a function only a later step calls leaves the earlier ones alone, through callers too
    changed["hpcprov_error"] = changed["hpcprov_error"].replace("error:", "error: ")
    again = fingerprints(build_plan(site, "/p"))
    assert again["prepare"] == before["prepare"]
    assert again["preflight"] != before["preflight"]  # hpcprov_require_tool calls it


FAKE_TOOLS = {
    "mpirun": 'echo "mpirun (Open MPI) 4.1.4"; echo "second line"',
    "c++": 'echo "$(basename "$0") (Debian 12.2.0-14+deb12u1) 12.2.0"',  # names itself
    "mpicc": "exit 0",
}


def test_the_key_text_is_what_published_keys_hold(tmp_path: Path) -> None:
    """hpcprov_horovod_key prints the key's inputs in the order and form every published
    key was computed from (a change would miss every wheelhouse entry and rebuild)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKE_TOOLS.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    plan = build_plan(load_site("local"), str(tmp_path / "p"))
    script = render_script(plan).split("\nHPCPROV_STEPS=(")[0]
    build = plan.step("build-horovod").lines
    lines = [ln for ln in build if "abi_facts" in ln]
    (tmp_path / "key.sh").write_text(script + '\nmkdir -p "$STATE/programs"\n'
                                     + "\n".join(lines) + '\ncat "$STATE/horovod-key.txt"\n')
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(["bash", str(tmp_path / "key.sh")], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    abi = subprocess.run([str(bin_dir / "python"), str(REPO / "provision/programs/abi_facts.py")],
                         capture_output=True, text=True, timeout=60).stdout
    # patches= changed on purpose three times (2026-11-23: the build-time patches for GCC
    # 13/14 and Python 3.12 joined the table, then the build-type patch with Release builds,
    # which also added HOROVOD_CMAKE_BUILD_TYPE; 2026-11-25: the C++ standard read from
    # PyTorch and the second distutils use), stdlib= was added (the fact those follow), and
    # torch-cxx= (the standard the PyTorch extension compiles as: torch 2.13.0 here: 17)
    torch_cxx = "17" if importlib.util.find_spec("torch") else ""
    want = ("horovod=0.28.1\npatches=edd3156fb18d2538\nbuild-env=HOROVOD_WITHOUT_TENSORFLOW=1 "
            "HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_MPI=1 "
            "HOROVOD_WITH_GLOO=1 HOROVOD_CMAKE_BUILD_TYPE=Release\n"
            f"{abi}mpi={os.path.realpath(bin_dir / 'mpicc')} "
            f"mpirun (Open MPI) 4.1.4\ncxx={os.path.realpath(bin_dir / 'c++')} "
            f"(Debian 12.2.0-14+deb12u1) 12.2.0\nstdlib=libstdc++ \ntorch-cxx={torch_cxx}\n"
            "cuda=\nnccl=\n")
    assert proc.stdout == want
    # the same compiler called g++ (as a module's CXX=g++ does) gives the same key text
    (bin_dir / "g++").symlink_to(bin_dir / "c++")
    again = subprocess.run(["bash", str(tmp_path / "key.sh")], capture_output=True, text=True,
                           env={**env, "CXX": "g++"}, timeout=60)
    assert again.stdout == want


def test_the_package_ships_the_library_and_the_programs() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    globs = data["tool"]["setuptools"]["package-data"]["hpcprov.provision"]
    shipped = {p for g in globs for p in (REPO / "provision").glob(g)}
    assert set(SCRIPTS) <= shipped
    assert {REPO / e.source for e in library.files().values()} <= shipped

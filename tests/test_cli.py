"""The command line: JSON outputs, detection, completion, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import (
    BUNDLED,
    assert_one_line_error,
    bash_syntax_ok,
    cli,
    cli_subprocess,
    hpcprov_argv,
    unshimmed_argv,
    write_profile,
)

from hpcprov.site.model import validate
from hpcprov.site.profiles import load_site

# ------------------------------------------------------------------- JSON


def test_sites_json(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "sites", "--json")
    assert res.rc == 0
    rows = json.loads(res.out)
    assert [r["name"] for r in rows] == sorted(BUNDLED)
    by_name = {r["name"]: r for r in rows}
    assert by_name["sockeye"]["scheduler"] == "pbs"
    assert by_name["neuron"]["scheduler"] == "slurm"
    assert all(r["error"] is None for r in rows)


@pytest.mark.parametrize("name", BUNDLED)
def test_site_show_json_is_the_loaded_site(capsys: pytest.CaptureFixture[str], name: str) -> None:
    res = cli(capsys, "site", "show", name, "--json")
    assert res.rc == 0
    assert validate(json.loads(res.out)) == load_site(name)
    res = cli(capsys, "site", "show", name)  # YAML, same content
    assert res.rc == 0 and f"name: {name}" in res.out.splitlines()


def test_launch_json(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "launch", "--site", "neuron", "-N", "2", "-G", "4", "-l", "horovodrun",
              "-H", "gpu[32-33]", "-t", "1:00:00", "--json", "--", "python", "train_hvd.py")
    assert res.rc == 0, res.err
    data = json.loads(res.out)
    assert unshimmed_argv(data["argv"]) == ["horovodrun", "-np", "8", "-H", "gpu32:4,gpu33:4",
                                            "python", "train_hvd.py"]
    assert data["argv"][5:9] == ["bash", "-c", '"$hpcprov_rank"', "hpcprov-rank"]
    assert data["setup"][0].startswith("hpcprov_rank=")  # the rank contract's text
    assert (data["nodes"], data["gpus_per_node"], data["world_size"]) == (2, 4, 8)
    assert data["allocate"][0] == "salloc" and data["warnings"] == []


def test_jobscript_json_and_output_file(capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    res = cli(capsys, "jobscript", "--site", "cc", "-o", "account=def-pi", "--json",
              "--", "python", "main.py")
    assert res.rc == 0, res.err
    data = json.loads(res.out)
    assert data["script"].startswith("#!") and data["submit"][0] == "sbatch"
    assert data["launcher"] == "torchrun" and data["ranks_per_node"] == 4
    target = tmp_path / "job.sh"
    res = cli(capsys, "jobscript", "--site", "cc", "-o", "account=def-pi", "--output",
              str(target), "--", "python", "main.py")
    assert res.rc == 0 and res.out == ""
    assert target.read_text(encoding="utf-8") == data["script"]
    bash_syntax_ok(target.read_text(encoding="utf-8"), tmp_path)


@pytest.mark.parametrize("flags", [["--dry-run", "--json"], ["--json", "--dry-run"]])
def test_setup_json(capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    res = cli(capsys, "setup", "--site", "neuron", *flags)
    assert res.rc == 0, res.err
    data = json.loads(res.out)
    assert data["plan"]["site"] == "neuron" and data["plan"]["backend"] == "conda"
    assert data["script"].startswith("#!/bin/bash")
    dry = cli(capsys, "setup", "--site", "neuron", "--dry-run")
    assert dry.out == data["script"]


def test_detect_json(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "detect", "--hostname", "glogin01", "--json")
    assert res.rc == 0
    assert json.loads(res.out) == {"hostname": "glogin01", "sites": ["neuron"]}
    res = cli(capsys, "detect", "--hostname", "nowhere.example.org", "--json")
    assert res.rc == 1
    assert json.loads(res.out)["sites"] == []


# ----------------------------------------------------------------- detect

@pytest.mark.parametrize(("host", "site"), [
    ("glogin01", "neuron"),                     # the seed's login prompt [glogin01]$
    ("glogin01.ksc.re.kr", "neuron"),
    ("cedar1.cedar.computecanada.ca", "cc"),
    ("tauruslogin3", "taurus"),
])
def test_detect_known_hosts(capsys: pytest.CaptureFixture[str], host: str, site: str) -> None:
    res = cli(capsys, "detect", "--hostname", host)
    assert res.rc == 0 and res.out.strip() == site


def test_detect_real_cli() -> None:
    res = cli_subprocess("detect", "--hostname", "laptop.example.org")
    assert_one_line_error(res, 1, "laptop.example.org", "--site")


def test_detect_finds_user_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    write_profile(tmp_path, "mylab", "extends: local\nlogin_hosts: ['lab-login*']\n")
    write_profile(tmp_path, "broken", "extends: local\nlogin_hosts: [\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(tmp_path))
    res = cli(capsys, "detect", "--hostname", "lab-login2.uni.example")
    assert res.rc == 0 and res.out.strip() == "mylab"


# ------------------------------------------------------------- completion

def test_completion_script(capsys: pytest.CaptureFixture[str]) -> None:
    for shell in ("bash", "zsh", "fish"):
        res = cli(capsys, "completion", shell)
        assert res.rc == 0 and "_HPCPROV_COMPLETE" in res.out
    res = cli(capsys, "completion", "tcsh")
    assert_one_line_error(res, 2, "tcsh")


def test_completion_completes_site_names() -> None:
    env = {**os.environ, "_HPCPROV_COMPLETE": "bash_complete",
           "COMP_WORDS": "hpcprov jobscript --site ne", "COMP_CWORD": "3"}
    proc = subprocess.run(hpcprov_argv(), capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0
    assert "neuron" in proc.stdout.split() or "plain,neuron" in proc.stdout.splitlines()


# ------------------------------------------------------------------ errors

def test_unknown_site_suggests_the_close_one(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "jobscript", "--site", "nueron", "--", "python", "x.py")
    assert_one_line_error(res, 2, "nueron", "did you mean 'neuron'")
    res = cli(capsys, "site", "show", "technio")
    assert_one_line_error(res, 2, "did you mean 'technion'")
    res = cli(capsys, "guide", "--site", "zzzzzz")
    line = assert_one_line_error(res, 2, "zzzzzz")
    assert "neuron" in line  # lists the known sites instead


@pytest.mark.parametrize("argv", [
    ["jobscript", "--site", "neuron", "--bogus", "--", "python", "x.py"],
    ["launch", "--site", "neuron", "-N", "zero", "--", "python", "x.py"],
    ["launch", "--site", "neuron", "-N", "0", "--", "python", "x.py"],
    ["launch", "--site", "neuron"],                     # no command
    ["setup", "--site", "local", "--on", "moon"],
    ["nosuchcommand"],
    ["launch", "--site", "neuron", "-p", "nope", "--", "python", "x.py"],
    ["launch", "--site", "neuron", "-l", "nope", "--", "python", "x.py"],
    ["launch", "--site", "neuron", "-o", "=x", "--", "python", "x.py"],
    ["guide", "--site", "neuron", "-p", "nope"],
    ["launch", "--site", "cc", "-o", "account=a", "-l", "container", "--", "python", "x.py"],
])
def test_usage_errors_are_one_line_exit_2(capsys: pytest.CaptureFixture[str],
                                          argv: list[str]) -> None:
    res = cli(capsys, *argv)
    line = assert_one_line_error(res, 2)
    assert line.startswith("hpcprov: error: ")
    assert res.out == ""


def test_unknown_option_via_real_cli() -> None:
    res = cli_subprocess("jobscript", "--site", "neuron", "--bogus", "--", "python", "x.py")
    assert_one_line_error(res, 2, "--bogus")


def test_setup_until_an_unknown_step_is_a_usage_error(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    res = cli(capsys, "setup", "--site", "local", "--prefix", str(tmp_path / "p"),
              "--until", "bogus")
    assert_one_line_error(res, 2, "--until", "bogus", "build-horovod")
    assert not (tmp_path / "p").exists()


def test_setup_with_an_unset_prefix_variable_fails_before_touching_anything(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCRATCH", raising=False)
    res = cli(capsys, "setup", "--site", "cc")
    assert_one_line_error(res, 2, "$SCRATCH", "--prefix")


def test_broken_user_profile_does_not_hide_the_others(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    write_profile(tmp_path, "broken", "extends: local\npartitions: {local: {nodes: x}}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(tmp_path))
    res = cli(capsys, "sites")
    assert res.rc == 0
    (line,) = [x for x in res.out.splitlines() if x.startswith("broken ")]
    assert "BROKEN" in line and f"{tmp_path / 'broken.yaml'}:2:" in line
    assert {x.split()[0] for x in res.out.splitlines()} == {*BUNDLED, "broken"}
    rows = {r["name"]: r for r in json.loads(cli(capsys, "sites", "--json").out)}
    assert rows["broken"]["error"] and rows["neuron"]["error"] is None


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "--version")
    assert res.rc == 0 and "0.1.0" in res.out
    res = cli(capsys, "--help")
    assert res.rc == 0 and "jobscript" in res.out and res.err == ""


def test_bare_command_prints_help_not_errors(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys)
    assert "Commands:" in res.out + res.err
    assert len([x for x in res.err_lines if x.startswith("hpcprov: error:")]) <= 1


def test_site_check_takes_a_sites_name_where_no_such_file_is_here(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`hpcprov site check cc` checks the bundled profile cc and names its file; a name
    nobody knows is one line with the closest one; a file of that name here is that file."""
    from hpcprov.site.loader import find_profile

    monkeypatch.chdir(tmp_path)
    res = cli(capsys, "site", "check", "cc")
    assert res.rc == 0 and res.out.strip() == f"{find_profile('cc')}: ok", res.err
    res = cli(capsys, "site", "check", "ccc")
    assert res.rc == 2 and res.out == ""
    assert res.err_lines == ["ccc: unknown site 'ccc'; did you mean 'cc'?"]
    (tmp_path / "cc").write_text("name: cc\nscheduler: nope\n")
    res = cli(capsys, "site", "check", "cc")
    assert res.rc == 2 and res.err_lines[0].startswith("cc:2:"), res.err


def test_site_check_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # (neuron warns: its GH200 nodes are aarch64, its environment x86_64)
    path = write_profile(tmp_path, "fine", "extends: cc\n")
    res = cli(capsys, "site", "check", str(path))
    assert res.rc == 0 and res.out.strip() == f"{path}: ok" and res.err == ""

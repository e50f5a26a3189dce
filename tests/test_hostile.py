"""Hostile strings in profiles and on the command line stay text.

Profiles extending `local` and `neuron` carry shell metacharacters in every value that
reaches a generated script. The scripts are generated through the CLI and really run with
bash against stub tools (tests/conftest.py: Stubs); no `touch PWNED...` may ever run, the
stubs must receive the hostile values verbatim, and the values must still be in the scripts.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from hpcprov_tests import (
    STUB_INSTALLER,
    Stubs,
    assert_one_line_error,
    cli,
    contains_run,
    directives,
    pwned_files,
    stub_steps,
    write_profile,
)

from hpcprov.site.profiles import check_file

LOCAL_HOSTILE = {
    "extends": "local",
    "paths": {"scratch": "$HOME/x$(touch PWNED1)"},
    "env": {
        "EVIL_TICKS": "`touch PWNED3`",
        "EVIL_MIX": "$HOME/`touch PWNED3b`/$(touch PWNED3c)\"'!;|&<>\\",
    },
    "launchers": {
        "horovodrun": {"kind": "horovodrun", "controller": "gloo",
                       "args": ["$(touch PWNED5)"]},
        "mpirun": {"kind": "mpirun", "args": ["$(touch PWNED5b)", "; touch PWNED5c"],
                   "export_env": ["EVIL_TICKS"]},
        "torchrun": {"kind": "torchrun", "per_node_wrapper": "none",
                     "args": ["`touch PWNED5d`"]},
    },
    "python": {
        "packages": ["foo; touch PWNED11", "$(touch PWNED12)"],
        "venv": {"wheelhouse": ["$HOME/wh$(touch PWNED16)"]},
    },
    "horovod": {"env": {"HOROVOD_EVIL": "$(touch PWNED13)"},
                "pip_args": ["--no-cache-dir", "`touch PWNED17`"]},
}

NEURON_HOSTILE = {
    "extends": "neuron",
    "paths": {"scratch": "$HOME/s$(touch PWNED1)"},
    "modules": {
        "init": "/etc/profile.d/lmod.sh$(touch PWNED18)",
        "build": {"load": ["gcc;touch PWNED2", "cuda/$(touch PWNED2b)"]},
        "runtime": {"purge": True, "load": ["gcc;touch PWNED2", "`touch PWNED2c`"]},
    },
    "env": {"EVIL": "`touch PWNED3`"},
    "containers": {"images": {"pytorch": '/img/a"; touch PWNED4; ".sif',
                              "home": '$HOME/b"; touch PWNED4b; ".sif'}},
    "launchers": {"srun": {"kind": "srun", "args": ["$(touch PWNED5)"]}},
    "policies": {"required_options": {"comment": {"choices": None}}},
    "python": {
        "conda": {"installer_url": "https://example.invalid/Mini$(touch PWNED14).sh",
                  # what the stub curl serves, in place of neuron's pinned installer
                  "installer_sha256": hashlib.sha256(STUB_INSTALLER.encode()).hexdigest()},
        "frameworks": {"pytorch": {"version": "1.12.0", "installer": "conda",
                                   # a channel that would run a command is refused by the
                                   # model (tests/test_setup_site_inputs.py); what a
                                   # valid one may hold, a node's variable, expands only
                                   "channel": "pytorch${HPCPROV_NO_SUCH_VAR}",
                                   "packages": ["pytorch==1.12.0"]}},
    },
}

JOB_NAME = "a'b\"c$(touch PWNED6)"
COMMENT = "a'b\"c$(touch PWNED6b)"


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user site folder with the hostile profiles, on HPCPROV_SITES_PATH."""
    user = tmp_path / "user-sites"
    for name, data in (("hostile-local", LOCAL_HOSTILE), ("hostile-neuron", NEURON_HOSTILE)):
        write_profile(user, name, yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(user))
    return user


def generate(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    res = cli(capsys, *args)
    assert res.rc == 0, (args, res.err)
    return res.out


def ran_clean(proc: subprocess.CompletedProcess[str], tmp_path: Path) -> None:
    """The script ran to its end and created no PWNED file."""
    assert proc.returncode == 0, proc.stderr
    assert pwned_files(tmp_path) == []


def test_hostile_profiles_are_valid(hostile: Path) -> None:
    for path in hostile.glob("*.yaml"):
        assert check_file(path) == []


def test_hostile_local_setup_runs_without_injection(hostile: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   stubs: Stubs) -> None:
    script = generate(capsys, "setup", "--site", "hostile-local", "--dry-run")
    for needle in ("touch PWNED1", "touch PWNED11", "touch PWNED12", "touch PWNED13",
                   "touch PWNED16", "touch PWNED17"):
        assert needle in script
    ran_clean(stubs.run(script, *stub_steps(script), name="setup.sh"), tmp_path)
    # the values reached the tools verbatim ($HOME expanded, nothing else)
    pips = [c for c in stubs.calls("python") if "pip" in c and "install" in c]
    uvs = [c for c in stubs.calls("uv") if "pip" in c and "install" in c]  # installer: auto
    assert any({"foo; touch PWNED11", "$(touch PWNED12)"} <= set(c) for c in pips + uvs)
    wheels = [c for c in stubs.calls("python") if "pip" in c and "wheel" in c]
    assert any("`touch PWNED17`" in c for c in wheels)  # horovod.pip_args reach pip wheel
    assert any(f"{stubs.home}/wh$(touch PWNED16)" in c for c in pips + uvs)
    assert any(f"{stubs.home}/wh$(touch PWNED16)" in c for c in uvs)
    prefix = stubs.home / "x$(touch PWNED1)" / ".hpcprov" / "local"
    assert (prefix / "activate").is_file()  # the literal directory was created
    assert (prefix / "venvs" / "horovod" / "bin" / "activate").is_file()


@pytest.mark.parametrize("launcher", ["horovodrun", "mpirun", "torchrun"])
def test_hostile_local_jobscripts_run_without_injection(hostile: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        stubs: Stubs, launcher: str) -> None:
    setup = generate(capsys, "setup", "--site", "hostile-local", "--dry-run")
    stubs.run(setup, *stub_steps(setup), name="setup.sh")
    stubs.reset_log()
    script = generate(capsys, "jobscript", "--site", "hostile-local", "-l", launcher,
                      "--", "python", "train.py", "$(touch PWNED9)")
    assert "touch PWNED9" in script
    probe = script + '\nprintf "%s|%s" "$EVIL_TICKS" "$EVIL_MIX" > "$HOME/env.txt"\n'
    ran_clean(stubs.run(probe, name="job.sh"), tmp_path)
    env = (stubs.home / "env.txt").read_text(encoding="utf-8")
    mix = LOCAL_HOSTILE["env"]["EVIL_MIX"].replace("$HOME", str(stubs.home))
    assert env == "`touch PWNED3`|" + mix
    # torchrun runs as the environment's `python -m torch.distributed.run`
    (call,) = ([c for c in stubs.calls("python") if "torch.distributed.run" in c]
               if launcher == "torchrun" else stubs.calls(launcher))
    assert call[-1] == "$(touch PWNED9)"
    args = LOCAL_HOSTILE["launchers"][launcher]["args"]
    assert contains_run(call, args)


def test_hostile_neuron_setup_runs_without_injection(hostile: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     stubs: Stubs) -> None:
    script = generate(capsys, "setup", "--site", "hostile-neuron", "--dry-run")
    for needle in ("touch PWNED1", "touch PWNED2", "touch PWNED2b", "touch PWNED14"):
        assert needle in script
    ran_clean(stubs.run(script, *stub_steps(script), name="setup.sh"), tmp_path)
    loads = [c for c in stubs.calls("module") if c[1:2] == ["load"]]
    assert ["module", "load", "gcc;touch PWNED2", "cuda/$(touch PWNED2b)"] in loads
    conda = [c for c in stubs.calls("conda") if "install" in c]
    # the channel's variable expanded on the node (unset: empty), nothing else
    assert any(contains_run(c, ["-c", "pytorch"]) for c in conda)
    (curl,) = stubs.calls("curl")
    assert curl[-1] == "https://example.invalid/Mini$(touch PWNED14).sh"
    conda_root = stubs.home / "s$(touch PWNED1)" / "hpcprov" / "miniconda3"
    assert (conda_root / "etc" / "profile.d" / "conda.sh").is_file()
    # the activate file it wrote is itself harmless
    activate = conda_root.parent / "activate"
    ran_clean(stubs.run(f"source {shlex.quote(str(activate))}\n", name="use-activate.sh"),
              tmp_path)


@pytest.mark.parametrize(("launcher", "extra"), [
    ("srun", []), ("horovodrun", []), ("mpirun", []), ("torchrun", []),
    ("container", []), ("container", ["--image", "home"]),
], ids=["srun", "horovodrun", "mpirun", "torchrun", "container", "container-home-image"])
def test_hostile_neuron_jobscripts_run_without_injection(
        hostile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], stubs: Stubs,
        launcher: str, extra: list[str]) -> None:
    setup = generate(capsys, "setup", "--site", "hostile-neuron", "--dry-run")
    stubs.run(setup, *stub_steps(setup), name="setup.sh")
    stubs.reset_log()
    script = generate(capsys, "jobscript", "--site", "hostile-neuron", "-l", launcher, *extra,
                      "-N", "2", "-J", JOB_NAME, "-o", f"comment={COMMENT}",
                      "--", "python", "train.py")
    # the directives carry the exact values (as sbatch parses them)
    d = directives(script)
    assert d["job-name"] == JOB_NAME and d["comment"] == COMMENT
    probe = script + '\nprintf "%s" "$EVIL" > "$HOME/env.txt"\n'
    ran_clean(stubs.run(probe, name="job.sh"), tmp_path)
    assert (stubs.home / "env.txt").read_text(encoding="utf-8") == "`touch PWNED3`"
    loads = [c for c in stubs.calls("module") if c[1:2] == ["load"]]
    if launcher == "container":  # the runtime's module only: the host's stay outside
        assert loads and loads[-1][2:] == ["singularity/3.9.7"]
    else:
        assert loads and contains_run(loads[-1], ["gcc;touch PWNED2", "`touch PWNED2c`"])
    if launcher == "srun":
        (call,) = stubs.calls("srun")
        assert "$(touch PWNED5)" in call
    if launcher == "container":
        (call,) = stubs.calls("srun")
        image = ('/img/a"; touch PWNED4; ".sif' if not extra
                 else f'{stubs.home}/b"; touch PWNED4b; ".sif')
        assert call[call.index("--nv") + 1] == image


@pytest.mark.parametrize("launcher", ["srun", "horovodrun", "mpirun", "torchrun", "container"])
def test_hostile_neuron_launch_and_allocate_lines_run_clean(
        hostile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], stubs: Stubs,
        launcher: str) -> None:
    out = generate(capsys, "launch", "--site", "hostile-neuron", "-l", launcher, "--allocate",
                   "-N", "2", "-J", JOB_NAME, "-o", f"comment={COMMENT}",
                   "--", "python", "train.py", "`touch PWNED10`")
    ran_clean(stubs.run(out, name="launch.sh"), tmp_path)
    (salloc,) = stubs.calls("salloc")
    assert f"--job-name={JOB_NAME}" in salloc and f"--comment={COMMENT}" in salloc
    assert any(c[-1] == "`touch PWNED10`" for c in stubs.calls())


def test_hostile_prefix_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            stubs: Stubs) -> None:
    prefix = f"{stubs.home}/p$(touch PWNED19)`touch PWNED20`"
    script = generate(capsys, "setup", "--site", "local", "--prefix", prefix, "--dry-run")
    ran_clean(stubs.run(script, *stub_steps(script), name="setup.sh"), tmp_path)
    assert (Path(prefix) / "activate").is_file()
    job = generate(capsys, "jobscript", "--site", "local", "--prefix", prefix,
                   "--", "python", "x.py")
    ran_clean(stubs.run(job, name="job.sh"), tmp_path)


# ------------------------------------------------------------ refused outright

@pytest.mark.parametrize("env_name", ["horovod; touch PWNED8", "$(touch PWNED8)", "a b",
                                      "-rf", "x\ny"])
def test_env_name_must_be_a_plain_name(tmp_path: Path, env_name: str) -> None:
    path = write_profile(tmp_path, "badenv", yaml.safe_dump(
        {"extends": "local", "python": {"env_name": env_name}}, sort_keys=False))
    (err,) = check_file(path)
    assert err.file == str(path) and err.line == 3
    assert "python.env_name" in err.problem


def test_setup_env_option_is_validated(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "setup", "--site", "local", "--env", "x;touch PWNED8", "--dry-run")
    assert_one_line_error(res, 2, "env")


@pytest.mark.parametrize("argv", [
    ["--site", "cc", "-o", "account=def-pi\ntouch PWNED"],
    ["--site", "cc", "-o", "account=def-pi", "-o", "mail-user=a\tb"],
    ["--site", "neuron", "-J", "job\n#SBATCH --mem=1T"],
    ["--site", "neuron", "-o", "comment=python\n#SBATCH --mem=1T"],
], ids=["account", "tab", "job-name", "comment-with-choices"])
def test_option_value_with_control_characters(capsys: pytest.CaptureFixture[str],
                                              argv: list[str]) -> None:
    res = cli(capsys, "jobscript", *argv, "--", "python", "x.py")
    assert_one_line_error(res, 2)
    assert res.out == ""


@pytest.mark.parametrize("hosts", ["gpu[32-33];touch PWNED", "$(touch PWNED)", "gpu 32",
                                   "gpu[32-"])
def test_hostile_host_lists_are_refused(capsys: pytest.CaptureFixture[str], hosts: str) -> None:
    res = cli(capsys, "launch", "--site", "neuron", "-l", "horovodrun", "-H", hosts,
              "--", "python", "x.py")
    assert_one_line_error(res, 2, "--hosts")


# ---------------------------------------------------------------- known holes

def test_newline_in_a_module_name_cannot_end_the_activate_heredoc(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], stubs: Stubs) -> None:
    path = write_profile(tmp_path, "heredoc", yaml.safe_dump({
        "extends": "neuron",
        "paths": {"scratch": str(stubs.home / "s")},
        "modules": {"runtime": {"load": ["gcc\nHPCPROV_EOF\ntouch PWNED7 #"]}},
    }, sort_keys=False))
    res = cli(capsys, "setup", "--site", str(path), "--dry-run")
    if res.rc != 0:  # refusing the profile is a fine fix as well
        assert_one_line_error(res, 2, str(path))
        return
    stubs.run(res.out, "prepare", "write-activate", name="setup.sh")
    assert pwned_files(tmp_path) == []


def _bash_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```$", markdown, flags=re.M | re.S)


def test_guide_commands_are_safe_to_paste(hostile: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str],
                                          stubs: Stubs) -> None:
    guide = generate(capsys, "guide", "--site", "hostile-local")
    blocks = _bash_blocks(guide)
    assert len(blocks) >= 3
    for i, block in enumerate(blocks):
        stubs.run(block, name=f"block{i}.sh")
    assert pwned_files(tmp_path) == []

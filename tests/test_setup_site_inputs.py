"""What a real cluster's profile gives setup besides its modules: a vendor's wheel index for
the frameworks, the site's variables in the install steps, and site variables ($NAME) in
conda channels and paths, expanded on the node and nothing else executed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import Stubs, assert_one_line_error, cli, write_profile

from hpcprov.provision.plan import build_plan, render_script
from hpcprov.site.profiles import load_site

ROCM = "https://download.pytorch.org/whl/rocm6.2"


def _site(tmp_path: Path, text: str, name: str = "s") -> Path:
    return write_profile(tmp_path / "sites", name, f"extends: local\nname: {name}\n" + text)


def _frameworks(installer: str = "pip") -> str:
    return (f"python:\n  venv: {{installer: {installer}}}\n  frameworks:\n    pytorch:\n"
            f"      version: '2.5.1'\n      index_url: {ROCM}\n"
            "      extra_index_urls: ['https://wheels.example/~me/simple']\n"
            "      packages: [torch==2.5.1]\n")


STUB_PYTHON = """#!/bin/bash
# records its arguments, one a line, each call's ended by ==, and the variables the install
# step exported
printf '%s\\n' "$@" == >> "$RECORD/argv"
env > "$RECORD/env"
"""


def _run_step(tmp_path: Path, profile: Path, step: str, **env: str) -> Path:
    """Run one step's function of the rendered setup.sh with a stub ``python`` first on the
    PATH that the environment's activate puts there; returns the folder it recorded in."""
    prefix = tmp_path / "p"
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "python").write_text(STUB_PYTHON)
    (stubs / "python").chmod(0o755)
    activate = prefix / "venvs" / "horovod" / "bin" / "activate"
    activate.parent.mkdir(parents=True)
    activate.write_text(f'PATH="{stubs}:$PATH"\n')
    record = tmp_path / "record"
    record.mkdir()
    script = render_script(build_plan(load_site(str(profile)), str(prefix)))
    head = script.split("\nHPCPROV_STEPS=(")[0]
    (tmp_path / "run.sh").write_text(f"{head}\nstep_{step.replace('-', '_')}\n")
    proc = subprocess.run(["bash", str(tmp_path / "run.sh")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "RECORD": str(record), **env}, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return record


def test_the_frameworks_index_urls_reach_pip_as_separate_quoted_words(tmp_path: Path) -> None:
    record = _run_step(tmp_path, _site(tmp_path, _frameworks()), "install-frameworks")
    argv = (record / "argv").read_text().splitlines()
    i = argv.index("--index-url")
    assert argv[i + 1] == ROCM
    j = argv.index("--extra-index-url")
    assert argv[j + 1] == "https://wheels.example/~me/simple"
    assert "torch==2.5.1" in argv


def test_uv_is_given_the_frameworks_index_urls_too(tmp_path: Path) -> None:
    site = load_site(str(_site(tmp_path, _frameworks("uv"))))
    (step,) = [s for s in build_plan(site, "/p").steps if s.id == "install-frameworks"]
    # the frameworks from their index; the profile's other packages (numpy) from pip's own
    (uv, rest) = [ln for ln in step.lines if ln.startswith("hpcprov_uv_install")]
    assert f"--index-url {ROCM} --extra-index-url" in uv
    assert "numpy" in rest and "--index-url" not in rest


@pytest.mark.parametrize(("text", "line", "needles"), [
    ("python:\n  frameworks:\n    pytorch:\n      version: '2.5.1'\n"
     "      packages: [torch==2.5.1, '--index-url=https://x.example/simple']\n", 7,
     ["python.frameworks.pytorch.packages.1", "is a pip option", "index_url"]),
    ("python:\n  packages:\n    - numpy\n    - --extra-index-url=https://x.example\n", 6,
     ["python.packages.1", "is a pip option", "index_url"]),
    ("python:\n  frameworks:\n    pytorch:\n      version: '2.5.1'\n"
     "      index_url: 'ftp://x.example/simple'\n", 7,
     ["python.frameworks.pytorch.index_url", "^https?://"]),
    ("python:\n  frameworks:\n    pytorch:\n      version: '2.5.1'\n"
     "      index_url: 'https://x.example/$(touch /tmp/pwned)'\n", 7,
     ["python.frameworks.pytorch.index_url"]),
])
def test_a_pip_option_among_packages_or_a_bad_index_url_is_refused_at_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: int,
        needles: list[str]) -> None:
    path = _site(tmp_path, text)
    res = cli(capsys, "site", "check", str(path))
    assert_one_line_error(res, 2, f"{path}:{line}:", *needles)


AMD = "partitions:\n  local:\n    gpus: {count: 2, vendor: amd}\n    cores_per_node: 8\n"


def test_site_check_warns_of_pypis_cuda_torch_on_amd_gpus_naming_the_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "site", "check", str(_site(tmp_path, AMD)))
    warned = [ln for ln in res.err_lines if "python.frameworks.pytorch.index_url" in ln]
    assert len(warned) == 1 and ROCM in warned[0] and "warning" in warned[0]
    assert "local.yaml:" in warned[0]  # located where pytorch is declared
    fixed = _site(tmp_path, AMD + _frameworks(), "fixed")
    res = cli(capsys, "site", "check", str(fixed))
    assert not [ln for ln in res.err_lines if "index_url" in ln]


def test_the_sites_env_is_exported_in_the_install_steps(tmp_path: Path) -> None:
    profile = _site(tmp_path, "env:\n  MPICC: '$HOME/bin/mpicc wrapper'\n"
                    "  WHERE: 'x$(touch PWNED)'\n")
    record = _run_step(tmp_path, profile, "install-frameworks")
    env = (record / "env").read_text().splitlines()
    assert f"MPICC={tmp_path}/bin/mpicc wrapper" in env  # $HOME expanded on the node
    assert "WHERE=x$(touch PWNED)" in env and not list(tmp_path.rglob("PWNED"))
    plan = build_plan(load_site(str(profile)), "/p")
    assert {s.id for s in plan.steps if s.modules == "build"} >= {"install-frameworks",
                                                                   "build-horovod"}


CONDA_SITE = ("paths:\n  scratch: /tmp\n  prefix: '{scratch}/${SYS_TYPE}/hp'\n"
              "python:\n  backend: conda\n  conda:\n    python: '3.11'\n"
              "    channels: ['file:///apps/${SYS_TYPE}/channel', conda-forge]\n")


def _head(profile: Path, prefix: str | None = None) -> str:
    script = render_script(build_plan(load_site(str(profile)), prefix))
    return script.split("\nHPCPROV_STEPS=(")[0]


def test_site_variables_in_conda_channels_and_the_prefix_expand_on_the_node(
        tmp_path: Path) -> None:
    head = _head(_site(tmp_path, CONDA_SITE))
    conda_sh = tmp_path / "conda.sh"  # stands in for the installed conda's profile script
    conda_sh.write_text(f'conda() {{ printf "%s\\n" "$@" > "{tmp_path}/argv"; }}\n')
    (tmp_path / "run.sh").write_text(
        f'{head}\necho "prefix=$PREFIX"\nCONDA_ROOT={tmp_path}/root\n'
        f'mkdir -p "$CONDA_ROOT/etc/profile.d"\ncp {conda_sh} "$CONDA_ROOT/etc/profile.d/"\n'
        "step_create_env\n")
    proc = subprocess.run(["bash", str(tmp_path / "run.sh")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "SYS_TYPE": "toss_4_x86_64"}, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "prefix=/tmp/toss_4_x86_64/hp" in proc.stdout
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[argv.index("-c") + 1] == "file:///apps/toss_4_x86_64/channel"


def test_a_channel_that_would_run_a_command_is_refused_and_never_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = CONDA_SITE.replace("conda-forge]", "'x$(touch PWNED)']")
    res = cli(capsys, "site", "check", str(_site(tmp_path, bad)))
    assert_one_line_error(res, 2, "s.yaml:10:", "python.conda.channels.1", "$NAME or ${NAME}")
    # rendered all the same (a view built without the model), it is text
    from types import SimpleNamespace

    from hpcprov.core.shell import join
    from hpcprov.provision.plan import conda_channel_args
    site = SimpleNamespace(python=SimpleNamespace(conda=SimpleNamespace(
        channels=["x$(touch PWNED)", "*", "${SYS_TYPE}`touch PWNED`"])))
    line = join(["printf", "%s\\n", *conda_channel_args(site, [])])
    proc = subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "SYS_TYPE": "t"}, timeout=30)
    assert proc.stdout.splitlines() == ["--override-channels", "-c", "x$(touch PWNED)", "-c",
                                        "*", "-c", "t`touch PWNED`"]
    assert not list(tmp_path.rglob("PWNED"))


CONDA_BASE_VENV = """\
extends: neuron
name: cb
modules:
  build: {load: [gcc/10.2.0, cuda/11.4, cudampi/openmpi-4.1.1, cmake/3.16.9, conda]}
  runtime: {purge: true, load: [gcc/10.2.0, cuda/11.4, cudampi/openmpi-4.1.1, conda]}
python:
  backend: venv
  conda: {module: conda}
  frameworks:
    pytorch: {installer: pip}
    tensorflow: {installer: pip}
"""


def test_a_venv_is_built_on_the_conda_modules_base_environment(
        tmp_path: Path, stubs: Stubs, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_profile(tmp_path / "sites", "cb", CONDA_BASE_VENV)
    prefix = tmp_path / "prefix"
    res = cli(capsys, "setup", "--site", str(path), "--prefix", str(prefix), "--dry-run")
    assert res.rc == 0, res.err
    proc = stubs.run(res.out, "create-env", name="setup.sh")
    assert proc.returncode == 0, proc.stderr
    calls = [c for c in stubs.calls() if c[0] in ("module", "conda", "python3", "python")]
    load = next(i for i, c in enumerate(calls) if c[:2] == ["module", "load"] and "conda" in c)
    activate = calls.index(["conda", "activate"])  # the base environment
    create = next(i for i, c in enumerate(calls) if c[0].startswith("python") and "venv" in c)
    assert load < activate < create
    # the module must be loaded where the venv is built and used
    bad = write_profile(tmp_path / "sites", "bad", CONDA_BASE_VENV.replace(
        ", conda]}\npython", "]}\npython").replace("name: cb", "name: bad"))
    res = cli(capsys, "site", "check", str(bad))
    assert res.rc == 2 and "python.conda.module is conda: add it to modules.runtime.load" \
        in res.err

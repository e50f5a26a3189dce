"""The profile's installer (python.venv.installer): pip, uv or auto (issue 16's wheelhouse hit).

uv reads none of pip's configuration, so hpcprov passes pip's on (provision/programs/
pip_to_uv.py): a site's constraint file, indexes and wheel directories apply to an install
made with uv as they do to pip. The real install below runs the real uv (from the package
index, as .ci/run installs it) against wheels made here.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hpcprov_tests import write_profile

from hpcprov.provision.diagnose import diagnose
from hpcprov.provision.horovod_steps import preflight_lines
from hpcprov.provision.library import definitions
from hpcprov.provision.plan import build_plan
from hpcprov.site.profiles import load_site

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "provision" / "programs" / "pip_to_uv.py"


def program() -> object:
    spec = importlib.util.spec_from_file_location("pip_to_uv", PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pips_configuration_becomes_uvs_arguments_the_first_scope_winning() -> None:
    listed = ("global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
              "global.constraint='/etc/xdg/pip/constraints.txt'\n"
              "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'\n"
              "global.find-links='/opt/global'\n"
              "install.find-links='/opt/install'\n"
              ":env:.find-links='/opt/wheels /site/wheels'\n"
              ":env:.default-timeout='180'\n"
              "global.no-index='false'\n")
    assert program().uv_args(listed) == [
        "--constraint", "/etc/xdg/pip/constraints.txt",
        "--extra-index-url", "file:///opt/pypi/simple",
        "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels", "--find-links", "/site/wheels"]
    assert program().uv_args(":env:.no-index='1'\nglobal.index-url='https://m/simple'\n") \
        == ["--index-url", "https://m/simple", "--no-index"]
    assert program().uv_args("") == []


def frameworks_step(tmp_path: Path, venv: str, backend: str = "venv") -> list[str]:
    conda = "  conda: {python: '3.11', channels: [conda-forge]}\n"
    write_profile(tmp_path / "sites", "u", f"extends: local\nname: u\npython:\n  backend: "
                  f"{backend}\n  venv: {venv}\n" + (conda if backend == "conda" else ""))
    site = load_site(str(tmp_path / "sites" / "u.yaml"))
    (step,) = [s for s in build_plan(site, "/p").steps if s.id == "install-frameworks"]
    return [*step.lines, "#preflight", *preflight_lines(site, 1)]


def test_pip_installs_without_uv_anywhere_and_is_the_default(tmp_path: Path) -> None:
    lines = frameworks_step(tmp_path, "{installer: pip}")
    assert "python -m pip install --no-compile torch==2.13.0 numpy" in lines
    assert not [ln for ln in lines if "uv" in ln]
    sockeye = load_site("sockeye")  # names no installer
    assert sockeye.python.venv.installer == "pip"
    (step,) = [s for s in build_plan(sockeye, "/p").steps if s.id == "install-frameworks"]
    assert not [ln for ln in step.lines if "uv" in ln]


def test_uv_installs_with_pips_configuration_and_preflight_requires_it(tmp_path: Path
                                                                       ) -> None:
    lines = frameworks_step(tmp_path, "{installer: uv}")
    assert 'hpcprov_uv_install "$STATE/programs/pip_to_uv.py" torch==2.13.0 numpy' in lines
    assert not [ln for ln in lines if "python -m pip install" in ln]
    assert any(ln.startswith("hpcprov_require_tool uv 'venv.installer: uv") for ln in lines)


def test_auto_takes_uv_where_it_is_else_pip_and_requires_nothing(tmp_path: Path) -> None:
    lines = frameworks_step(tmp_path, "{installer: auto}")
    at = lines.index("if command -v uv >/dev/null 2>&1; then")
    assert lines[at + 1:at + 5] == [
        '  hpcprov_uv_install "$STATE/programs/pip_to_uv.py" torch==2.13.0 numpy', "else",
        "  python -m pip install --no-compile torch==2.13.0 numpy", "fi"]
    assert not [ln for ln in lines if "require_tool uv" in ln]


def test_a_conda_environment_installs_its_pip_packages_with_pip(tmp_path: Path) -> None:
    lines = frameworks_step(tmp_path, "{installer: uv}", backend="conda")
    assert not [ln for ln in lines if "uv" in ln]


@pytest.mark.parametrize(("log", "needle"), [
    ("error: No solution found when resolving dependencies\n  cause: Because you require "
     "torch==9.9.9 and torch<=2.14.1, we can conclude that your requirements are "
     "unsatisfiable.", "uv cannot install the packages: because you require torch==9.9.9 "
     "and torch<=2.14.1"),
    ("  x No solution found when resolving dependencies:\n  \u2570\u2500\u25b6 Because "
     "torch was not found in the provided package locations and you require torch==9.9.9,"
     " we can conclude that your requirements are unsatisfiable.",
     "because torch was not found in the provided package locations"),
])
def test_uvs_unsolvable_install_is_explained(log: str, needle: str) -> None:
    assert needle in (diagnose(log) or "")


# ---- the real uv ------------------------------------------------------------------------

def wheel(folder: Path, version: str) -> None:
    """A minimal pure-Python wheel of hpcprov-probe VERSION."""
    name = f"hpcprov_probe-{version}"
    with zipfile.ZipFile(folder / f"{name}-py3-none-any.whl", "w") as z:
        z.writestr("hpcprov_probe.py", f"VERSION = {version!r}\n")
        z.writestr(f"{name}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: hpcprov-probe\nVersion: {version}\n")
        z.writestr(f"{name}.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                   "Tag: py3-none-any\n")
        z.writestr(f"{name}.dist-info/RECORD", "")


@pytest.fixture
def env_with_pip(tmp_path: Path) -> Path:
    """A new environment (with pip, whose configuration the program asks)."""
    where = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    return where


@pytest.mark.parametrize("constrained", [True, False])
def test_uv_installs_what_pips_configuration_allows(tmp_path: Path, env_with_pip: Path,
                                                     constrained: bool) -> None:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not os.access(uv, os.X_OK):
        pytest.skip("uv is not installed here (.ci/run installs it)")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0", "2.0"):
        wheel(wheels, version)
    (tmp_path / "c.txt").write_text("hpcprov-probe<2\n")
    body = ('hpcprov_file_pip_to_uv_py > "$STATE/pip_to_uv.py"\n'
            'hpcprov_uv_install "$STATE/pip_to_uv.py" hpcprov-probe')
    (tmp_path / "state").mkdir()
    script = tmp_path / "run.sh"
    script.write_text("set -eo pipefail\n" + "\n".join(definitions([body])) + "\n" + body)
    env = {"PATH": f"{env_with_pip / 'bin'}:{Path(uv).parent}:/usr/bin:/bin",
           "HOME": str(tmp_path), "STATE": str(tmp_path / "state"),
           "PIP_CONFIG_FILE": os.devnull, "UV_NO_CONFIG": "1",
           "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
           # pip's configuration, as a site sets it: only the wheels here, and a cap
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels),
           **({"PIP_CONSTRAINT": str(tmp_path / "c.txt")} if constrained else {})}
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"--find-links {wheels} --no-index" in proc.stdout  # said what it passed on
    got = subprocess.run([str(env_with_pip / "bin" / "python"), "-c",
                          "import hpcprov_probe; print(hpcprov_probe.VERSION)"],
                         capture_output=True, text=True, timeout=60)
    assert got.stdout.strip() == ("1.0" if constrained else "2.0"), got.stderr


@pytest.mark.parametrize("installer", ["pip", "uv", "auto"])
def test_the_horovod_step_installs_with_the_profiles_installer(tmp_path: Path,
                                                              installer: str) -> None:
    """Horovod's build requirements and its wheel (built or from the wheelhouse) go in with
    the installer the frameworks did (uv: about a second less of every setup, a wheelhouse
    hit's too), never from the frameworks' own index."""
    venv = f"{{creator: virtualenv, installer: {installer}}}"
    write_profile(tmp_path / "sites", "x", (
        f"extends: local\nname: x\npython:\n  venv: {venv}\n  frameworks:\n    pytorch: "
        "{version: '2.13.0', index_url: 'https://idx.example/t'}\n"))
    site = load_site(str(tmp_path / "sites" / "x.yaml"))
    (step,) = [s for s in build_plan(site, "/p").steps if s.id == "build-horovod"]
    uv = [ln.strip() for ln in step.lines if "hpcprov_uv_install" in ln]
    pip = [ln.strip() for ln in step.lines if "python -m pip install" in ln]
    uv_wanted = ['hpcprov_uv_install "$STATE/programs/pip_to_uv.py" setuptools wheel '
                 'packaging cffi cloudpickle psutil pyyaml',
                 'hpcprov_uv_install "$STATE/programs/pip_to_uv.py" --no-deps --reinstall '
                 '"$HPCPROV_WHEEL"']
    pip_wanted = ["python -m pip install --no-compile setuptools wheel packaging cffi "
                  "cloudpickle psutil pyyaml",
                  'python -m pip install --no-compile --no-deps --force-reinstall '
                  '"$HPCPROV_WHEEL"']
    assert uv == (uv_wanted if installer != "pip" else [])
    assert pip == (pip_wanted if installer != "uv" else [])
    assert not [ln for ln in step.lines if "idx.example" in ln]

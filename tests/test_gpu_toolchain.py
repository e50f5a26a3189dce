"""Today's GPU toolchains (issue 15): the patches chosen from the build's facts (libstdc++,
Python), the NCCL that PyTorch's wheel ships, and a CMake 3 when PATH has CMake 4.

Everything here runs on this CPU machine: the facts come from the real compiler and Python,
the patches are applied to the real Horovod 0.28.1 sdist, CMake 4 and 3 are the real ones from
the package index. What needs a GPU (nvcc, NCCL itself) is the folder an nvidia-nccl wheel
installs, made here with its real file names; docs/gpu.md says what that leaves unverified.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hpcprov_tests import write_profile

from hpcprov.provision.horovod_steps import build_lines, links_wheel_nccl
from hpcprov.provision.library import definitions
from hpcprov.site.profiles import load_site

PROGRAM = Path(__file__).resolve().parents[1] / "provision" / "programs" / "nccl_home.py"


def bash(tmp_path: Path, body: str, env: dict[str, str] | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `body` after the library functions (and files) it calls, as a setup script
    carries them."""
    script = tmp_path / "run.sh"
    script.write_text("\n".join(definitions([body])) + "\n" + body + "\n")
    base = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
            "STATE": str(tmp_path / "state"), "PREFIX": str(tmp_path / "prefix")}
    return subprocess.run(["bash", str(script)], capture_output=True, text=True,
                          env={**base, **(env or {})}, timeout=timeout)


def python_bin(tmp_path: Path) -> Path:
    """A folder whose `python` is this interpreter (the environment's python in a setup)."""
    folder = tmp_path / "pybin"
    folder.mkdir(exist_ok=True)
    if not (folder / "python").exists():
        (folder / "python").symlink_to(sys.executable)
    return folder


# ---- build facts and the patches they choose -------------------------------------------

def test_the_build_facts_are_read_from_the_real_compiler_and_python(tmp_path: Path) -> None:
    gcc = subprocess.run(["c++", "-dumpversion"], capture_output=True, text=True).stdout
    major = gcc.strip().split(".")[0]
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    env = {"PATH": f"{python_bin(tmp_path)}:/usr/bin:/bin"}
    proc = bash(tmp_path, "hpcprov_build_fact libstdc++; hpcprov_build_fact python", env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [major, py]   # g++'s libstdc++ release is its major version
    # at least: the fact itself holds, the next release does not; versions compare in version
    # order (3.11 >= 3.9, which a string comparison gets wrong)
    checks = {f"libstdc++ {major}": 0, f"libstdc++ {int(major) + 1}": 1, f"python {py}": 0,
              f"python {sys.version_info[0]}.{sys.version_info[1] + 1}": 1, "python 3.9": 0}
    for args, want in checks.items():
        proc = bash(tmp_path, f"hpcprov_at_least {args}", env)
        assert proc.returncode == want, (args, proc.stdout, proc.stderr)
        assert ("(>= " if want == 0 else "(not >= ") in proc.stdout


def test_an_unknown_fact_and_another_standard_library_are_said(tmp_path: Path) -> None:
    proc = bash(tmp_path, "hpcprov_at_least cuda 12")
    assert proc.returncode == 2 and "unknown build fact cuda" in proc.stderr
    # a compiler whose library is not libstdc++ (no _GLIBCXX_RELEASE): unknown, not applied
    fake = tmp_path / "cxx"
    fake.write_text("#!/bin/sh\ncat >/dev/null; echo _GLIBCXX_RELEASE\n")
    fake.chmod(0o755)
    proc = bash(tmp_path, "hpcprov_at_least libstdc++ 13",
                {"CXX": str(fake)})
    assert proc.returncode == 1 and "libstdc++ is unknown" in proc.stdout


def conditional_patch_lines(site_name: str) -> list[str]:
    """The build step's patch lines (between unpacking and the CMake check), unindented."""
    lines = [ln[2:] for ln in build_lines(load_site(site_name)) if ln.startswith("  ")]
    start = lines.index("hpcprov_horovod_unpack") + 1
    end = next(i for i, ln in enumerate(lines) if ln.startswith("hpcprov_cmake_below"))
    return lines[start:end]


def test_build_time_patches_are_guarded_by_their_facts_in_the_plan() -> None:
    cpu = conditional_patch_lines("local")
    assert cpu[0].startswith("hpcprov_file_horovod_0_28_1_cxx_standard_patch |")
    assert "if hpcprov_at_least libstdc++ 13; then" in cpu
    assert "if hpcprov_at_least python 3.12; then" in cpu
    assert not any("cuda-std14" in ln for ln in cpu)        # a CPU build
    gpu = conditional_patch_lines("neuron")
    i = gpu.index("if hpcprov_at_least libstdc++ 14; then")
    assert "horovod-0.28.1-cuda-std14.patch" in gpu[i + 1] and gpu[i + 2] == "fi"


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real Horovod 0.28.1 sdist from the package index."""
    folder = tmp_path_factory.mktemp("sdist")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                           ":all:", "--no-build-isolation", "horovod==0.28.1", "-d", str(folder)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (path,) = folder.glob("horovod-0.28.1.tar.gz")
    return path


def unpacked(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers()
                   if m.name.split("/", 2)[1:2] in (["horovod"], ["CMakeLists.txt"],
                                                     ["setup.py"])]
        tar.extractall(into, members=members, filter="data")
    return into / "horovod-0.28.1"


@pytest.mark.slow
@pytest.mark.parametrize(("site_name", "stdlib", "want"), [
    ("local", "12", {"cxx-standard", "build-type"}),
    ("local", "13", {"cxx-standard", "std-includes", "build-type"}),
    ("local", "14", {"cxx-standard", "std-includes", "build-type"}),  # a CPU build: no CUDA kernels
    ("neuron", "14", {"std-includes", "cuda-std14", "build-type"}),  # torch 1.12: no cxx-standard
])
def test_the_build_applies_the_patches_its_toolchain_needs(
        sdist: Path, tmp_path: Path, site_name: str, stdlib: str, want: set[str]) -> None:
    """The build step's own patch lines, run on the real sdist; the compiler stands for one
    whose libstdc++ has the given release (its preprocessor answers _GLIBCXX_RELEASE), the
    Python is this one (3.11 here: the distutils patch stays out)."""
    src = unpacked(sdist, tmp_path / "src")
    cxx = tmp_path / "cxx"
    cxx.write_text(f"#!/bin/sh\ncat >/dev/null; echo {stdlib}\n")
    cxx.chmod(0o755)
    lines = conditional_patch_lines(site_name)
    (tmp_path / "prefix" / "build" / "horovod").mkdir(parents=True)
    proc = bash(tmp_path, "\n".join(lines), {"PATH": f"{python_bin(tmp_path)}:/usr/bin:/bin",
                                             "CXX": str(cxx), "HPCPROV_SRC": str(src)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    applied = {line.split("horovod-0.28.1-", 1)[1].removesuffix(".patch")
               for line in proc.stdout.splitlines() if line.startswith("hpcprov: applying")}
    assert applied == want
    assert "HOROVOD_CMAKE_BUILD_TYPE" in (src / "setup.py").read_text()  # build-type applied
    group_table = (src / "horovod/common/group_table.h").read_text()
    assert ("#include <string>" in group_table) == ("std-includes" in want)
    cuda = (src / "horovod/common/ops/cuda/CMakeLists.txt").read_text()
    assert ("set(CMAKE_CUDA_STANDARD 14)" in cuda) == ("cuda-std14" in want)


@pytest.mark.slow
def test_the_distutils_patch_lets_horovodrun_load_without_distutils(sdist: Path,
                                                                    tmp_path: Path) -> None:
    """Python 3.12 has no distutils: the unpatched js_run fails to import, the patched one
    imports and finds executables as before (distutils blocked here, on 3.11)."""
    src = unpacked(sdist, tmp_path / "src")
    probe = ("import sys; sys.modules['distutils'] = sys.modules['distutils.spawn'] = None; "
             "import horovod.runner.js_run as j; print(j.find_executable('sh'))")
    before = subprocess.run([sys.executable, "-c", probe], cwd=src, capture_output=True,
                            text=True, timeout=60)
    assert before.returncode != 0 and "distutils" in before.stderr
    patch = Path(__file__).resolve().parents[1] / "provision/patches"
    subprocess.run(["patch", "-p1", "--forward", "-i",
                    str(patch / "horovod-0.28.1-no-distutils.patch")], cwd=src, check=True,
                   capture_output=True)
    after = subprocess.run([sys.executable, "-c", probe], cwd=src, capture_output=True,
                           text=True, timeout=60)
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip().endswith("/sh")


@pytest.mark.slow
def test_the_distutils_patch_gives_the_torch_extension_pythons_headers(sdist: Path,
                                                                      tmp_path: Path) -> None:
    """horovod/torch/CMakeLists.txt asks Python for its include folder; with distutils gone
    (Python 3.12) the unpatched command prints nothing (then 'Python.h: No such file' at
    97%), the patched one names the folder that holds Python.h."""
    src = unpacked(sdist, tmp_path / "src")
    cmake = src / "horovod" / "torch" / "CMakeLists.txt"

    def include_dir() -> subprocess.CompletedProcess[str]:
        (command,) = re.findall(r'\$\{PY_EXE\} -c "([^"]*get_\w*inc\w*[^"]*|[^"]*'
                                r'sysconfig[^"]*)"', cmake.read_text())
        blocked = ("import sys; sys.modules['distutils'] = sys.modules['distutils.sysconfig']"
                   " = None; ")
        return subprocess.run([sys.executable, "-c", blocked + command], capture_output=True,
                              text=True, timeout=60)

    before = include_dir()
    assert before.returncode != 0 and before.stdout == ""
    patch = Path(__file__).resolve().parents[1] / "provision/patches"
    subprocess.run(["patch", "-p1", "--forward", "-i",
                    str(patch / "horovod-0.28.1-no-distutils.patch")], cwd=src, check=True,
                   capture_output=True)
    assert "distutils" not in cmake.read_text()
    after = include_dir()
    assert after.returncode == 0, after.stderr
    assert (Path(after.stdout.strip()) / "Python.h").is_file()


# ---- the C++ standard of the PyTorch extension ---------------------------------------------

def fake_torch(root: Path, std: str | None) -> Path:
    """A torch package whose headers demand C++STD as PyTorch's do (torch/all.h stops a
    compile below it); None: headers without that check."""
    pkg = root / "torch"
    header = pkg / "include" / "torch" / "csrc" / "api" / "include" / "torch" / "all.h"
    header.parent.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('never imported: read as text')\n")
    value = {"17": "201703L", "20": "202002L"}.get(std or "")
    check = (f"#if !defined(_MSC_VER) && __cplusplus < {value}\n#error C++{std} or later "
             "compatible compiler is required to use PyTorch.\n#endif\n") if value else ""
    header.write_text("#pragma once\n\n" + check + "#include <torch/cuda.h>\n")
    return root


@pytest.mark.parametrize(("std", "want"), [("17", "17"), ("20", "20"), (None, "")])
def test_the_torch_extension_standard_is_read_from_the_pytorch_built_against(
        tmp_path: Path, std: str | None, want: str) -> None:
    site = fake_torch(tmp_path / "site", std)
    env = {"PATH": f"{python_bin(tmp_path)}:/usr/bin:/bin", "PYTHONPATH": str(site)}
    proc = bash(tmp_path, "hpcprov_build_fact torch-cxx; hpcprov_torch_cxx_standard; "
                          'echo "std=$HOROVOD_TORCH_CXX_STANDARD"', env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == want if want else not lines[0].isdigit()
    assert lines[-1] == f"std={want or '17'}"


def test_a_real_pytorch_names_its_standard(tmp_path: Path) -> None:
    """The PyTorch this interpreter has (CI: 2.13.0, whose headers demand C++17) and a CUDA
    2.14.1 folder on HPCPROV_TEST_TORCH_CUDA (C++20)."""
    cases = [(None, sys.executable)]
    torch_cuda = os.environ.get("HPCPROV_TEST_TORCH_CUDA")
    if torch_cuda:
        cases.append((torch_cuda, sys.executable))
    for pythonpath, _ in cases:
        env = {"PATH": f"{python_bin(tmp_path)}:/usr/bin:/bin",
               **({"PYTHONPATH": pythonpath} if pythonpath else {})}
        probe = subprocess.run([sys.executable, "-c", "import importlib.metadata as m; "
                                "print(m.version('torch'))"], capture_output=True, text=True,
                               env={**os.environ, **env})
        if probe.returncode != 0:
            continue
        version = tuple(int(x) for x in probe.stdout.split("+")[0].split(".")[:2])
        proc = bash(tmp_path, "hpcprov_build_fact torch-cxx", env)
        assert proc.stdout.strip() == ("20" if version >= (2, 14) else "17"), probe.stdout


def test_every_pytorch_build_takes_its_standard_from_pytorch() -> None:
    """CPU builds included: the cxx-standard patch and the line that reads the standard."""
    for name in ("local", "neuron"):
        lines = [ln.strip() for ln in build_lines(load_site(name))]
        assert ("hpcprov_torch_cxx_standard" in lines) == (name == "local")  # torch 1.12: no


# ---- the CUDA toolkit, found as the toolkit is ---------------------------------------------

def toolkit(root: Path) -> Path:
    """A CUDA toolkit folder whose nvcc answers `-v --dryrun` as the real one does."""
    (root / "bin").mkdir(parents=True)
    nvcc = root / "bin" / "nvcc"
    # the real nvcc names its own file's folder (not the name it was called by)
    nvcc.write_text("#!/bin/sh\ncase \"$*\" in *--dryrun*) echo \"#\\$ TOP=$(dirname "
                    "\"$(readlink -f \"$0\")\")/..\""
                    " >&2;; *--version*) echo 'Cuda compilation tools, release 12.4';; esac\n")
    nvcc.chmod(0o755)
    return root


@pytest.mark.parametrize("how", ["wrapper", "symlink", "CUDA_HOME", "CUDA_PATH"])
def test_the_cuda_home_is_the_toolkit_not_the_wrappers_folder(tmp_path: Path, how: str) -> None:
    kit = toolkit(tmp_path / "cuda-12.4")
    front = tmp_path / "front" / "bin"
    front.mkdir(parents=True)
    env = {"PATH": f"{front}:/usr/bin:/bin"}
    if how == "wrapper":      # as /usr/local/bin/nvcc on this project's machines
        (front / "nvcc").write_text(f'#!/bin/sh\nexec {kit}/bin/nvcc "$@"\n')
        (front / "nvcc").chmod(0o755)
    elif how == "symlink":
        (front / "nvcc").symlink_to(kit / "bin" / "nvcc")
    else:
        env[how] = str(kit)
    proc = bash(tmp_path, 'hpcprov_cuda_home && printf "%s\\n" "$CUDA_HOME" "$CUDA_PATH" '
                          '"$HOROVOD_CUDA_HOME" "$(command -v nvcc)"', env)
    assert proc.returncode == 0, proc.stderr
    *said, home, path, hvd, nvcc = proc.stdout.splitlines()
    assert home == path == hvd == str(kit.resolve()) if how in ("wrapper", "symlink") else \
        home == path == hvd == str(kit)
    assert nvcc == f"{home}/bin/nvcc"  # the toolkit's bin/ first on PATH, for the build
    assert "release 12.4" in said[0]


def test_the_real_nvcc_wrapper_leads_to_the_real_toolkit(tmp_path: Path) -> None:
    wrapper = shutil.which("nvcc")
    if wrapper is None:
        pytest.skip("no nvcc on PATH")
    proc = bash(tmp_path, 'hpcprov_cuda_home && echo "$CUDA_HOME"',
                {"PATH": f"{Path(wrapper).parent}:/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    home = Path(proc.stdout.splitlines()[-1])
    assert (home / "include" / "cuda_runtime.h").is_file() and (home / "bin" / "nvcc").is_file()


def test_no_toolkit_is_one_line_with_the_fix(tmp_path: Path) -> None:
    proc = bash(tmp_path, "hpcprov_cuda_home", {"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 3 and "load the site's CUDA module" in proc.stderr
    proc = bash(tmp_path, "hpcprov_cuda_home", {"PATH": "/usr/bin:/bin", "CUDA_HOME": "/no"})
    assert proc.returncode == 3 and "'/no', has no bin/nvcc" in proc.stderr


def test_only_cuda_builds_look_for_the_toolkit_before_the_key() -> None:
    gpu = [ln.strip() for ln in build_lines(load_site("neuron"))]
    assert gpu.index("hpcprov_cuda_home") < next(i for i, ln in enumerate(gpu)
                                                 if "hpcprov_horovod_key" in ln)
    assert "hpcprov_cuda_home" not in [ln.strip() for ln in build_lines(load_site("local"))]


# ---- NCCL from PyTorch's nvidia-nccl wheel ------------------------------------------------

def nccl_wheel(root: Path, version: tuple[int, int, int] = (2, 28, 9)) -> Path:
    """What `pip install nvidia-nccl-cu13` puts in site-packages (its real file names)."""
    nccl = root / "nvidia" / "nccl"
    (nccl / "include").mkdir(parents=True)
    (nccl / "lib").mkdir()
    major, minor, patch = version
    (nccl / "include" / "nccl.h").write_text(
        f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n")
    (nccl / "include" / "nccl_device.h").write_text("/* more headers */\n")
    (nccl / "lib" / "libnccl.so.2").write_bytes(b"\x7fELF not really\n")
    (nccl / "__init__.py").write_text("")
    return nccl


def test_the_nccl_home_links_the_wheel_pytorch_uses(tmp_path: Path) -> None:
    wheel = nccl_wheel(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    home = tmp_path / "state" / "nccl"
    proc = subprocess.run([sys.executable, str(PROGRAM), str(home)], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(home)
    # what Horovod's FindNCCL looks for, each a link to the very file PyTorch loads
    for name, target in (("include/nccl.h", "include/nccl.h"),
                         ("include/nccl_device.h", "include/nccl_device.h"),
                         ("lib/libnccl.so", "lib/libnccl.so.2"),
                         ("lib/libnccl.so.2", "lib/libnccl.so.2")):
        assert (home / name).is_symlink() and (home / name).resolve() == wheel / target
    # run again (a resumed setup, or a newer wheel): the links are replaced, not doubled
    again = subprocess.run([sys.executable, str(PROGRAM), str(home)], capture_output=True,
                           text=True, env=env, timeout=60)
    assert again.returncode == 0 and sorted(p.name for p in (home / "lib").iterdir()) == [
        "libnccl.so", "libnccl.so.2"]


def test_without_a_wheel_nccl_the_program_says_nothing_and_fails(tmp_path: Path) -> None:
    (tmp_path / "site" / "nvidia" / "cublas").mkdir(parents=True)   # other nvidia wheels only
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    proc = subprocess.run([sys.executable, str(PROGRAM), str(tmp_path / "home")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert not (tmp_path / "home").exists()


def nccl_choice(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "state").mkdir(exist_ok=True)
    body = (f'hpcprov_nccl_home {PROGRAM}\necho "HOME=${{HOROVOD_NCCL_HOME:-}}"\n'
            'echo "LINK=${HOROVOD_NCCL_LINK:-}"\n'
            'hpcprov_horovod_key 0.28.1 none "" /dev/null | grep "^nccl="')
    return bash(tmp_path, body,
                {"PATH": f"{python_bin(tmp_path)}:/usr/bin:/bin", **env})


def test_the_build_takes_pytorchs_nccl_and_the_key_records_its_version(tmp_path: Path) -> None:
    nccl_wheel(tmp_path / "site")
    proc = nccl_choice(tmp_path, {"PYTHONPATH": str(tmp_path / "site")})
    assert proc.returncode == 0, proc.stderr
    assert f"HOME={tmp_path}/state/nccl" in proc.stdout and "LINK=SHARED" in proc.stdout
    assert "NCCL from PyTorch's nvidia-nccl wheel" in proc.stdout
    assert "nccl=2.28.9." in proc.stdout


def test_an_nccl_the_site_names_wins_and_a_module_nccl_comes_after_pytorchs(
        tmp_path: Path) -> None:
    named = tmp_path / "site-nccl"
    (named / "include").mkdir(parents=True)
    (named / "include" / "nccl.h").write_text(
        "#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n")
    nccl_wheel(tmp_path / "site")
    proc = nccl_choice(tmp_path, {"PYTHONPATH": str(tmp_path / "site"),
                                  "HOROVOD_NCCL_HOME": str(named)})
    assert f"HOME={named}" in proc.stdout and "nccl=2.21.5." in proc.stdout
    assert "set by the site" in proc.stdout and "LINK=\n" in proc.stdout
    # a module's NCCL_HOME counts only when PyTorch brings no NCCL of its own
    proc = nccl_choice(tmp_path, {"PYTHONPATH": str(tmp_path / "site"), "NCCL_HOME": str(named)})
    assert "nccl=2.28.9." in proc.stdout
    proc = nccl_choice(tmp_path, {"NCCL_HOME": str(named)})
    assert f"HOME={named}" in proc.stdout and "set by a module" in proc.stdout
    proc = nccl_choice(tmp_path, {})
    assert "HOME=\n" in proc.stdout and "Horovod searches the CUDA toolkit" in proc.stdout


def test_only_nccl_builds_that_name_no_nccl_look_for_pytorchs(tmp_path: Path) -> None:
    assert not links_wheel_nccl(load_site("local"))            # a CPU build
    neuron = load_site("neuron")
    assert links_wheel_nccl(neuron)
    lines = build_lines(neuron)
    nccl = lines.index('hpcprov_nccl_home "$STATE/programs/nccl_home.py"')
    key = next(i for i, ln in enumerate(lines) if "hpcprov_horovod_key" in ln)
    assert nccl < key                                           # the key reads its version
    path = write_profile(tmp_path, "named", """
        extends: neuron
        name: named
        horovod: {env: {HOROVOD_NCCL_HOME: /opt/nccl}}
        """)
    from hpcprov.site.catalog import load

    named = load(str(path))
    assert not links_wheel_nccl(named)
    assert not any("nccl_home" in ln for ln in build_lines(named))
    # the key is computed with the profile's HOROVOD_NCCL_HOME set, so it reads that NCCL
    (key,) = [ln for ln in build_lines(named) if "hpcprov_horovod_key" in ln]
    assert key.startswith("HOROVOD_NCCL_HOME=/opt/nccl ") or " HOROVOD_NCCL_HOME=/opt/nccl " in key


# ---- CMake 3 where PATH has CMake 4 --------------------------------------------------------

@pytest.mark.slow
def test_the_build_installs_cmake_3_where_path_has_cmake_4(cmake4: Path, tmp_path: Path) -> None:
    env = {"PATH": f"{cmake4}:{python_bin(tmp_path)}:/usr/bin:/bin"}
    proc = bash(tmp_path, "hpcprov_cmake_below 4\ncommand -v cmake\ncmake --version", env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cmake 4." in proc.stdout and "installing cmake<4" in proc.stdout
    assert f"{tmp_path}/prefix/build/cmake/cmake/data/bin/cmake\n" in proc.stdout
    assert "cmake version 3." in proc.stdout.split("building with", 1)[1]


@pytest.mark.slow
def test_a_cmake_3_on_path_is_used_and_no_cmake_at_all_is_fixed_too(tmp_path: Path) -> None:
    # this machine's own CMake 3 (Debian's): nothing to do
    proc = bash(tmp_path, "hpcprov_cmake_below 4; command -v cmake",
                {"PATH": f"{python_bin(tmp_path)}:/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.strip() == "/usr/bin/cmake"
    assert not (tmp_path / "prefix" / "build" / "cmake").exists()
    # no cmake on PATH at all (PATH: the tools the function uses, no cmake): installed too
    bare = tmp_path / "bare"
    bare.mkdir()
    for tool in ("bash", "awk", "head", "rm", "cat", "grep", "tail"):
        (bare / tool).symlink_to(f"/usr/bin/{tool}")
    proc = bash(tmp_path, "hpcprov_cmake_below 4\ncmake --version",
                {"PATH": f"{python_bin(tmp_path)}:{bare}"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cmake not found: installing cmake<4" in proc.stdout


def test_without_a_cmake_3_to_install_the_build_stops_naming_the_fixes(tmp_path: Path) -> None:
    """An offline site whose wheelhouse has no cmake wheel: exit 3 and the two fixes."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "cmake").write_text('#!/bin/sh\necho "cmake version 4.4.4"\n')
    (fake / "cmake").chmod(0o755)
    empty = tmp_path / "wheels"
    empty.mkdir()
    proc = bash(tmp_path, f"hpcprov_cmake_below 4 --no-index --find-links {empty}",
                {"PATH": f"{fake}:{python_bin(tmp_path)}:/usr/bin:/bin"})
    assert proc.returncode == 3
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("hpcprov: error:")]
    assert "cmake on PATH is 4.4.4" in line and "load a cmake/3 module" in line
    assert "cmake<4 wheel in the profile's wheelhouse" in line


# ---- the recipe for one GPU node (docs/gpu.md) ---------------------------------------------

RECIPE = Path(__file__).resolve().parents[1] / "docs" / "gpu"


def test_the_recipes_profile_checks_and_plans_the_nccl_build(tmp_path: Path) -> None:
    """The profile run.sh writes for a node like the one of issue 15 passes `site check`, and
    its setup plan makes the NCCL home, builds for sm_90 and brings its own CMake 3."""
    proc = subprocess.run([sys.executable, str(RECIPE / "profile.py"), str(tmp_path),
                           str(tmp_path / "wheels"), "1", "NVIDIA H100 80GB HBM3",
                           "2.11.0+cu130"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    path = proc.stdout.strip()
    check = subprocess.run([sys.executable, "-m", "hpcprov", "site", "check", path],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    plan = subprocess.run([sys.executable, "-m", "hpcprov", "setup", "--site", path,
                           "--dry-run"], capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0, plan.stderr
    script = plan.stdout
    assert 'hpcprov_nccl_home "$STATE/programs/nccl_home.py"' in script
    assert "HOROVOD_BUILD_CUDA_CC_LIST=90" in script and "HOROVOD_GPU_OPERATIONS=NCCL" in script
    assert "hpcprov_cmake_below 4 --no-index --find-links" in script
    assert "torch==2.11.0+cu130" in script
    bad = subprocess.run([sys.executable, str(RECIPE / "profile.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("usage: profile.py")


# The kit that prepare.sh gathers, and hpcprov installed from it with --no-index as run.sh
# does on the node, are the GPU check's rehearsal (benchmarks/gpu_check.sh rehearse, CI's
# GPU build): tests/test_gpu_build_real.py asserts on its bundle and on everything after.


# ---- the recipe's profile ------------------------------------------------------------------

@pytest.mark.parametrize("cores", [1, 2, 64])
def test_the_recipes_profile_passes_site_check_on_any_core_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int) -> None:
    import importlib.util

    from hpcprov.jobs.lint import site_check_errors

    path = Path(__file__).resolve().parents[1] / "docs" / "gpu" / "profile.py"
    spec = importlib.util.spec_from_file_location("gpu_profile", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module.os, "cpu_count", lambda: cores)
    assert module.main(["profile.py", str(tmp_path), str(tmp_path / "wheels"), "4",
                        "H100 80GB HBM3", "2.14.1"]) == 0
    profile = tmp_path / "gpu-node.yaml"
    assert site_check_errors(profile) == []
    # pinned as pip knows the wheel (its metadata), which an offline pip can satisfy
    assert '"2.14.1"' in profile.read_text() or "version: 2.14.1" in profile.read_text()

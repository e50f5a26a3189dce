"""The GPU build for real, with no GPU: Horovod 0.28.1 compiled with NCCL against PyTorch
2.15.0+cu130 and its nvidia-nccl wheel, with the CUDA 13 toolkit behind the nvcc wrapper on
PATH and CMake 4 first on PATH, as a new user gets it from docs/gpu (.ci/gpu-build runs the
GPU check's rehearsal: benchmarks/gpu_check.sh fetches its bundle with docs/gpu/prepare.sh,
then runs docs/gpu/run.sh in its no-GPU mode: site check, setup, doctor).

What a GPU user needs is asserted on what the run left: `horovodrun -cb` lists NCCL; the
torch extension's libnccl.so.2 is PyTorch's wheel's and libcudart resolves (ldd); kernels
only for the profile's architecture (cuobjdump); the wheelhouse key names CUDA and NCCL; the
2-process proof passed; doctor is healthy. Only a CUDA tensor through NCCL needs a GPU.

Inputs (the folders are big, so they are made once by .ci/run, or by hand):
* HPCPROV_TEST_TORCH_CUDA: `pip install --target DIR torch==2.15.0 numpy` (Python 3.11);
* HPCPROV_TEST_GPU_RUN: where .ci/run runs .ci/gpu-build beside the tests, writing DIR/rc when
  it ends (the tests wait for that file); else the test runs it, about 4 minutes on 2 cores;
* HPCPROV_TEST_TORCH_CUDA_312 (+ pyenv's 3.12.1, or HPCPROV_TEST_PYTHON_312): the same on
  Python 3.12, with setuptools only from PYTHONPATH (torch's own dependency there).
Without them the tests skip, unless HPCPROV_REQUIRE_GPU_BUILD=1 (CI), where they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

# slow; last: CI builds it beside the other tests (.ci/run), which this module waits for
pytestmark = [pytest.mark.slow, pytest.mark.last]

REPO = Path(__file__).resolve().parents[1]
REQUIRE = os.environ.get("HPCPROV_REQUIRE_GPU_BUILD") == "1"
ARCH = "90"  # H100, H200


@dataclass(frozen=True)
class GpuRun:
    """What .ci/gpu-build left: its exit status and output, the prefix, the torch folder."""

    rc: int
    output: str
    dir: Path
    torch: Path

    @property
    def prefix(self) -> Path:
        return self.dir / "work" / "env"

    @property
    def state(self) -> Path:
        return self.prefix / ".hpcprov"

    def log(self, step: str) -> str:
        (path,) = (self.state / "logs").glob(f"*-{step}.log")
        return path.read_text(errors="replace")


def _missing(why: str) -> None:
    if REQUIRE:
        pytest.fail(f"the GPU build is required (HPCPROV_REQUIRE_GPU_BUILD=1): {why}")
    pytest.skip(why)


def _python_312() -> str | None:
    given = os.environ.get("HPCPROV_TEST_PYTHON_312")
    if given:
        return given
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return None
    proc = subprocess.run([pyenv, "prefix", "3.12.1"], capture_output=True, text=True)
    path = Path(proc.stdout.strip()) / "bin" / "python3"
    return str(path) if proc.returncode == 0 and path.exists() else None


def gpu_build(dir: Path, torch: Path, python: str | None = None) -> GpuRun:
    argv = ["bash", str(REPO / ".ci" / "gpu-build"), str(dir), str(torch)]
    proc = subprocess.run([*argv, *([python] if python else [])], capture_output=True,
                          text=True, timeout=3600, stdin=subprocess.DEVNULL)
    return GpuRun(proc.returncode, proc.stdout + proc.stderr, dir, torch)


def _wait_for_file(path: Path, timeout: float) -> None:
    """Poll for ``path`` (a build's status file, written last), failing after ``timeout``."""
    end = time.monotonic() + timeout
    while not path.is_file():
        assert time.monotonic() < end, f"{path} did not appear in {timeout:.0f} s"
        time.sleep(1)


@pytest.fixture(scope="module", params=["3.11", "3.12"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> GpuRun:
    if request.param == "3.11":
        torch = os.environ.get("HPCPROV_TEST_TORCH_CUDA")
        if not torch or not Path(torch, "torch").is_dir():
            _missing("no CUDA PyTorch folder (HPCPROV_TEST_TORCH_CUDA)")
        done = os.environ.get("HPCPROV_TEST_GPU_RUN")
        if done:  # .ci/run's build, beside the tests: over when its status file is there
            _wait_for_file(Path(done) / "rc", 3600)
            log = (Path(done) / "out" / "run.log").read_text(errors="replace")
            rc = 0 if Path(done, "out", "doctor.json").exists() and \
                "setup rc=0" in log else 1
            return GpuRun(rc, log, Path(done), Path(torch))
        return gpu_build(tmp_path_factory.mktemp("gpu311"), Path(torch))
    torch = os.environ.get("HPCPROV_TEST_TORCH_CUDA_312")
    python = _python_312()
    if not torch or not Path(torch, "torch").is_dir() or python is None:
        pytest.skip("no Python 3.12 CUDA PyTorch folder (HPCPROV_TEST_TORCH_CUDA_312) or no "
                    "Python 3.12.1: this build runs where both are present")
    return gpu_build(tmp_path_factory.mktemp("gpu312"), Path(torch), python)


def _extension(run: GpuRun) -> Path:
    (path,) = run.prefix.glob("venvs/*/lib/python3*/site-packages/horovod/torch/mpi_lib_v2*.so")
    return path


def _ldd(path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, env=env,
                         timeout=60).stdout
    return {m[1]: m[2] for m in re.finditer(r"^\s*(\S+) => (.+?)(?: \(0x[0-9a-f]+\))?$", out,
                                            re.M)}


def test_setup_builds_horovod_with_nccl_with_no_hand_step(run: GpuRun) -> None:
    assert run.rc == 0, run.output[-6000:]
    build = run.log("build-horovod")
    manifest = json.loads((run.state / "manifest.json").read_text())
    if manifest["horovod_wheel"]["how"] == "built":
        # each gap the GPU node found, closed by the build itself
        assert "installing cmake<4 for this build" in build            # CMake 4 on PATH
        assert re.search(r"CUDA toolkit \S*cuda-13\.0 \(from the nvcc on PATH", build)
        assert "the PyTorch extension compiles as C++20" in build     # torch 2.14's headers
        assert "NCCL from PyTorch's nvidia-nccl wheel" in build
    section = run.log("check-build").split("Available Tensor Operations:", 1)[1]
    assert re.search(r"\[X\] NCCL", section), section


def test_the_extension_links_pytorchs_nccl_and_cuda_runtime(run: GpuRun) -> None:
    assert run.rc == 0, run.output[-3000:]
    libs = _ldd(_extension(run))
    wheel_nccl = run.torch / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    assert "libnccl.so.2" in libs, libs
    assert Path(libs["libnccl.so.2"]).resolve() == wheel_nccl.resolve()
    cudart = [v for k, v in libs.items() if k.startswith("libcudart")]
    assert cudart and all(Path(v).is_file() for v in cudart), libs
    assert "not found" not in libs.get("libnccl.so.2", "")


def test_kernels_only_for_the_profiles_architecture(run: GpuRun) -> None:
    assert run.rc == 0, run.output[-3000:]
    # the toolkit here is a slim one without cuobjdump; PyTorch's Triton ships one
    cuobjdump = next((str(c) for c in (shutil.which("cuobjdump"),
                                       run.torch / "triton/backends/nvidia/bin/cuobjdump")
                      if c and Path(c).is_file()), None)
    assert cuobjdump, "no cuobjdump: neither on PATH nor in PyTorch's Triton"
    listed = subprocess.run([cuobjdump, "--list-elf", "--list-ptx", str(_extension(run))],
                            capture_output=True, text=True, timeout=120).stdout
    archs = set(re.findall(r"\.(sm_\d+)\.cubin", listed))
    ptx = set(re.findall(r"\.(sm_\d+)\.ptx", listed))
    assert archs == {f"sm_{ARCH}"}, listed
    assert ptx <= {f"sm_{ARCH}"}, listed
    key = (run.state / "horovod-key.txt").read_text()
    assert f"HOROVOD_BUILD_CUDA_CC_LIST={ARCH}" in key


def test_the_wheelhouse_key_names_cuda_and_nccl(run: GpuRun) -> None:
    assert run.rc == 0, run.output[-3000:]
    key = dict(line.split("=", 1) for line in
               (run.state / "horovod-key.txt").read_text().splitlines() if "=" in line)
    assert "cuda_13.0" in key["cuda"]
    nccl = (run.torch / "nvidia" / "nccl" / "include" / "nccl.h").read_text()
    version = ".".join(re.search(rf"#define NCCL_{p} +(\d+)", nccl)[1]
                       for p in ("MAJOR", "MINOR", "PATCH"))
    assert key["nccl"].rstrip(".") == version
    (dist,) = run.torch.glob("torch-*.dist-info")  # the PyTorch the folder holds
    version = dist.name.removeprefix("torch-").removesuffix(".dist-info")
    assert key["torch"] == f"torch {version}" and key["torch-cxx"] == "20"


def test_the_proof_passes_and_doctor_is_healthy(run: GpuRun) -> None:
    assert run.rc == 0, run.output[-3000:]
    # the proof runs in check-build's interpreter where Horovod has Gloo, else on its own
    proved = [step for step in ("check-build", "prove-allreduce")
              if list((run.state / "logs").glob(f"*-{step}.log"))
              and "torch allreduce ok on rank 1 of 2" in run.log(step)]
    assert proved, run.log("check-build")[-3000:]
    doctor = json.loads((run.dir / "out" / "doctor.json").read_text())
    assert doctor["ok"], doctor
    assert "validate: not run (the no-GPU mode" in run.output


def test_the_gpu_check_carries_what_a_device_run_can_and_leaves_its_files(run: GpuRun) -> None:
    """The GPU check's rehearsal (benchmarks/gpu_check.sh rehearse, issue 44): the bundle it
    fetched fits in the 50 MB a device run carries and holds Horovod's sdist and hpcprov's
    wheel (numpy is the machine's own); OUT holds at most 8 files, the ones named; the
    output ends with its one-screen summary."""
    assert run.rc == 0, run.output[-3000:]
    kit = run.dir / "kit"
    if not kit.is_dir():
        pytest.skip("this build was not made by the GPU check (no bundle)")
    size = sum(p.stat().st_size for p in kit.rglob("*") if p.is_file())
    assert size <= 50 << 20, size
    names = {p.name for p in (kit / "wheels").iterdir()}
    assert "horovod-0.28.1.tar.gz" in names and any(n.startswith("hpcprov-") for n in names)
    assert any(n.startswith("cmake-3.") for n in names)  # CMake 3 for a node with CMake 4
    assert not any(n.startswith("numpy-") for n in names)
    assert {"run.sh", "profile.py"} <= {p.name for p in kit.iterdir()}
    # hpcprov installed from it with --no-index (run.sh), and ran: the profile checked
    assert "install hpcprov from the bundle | " in (run.dir / "out" / "timing.md").read_text()
    assert (run.dir / "work" / "hpcprov" / "bin" / "hpcprov").is_file()
    out = {p.name for p in (run.dir / "out").iterdir()}
    assert len(out) <= 8 and {"run.log", "setup.log", "doctor.json", "timing.md"} <= out, out
    summed = (run.dir / "out" / "setup.log").read_text(errors="replace")
    logs = sorted(p.name for p in (run.state / "logs").glob("*.log"))
    assert logs and all(f"==== {name} (" in summed for name in logs), logs  # every step's
    timing = (run.dir / "out" / "timing.md").read_text()
    assert "| hpcprov setup (the NCCL build, -cb, the proof) |" in timing
    assert "================ summary (no-gpu mode, exit 0) ================" in run.output
    assert "doctor: healthy" in run.output and "horovodrun -cb:" in run.output


def _validate(run: GpuRun, tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    """`hpcprov validate` of the recipe's node profile in the built environment, by the
    hpcprov the recipe installed, with the node's PyTorch on PYTHONPATH as its module sets."""
    hp = run.dir / "work" / "hpcprov" / "bin" / "hpcprov"
    env = {**os.environ, "PYTHONPATH": str(run.torch),
           "HPCPROV_HISTORY": str(tmp_path / "history")}
    proc = subprocess.run([str(hp), "validate", "--site", str(run.dir / "work" / "gpu-node.yaml"),
                           "--env", str(run.prefix), "--nodes", "1", "--workdir",
                           str(tmp_path / "run"), "--json", "--max-bytes", "65536", "--iters",
                           "2", "--steps", "4", *args], capture_output=True, text=True, env=env,
                          timeout=900, stdin=subprocess.DEVNULL)
    return proc.returncode, json.loads(proc.stdout or "{}"), proc.stderr


def test_a_gpu_validation_without_a_gpu_stops_after_the_env_check(run: GpuRun,
                                                                   tmp_path: Path) -> None:
    assert run.rc == 0, run.output[-3000:]
    rc, data, err = _validate(run, tmp_path)              # the default device: cuda
    assert rc == 1 and not data["ok"], err[-3000:]
    assert [j["check"] for j in data["jobs"]] == ["env"]  # no GPU job was started
    assert "no GPU visible on" in data["stopped"] and "--device cpu" in data["stopped"]
    gpus = [o for o in data["outcomes"] if o["name"].endswith(" gpus")]
    assert gpus and all(o["status"] == "fail" and o["measured"] == 0 for o in gpus)
    # everything but the GPUs is fine: the environment's imports and -cb (NCCL included)
    status = {o["name"]: o["status"] for o in data["outcomes"]}
    assert status["env imports"] == "pass" and status["env horovodrun -cb"] == "pass"


def test_torch_jobs_run_with_the_environments_python(run: GpuRun, tmp_path: Path) -> None:
    """torchrun by name would be another Python's (this machine's system one has torch
    2.13.0 and a CPU Horovod); `python -m torch.distributed.run` is the environment's."""
    assert run.rc == 0, run.output[-3000:]
    rc, data, err = _validate(run, tmp_path, "--device", "cpu", "--checks", "env,allreduce")
    status = {o["name"]: o["status"] for o in data["outcomes"]}
    assert rc == 0 and data["ok"], (status, err[-3000:])
    assert status["allreduce-torch-gloo correctness"] == "pass"
    assert status["env horovodrun -cb"] == "pass"
    script = (tmp_path / "run" / "allreduce-torch-gloo.sh").read_text()
    assert "python -m torch.distributed.run" in script and "\ntorchrun " not in script

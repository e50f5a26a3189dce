"""The GPU build: Horovod with NCCL for the profile's architecture against every architecture."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks import ROOT, BenchError, Context, Result

NAME = "gpubuild"
TITLE = "The GPU build (Horovod 0.28.1 with NCCL, CUDA 13, PyTorch 2.14.1+cu130)"
ALL = "every architecture nvcc lists"
METHOD = f"""\
`hpcprov setup --until build-horovod` of the GPU recipe's node profile (`docs/gpu/profile.py`:
one node with 4 x H100 80GB HBM3, no scheduler, Gloo and NCCL, PyTorch 2.14.1+cu130 from a
folder on `PYTHONPATH` as a site's module provides it, its NCCL wheel 2.30.7, the CUDA 13.0
toolkit behind the `nvcc` wrapper on PATH), twice, one run each, side by side on the same
machine:

- **the profile's architecture**: what hpcprov builds, `HOROVOD_BUILD_CUDA_CC_LIST=90` from
  the GPU model;
- **{ALL}**: the same profile with `horovod.env.HOROVOD_BUILD_CUDA_CC_LIST` set to every
  architecture `nvcc --list-gpu-arch` lists, which is what Horovod compiles when nothing
  names them.

Each run: a new prefix and wheelhouse, pip's cache and ccache off (`PIP_NO_CACHE_DIR=1`,
`CCACHE_DISABLE=1`), so everything compiles. The rows are the build-horovod step (the
runner's own clock, from the journal) and the size of the wheel it made. No target: the
build for one architecture is what hpcprov does; the other row says what that saves.
Needs `HPCPROV_BENCH_TORCH_CUDA` (or `HPCPROV_TEST_TORCH_CUDA`): a folder made by
`pip install --target DIR torch==2.14.1`; without it the rows say "not available"."""


def _recipe_profile(work: Path) -> dict:
    spec = importlib.util.spec_from_file_location("gpu_profile",
                                                  ROOT / "docs" / "gpu" / "profile.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = module.profile(str(work), str(work / "wheels"), 4, "H100 80GB HBM3", "2.14.1", False)
    data["python"]["venv"].update(no_index=False, wheelhouse=[])  # the package index
    return data


def _build(base: Path, label: str, cc_list: str | None, env: dict[str, str]) -> tuple[float,
                                                                                      int]:
    """One setup up to build-horovod: (its seconds, the wheel's bytes)."""
    work = base / label
    data = _recipe_profile(work)
    if cc_list:
        data["horovod"]["env"] = {"HOROVOD_BUILD_CUDA_CC_LIST": cc_list}
    work.mkdir(parents=True)
    profile = work / "gpu-node.yaml"
    profile.write_text(yaml.safe_dump(data, sort_keys=False))
    run_env = {**env, "HPCPROV_WHEELHOUSE": str(work / "wheelhouse")}
    proc = subprocess.run([sys.executable, "-m", "hpcprov", "setup", "--site", str(profile),
                           "--until", "build-horovod"], env=run_env, capture_output=True,
                          text=True, timeout=7200, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise BenchError(f"{label}: setup failed: {proc.stderr.strip()[-800:]}")
    prefix = work / "env"
    journal = json.loads((prefix / ".hpcprov" / "journal.json").read_text())
    (wheel,) = (prefix / "build" / "horovod" / "dist").glob("horovod-*.whl")
    return journal["steps"]["build-horovod"]["seconds"], wheel.stat().st_size


def run(ctx: Context) -> list[Result]:
    torch = os.environ.get("HPCPROV_BENCH_TORCH_CUDA") or os.environ.get("HPCPROV_TEST_TORCH_CUDA")
    nvcc = shutil.which("nvcc")
    if not torch or not Path(torch, "torch").is_dir() or nvcc is None:
        why = "not available: no CUDA PyTorch folder (HPCPROV_BENCH_TORCH_CUDA) or no nvcc"
        return [Result(f"build-horovod, {what}", "s", status=why)
                for what in ("the profile's architecture (sm_90)", ALL)]
    archs = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True,
                           timeout=60).stdout.split()
    every = ",".join(a.removeprefix("compute_") for a in archs)
    ctx.cache.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="gpubuild-", dir=ctx.cache))
    env = {**os.environ, "PYTHONPATH": torch, "PIP_NO_CACHE_DIR": "1", "CCACHE_DISABLE": "1"}
    try:
        results = []
        for label, cc in (("sm_90", None), ("all", every)):
            ctx.log(f"GPU build for {label} (several minutes)")
            t0 = time.perf_counter()
            seconds, size = _build(base, label, cc, env)
            ctx.log(f"  {label}: build-horovod {seconds:.0f} s, setup up to it "
                    f"{time.perf_counter() - t0:.0f} s, wheel {size / 1e6:.2f} MB")
            what = "the profile's architecture (sm_90)" if cc is None else f"{ALL} ({every})"
            results += [Result(f"build-horovod, {what}", "s", [seconds]),
                        Result(f"wheel size, {what}", "MB", [size / 1e6])]
        ratio = results[2].runs[0] / results[0].runs[0]
        ctx.note(f"Building for every architecture took {ratio:.2f}x the time of the "
                 f"profile's one, and its wheel is {results[3].runs[0] / results[1].runs[0]:.2f}"
                 "x the size. Horovod has one small CUDA source (its fused-buffer kernels), "
                 "compiled once per architecture and C++ ABI; on 2 cores those nvcc runs "
                 "overlap the long C++ compiles of the core, Gloo and the PyTorch extension "
                 "(C++20 headers), so the build time barely moves (one run each: within "
                 "noise). What one architecture buys is a smaller wheel and, above all, no "
                 "architecture the build's CUDA cannot target: Horovod's own default list is "
                 "what nvcc lists, but a list from a profile's GPUs that the CUDA lacks fails "
                 "the build, which `site check` now refuses first.")
        return results
    finally:
        shutil.rmtree(base, ignore_errors=True)

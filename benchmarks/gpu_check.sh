#!/bin/bash
# The GPU check (issue 44): hpcprov's NCCL path, end to end, on a GPU machine without network,
# as a user's setup and validation would run it (docs/gpu.md, "Runs on a real GPU").
#
#   benchmarks/gpu_check.sh fetch [PYTHON_VERSION]
#       on a machine with the package index: put in .gpu-bundle/ (ignored by git) exactly what
#       the GPU machine lacks, for its Python (default 3.12) on manylinux x86_64: hpcprov and
#       its dependencies as wheels, Horovod 0.28.1's sdist, its build requirements and a
#       CMake 3 wheel, but numpy, which the GPU image has (HPCPROV_KIT_SKIP: another list);
#       refused when it exceeds 50 MB (what a device run may carry).
#   benchmarks/gpu_check.sh run [OUT]
#       on the GPU machine, from a checkout holding .gpu-bundle/: install hpcprov from the
#       bundle, write the machine's profile (docs/gpu/profile.py: no scheduler, a venv over
#       the machine's PyTorch as a site module provides it, NCCL from PyTorch's wheel, Gloo,
#       the CUDA architecture of its GPUs only, no index), `hpcprov setup` (the NCCL build,
#       the patches, horovodrun -cb and the proof), `hpcprov validate --device cuda -N 1` and
#       `hpcprov doctor`. OUT (default gpu-check-out/) gets at most 8 files: run.log,
#       setup.log (every step's status and the end of its log), validate.json, report.md,
#       report-busbw.png, doctor.json, timing.md; a one-screen summary ends the output.
#   benchmarks/gpu_check.sh rehearse DIR TORCH_DIR [PYTHON]
#       CI, no GPU: fetch for PYTHON (default python3 on PATH) into DIR/kit, then `run` in its
#       no-GPU mode for the GPU machine (1 x NVIDIA H200, sm_90) with TORCH_DIR (`pip install
#       --target` of a CUDA PyTorch and numpy, as the image has them) on PYTHONPATH and PyPI's CMake 4 first on PATH: the
#       bundle, the install from it, setup with the NCCL build and -cb, doctor; it stops
#       where a GPU is needed (validate). .ci/gpu-build runs it; tests/test_gpu_build_real.py
#       asserts on what it leaves.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bundle=${HPCPROV_GPU_BUNDLE:-$repo/.gpu-bundle}
LIMIT_MB=50
# the GPU image's python3 has numpy beside its PyTorch (on PYTHONPATH in `run`), as CI's
# PyTorch folder has: not carried
export HPCPROV_KIT_SKIP=${HPCPROV_KIT_SKIP-numpy}

fetch() {  # fetch FOLDER PYTHON_VERSION
  rm -rf "$1"
  bash "$repo/docs/gpu/prepare.sh" "$1" "$2"
  local kb
  kb=$(du -sk "$1" | cut -f1)
  echo "== the bundle: $(find "$1" -type f | wc -l) files, $((kb / 1024)) MB (at most $LIMIT_MB)"
  if [ "$kb" -gt $((LIMIT_MB * 1024)) ]; then
    echo "gpu_check: $1 holds $((kb / 1024)) MB, more than the $LIMIT_MB MB a device run" \
      "carries" >&2
    return 1
  fi
}

case "${1:-}" in
  fetch)
    fetch "$bundle" "${2:-3.12}"
    echo "ready: carry .gpu-bundle to the GPU machine and run: bash benchmarks/gpu_check.sh run"
    ;;
  run)
    out=${2:-$repo/gpu-check-out}
    [ -d "$bundle/wheels" ] || { echo "gpu_check: no $bundle: run 'bash $0 fetch' on a" \
      "machine with the package index first" >&2; exit 3; }
    # a Python that is itself a venv (the GPU image's) holds PyTorch in its own site-packages:
    # put them on PYTHONPATH, as a site's PyTorch module does (a venv made from it would see
    # its base interpreter's, not these)
    site=$(python3 -c 'import sys, sysconfig
if sys.prefix != sys.base_prefix: print(sysconfig.get_paths()["purelib"])')
    if [ -n "$site" ]; then
      export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
      echo "== python3 is a venv ($(python3 -c 'import sys; print(sys.prefix)')): its" \
        "site-packages on PYTHONPATH, as a module provides PyTorch"
    fi
    exec bash "$repo/docs/gpu/run.sh" "$bundle" "$out"
    ;;
  rehearse)
    dir=${2:?usage: gpu_check.sh rehearse DIR TORCH_DIR [PYTHON]}
    torch=$(cd "${3:?usage: gpu_check.sh rehearse DIR TORCH_DIR [PYTHON]}" && pwd)
    python=${4:-$(command -v python3)}
    rm -rf "$dir"
    mkdir -p "$dir/bin"
    dir=$(cd "$dir" && pwd)
    ln -s "$python" "$dir/bin/python3"   # the machine's python3, first on PATH
    version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    echo "== CMake 4 from the package index, first on PATH (as on the GPU machines)"
    python3 -m pip install -q --no-compile --no-deps --target "$dir/cmake4" "cmake>=4,<5"
    echo "== fetch (Python $version)"
    PATH="$dir/bin:$PATH" fetch "$dir/kit" "$version"
    echo "== run, no-GPU mode: 1 x NVIDIA H200 (the GPU machine), TORCH_DIR on PYTHONPATH"
    # pip as on the GPU machine: no configuration of this machine's (a cap on torch, an index)
    PIP_CONFIG_FILE=/dev/null \
      PATH="$dir/cmake4/cmake/data/bin:$dir/bin:$PATH" PYTHONPATH="$torch" WORK="$dir/work" \
        GPUS=1 MODEL="NVIDIA H200" HPCPROV_WHEELHOUSE="$dir/wheelhouse" \
        bash "$repo/docs/gpu/run.sh" "$dir/kit" "$dir/out"
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
    exit 2
    ;;
esac

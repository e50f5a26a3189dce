#!/usr/bin/env bash
# Build and install Horovod 0.28.1 (PyTorch, MPI, Gloo) for the testbed's horovodrun tests,
# with the C++17 patch from provision/patches. The wheel is cached inside this run only
# (.ci-cache/, ignored by git). The provisioner (issue 4) will take this job over.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=.ci-cache
mkdir -p "$cache"
if python3 -c 'import horovod' 2>/dev/null && command -v horovodrun >/dev/null; then
  echo "horovod already installed"; exit 0
fi
if ! ls "$cache"/horovod-0.28.1-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q psutil pyyaml cloudpickle cffi packaging wheel
  rm -rf "$cache/src" && mkdir -p "$cache/src"
  python3 -m pip download -q --no-deps --no-binary :all: horovod==0.28.1 -d "$cache/src"
  tar xzf "$cache"/src/horovod-0.28.1.tar.gz -C "$cache/src"
  patch -d "$cache/src/horovod-0.28.1" -p1 < provision/patches/horovod-0.28.1-cxx17.patch
  (cd "$cache/src/horovod-0.28.1" &&
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 MAKEFLAGS=-j2 \
    python3 -m pip wheel -q --no-deps --no-build-isolation --no-cache-dir -w "../.." .)
fi
python3 -m pip install -q --no-deps "$cache"/horovod-0.28.1-*.whl
horovodrun -cb

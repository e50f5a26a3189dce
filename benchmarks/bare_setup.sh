#!/bin/bash
# The `local` setup done by hand, as the seed tutorials do it: the bare steps that
# `hpcprov setup --site local` is compared with (benchmarks/bench_provision.py). A virtualenv,
# torch 2.13.0 and numpy, Horovod 0.28.1's sdist patched as hpcprov patches it (C++17, the build
# type) and built Release with PyTorch, MPI and Gloo, installed, then `horovodrun -cb` and a
# 2-process allreduce.
#
# usage: bare_setup.sh PREFIX PROOF PATCH...   (PROOF: a proof program; PATCH: patch files)
set -euo pipefail
prefix=$1 proof=$2
shift 2
rm -rf "$prefix"
mkdir -p "$prefix/build"
python3 -m virtualenv -q "$prefix/venv"
# shellcheck disable=SC1091
source "$prefix/venv/bin/activate"
python -m pip install -q torch==2.13.0 numpy
python -m pip install -q setuptools wheel packaging cffi cloudpickle psutil pyyaml
python -m pip download -q --no-deps --no-binary :all: --no-build-isolation horovod==0.28.1 \
  -d "$prefix/build"
tar xzf "$prefix/build/horovod-0.28.1.tar.gz" -C "$prefix/build"
for patch_file in "$@"; do
  patch -s -d "$prefix/build/horovod-0.28.1" -p1 < "$patch_file"
done
HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
  HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 HOROVOD_CMAKE_BUILD_TYPE=Release MAKEFLAGS="-j$(nproc)" \
  python -m pip wheel -q --no-deps --no-build-isolation -w "$prefix/build/dist" \
  "$prefix/build/horovod-0.28.1"
python -m pip install -q --no-deps "$prefix"/build/dist/horovod-*.whl
horovodrun -cb
horovodrun --gloo -np 2 -H localhost:2 python "$proof"

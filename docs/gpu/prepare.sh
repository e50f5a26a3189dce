#!/bin/bash
# Prepare, on a machine that reaches the package index, everything a GPU node without internet
# needs to run hpcprov there (docs/gpu.md): hpcprov and its dependencies as wheels for the node's
# Python, Horovod's sdist, what its build needs (cmake<4 included), in one folder to copy over.
#
# usage: docs/gpu/prepare.sh FOLDER [PYTHON_VERSION]   (the node's Python, default 3.12)
# HPCPROV_KIT_SKIP="numpy ...": packages the node's Python already has (from its own site-
# packages or the PyTorch module's PYTHONPATH), left out of the folder.
set -euo pipefail
out=${1:?usage: prepare.sh FOLDER [PYTHON_VERSION, e.g. 3.12]}
py=${2:-3.12}
repo=$(cd "$(dirname "$0")/../.." && pwd)
wheels="$out/wheels"
mkdir -p "$wheels"
# binary wheels for the node's Python on x86-64 Linux, whatever this machine runs
binary=(--only-binary=:all: --python-version "$py" --implementation cp
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --find-links "$wheels")
echo "== hpcprov and its dependencies (Python $py)"
python3 -m pip wheel -q --no-deps -w "$wheels" "$repo" python-hostlist
python3 -m pip download -q "${binary[@]}" -d "$wheels" "$wheels"/hpcprov-*.whl
echo "== what the Horovod build and the checks install in the environment, and a CMake 3"
python3 -m pip download -q "${binary[@]}" -d "$wheels" setuptools wheel packaging cffi \
  cloudpickle psutil pyyaml numpy "cmake>=3.13,<4"
echo "== Horovod's source"
python3 -m pip download -q --no-deps --no-binary :all: -d "$wheels" horovod==0.28.1
for name in ${HPCPROV_KIT_SKIP:-}; do   # what the node has: not carried
  rm -f "$wheels/${name//-/_}"-[0-9]*.whl "$wheels/$name"-[0-9]*.whl
done
cp "$repo/docs/gpu/run.sh" "$repo/docs/gpu/profile.py" "$out/"
echo "ready: copy $out to the GPU node and run: bash $out/run.sh $out"

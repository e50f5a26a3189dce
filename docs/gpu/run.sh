#!/bin/bash
# hpcprov on one GPU node without internet (docs/gpu.md): set up Horovod with NCCL over the
# PyTorch the node already has (from the system or a module: load it first), prove it, validate
# on the GPU, and check the environment, with hpcprov doing every step itself.
#
# usage: run.sh FOLDER [OUT]    (FOLDER: what prepare.sh made; OUT: logs, default FOLDER/out)
# WORK (default /tmp/hpcprov-gpu) holds hpcprov, the profile, the environment and the wheelhouse.
set -uo pipefail
folder=$(cd "${1:?usage: run.sh FOLDER [OUT]}" && pwd)
out=${2:-$folder/out}
work=${WORK:-/tmp/hpcprov-gpu}
mkdir -p "$out" "$work"
exec > >(tee "$out/run.log") 2>&1

echo "== the node"
nvidia-smi -L
python3 -V
g++ --version | head -n 1
nvcc --version 2>/dev/null | tail -n 1
cmake --version 2>/dev/null | head -n 1 || echo "no cmake on PATH"
nproc
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
"nccl", torch.cuda.nccl.version(), "from", torch.__file__)' \
  || { echo "no PyTorch here: load its module first"; exit 3; }
torch_version=$(python3 -c 'import torch; print(torch.__version__)')
gpus=$(nvidia-smi -L | grep -c '^GPU ')
model=$(nvidia-smi -L | sed -n '1s/^GPU [0-9]*: \(.*\) (UUID.*/\1/p')
# PyTorch in the system Python itself (not on PYTHONPATH): the environment sees it through
# --system-site-packages
system=()
if PYTHONPATH='' python3 -c 'import torch' 2>/dev/null; then
  system=(--system-site-packages)
fi

echo "== hpcprov, into its own venv (the node's PyTorch stays visible through PYTHONPATH)"
python3 -m venv "$work/hpcprov"
"$work/hpcprov/bin/python" -m pip install -q --no-index --find-links "$folder/wheels" hpcprov \
  || exit 3
hp="$work/hpcprov/bin/hpcprov"

echo "== the profile: one node, no scheduler, the GPUs nvidia-smi lists"
site=$("$work/hpcprov/bin/python" "$folder/profile.py" "$work" "$folder/wheels" "$gpus" \
  "$model" "$torch_version" "${system[@]}") || exit 3
cat "$site"
"$hp" site check "$site" || exit 3
export HPCPROV_WHEELHOUSE="$work/wheelhouse"

echo "== hpcprov setup"
SECONDS=0
"$hp" setup --site "$site" --verbose
echo "setup rc=$? in ${SECONDS}s"
mkdir -p "$out/logs"
cp "$work"/env/.hpcprov/logs/* "$out/logs/" 2>/dev/null
cp "$work/env/.hpcprov/manifest.json" "$out/" 2>/dev/null

echo "== hpcprov validate (the default device: cuda, the partition has GPUs)"
SECONDS=0
"$hp" validate --site "$site" --env "$work/env" --nodes 1 --report "$out/report.md" --json \
  > "$out/validate.json"
echo "validate rc=$? in ${SECONDS}s"
head -c 4000 "$out/validate.json"; echo

echo "== hpcprov doctor"
"$hp" doctor --prefix "$work/env" --json > "$out/doctor.json"
echo "doctor rc=$?"
echo "logs, manifest, validate.json, report.md, doctor.json: $out"

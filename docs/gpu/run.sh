#!/bin/bash
# hpcprov on one GPU node without internet (docs/gpu.md): set up Horovod with NCCL over the
# PyTorch the node already has (from the system or a module: load it first), prove it, validate
# on the GPU, and check the environment, with hpcprov doing every step itself.
#
# usage: run.sh FOLDER [OUT]    (FOLDER: what prepare.sh made; OUT: default FOLDER/out)
# WORK (default /tmp/hpcprov-gpu) holds hpcprov, the profile, the environment and the wheelhouse.
# OUT gets at most 8 files: run.log (all of this output), setup.log (every step's log, the end
# of each), validate.json, report.md and report-busbw.png, doctor.json, timing.md; the output
# ends with a one-screen summary.
#
# Without a GPU (no nvidia-smi, or it lists none) the same script runs in its no-GPU mode for
# the node that GPUS and MODEL describe (e.g. GPUS=4 MODEL="H100 80GB HBM3"): it builds for
# that GPU, runs setup (build, horovodrun -cb, the 2-process proof) and doctor, and stops
# before validate, which needs a GPU. Exit status: 0 when every step that ran passed.
set -uo pipefail
folder=$(cd "${1:?usage: run.sh FOLDER [OUT]}" && pwd)
out=${2:-$folder/out}
work=${WORK:-/tmp/hpcprov-gpu}
mkdir -p "$out" "$work"
exec > >(tee "$out/run.log") 2>&1
failed=0
timing=()   # "PHASE|SECONDS|RESULT" rows of timing.md
phase_end() {  # phase_end NAME RESULT: a row for the phase that started at SECONDS=0
  timing+=("$1|$SECONDS|$2")
}

echo "== the node"
gpu_list=$(nvidia-smi -L 2>/dev/null | grep '^GPU ' || true)
if [ -n "$gpu_list" ]; then
  echo "$gpu_list"
  gpus=$(grep -c '^GPU ' <<<"$gpu_list")
  model=$(sed -n '1s/^GPU [0-9]*: \(.*\) (UUID.*/\1/p' <<<"$gpu_list")
  mode=gpu
else
  gpus=${GPUS:-}
  model=${MODEL:-}
  if [ -z "$gpus" ] || [ -z "$model" ]; then
    echo "no GPU here (nvidia-smi lists none): for the no-GPU mode, say which node to build" \
      "for, e.g. GPUS=4 MODEL='H100 80GB HBM3' bash $0 $folder"
    exit 3
  fi
  echo "no GPU here: the no-GPU mode for $gpus x $model (build, -cb, proof, doctor; no validate)"
  mode=no-gpu
fi
python3 -V
g++ --version | head -n 1
nvcc --version 2>/dev/null | tail -n 1
cmake --version 2>/dev/null | head -n 1 || echo "no cmake on PATH"
nproc
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"available", torch.cuda.is_available(), "nccl", torch.cuda.nccl.version(), "from", torch.__file__)' \
  || { echo "no PyTorch here: load its module first"; exit 3; }
# the version pip knows the installed wheel by (2.14.1), not torch.__version__ (2.14.1+cu130):
# a pin on the local label is satisfied by no wheel's metadata, so an offline pip finds nothing
torch_version=$(python3 -c 'from importlib.metadata import version; print(version("torch"))')
# PyTorch in the system Python itself (not on PYTHONPATH): the environment sees it through
# --system-site-packages
system=()
if PYTHONPATH='' python3 -c 'import torch' 2>/dev/null; then
  system=(--system-site-packages)
fi

echo "== hpcprov, into its own venv (the node's PyTorch stays visible through PYTHONPATH)"
SECONDS=0
rm -rf "$work/hpcprov"
python3 -m venv "$work/hpcprov"
"$work/hpcprov/bin/python" -m pip install -q --no-index --find-links "$folder/wheels" hpcprov \
  || exit 3
hp="$work/hpcprov/bin/hpcprov"
phase_end "install hpcprov from the bundle" ok

echo "== the profile: one node, no scheduler, $gpus x $model"
site=$("$work/hpcprov/bin/python" "$folder/profile.py" "$work" "$folder/wheels" "$gpus" \
  "$model" "$torch_version" "${system[@]}") || exit 3
cat "$site"
"$hp" site check "$site" || exit 3
export HPCPROV_WHEELHOUSE="${HPCPROV_WHEELHOUSE:-$work/wheelhouse}"

echo "== hpcprov setup"
SECONDS=0
"$hp" setup --site "$site" --verbose
rc=$?
echo "setup rc=$rc in ${SECONDS}s"
phase_end "hpcprov setup (the NCCL build, -cb, the proof)" "rc=$rc"
[ "$rc" -eq 0 ] || failed=$rc
for log in "$work"/env/.hpcprov/logs/*.log; do   # the logs summed up: each one's end
  [ -f "$log" ] || continue
  echo "==== ${log##*/} ($(wc -l <"$log") lines; the last 150)"
  tail -n 150 "$log"
done > "$out/setup.log"

if [ "$mode" = gpu ] && [ "$failed" -eq 0 ]; then
  echo "== hpcprov validate (the default device: cuda, the partition has GPUs)"
  SECONDS=0
  "$hp" validate --site "$site" --env "$work/env" --nodes 1 --device cuda \
    --report "$out/report.md" --json > "$out/validate.json"
  rc=$?
  echo "validate rc=$rc in ${SECONDS}s"
  phase_end "hpcprov validate --device cuda -N 1" "rc=$rc"
  [ "$rc" -eq 0 ] || failed=$rc
  head -c 4000 "$out/validate.json"; echo
else
  why="the no-GPU mode: it needs a GPU"
  [ "$failed" -eq 0 ] || why="setup failed"
  echo "== hpcprov validate: not run ($why)"
fi

echo "== hpcprov doctor"
SECONDS=0
"$hp" doctor --prefix "$work/env" --json > "$out/doctor.json"
rc=$?
echo "doctor rc=$rc"
phase_end "hpcprov doctor" "rc=$rc"
[ "$rc" -eq 0 ] || [ "$failed" -ne 0 ] || failed=$rc
{
  echo "| phase | seconds | result |"
  echo "|---|---:|---|"
  for row in "${timing[@]}"; do IFS='|' read -r name secs result <<<"$row"
    echo "| $name | $secs | $result |"; done
} > "$out/timing.md"

echo
echo "================ summary ($mode mode, exit $failed) ================"
cat "$out/timing.md"
sed -n '/Available Tensor Operations/,$p' "$work/env/.hpcprov/check-build.txt" 2>/dev/null \
  | sed 's/^/horovodrun -cb: /' || true
"$work/hpcprov/bin/python" - "$out/validate.json" "$out/doctor.json" <<'PY' || true
import json, sys
for path in sys.argv[1:]:
    try:
        data = json.load(open(path, encoding="utf-8"))
    except (OSError, ValueError):
        print(f"{path.rsplit('/', 1)[-1]}: none")
        continue
    if "outcomes" in data:  # validate
        print(f"validate: {'PASS' if data.get('ok') else 'FAIL'}")
        for o in data["outcomes"]:
            print(f"  {o['status'].upper():5} {o['name']}: {o.get('measured')}"
                  f" {o.get('detail', '')}"[:110])
    else:  # doctor
        print(f"doctor: {'healthy' if data.get('ok') else 'NOT healthy'}")
        for c in data.get("checks", []):
            if c.get("status") != "ok":
                print(f"  {c.get('status', '?').upper():5} {c.get('name')}: "
                      f"{c.get('detail', '')}"[:110])
PY
echo "files: $out ($(find "$out" -maxdepth 1 -type f | wc -l) of at most 8)"
exit "$failed"

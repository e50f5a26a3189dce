# shellcheck shell=bash
# hpcprov's shell library: the probe of `hpcprov doctor`, which prints facts as KEY=VALUE
# lines for provision/doctor.py to judge.
#
# The probe runs under `set +e`: a probe never fails, it reports. See common.sh for the
# conventions.

# hpcprov_probe_modules MODULE...: module_missing=NAME for each module not available here.
hpcprov_probe_modules() {
  local m
  for m in "$@"; do
    module is-avail "$m" >/dev/null 2>&1 || echo "module_missing=$m"
  done
}

# hpcprov_probe_conda CONDA: conda_auto_activate_base=VALUE of that conda's configuration.
hpcprov_probe_conda() {
  echo "conda_auto_activate_base=$("$1" config --show auto_activate_base 2>/dev/null \
    | awk '{print $2}')"
}

# hpcprov_probe_host PATTERN COMMAND...: gpus=N, the distinct matches of PATTERN (an
# extended regular expression) in what COMMAND prints (the site's GPU vendor's count
# command: nvidia-smi -L, rocm-smi --showid, ...; none without it), and mpi=the first line
# of `mpirun --version`.
hpcprov_probe_host() {
  local pattern="$1"
  shift
  if command -v "$1" >/dev/null 2>&1; then
    echo "gpus=$("$@" 2>/dev/null | grep -oE "$pattern" | sort -u | wc -l)"
  else
    echo "gpus=none"
  fi
  echo "mpi=$(mpirun --version 2>/dev/null | head -n 1)"
}

# hpcprov_probe_image IMAGE: image=ok where the image file (or directory) the jobs of a
# container site read is readable here, else image=missing.
hpcprov_probe_image() {
  if [ -r "$1" ]; then echo "image=ok"; else echo "image=missing"; fi
}

# hpcprov_probe_activate ACTIVATE: source the prefix's activate file here (quietly) and
# print activate_rc=ITS STATUS; the probe's Python then runs in that environment.
hpcprov_probe_activate() {
  # shellcheck disable=SC1090  # the prefix's own activate file
  source "$1" >/dev/null 2>&1
  echo "activate_rc=$?"
}

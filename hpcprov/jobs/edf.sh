# shellcheck shell=bash
# hpcprov's EDF writer: lines of every job script whose launcher has runtime: edf
# (hpcprov/jobs/launchers/images.py, edf_lines), carried verbatim from the first blank line
# on. It defines
#   hpcprov_toml VALUE          VALUE as a TOML basic string, whatever it holds (quotes,
#                               backslashes, newlines: escaped), so a value the job's shell
#                               expands ($SCRATCH, a glob's match) cannot add TOML lines;
#   hpcprov_edf_row FORMAT V... printf FORMAT (hpcprov's own, keys the model checked) with
#                               each V as hpcprov_toml gives it;
# and makes hpcprov_edf a new file (mktemp: mode 0600, a random name nobody can plant a
# link at) in the job's folder, after refusing a folder others may write without the
# sticky bit (one of them could swap the file before srun reads it).

hpcprov_toml() {
  local v=$1 out="" ch i
  for ((i = 0; i < ${#v}; i++)); do
    ch=${v:i:1}
    case $ch in
      \\) out+="\\\\" ;;
      \") out+='\"' ;;
      [[:cntrl:]]) printf -v ch '\\u%04x' "'$ch"; out+=$ch ;;
      *) out+=$ch ;;
    esac
  done
  printf '"%s"' "$out"
}
hpcprov_edf_row() {
  local fmt=$1 v
  local -a words=()
  shift
  for v in "$@"; do words+=("$(hpcprov_toml "$v")"); done
  # shellcheck disable=SC2059  # the format is hpcprov's own text
  printf "$fmt\n" "${words[@]}"
}
if [ ! -k "$PWD" ] && [ -n "$(find "$PWD" -maxdepth 0 -perm /022)" ]; then
  echo "hpcprov: $PWD may be written by others: someone else could replace the job's EDF file there before srun reads it; submit from a folder only you can write, or make it sticky (chmod +t)" >&2
  exit 1
fi
# shellcheck disable=SC2034  # read by the srun line after it
hpcprov_edf=$(mktemp "$PWD/.hpcprov-edf-${SLURM_JOB_ID:-$$}.XXXXXXXX.toml")

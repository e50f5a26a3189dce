# shellcheck shell=bash
# hpcprov's EDF writer: lines of every job script whose launcher has runtime: edf
# (hpcprov/jobs/launchers/images.py, edf_lines), carried verbatim from the first blank line
# on. It defines
#   hpcprov_toml VALUE          VALUE as a TOML basic string, whatever it holds (quotes,
#                               backslashes, newlines, C0 and C1 controls: escaped), so a
#                               value the job's shell expands ($SCRATCH, a glob's match)
#                               cannot add TOML lines; a VALUE that is not UTF-8 (TOML
#                               cannot hold it) is refused in one line, status 1;
#   hpcprov_edf_row FORMAT V... printf FORMAT (hpcprov's own, keys the model checked) with
#                               each V as hpcprov_toml gives it (a refused V: the file is
#                               removed and the job exits 1);
#   hpcprov_edf_folder          the job's folder, symlinks resolved (pwd -P), into
#                               hpcprov_edf_dir, after refusing it (exit 1) when another user
#                               could replace a file there: the rule of hpcprov's
#                               core.fsutil.code_folder, checked on the physical path: it and
#                               every folder above it up to / belong to this user or root, and
#                               one that its group or others may write is sticky;
# and makes hpcprov_edf a new file (mktemp: mode 0600, a random name nobody can plant a
# link at) in that folder.

hpcprov_toml() {
  # byte by byte (LC_ALL=C), whatever the job's locale: UTF-8 sequences are checked and
  # copied whole, controls (U+0000-001F, U+007F, U+0080-009F) written as \uXXXX
  local LC_ALL=C v=$1 out="" ch b n m need lo hi i k
  for ((i = 0; i < ${#v}; i++)); do
    ch=${v:i:1}
    printf -v n '%d' "'$ch"
    if ((n < 128)); then
      case $ch in
        \\) out+="\\\\" ;;
        \") out+='\"' ;;
        *) if ((n < 32 || n == 127)); then printf -v ch '\\u%04x' "$n"; fi; out+=$ch ;;
      esac
      continue
    fi
    need=0 lo=128 hi=191  # continuation bytes to follow; the first one's range
    if ((n >= 194 && n <= 223)); then need=1
    elif ((n == 224)); then need=2 lo=160
    elif ((n >= 225 && n <= 239)); then need=2; if ((n == 237)); then hi=159; fi
    elif ((n == 240)); then need=3 lo=144
    elif ((n >= 241 && n <= 243)); then need=3
    elif ((n == 244)); then need=3 hi=143
    fi
    for ((k = 1; k <= need; k++)); do
      b=${v:i+k:1}
      printf -v m '%d' "'$b"
      if ((m < lo || m > hi)); then need=0; break; fi
      ch+=$b lo=128 hi=191
    done
    if ((need == 0)); then
      printf -v b '%02x' "$n"
      echo "hpcprov: a value for the job's EDF file is not UTF-8 (byte 0x$b after \"$out\"): TOML cannot hold it; give the file or folder it names (the image a glob matched, \$SCRATCH...) a UTF-8 name" >&2
      return 1
    fi
    if ((n == 194)); then  # U+0080-00BF: the C1 controls escaped
      printf -v m '%d' "'${ch:1:1}"
      if ((m < 160)); then printf -v ch '\\u%04x' "$m"; fi
    fi
    out+=$ch
    i=$((i + need))
  done
  printf '"%s"' "$out"
}
hpcprov_edf_row() {
  local fmt=$1 v w
  local -a words=()
  shift
  for v in "$@"; do
    w=$(hpcprov_toml "$v") || { rm -f -- "${hpcprov_edf:-}"; exit 1; }
    words+=("$w")
  done
  # shellcheck disable=SC2059  # the format is hpcprov's own text
  printf "$fmt\n" "${words[@]}"
}
hpcprov_edf_folder() {
  local dir why="" uid mode i stats
  local -a dirs=() found=()
  hpcprov_edf_dir=$(pwd -P) || exit 1
  dir=$hpcprov_edf_dir
  while :; do
    dirs+=("$dir")
    [ "$dir" != / ] || break
    dir=${dir%/*}
    dir=${dir:-/}
  done
  if ! stats=$(stat -c '%u %a' -- "${dirs[@]}" 2>/dev/null); then
    why="$hpcprov_edf_dir or a folder above it cannot be checked"
  else
    IFS=$' \t\n' read -r -d '' -a found <<< "$stats" || :
  fi
  for ((i = 0; i < ${#dirs[@]} && ${#why} == 0; i++)); do
    uid=${found[2 * i]} mode=$((8#${found[2 * i + 1]}))
    if [ "$uid" != "$EUID" ] && [ "$uid" != 0 ]; then
      why="${dirs[i]} belongs to user $uid"
    elif ((mode & 8#22 && !(mode & 8#1000))); then
      why="${dirs[i]} may be written by its group"
      if (((mode & 8#22) == 8#2)); then why="${dirs[i]} may be written by everyone"; fi
      if (((mode & 8#22) == 8#22)); then why+=" and everyone"; fi
    fi
  done
  if [ -n "$why" ]; then
    echo "hpcprov: $why: someone else could replace the job's EDF file under $hpcprov_edf_dir before srun reads it; submit from a folder only you can write (e.g. a folder of your own in the project space, chmod 755), or make the shared folder sticky (chmod +t)" >&2
    exit 1
  fi
}
hpcprov_edf_folder
# shellcheck disable=SC2034  # read by the srun line after it
hpcprov_edf=$(mktemp "$hpcprov_edf_dir/.hpcprov-edf-${SLURM_JOB_ID:-$$}.XXXXXXXX.toml") || exit 1

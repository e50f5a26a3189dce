# shellcheck shell=bash
# hpcprov's program check: lines of every validation job script (validate/plan.py,
# program_check), carried verbatim from the first blank line on, after the line
#   hpcprov_programs=(SHA256 PATH SHA256 PATH ...)   (quoted by hpcprov/core/shell.py)
# Before its launch the job refuses to run a program that is not, byte for byte, the file
# hpcprov wrote: the SHA-256 of each is written into the script itself at submission; and a
# program beside a __pycache__ folder, whose bytecode Python would load instead.
# shellcheck disable=SC2154  # hpcprov_programs: set by the line before it

for ((hpcprov_i = 0; hpcprov_i < ${#hpcprov_programs[@]}; hpcprov_i += 2)); do
  hpcprov_file=${hpcprov_programs[hpcprov_i + 1]}
  # Python would load bytecode cached beside it instead of the bytes checked here (the
  # programs write none of runtime.py): a __pycache__ there is not hpcprov's
  if [ -e "${hpcprov_file%/*}/__pycache__" ] || [ -L "${hpcprov_file%/*}/__pycache__" ]; then
    echo "hpcprov: ${hpcprov_file%/*}/__pycache__ holds bytecode Python would run instead of the program hpcprov wrote: refusing to run it; validate again from a folder only you can write" >&2
    exit 97
  fi
  hpcprov_got=$(sha256sum 2>/dev/null < "$hpcprov_file") || hpcprov_got=unreadable
  if [ "${hpcprov_got%% *}" != "${hpcprov_programs[hpcprov_i]}" ]; then
    echo "hpcprov: $hpcprov_file is not the program hpcprov wrote (it changed after the job was submitted): refusing to run it; validate again from a folder only you can write" >&2
    exit 97
  fi
done

# shellcheck shell=bash
# hpcprov's status trap: lines of every validation job script (validate/plan.py,
# status_trap), carried verbatim from the first blank line on, after the line
#   hpcprov_exit_file=PATH   (quoted by hpcprov/core/shell.py)
# When the script exits, they write "STATUS START END" to PATH: its exit status and its own
# start and end (epoch seconds). The harness reads them where the scheduler's accounting is
# off, and tells its own overhead from the job's run time.
# shellcheck disable=SC2154  # hpcprov_exit_file: set by the line before it

hpcprov_t0=$(date +%s.%N)
trap 'printf "%s %s %s\n" "$?" "$hpcprov_t0" "$(date +%s.%N)" > "$hpcprov_exit_file"' EXIT

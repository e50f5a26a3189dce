# shellcheck shell=bash
# hpcprov's allocation pilot: the body of the script of a validation run's one allocation
# (hpcprov/schedulers/allocation.py), carried verbatim, from the first blank line on, after
# the lines that pilot_lines() generates:
#   q=QUEUE          the queue folder (quoted by hpcprov/core/shell.py)
#   idle_s=SECONDS   end when no step ran for this long (the harness is gone)
#   hpcprov_allocation_nodes() { ... }   prints the allocation's nodes, one a line (the
#                                        backend's allocation_nodes())
# It writes the nodes to QUEUE/nodes, then starts each step file QUEUE/N.step (renamed
# N.run) in a session of its own, its pid kept in memory (a pid file could be rewritten
# before it is read: a kill of somebody's choosing); stops a step on QUEUE/N.cancel; ends
# on QUEUE/END, after its steps.
# shellcheck disable=SC2154  # q and idle_s: set by the lines before it

# hpcprov/schedulers/allocation_pilot.sh, verbatim: q, idle_s, hpcprov_allocation_nodes above
set -u
declare -A hpcprov_pids=()
hpcprov_allocation_nodes > "$q/nodes.part" && mv "$q/nodes.part" "$q/nodes"
last=$SECONDS
while [ ! -e "$q/END" ]; do
  for s in "$q"/*.step; do
    [ -e "$s" ] || continue
    n=${s%.step}
    mv "$s" "$n.run"
    setsid bash "$n.run" &
    hpcprov_pids[$n]=$!
  done
  for c in "$q"/*.cancel; do
    [ -e "$c" ] || continue
    n=${c%.cancel}
    if [ -n "${hpcprov_pids[$n]:-}" ]; then
      kill -TERM -- "-${hpcprov_pids[$n]}" 2>/dev/null || true
    fi
    rm -f "$c"
  done
  if [ -n "$(jobs -rp)" ]; then last=$SECONDS; fi
  if [ $((SECONDS - last)) -gt "$idle_s" ]; then
    echo "hpcprov: no step for $idle_s s: ending the allocation"
    break
  fi
  sleep 0.2
done
wait

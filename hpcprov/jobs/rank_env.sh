# shellcheck shell=bash
# shellcheck disable=SC2154  # hpcprov_kind, hpcprov_sets: the launch's table, written before
# The rank contract of hpcprov (hpcprov/jobs/rank_env.sh), carried verbatim in job scripts
# and launch lines as the text of $hpcprov_rank (after the table of the starters of the
# launch, hpcprov/jobs/ranks.py) and run on every rank as
#   bash -c "$hpcprov_rank" hpcprov-rank SIZE PER_NODE ADDR PORT [WRAPPER...] -- COMMAND...

# Each rank gets the environment of torch.distributed (RANK, LOCAL_RANK, WORLD_SIZE,
# LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT) from the variables of whichever
# starter launched it: the first entry of the table whose rank and size are both present.
# SIZE and PER_NODE are the geometry hpcprov planned (where a starter says no local size),
# ADDR and PORT the rendezvous (where the launch exported none). Where no starter's variables
# are there, a planned world of one is rank 0 of 1; of more, the rank stops at once (exit
# status 2, one line naming the launcher kind and the variables it looked for): the launcher
# did not start it as one of SIZE, and as rank 0 of 1 it would train alone. WRAPPER words (a GPU
# binding such as env CUDA_VISIBLE_DEVICES=$LOCAL_RANK) have their $NAME and ${NAME}
# references replaced with the values of this rank; nothing else in them is evaluated (no
# command substitution, no globbing, no word splitting).
set -u
hpcprov_size=$1 hpcprov_per_node=$2
: "${MASTER_ADDR:=$3}" "${MASTER_PORT:=$4}"
export MASTER_ADDR MASTER_PORT
shift 4
hpcprov_value() {  # the value of variable $1 ("-": none), digits only, else nothing
  local v
  [ "$1" = - ] && return 0
  v=${!1-}
  case $v in "" | *[!0-9]*) return 0 ;; esac
  printf "%s" "$v"
}
hpcprov_source=single
for hpcprov_set in "${hpcprov_sets[@]}"; do
  read -r hpcprov_src hpcprov_r hpcprov_n hpcprov_l hpcprov_ln hpcprov_node <<<"$hpcprov_set"
  hpcprov_rank_v=$(hpcprov_value "$hpcprov_r")
  hpcprov_size_v=$(hpcprov_value "$hpcprov_n")
  [ "$hpcprov_n" = - ] && hpcprov_size_v=$hpcprov_size
  # the first starter whose variables are all there: rank, size and local rank (a
  # starter that sets a local rank always does; another starter sets the same rank names)
  if [ -n "$hpcprov_rank_v" ] && [ -n "$hpcprov_size_v" ] \
      && { [ "$hpcprov_l" = - ] || [ -n "$(hpcprov_value "$hpcprov_l")" ]; }; then
    hpcprov_source=$hpcprov_src
    RANK=$hpcprov_rank_v WORLD_SIZE=$hpcprov_size_v
    LOCAL_WORLD_SIZE=$(hpcprov_value "$hpcprov_ln")
    LOCAL_WORLD_SIZE=${LOCAL_WORLD_SIZE:-$hpcprov_per_node}
    LOCAL_RANK=$(hpcprov_value "$hpcprov_l")
    LOCAL_RANK=${LOCAL_RANK:-$((RANK % LOCAL_WORLD_SIZE))}
    NODE_RANK=$(hpcprov_value "$hpcprov_node")
    NODE_RANK=${NODE_RANK:-$((RANK / LOCAL_WORLD_SIZE))}
    break
  fi
done
if [ "$hpcprov_source" = single ]; then
  if [ "$hpcprov_size" -gt 1 ]; then
    hpcprov_looked=""
    for hpcprov_set in "${hpcprov_sets[@]}"; do
      read -r _ hpcprov_r _ <<<"$hpcprov_set"  # the rank variable of each starter, once
      case $hpcprov_looked in *" $hpcprov_r,"*) ;; *) hpcprov_looked+=" $hpcprov_r," ;; esac
    done
    hpcprov_looked=${hpcprov_looked%,}
    hpcprov_why="none of${hpcprov_looked:- its starters variables} is set"
    hpcprov_why+=", but $hpcprov_size ranks were planned: the launcher did not start this"
    hpcprov_why+=" rank as one of $hpcprov_size (a wrapper that strips its variables?)"
    printf "%s\n" "hpcprov: rank of launcher kind $hpcprov_kind: $hpcprov_why" >&2
    exit 2
  fi
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 NODE_RANK=0
fi
HPCPROV_RANK_SOURCE=$hpcprov_source
export RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK HPCPROV_RANK_SOURCE
hpcprov_expand() {  # $1 with $NAME and ${NAME} replaced by their values, nothing else;
  # with $2 (" NAME NAME "), only those names: any other stays as written
  local rest=$1 only=${2-} out="" name
  while [[ $rest =~ ^([^\$]*)[\$](.*)$ ]]; do
    out+=${BASH_REMATCH[1]}
    rest=${BASH_REMATCH[2]}
    if [[ $rest =~ ^\{([A-Za-z_][A-Za-z0-9_]*)\}(.*)$ ]] \
        || [[ $rest =~ ^([A-Za-z_][A-Za-z0-9_]*)(.*)$ ]]; then
      name=${BASH_REMATCH[1]}
      if [ -n "$only" ] && [[ $only != *" $name "* ]]; then
        out+="\$${rest:0:${#rest}-${#BASH_REMATCH[2]}}"
      else
        out+=${!name-}
      fi
      rest=${BASH_REMATCH[2]}
    else
      out+="\$"
    fi
  done
  printf "%s" "$out$rest"
}
hpcprov_wrapper=()
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
  hpcprov_wrapper+=("$(hpcprov_expand "$1")")
  shift
done
shift
# the command's words name this rank's contract values as $NODE_RANK, ${MASTER_ADDR}...
# (as a site's guide writes `python train.py --node_rank=$NODE_RANK`; the names: the table's
# hpcprov_contract, hpcprov/jobs/ranks.py CONTRACT): those are replaced; any other $NAME
# stays as written
hpcprov_command=()
for hpcprov_word in "$@"; do
  case $hpcprov_word in
    *'$'*) hpcprov_word=$(hpcprov_expand "$hpcprov_word" "$hpcprov_contract") ;;
  esac
  hpcprov_command+=("$hpcprov_word")
done
exec "${hpcprov_wrapper[@]}" "${hpcprov_command[@]}"

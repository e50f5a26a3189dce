#!/bin/sh
# Starts Grid Engine's sge_qmaster for the testbed, as the first process of a new private
# mount namespace (hpcprov.testbed runs it with `unshare --mount --propagation private`;
# the namespace lives as long as the daemon).
#
#   gridengine-qmaster.sh STATE_DIR HOSTS_FILE QMASTER
#
# The qmaster names every client by its address, so it must resolve the compute nodes
# (gpu01 -> 10.251.0.11 and back). This machine's own /etc/hosts stays untouched: in this
# namespace only, HOSTS_FILE (generated: this machine, every node) is bind-mounted over it.
# sge_qmaster forks into the background and this script's process ends.
set -eu
STATE=$1
HOSTS=$2
QMASTER=$3

# Do not keep the nodes' namespace files or `ip netns` handles alive from here.
umount -l "$STATE/ns" 2>/dev/null || true
umount -l /run/netns 2>/dev/null || true

mount --bind "$HOSTS" /etc/hosts
exec "$QMASTER"

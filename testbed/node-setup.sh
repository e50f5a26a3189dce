#!/bin/sh
# Runs once per compute node, as the first process of the node's new mount and
# UTS namespaces (started by hpcprov.testbed through `unshare --mount=FILE
# --uts=FILE --propagation private`; the namespaces outlive it through FILE).
#
#   node-setup.sh STATE_DIR NODE_NAME
#
# Gives the node its hostname and node-local /tmp, /dev/shm and /run (as on a
# real compute node), and bind-mounts the generated /etc/hosts (all nodes by
# name), /etc/ssh/ssh_config (testbed key, no host key checks) and
# /etc/lmod/modulespath (the testbed's Neuron-like modulefiles), and the
# generated Slurm config directory over /etc/slurm.
set -eu
STATE=$1
NODE=$2

# Do not keep other nodes' namespace files or `ip netns` handles alive from here.
umount -l "$STATE/ns" 2>/dev/null || true
umount -l /run/netns 2>/dev/null || true

hostname "$NODE"

mount -t tmpfs -o mode=1777,size=4g "hpctb-$NODE-tmp" /tmp
mount -t tmpfs -o mode=1777,size=4g "hpctb-$NODE-shm" /dev/shm
mount -t tmpfs -o mode=755,size=64m "hpctb-$NODE-run" /run
mkdir -p /run/sshd /run/lock /run/mount
chmod 1777 /run/lock
ln -s /dev/shm /run/shm

mount --bind "$STATE/etc/hosts" /etc/hosts
if [ -e /etc/ssh/ssh_config ]; then
    mount --bind "$STATE/ssh/ssh_config" /etc/ssh/ssh_config
fi
# as on a real node, Slurm commands find the config without SLURM_CONF
if [ -d /etc/slurm ]; then
    mount --bind "$STATE/etc" /etc/slurm
fi
if [ -e /etc/lmod/modulespath ]; then
    mount --bind "$STATE/etc/lmod-modulespath" /etc/lmod/modulespath
fi

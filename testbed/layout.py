"""The cluster's shape as plain data: names, addresses, ports, partitions and nodes.

Layout of ``node_layout(N)``, N = 1..4::

    host (this machine)                      compute nodes (one set of namespaces each)
    -------------------                      -----------------------------------------
    munged  (own key + socket in STATE)      gpu01  10.251.0.11  slurmd + sshd
    slurmctld  on 10.251.0.1                 gpu02  10.251.0.12  slurmd + sshd
    slurmdbd + mariadbd (accounting only)    gpu03  10.251.0.13  (N >= 3)
    bridge hpctb0  10.251.0.1/24             gpu04  10.251.0.14  (N >= 4)

Nothing here touches the machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import TestbedError

STATE_DIR_ENV = "HPCPROV_TESTBED_DIR"
DEFAULT_STATE_DIR = "/var/lib/hpcprov-testbed"

CLUSTER_NAME = "testbed"
BRIDGE = "hpctb0"
NET_PREFIX = "10.251.0"
HOST_ADDR = f"{NET_PREFIX}.1"
NETNS_PREFIX = "hpctb-"
MAX_NODES = 4
ALL_PARTITION = "all"  # exists with 3+ nodes: every node, both node types
# Each node also answers to its name on the "high-speed network" (an alias of its one link),
# as sites name nodes ``<node>-ib`` or ``<node>i``: profiles can rendezvous on those names.
FAST_NAME_SUFFIX = "-ib"
# A QOS that exists (with accounting): profiles that route by constraint and QOS ask for it.
QOS_NAMES = ("regular",)

SLURMCTLD_PORT = 16817
SLURMD_PORT = 6818
SLURMDBD_PORT = 16819
MARIADB_PORT = 16306
# Grid Engine beside Slurm (``up --scheduler gridengine``): sge_qmaster on the host, one
# sge_execd per node (each in its node's network namespace, so one port serves them all).
SGE_QMASTER_PORT = 16444
SGE_EXECD_PORT = 16445


@dataclass(frozen=True)
class Partition:
    """A Slurm partition and the hardware its nodes advertise."""

    name: str
    gpus_per_node: int
    sockets: int
    cores_per_socket: int
    memory_mb: int
    feature: str
    default: bool = False
    max_time: str = "2-00:00:00"

    @property
    def cores(self) -> int:
        """Cores per node."""
        return self.sockets * self.cores_per_socket


# Miniatures of two KISTI Neuron partitions (core/memory figures as advertised
# by Neuron's node types; the nodes claim them via SlurmdParameters=config_overrides).
# Each node type has a Slurm feature (``-C a100``), as sites that route by constraint have.
A100_PARTITION = Partition("amd_a100nv_8", 8, 2, 32, 1_000_000, "a100", default=True)
V100_PARTITION = Partition("cas_v100_4", 4, 2, 20, 384_000, "v100")
PARTITIONS = {p.name: p for p in (A100_PARTITION, V100_PARTITION)}


@dataclass(frozen=True)
class Node:
    """One compute node: its name, its address on the bridge, its partition."""

    name: str
    addr: str
    partition: Partition

    @property
    def netns(self) -> str:
        """Name of the node's network namespace (``ip netns``)."""
        return NETNS_PREFIX + self.name

    @property
    def veth(self) -> str:
        """Host side of the node's veth pair (<= 15 characters)."""
        return NETNS_PREFIX + self.name

    @property
    def fast_name(self) -> str:
        """The node's alias on the "high-speed network" (``gpu01-ib``)."""
        return self.name + FAST_NAME_SUFFIX

    @property
    def gpus(self) -> int:
        """Fake GPUs on the node."""
        return self.partition.gpus_per_node


def node_layout(count: int) -> list[Node]:
    """gpu01-gpu02 are A100 nodes (amd_a100nv_8), gpu03-gpu04 V100 nodes (cas_v100_4)."""
    if not 1 <= count <= MAX_NODES:
        raise TestbedError(f"nodes must be between 1 and {MAX_NODES}, got {count}")
    return [Node(f"gpu{i:02d}", f"{NET_PREFIX}.{10 + i}",
                 A100_PARTITION if i <= 2 else V100_PARTITION)
            for i in range(1, count + 1)]

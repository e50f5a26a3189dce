"""The nodes' namespaces: the bridge and veth pairs, each node's network namespace, and
its persistent mount + UTS namespace (bind-mounted onto ``STATE/ns/gpuNN.{mnt,uts}``).

``node-setup.sh`` runs first in each new mount namespace and gives the node its hostname,
private /tmp, /dev/shm and /run and the generated /etc files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from .layout import BRIDGE, HOST_ADDR, NETNS_PREFIX, Node
from .system import mounts, run

NODE_SETUP = Path(__file__).resolve().parent / "node-setup.sh"


def create_network(nodes: Iterable[Node]) -> None:
    """The bridge with the host's address, and one veth pair into each node's netns."""
    cmds = [
        f"link add {BRIDGE} type bridge stp_state 0 forward_delay 0",
        f"addr add {HOST_ADDR}/24 dev {BRIDGE}",
        f"link set {BRIDGE} up",
    ]
    for n in nodes:
        cmds += [
            f"netns add {n.netns}",
            f"link add {n.veth} type veth peer name eth0 netns {n.netns}",
            f"link set {n.veth} master {BRIDGE} up",
        ]
    run(["ip", "-batch", "-"], input="\n".join(cmds) + "\n")
    for n in nodes:
        # no default route on purpose: name lookups fail fast instead of hanging
        run(["ip", "-n", n.netns, "-batch", "-"], input="\n".join([
            "link set lo up",
            f"addr add {n.addr}/24 dev eth0",
            "link set eth0 up",
        ]) + "\n")


def create_node_namespaces(state_dir: Path, nodes: Iterable[Node]) -> None:
    """Each node's mount + UTS namespace, set up by node-setup.sh and kept by bind mounts."""
    ns = state_dir / "ns"
    if str(ns) not in mounts():
        run(["mount", "--bind", str(ns), str(ns)])
        run(["mount", "--make-private", str(ns)])
    for n in nodes:
        mnt, uts = ns / f"{n.name}.mnt", ns / f"{n.name}.uts"
        mnt.touch()
        uts.touch()
        run(["unshare", f"--mount={mnt}", f"--uts={uts}", "--propagation", "private",
             "--", "sh", str(NODE_SETUP), str(state_dir), n.name])


def node_command(state_dir: Path, node: Node, argv: list[str]) -> list[str]:
    """``argv`` prefixed so it runs inside ``node``'s namespaces."""
    ns = state_dir / "ns"
    return ["nsenter", f"--net=/run/netns/{node.netns}", f"--mount={ns / (node.name + '.mnt')}",
            f"--uts={ns / (node.name + '.uts')}", "--wd=/", "--", *argv]


def netns_exists(node: Node) -> bool:
    """Whether ``node``'s network namespace exists."""
    return os.path.exists(f"/run/netns/{node.netns}")


def bridge_exists() -> bool:
    """Whether the testbed's bridge exists."""
    return os.path.exists(f"/sys/class/net/{BRIDGE}")


def testbed_netns() -> list[str]:
    """The testbed's network namespaces that exist (``ip netns`` names)."""
    try:
        return sorted(f for f in os.listdir("/run/netns") if f.startswith(NETNS_PREFIX))
    except FileNotFoundError:
        return []


def testbed_links() -> list[str]:
    """The testbed's network links that exist on the host (bridge, veth ends)."""
    try:
        return sorted(x for x in os.listdir("/sys/class/net") if x.startswith("hpctb"))
    except FileNotFoundError:
        return []

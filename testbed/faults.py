"""Faults, for testing what hpcprov does with a bad node: power a node off, slow its link.

``kill_node`` takes the link down first, so peers get no FIN or RST (as with a real crash),
then kills every process in the node's namespaces. ``slow_link`` puts a token-bucket
filter (``tc qdisc ... tbf``) on both ends of the node's veth pair.
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import TestbedError
from .layout import Node
from .system import all_pids, kill_and_wait, ns_inode, proc_ns, run

TC_RATE = re.compile(r"\d+(\.\d+)?[kmg]?bit")


def kill_node(node: Node, state_dir: Path) -> None:
    """Power ``node`` off: link down, then every process in its namespaces killed."""
    run(["ip", "link", "set", node.veth, "down"])
    net = ns_inode(f"/run/netns/{node.netns}")
    mnt = ns_inode(state_dir / "ns" / f"{node.name}.mnt")
    pids = {int(p) for p in all_pids()
            if proc_ns(p, "net") == net or proc_ns(p, "mnt") == mnt}
    kill_and_wait(pids, timeout=0.5)


def slow_link(node: Node, rate: str = "50mbit") -> None:
    """Shape ``node``'s link both ways with a token bucket (tc tbf) to ``rate``."""
    if not TC_RATE.fullmatch(rate):
        raise TestbedError(f"rate {rate!r}: use a tc rate such as 50mbit")
    tbf = ["root", "tbf", "rate", rate, "burst", "64kb", "latency", "400ms"]
    run(["tc", "qdisc", "replace", "dev", node.veth, *tbf])
    run(["ip", "netns", "exec", node.netns, "tc", "qdisc", "replace", "dev", "eth0", *tbf])


def clear_link(node: Node) -> None:
    """Undo slow_link() (nothing happens if the link was not slowed)."""
    run(["tc", "qdisc", "del", "dev", node.veth, "root"], check=False)
    run(["ip", "netns", "exec", node.netns, "tc", "qdisc", "del", "dev", "eth0", "root"],
        check=False)

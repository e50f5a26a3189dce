"""What of the testbed exists on this machine, and removing all of it: processes (in the
node namespaces and the host daemons), mounts under the state dir, namespaces, links."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import TestbedError
from .network import testbed_links, testbed_netns
from .system import (
    all_pids,
    kill_and_wait,
    mounts,
    ns_inode,
    pid_alive,
    proc_ns,
    proc_text,
    read_pid,
    run,
)

DAEMONS = {"slurmctld", "slurmdbd", "munged", "mariadbd", "mysqld", "slurmd", "slurmstepd",
           "sshd", "sge_qmaster", "sge_execd", "sge_shepherd", "sge_coshepherd"}
HOST_PID_FILES = ("munged", "slurmctld", "slurmdbd", "mariadb")  # STATE/run/NAME.pid


def _node_mnt_inodes(state_dir: Path) -> set[int]:
    """Inodes of the node mount namespaces bind-mounted onto STATE/ns/*.mnt."""
    ns_dir = state_dir / "ns"
    if not ns_dir.exists():
        return set()
    plain_dev = os.stat(ns_dir).st_dev
    inodes = set()
    for f in ns_dir.glob("*.mnt"):
        st = os.stat(f)
        if st.st_dev != plain_dev:  # a bind-mounted namespace, not the plain file
            inodes.add(st.st_ino)
    return inodes


def _is_our_daemon(pid: str, state_dir: str) -> bool:
    """A Slurm/munge/ssh/MariaDB process started for this state dir."""
    comm = proc_text(pid, "comm").strip()
    if comm not in DAEMONS and not comm.startswith("slurmstepd"):
        return False
    return (state_dir in proc_text(pid, "cmdline")
            or f"={state_dir}/" in proc_text(pid, "environ"))


def testbed_pids(state_dir: Path) -> set[int]:
    """Every process that belongs to the testbed (node namespaces + host daemons)."""
    net_inodes = {ns_inode(f"/run/netns/{name}") for name in testbed_netns()}
    net_inodes.discard(None)
    mnt_inodes = _node_mnt_inodes(state_dir)
    pids = set()
    for pid in all_pids():
        in_node = proc_ns(pid, "net") in net_inodes or proc_ns(pid, "mnt") in mnt_inodes
        if in_node or _is_our_daemon(pid, str(state_dir)):
            pids.add(int(pid))
    for name in HOST_PID_FILES:
        pid = read_pid(state_dir / "run" / f"{name}.pid")
        if pid:
            pids.add(pid)
    pids.discard(os.getpid())
    return pids


def testbed_mounts(state_dir: Path) -> list[str]:
    """Mount points at or under the state dir."""
    sd = str(state_dir)
    return [m for m in mounts() if m == sd or m.startswith(sd + "/")]


def leftovers(state_dir: Path) -> dict[str, list]:
    """What of the testbed still exists (all lists empty after tear_down())."""
    return {
        "processes": sorted(testbed_pids(state_dir)),
        "netns": testbed_netns(),
        "links": testbed_links(),
        "mounts": testbed_mounts(state_dir),
    }


def anything_left(state_dir: Path) -> bool:
    """Whether any process, namespace, link or mount of the testbed exists."""
    return any(leftovers(state_dir).values())


def tear_down(state_dir: Path) -> None:
    """Stop and remove everything; raise TestbedError listing what could not be removed."""
    errors = _kill_processes(state_dir) + _unmount(state_dir) + _remove_network()
    (state_dir / "testbed.json").unlink(missing_ok=True)
    if (state_dir / "run").exists():
        for f in (state_dir / "run").iterdir():
            f.unlink()
    left = {k: v for k, v in leftovers(state_dir).items() if v}
    if left:
        errors.append(f"left behind: {left}")
    if errors:
        raise TestbedError("tear-down incomplete: " + "; ".join(errors))


def _kill_processes(state_dir: Path) -> list[str]:
    """Everything in the node namespaces (jobs, slurmstepd, slurmd, sshd), host daemons."""
    kill_and_wait(testbed_pids(state_dir))
    leftover = {p for p in testbed_pids(state_dir) if pid_alive(p)}
    return [f"processes still running: {sorted(leftover)}"] if leftover else []


def _unmount(state_dir: Path) -> list[str]:
    """Namespace files, the private ns dir, the database tmpfs (deepest first)."""
    errors = []
    for m in sorted(testbed_mounts(state_dir), key=len, reverse=True):
        proc = run(["umount", m], check=False)
        if proc.returncode != 0:
            proc = run(["umount", "-l", m], check=False)
            if proc.returncode != 0:
                errors.append(f"umount {m}: {proc.stderr.strip()}")
    return errors


def _remove_network() -> list[str]:
    """Deleting a netns deletes its veth end, and with it the host end; then the bridge."""
    errors = []
    for name in testbed_netns():
        proc = run(["ip", "netns", "del", name], check=False)
        if proc.returncode != 0:
            errors.append(f"ip netns del {name}: {proc.stderr.strip()}")
    for link in testbed_links():
        if os.path.exists(f"/sys/class/net/{link}"):
            run(["ip", "link", "del", link], check=False)
    return errors

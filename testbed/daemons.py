"""Starting the testbed's daemons and waiting until they serve: munged, MariaDB and
slurmdbd (accounting only), slurmctld, and slurmd + sshd inside each node.

``env`` is always the environment the daemons run with (the testbed's variables and a
PATH with the sbin directories).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .config import ClusterShape
from .errors import TestbedError
from .layout import HOST_ADDR, MARIADB_PORT, QOS_NAMES, SLURMCTLD_PORT, SLURMDBD_PORT, Node
from .network import node_command
from .system import (
    log_tail,
    mounts,
    pid_alive,
    port_open,
    run,
    sbin_path,
    wait_for,
    written_pid,
)


def daemon_died(name: str, pidfile: Path, log: Path) -> None:
    """Raise if ``pidfile`` names, in full, a process that is gone (the daemon died)."""
    pid = written_pid(pidfile)
    if pid is not None and not pid_alive(pid):
        tail = log_tail(log)
        raise TestbedError(f"{name} died during start-up (see {log})"
                           + (f"; its log ends: {tail}" if tail else ""))


def start_munge(shape: ClusterShape, env: dict[str, str]) -> None:
    """munged with the testbed's own key and socket."""
    sd = shape.state_dir
    run(["munged", "--force", f"--socket={shape.munge_socket}",
         f"--key-file={sd / 'munge/munge.key'}", f"--pid-file={sd / 'run/munged.pid'}",
         f"--log-file={sd / 'log/munged.log'}", f"--seed-file={sd / 'munge/munged.seed'}"],
        env=env)
    wait_for("munged", shape.munge_socket.exists, 10, sd / "log/munged.log")


def start_accounting(shape: ClusterShape, env: dict[str, str], timeout: float) -> None:
    """MariaDB (datadir on tmpfs, loopback only), then slurmdbd."""
    _start_mariadb(shape.state_dir, env, timeout)
    sd = shape.state_dir
    run(["slurmdbd"], env=env)
    log, pidfile = sd / "log/slurmdbd.log", sd / "run/slurmdbd.pid"

    def ready() -> bool:
        daemon_died("slurmdbd", pidfile, log)
        return pidfile.exists() and port_open(HOST_ADDR, SLURMDBD_PORT)

    wait_for("slurmdbd", ready, timeout, log)
    add_qos(env)


def add_qos(env: dict[str, str]) -> None:
    """The QOS that profiles routing by constraint and QOS ask for (``-q regular``); slurmctld
    reads them from slurmdbd when it starts, and refuses a QOS that does not exist."""
    for name in QOS_NAMES:
        run(["sacctmgr", "-i", "add", "qos", f"name={name}"], env=env)


def _start_mariadb(sd: Path, env: dict[str, str], timeout: float) -> None:
    """A throwaway MariaDB for slurmdbd: fresh datadir on a tmpfs, no grant tables."""
    db = sd / "db"
    db.mkdir(exist_ok=True)
    if str(db) not in mounts():
        run(["mount", "-t", "tmpfs", "-o", "size=1g,mode=700", "hpctb-db", str(db)])
    common = ["--no-defaults", f"--datadir={db / 'data'}", "--user=root"]
    run(["mariadb-install-db", *common, "--auth-root-authentication-method=normal",
         "--skip-test-db", "--skip-name-resolve", "--innodb-log-file-size=16M"],
        timeout=timeout, env=env)
    log = sd / "log" / "mariadb.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            ["mariadbd", *common, f"--socket={db / 'mysqld.sock'}", f"--port={MARIADB_PORT}",
             "--bind-address=127.0.0.1", f"--pid-file={sd / 'run/mariadb.pid'}",
             "--skip-grant-tables", "--skip-name-resolve", "--skip-log-bin",
             "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=16M",
             "--innodb-flush-log-at-trx-commit=0", "--max-connections=200"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env=env)
    (sd / "run" / "mariadb.pid").write_text(f"{proc.pid}\n")

    def ready() -> bool:
        if proc.poll() is not None:
            raise TestbedError(f"mariadbd exited with {proc.returncode} (see {log})")
        return port_open("127.0.0.1", MARIADB_PORT)

    wait_for("MariaDB", ready, timeout, log)


def start_slurmctld(shape: ClusterShape, env: dict[str, str], timeout: float) -> None:
    """slurmctld with no saved state (``-c``); returns once it listens."""
    run(["slurmctld", "-c", "-f", str(shape.slurm_conf)], env=env)
    log = shape.state_dir / "log/slurmctld.log"
    pidfile = shape.state_dir / "run/slurmctld.pid"

    def ready() -> bool:
        daemon_died("slurmctld", pidfile, log)
        return pidfile.exists() and port_open(HOST_ADDR, SLURMCTLD_PORT)

    wait_for("slurmctld", ready, timeout, log)


def start_node_daemons(shape: ClusterShape, node: Node, env: dict[str, str]) -> None:
    """slurmd and sshd inside ``node``'s namespaces (both fork into the background)."""
    run(node_command(shape.state_dir, node,
                     ["slurmd", "-N", node.name, "-f", str(shape.slurm_conf)]), env=env)
    sshd = shutil.which("sshd", path=sbin_path()) or "sshd"
    run(node_command(shape.state_dir, node,
                     [sshd, "-f", str(shape.node_dir(node.name) / "sshd_config")]), env=env)


def sinfo_states(env: dict[str, str]) -> dict[str, str]:
    """Node name -> Slurm state as ``sinfo`` reports it ({} if sinfo does not answer)."""
    try:
        proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True,
                              text=True, env=env, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    states = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1].lower()
    return states


def wait_nodes_idle(shape: ClusterShape, env: dict[str, str], timeout: float) -> None:
    """Wait until every node is idle; raise at once if slurmctld or a slurmd died."""
    log = shape.state_dir / "log/slurmctld.log"

    def idle() -> bool:
        daemon_died("slurmctld", shape.state_dir / "run/slurmctld.pid", log)
        for n in shape.nodes:
            ndir = shape.node_dir(n.name)
            daemon_died(f"slurmd on {n.name}", ndir / "slurmd.pid", ndir / "slurmd.log")
        states = sinfo_states(env)
        return all(states.get(n, "").rstrip("*") == "idle" for n in shape.node_names)

    wait_for("compute nodes to become idle", idle, timeout, log)

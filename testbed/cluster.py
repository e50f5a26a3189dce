"""A real multi-node Slurm cluster on one machine, shaped like KISTI Neuron: the lifecycle.

:class:`Testbed` brings the cluster up and down, reports its status and runs commands in
its nodes. The work is done by the modules next to this one:

* ``layout``   -- names, addresses, ports, partitions and nodes (plain data);
* ``config``   -- every generated file rendered as text (pure, unit-tested without root);
* ``statedir`` -- the state directory made ready: folders, keys, fake GPUs, those files;
* ``network``  -- bridge, veth pairs, the nodes' network and mount + UTS namespaces;
* ``daemons``  -- munged, MariaDB + slurmdbd, slurmctld, slurmd + sshd, and waiting for them;
* ``teardown`` -- what of the testbed exists, and removing all of it;
* ``faults``   -- kill a node, slow or clear its link;
* ``prereqs``  -- root, packages, a usable state directory;
* ``system``   -- commands, pid files, /proc, ports and mounts.

Everything the testbed creates lives under the state directory (default
``/var/lib/hpcprov-testbed``, env ``HPCPROV_TESTBED_DIR``) or is named
``hpctb*``; ``down()`` removes all processes, namespaces, links and mounts.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import hostlist

from . import daemons, faults, network, prereqs, statedir, teardown
from .config import ClusterShape, client_env
from .errors import TestbedError
from .layout import (
    A100_PARTITION,
    BRIDGE,
    CLUSTER_NAME,
    DEFAULT_STATE_DIR,
    HOST_ADDR,
    MARIADB_PORT,
    MAX_NODES,
    PARTITIONS,
    SLURMCTLD_PORT,
    SLURMDBD_PORT,
    STATE_DIR_ENV,
    Node,
    node_layout,
)
from .system import port_free, read_pid, sbin_path

__all__ = ["BRIDGE", "MAX_NODES", "Testbed", "TestbedError", "node_layout", "state_dir_path"]

BUSY_STATES = ("idle", "mixed", "allocated")  # a node in one of these is usable


def state_dir_path(state_dir: str | os.PathLike[str] | None = None) -> Path:
    """``state_dir``, else $HPCPROV_TESTBED_DIR, else /var/lib/hpcprov-testbed."""
    return Path(state_dir or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR).absolute()


class Testbed:
    """A Slurm cluster of ``nodes`` compute nodes in namespaces on this machine.

    >>> tb = Testbed(nodes=2)          # doctest: +SKIP
    >>> tb.up()                         # seconds; idempotent
    >>> subprocess.run(["sinfo"], env=tb.environ())
    >>> tb.down()                       # no process, namespace, link or mount left
    """

    __test__ = False  # not a pytest test class

    def __init__(self, nodes: int = 2, accounting: bool = True,
                 state_dir: str | os.PathLike[str] | None = None, policy: bool = True):
        self.shape = ClusterShape.build(nodes, state_dir_path(state_dir),
                                        socket.gethostname().split(".")[0], accounting, policy)

    @classmethod
    def from_state(cls, state_dir: str | os.PathLike[str] | None = None) -> Testbed:
        """The testbed as last brought up in ``state_dir`` (defaults if never)."""
        sd = state_dir_path(state_dir)
        saved = _read_json(sd / "testbed.json")
        if saved is None:
            return cls(state_dir=sd)
        return cls(nodes=saved["nodes"], accounting=saved["accounting"],
                   policy=saved.get("policy", True), state_dir=sd)

    # -- facts -------------------------------------------------------------------

    @property
    def nodes(self) -> list[Node]:
        """The compute nodes."""
        return list(self.shape.nodes)

    @property
    def accounting(self) -> bool:
        """Whether slurmdbd + MariaDB run (``sacct`` works)."""
        return self.shape.accounting

    @property
    def policy(self) -> bool:
        """Whether Neuron's submit policy (job_submit.lua) is enforced."""
        return self.shape.policy

    @property
    def state_dir(self) -> Path:
        """Where everything the testbed creates lives."""
        return self.shape.state_dir

    @property
    def host(self) -> str:
        """This machine's short host name (the controller)."""
        return self.shape.ctl_host

    @property
    def node_names(self) -> list[str]:
        """Compute node names, in order."""
        return self.shape.node_names

    @property
    def node_addrs(self) -> dict[str, str]:
        """Node name -> address on the bridge."""
        return {n.name: n.addr for n in self.shape.nodes}

    @property
    def partitions(self) -> dict[str, list[str]]:
        """Partition name -> its nodes (not the 3+ node partition ``all``)."""
        return self.shape.partitions

    @property
    def default_partition(self) -> str:
        """The default partition's name."""
        return A100_PARTITION.name

    @property
    def etc(self) -> Path:
        """The generated Slurm config directory."""
        return self.shape.etc

    @property
    def slurm_conf(self) -> Path:
        """The generated slurm.conf."""
        return self.shape.slurm_conf

    @property
    def ssh_config(self) -> Path:
        """ssh client config mapping node names to addresses."""
        return self.shape.ssh_config

    @property
    def ssh_key(self) -> Path:
        """root's testbed ssh key."""
        return self.shape.ssh_key

    @property
    def scratch(self) -> Path:
        """Shared directory visible on the host and on every node (not /tmp)."""
        return self.shape.scratch

    @property
    def munge_socket(self) -> Path:
        """The testbed's munged socket."""
        return self.shape.munge_socket

    @property
    def modulefiles_dir(self) -> Path:
        """The copy of the testbed's modulefiles that the nodes read."""
        return self.shape.modulefiles_dir

    # -- using it ------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """Variables to add to a process's environment to use the testbed."""
        return client_env(self.shape, os.environ.get("MODULEPATH", ""))

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """A full environment (``base`` or os.environ) plus :meth:`env`."""
        merged = dict(os.environ if base is None else base)
        merged.update(self.env())
        # pyenv's shims cd into PYENV_DIR (the caller's cwd), which may not exist on a node
        merged.pop("PYENV_DIR", None)
        return merged

    def node_command(self, node: str, argv: list[str]) -> list[str]:
        """argv prefixed so it runs inside ``node``'s namespaces (as root)."""
        return network.node_command(self.state_dir, self._node(node), argv)

    def run_on(self, node: str, argv: list[str],
               **kwargs: Any) -> subprocess.CompletedProcess:
        """subprocess.run ``argv`` inside ``node`` with the testbed environment."""
        kwargs.setdefault("env", self.environ())
        return subprocess.run(self.node_command(node, argv), **kwargs)

    def problems(self) -> list[str]:
        """Why the testbed cannot be brought up here ([] if it can)."""
        return prereqs.problems(self.state_dir, self.accounting)

    # -- status --------------------------------------------------------------------

    def status(self) -> dict:
        """What is running. ``status()["up"]`` is True when the cluster is usable."""
        run = self.state_dir / "run"
        st: dict = {
            "state_dir": str(self.state_dir),
            "config": _read_json(self.state_dir / "testbed.json"),
            **{name: read_pid(run / f"{name}.pid")
               for name in ("munged", "slurmctld", "slurmdbd", "mariadb")},
            "bridge": network.bridge_exists(),
        }
        states = daemons.sinfo_states(self.environ()) if st["slurmctld"] else {}
        st["nodes"] = [self._node_status(n, states.get(n.name)) for n in self.shape.nodes]
        st["up"] = self._usable(st)
        st["env"] = self.env()
        return st

    def _node_status(self, n: Node, state: str | None) -> dict:
        """One node's entry in :meth:`status`."""
        ndir = self.shape.node_dir(n.name)
        return {"name": n.name, "addr": n.addr, "partition": n.partition.name,
                "gpus": n.gpus, "netns": n.netns, "netns_exists": network.netns_exists(n),
                "slurmd": read_pid(ndir / "slurmd.pid"), "sshd": read_pid(ndir / "sshd.pid"),
                "state": state}

    def _usable(self, st: dict) -> bool:
        """Up as configured: same options saved, every daemon alive, every node usable."""
        saved = st["config"] or {}
        same = (saved.get("nodes") == len(self.shape.nodes)
                and saved.get("accounting") == self.accounting
                and saved.get("policy") == self.policy)
        host = bool(st["munged"] and st["slurmctld"] and st["bridge"]
                    and (st["slurmdbd"] and st["mariadb"] if self.accounting else True))
        nodes = all(n["slurmd"] and n["sshd"] and n["netns_exists"]
                    and (n["state"] or "").rstrip("*") in BUSY_STATES for n in st["nodes"])
        return bool(saved) and same and host and nodes

    # -- lifecycle -------------------------------------------------------------------

    def up(self, timeout: float = 60) -> Testbed:
        """Bring the cluster up (or leave it be if it already is, as configured)."""
        probs = self.problems()
        if probs:
            raise TestbedError("; ".join(probs))
        if self.status()["up"]:
            return self
        if teardown.anything_left(self.state_dir):
            self.down()
        self._check_ports()
        try:
            self._start(timeout)
        except BaseException:
            with contextlib.suppress(TestbedError):
                self.down()
            raise
        (self.state_dir / "testbed.json").write_text(json.dumps({
            "nodes": len(self.shape.nodes), "accounting": self.accounting,
            "policy": self.policy, "host": self.host, "started": time.time(),
        }, indent=1) + "\n")
        return self

    def _check_ports(self) -> None:
        """Refuse to start when another Slurm (or testbed) holds the host's ports."""
        ports = [SLURMCTLD_PORT] + ([SLURMDBD_PORT, MARIADB_PORT] if self.accounting else [])
        busy = [str(p) for p in ports if not port_free(p)]
        if busy:
            raise TestbedError(f"port(s) {', '.join(busy)} already in use on this machine "
                               "(another Slurm or testbed running?)")

    def _start(self, timeout: float) -> None:
        """Files, munge, network, namespaces, accounting, slurmctld, nodes; wait for idle."""
        env = self._daemon_env()
        statedir.prepare(self.shape)
        daemons.start_munge(self.shape, env)
        network.create_network(self.shape.nodes)
        network.create_node_namespaces(self.state_dir, self.shape.nodes)
        if self.accounting:
            daemons.start_accounting(self.shape, env, timeout)
        daemons.start_slurmctld(self.shape, env, timeout)
        for n in self.shape.nodes:
            daemons.start_node_daemons(self.shape, n, env)
        daemons.wait_nodes_idle(self.shape, self.environ(), timeout)

    def _daemon_env(self) -> dict[str, str]:
        """The environment daemons start with: :meth:`environ` with the sbin directories."""
        env = self.environ()
        env["PATH"] = sbin_path()
        return env

    def down(self) -> None:
        """Stop everything the testbed started; safe to call when nothing runs."""
        if os.geteuid() != 0:
            raise TestbedError("must run as root to tear the testbed down")
        teardown.tear_down(self.state_dir)

    def leftovers(self) -> dict[str, list]:
        """What of the testbed still exists (all lists empty after down())."""
        return teardown.leftovers(self.state_dir)

    # -- faults ------------------------------------------------------------------------

    def kill_node(self, name: str) -> None:
        """Power a node off: its link goes down first (so peers get no FIN or RST, as
        with a real crash), then every process in its namespaces is killed."""
        faults.kill_node(self._node(name), self.state_dir)

    def slow_link(self, name: str, rate: str = "50mbit") -> None:
        """Shape a node's link both ways with a token bucket (tc tbf) to ``rate``."""
        faults.slow_link(self._node(name), rate)

    def clear_link(self, name: str) -> None:
        """Undo slow_link()."""
        faults.clear_link(self._node(name))

    # -- helpers ---------------------------------------------------------------------------

    def _node(self, name: str) -> Node:
        """The node called ``name``, or a TestbedError naming the nodes there are."""
        for n in self.shape.nodes:
            if n.name == name:
                return n
        raise TestbedError(f"no such node: {name} (nodes: {', '.join(self.node_names)})")

    def describe(self) -> dict:
        """Static facts (names, addresses, partitions, env) as a dict."""
        return {
            "cluster": CLUSTER_NAME,
            "controller": {"host": self.host, "addr": HOST_ADDR, "port": SLURMCTLD_PORT},
            "nodes": [{"name": n.name, "addr": n.addr, "partition": n.partition.name,
                       "gpus": n.gpus, "netns": n.netns} for n in self.shape.nodes],
            "partitions": [{**asdict(PARTITIONS[p]), "nodes": hostlist.collect_hostlist(members)}
                           for p, members in self.partitions.items()],
            "accounting": self.accounting,
            "policy": self.policy,
            "state_dir": str(self.state_dir),
            "scratch": str(self.scratch),
            "ssh_config": str(self.ssh_config),
            "modulefiles": str(self.modulefiles_dir),
            "env": self.env(),
        }


def _read_json(path: Path) -> dict | None:
    """``path`` parsed as JSON, None if it is missing or not JSON."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None

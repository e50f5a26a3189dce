"""A real Grid Engine (Son of Grid Engine 8.1.9 from Debian's packages) beside Slurm on the
testbed's nodes: sge_qmaster on the host, one sge_execd inside each node's namespaces.

>>> tb = Testbed(nodes=2)                 # doctest: +SKIP
>>> ge = GridEngine(tb).up()               # brings the testbed up first if it is not
>>> subprocess.run(["qsub", "-terse", "-pe", "mpi", "2", "job.sh"], env=ge.environ())
>>> ge.down()                              # Grid Engine only; tb.down() removes everything

The execds run in the same network, mount and UTS namespaces as the nodes' slurmd, so they
report the host names gpu01, gpu02..., see the nodes' /etc/hosts, private /tmp and the
testbed's Lmod modules, and reach each other (``qrsh -inherit``) over the bridge.

The qmaster must name every client by its address: it runs in a private mount namespace
of its own whose /etc/hosts (generated) lists this machine and every node
(``gridengine-qmaster.sh``); this machine's /etc/hosts stays untouched. Clients on the host
work with the names they are given (``qsub``, ``qstat``, ``qacct``, ``qdel``, ``qhost``);
commands that take a node's name as an argument (``qconf -se gpu01``, ``qsub -q
amd_a100nv_8@gpu01``) must resolve it, so run them with :meth:`GridEngine.admin_command`
(inside the qmaster's namespace) or inside a node.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from . import gridengine_config as gec
from .errors import TestbedError
from .layout import SGE_QMASTER_PORT, Node
from .statedir import write_files
from .system import (
    all_pids,
    kill_and_wait,
    log_tail,
    pid_alive,
    port_free,
    port_open,
    proc_text,
    read_pid,
    run,
    sbin_path,
    wait_for,
    written_pid,
)

if TYPE_CHECKING:
    from .cluster import Testbed

QMASTER_SH = Path(__file__).resolve().parent / "gridengine-qmaster.sh"
DAEMONS = ("sge_qmaster", "sge_execd", "sge_shepherd", "sge_coshepherd")

# (file under BIN_DIR, what needs it) checked before bring-up
REQUIRED = ("sge_qmaster", "sge_execd", "sge_shepherd", "qsub", "qstat", "qacct", "qdel",
            "qconf", "qhost", "qrsh", "qrsh_starter", "spoolinit", "spooldefaults.bin",
            "libspoolc.so")


def problems() -> list[str]:
    """Why Grid Engine cannot come up here ([] if it can), one line each."""
    missing = [name for name in REQUIRED if not (gec.BIN_DIR / name).exists()]
    probs = []
    if missing:
        probs.append(f"Grid Engine is not unpacked in {gec.PREFIX} (missing "
                     f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}; install "
                     "with: bash testbed/install-deps.sh)")
    elif not (gec.COMPILED_IN_DIR / "libspoolc.so").exists():
        probs.append(f"{gec.COMPILED_IN_DIR} does not lead to {gec.BIN_DIR} (Debian's "
                     "sge_qmaster loads its spooling library from there; install with: bash "
                     "testbed/install-deps.sh)")
    return probs


class GridEngine:
    """Grid Engine on a :class:`~hpcprov.testbed.cluster.Testbed`'s nodes."""

    __test__ = False  # not a pytest test class

    def __init__(self, testbed: Testbed):
        self.testbed = testbed
        self.shape = testbed.shape

    # -- facts -------------------------------------------------------------------------

    @property
    def sge_root(self) -> Path:
        """SGE_ROOT (in the state dir)."""
        return gec.sge_root(self.shape)

    @property
    def cell(self) -> str:
        """SGE_CELL."""
        return gec.CELL

    @property
    def common_dir(self) -> Path:
        """The cell's common directory (accounting, act_qmaster, settings.sh)."""
        return gec.common_dir(self.shape)

    @property
    def bin_dir(self) -> Path:
        """Where qsub, qstat, qacct, qdel, qconf, qhost and qrsh are."""
        return gec.BIN_DIR

    @property
    def queues(self) -> dict[str, list[str]]:
        """Cluster queue -> its hosts (one queue per node type, named like its partition)."""
        return self.shape.partitions

    @property
    def parallel_envs(self) -> dict[str, str]:
        """Parallel environment -> its allocation rule."""
        return {pe.name: pe.allocation_rule for pe in gec.PARALLEL_ENVS}

    @property
    def qmaster_log(self) -> Path:
        """The qmaster's messages file."""
        return gec.qmaster_spool(self.shape) / "messages"

    def execd_dir(self, node: str) -> Path:
        """An execd's spool directory (execd.pid, messages, active_jobs)."""
        return gec.execd_spool(self.shape) / node

    # -- using it ------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """Variables to add to a process's environment to use Grid Engine: SGE_ROOT,
        SGE_CELL, the ports, PATH with the clients first."""
        return gec.client_env(self.shape, os.environ.get("PATH", ""))

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The testbed's environment (MODULEPATH, ssh config, ...) without SLURM_CONF, plus
        :meth:`env`."""
        merged = self.testbed.environ(base)
        merged.pop("SLURM_CONF", None)
        merged.update(gec.client_env(self.shape, merged.get("PATH", "")))
        return merged

    def admin_command(self, argv: list[str]) -> list[str]:
        """``argv`` prefixed so it runs in the qmaster's mount namespace, where the nodes'
        names resolve (``qconf -se gpu01``, ``-q queue@gpu01``). Needs root."""
        pid = self._qmaster_pid()
        if pid is None:
            raise TestbedError("Grid Engine is not running (no sge_qmaster)")
        return ["nsenter", "-t", str(pid), "-m", "--", *argv]

    # -- status ----------------------------------------------------------------------------

    def status(self) -> dict:
        """What runs: the qmaster's and each execd's pid, the hosts qhost reports with a
        load (an execd that registered and reports). ``up`` when all of them do."""
        qmaster = self._qmaster_pid()
        execds = {n.name: read_pid(self.execd_dir(n.name) / "execd.pid")
                  for n in self.shape.nodes}
        reporting = self._reporting_hosts() if qmaster else []
        up = (qmaster is not None and all(execds.values())
              and set(reporting) >= set(self.shape.node_names))
        return {"up": up, "qmaster": qmaster, "execds": execds, "reporting": reporting,
                "sge_root": str(self.sge_root), "env": self.env()}

    def _qmaster_pid(self) -> int | None:
        return read_pid(gec.qmaster_spool(self.shape) / "qmaster.pid")

    def _reporting_hosts(self) -> list[str]:
        """Hosts ``qhost`` lists with an architecture (their execd reports), [] on error."""
        try:
            proc = subprocess.run([str(gec.BIN_DIR / "qhost")], capture_output=True,
                                  text=True, env=self._daemon_env(), timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return []
        hosts = []
        for line in proc.stdout.splitlines()[2:]:
            fields = line.split()
            if len(fields) >= 2 and fields[0] != "global" and fields[1] != "-":
                hosts.append(fields[0])
        return hosts

    # -- lifecycle -----------------------------------------------------------------------------

    def up(self, timeout: float = 60) -> GridEngine:
        """Bring Grid Engine up beside Slurm (the testbed first, as configured, if it is not
        up); leave it be if it already runs."""
        probs = problems()
        if probs:
            raise TestbedError("; ".join(probs))
        if not self.testbed.status()["up"]:
            self.testbed.up(timeout)
        if self.status()["up"]:
            return self
        self.down()
        try:
            self._start(timeout)
        except BaseException:
            with contextlib.suppress(TestbedError):
                self.down()
            raise
        return self

    def down(self) -> None:
        """Stop Grid Engine (qmaster, execds, their jobs); the testbed stays up."""
        if os.geteuid() != 0:
            raise TestbedError("must run as root to stop Grid Engine")
        pids = self.pids()
        kill_and_wait(pids)
        left = {p for p in self.pids() if pid_alive(p)}
        if left:
            raise TestbedError(f"Grid Engine processes still running: {sorted(left)}")

    def pids(self) -> set[int]:
        """Grid Engine's daemons for this state dir and every process under them (jobs)."""
        marker = f"SGE_ROOT={self.sge_root}"
        roots = set()
        for pid in all_pids():
            comm = proc_text(pid, "comm").strip()
            if comm in DAEMONS and marker in proc_text(pid, "environ").split(" "):
                roots.add(int(pid))
        for pidfile in [gec.qmaster_spool(self.shape) / "qmaster.pid",
                        *(self.execd_dir(n.name) / "execd.pid" for n in self.shape.nodes)]:
            daemon = read_pid(pidfile)
            if daemon:
                roots.add(daemon)
        return _with_descendants(roots)

    def _start(self, timeout: float) -> None:
        """Fresh cell, spool initialised, qmaster, objects by qconf, execds; wait for them."""
        env = self._daemon_env()
        self._prepare()
        self._init_spool(env)
        if not port_free(SGE_QMASTER_PORT):
            raise TestbedError(f"port {SGE_QMASTER_PORT} already in use on this machine "
                               "(another Grid Engine running?)")
        self._start_qmaster(env, timeout)
        self._configure(env)
        self._start_execds(env, timeout)

        def reporting() -> bool:
            for n in self.shape.nodes:
                self._execd_died(n)
            return set(self._reporting_hosts()) >= set(self.shape.node_names)

        wait_for("every execd to report to the qmaster", reporting, timeout, self.qmaster_log)

    def _daemon_env(self) -> dict[str, str]:
        env = self.environ()
        env["PATH"] = gec.client_env(self.shape, sbin_path())["PATH"]
        return env

    def _prepare(self) -> None:
        """A fresh SGE_ROOT: links to the packages' binaries, the generated files, the
        complexes to load (SGE's defaults and ``gpu``). The last run's cell goes (job ids
        start at 1 again); its qmaster messages and accounting are kept as ``*.prev`` in
        the state dir's log folder."""
        root = self.sge_root
        logs = self.shape.state_dir / "log"
        logs.mkdir(parents=True, exist_ok=True)
        for src, name in ((self.qmaster_log, "sge_qmaster.log.prev"),
                          (self.common_dir / "accounting", "sge_accounting.prev")):
            if src.exists():
                src.replace(logs / name)
        shutil.rmtree(root, ignore_errors=True)
        arch = gec.arch()
        for sub in ("bin", "utilbin", "lib"):
            (root / sub).mkdir(parents=True)
            (root / sub / arch).symlink_to(gec.BIN_DIR)
        (root / "util").symlink_to(gec.SHARE_DIR / "util")
        for d in (gec.qmaster_spool(self.shape), gec.execd_spool(self.shape), self.common_dir):
            d.mkdir(parents=True, exist_ok=True)
        write_files(self.shape.state_dir, gec.render(self.shape, host_addrs=_host_addrs()))
        centry = gec.templates_dir(self.shape) / "centry"
        for f in (gec.SHARE_DIR / "util" / "resources" / "centry").iterdir():
            if not (centry / f.name).exists():
                shutil.copyfile(f, centry / f.name)

    def _init_spool(self, env: dict[str, str]) -> None:
        """What Debian's init_cluster does, into the testbed's cell: the spool, the global
        configuration, complexes, usersets, root as manager."""
        env = {**env, "LD_LIBRARY_PATH": str(gec.BIN_DIR)}
        b, t = gec.BIN_DIR, gec.templates_dir(self.shape)
        params = f"{self.common_dir};{gec.qmaster_spool(self.shape)}"
        run([str(b / "spoolinit"), "classic", "libspoolc", params, "init"], env=env)
        defaults = str(b / "spooldefaults.bin")
        run([defaults, "configuration", str(t / "configuration")], env=env)
        run([defaults, "complexes", str(t / "centry")], env=env)
        run([defaults, "usersets", str(gec.SHARE_DIR / "util" / "resources" / "usersets")],
            env=env)
        run([defaults, "managers", "root"], env=env)

    def _start_qmaster(self, env: dict[str, str], timeout: float) -> None:
        run(["unshare", "--mount", "--propagation", "private", "--", "sh", str(QMASTER_SH),
             str(self.shape.state_dir), str(gec.qmaster_hosts(self.shape)),
             str(gec.BIN_DIR / "sge_qmaster")], env=env)
        pidfile = gec.qmaster_spool(self.shape) / "qmaster.pid"

        def ready() -> bool:
            pid = written_pid(pidfile)
            if pid is not None and not pid_alive(pid):
                raise TestbedError(f"sge_qmaster died during start-up (see {self.qmaster_log})"
                                   f"; its log ends: {log_tail(self.qmaster_log)}")
            return pid is not None and port_open("127.0.0.1", SGE_QMASTER_PORT)

        wait_for("sge_qmaster", ready, timeout, self.qmaster_log)

    def _configure(self, env: dict[str, str]) -> None:
        """Hosts, host groups, exec hosts, parallel environments, queues, scheduler: qconf
        in the qmaster's namespace (the node names resolve there)."""
        t = gec.templates_dir(self.shape)
        nodes = ",".join(self.shape.node_names)
        self._qconf(env, "-ah", nodes)
        self._qconf(env, "-as", f"{self.shape.ctl_host},{nodes}")
        for part in self.shape.partitions:
            self._qconf(env, "-Ahgrp", str(t / "hostgroups" / part))
        for n in self.shape.nodes:
            # an admin host may already be an exec host (without the gpu consumable)
            f = str(t / "exechosts" / n.name)
            proc = self._qconf(env, "-Ae", f, check=False)
            if proc.returncode != 0:
                self._qconf(env, "-Me", f)
        for pe in gec.PARALLEL_ENVS:
            self._qconf(env, "-Ap", str(t / "pe" / pe.name))
        for part in self.shape.partitions:
            self._qconf(env, "-Aq", str(t / "queues" / part))
        self._qconf(env, "-Msconf", str(t / "sched_configuration"))

    def _qconf(self, env: dict[str, str], *args: str,
               check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = run(self.admin_command([str(gec.BIN_DIR / "qconf"), *args]), env=env,
                   check=False)
        if check and proc.returncode != 0:
            out = (proc.stderr + proc.stdout).strip().splitlines()
            raise TestbedError(f"qconf {' '.join(args)} failed: "
                               f"{out[-1] if out else f'exit status {proc.returncode}'}")
        return proc

    def _start_execds(self, env: dict[str, str], timeout: float) -> None:
        """One sge_execd in each node's namespaces, all at once (each waits to register)."""
        procs = [(n, subprocess.Popen(self.testbed.node_command(n.name,
                                                                [str(gec.BIN_DIR / "sge_execd")]),
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, env=env))
                 for n in self.shape.nodes]
        for n, proc in procs:
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise TestbedError(f"sge_execd on {n.name} did not start in {timeout:.0f}s")\
                    from None
            if proc.returncode != 0:
                last = (out or "").strip().splitlines()
                raise TestbedError(f"sge_execd on {n.name} failed: "
                                   f"{last[-1] if last else f'exit status {proc.returncode}'}")

    def _execd_died(self, node: Node) -> None:
        pidfile = self.execd_dir(node.name) / "execd.pid"
        pid = written_pid(pidfile)
        if pid is not None and not pid_alive(pid):
            log = self.execd_dir(node.name) / "messages"
            raise TestbedError(f"sge_execd on {node.name} died during start-up (see {log}); "
                               f"its log ends: {log_tail(log)}")


def _host_addrs() -> list[str]:
    """The addresses this machine's name resolves to here (what a client on the host may
    reach the qmaster from)."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except OSError:
        return []
    return sorted({str(info[4][0]) for info in infos})


def _with_descendants(roots: set[int]) -> set[int]:
    """``roots`` and every process below them (by parent pid)."""
    children: dict[int, list[int]] = {}
    for entry in all_pids():
        stat = proc_text(entry, "stat")
        try:
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children.get(pid, []))
    found.discard(os.getpid())
    return found

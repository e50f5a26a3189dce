"""A real multi-node Slurm cluster on one machine, shaped like KISTI Neuron.

Layout (``Testbed(nodes=N)``, N = 1..4)::

    host (this machine)                      compute nodes (one set of namespaces each)
    -------------------                      -----------------------------------------
    munged  (own key + socket in STATE)      gpu01  10.251.0.11  slurmd + sshd
    slurmctld  on 10.251.0.1                 gpu02  10.251.0.12  slurmd + sshd
    slurmdbd + mariadbd (accounting only)    gpu03  10.251.0.13  (N >= 3)
    bridge hpctb0  10.251.0.1/24             gpu04  10.251.0.14  (N >= 4)

Each compute node is a network namespace (``ip netns``, name ``hpctb-gpuNN``)
joined to the bridge by a veth pair, plus a persistent mount + UTS namespace
(bind-mounted onto ``STATE/ns/gpuNN.{mnt,uts}``) in which the node has its own
hostname, its own ``/tmp``, ``/dev/shm`` and ``/run``, and generated
``/etc/hosts``, ``/etc/ssh/ssh_config`` and ``/etc/lmod/modulespath``, and the
generated Slurm config directory bind-mounted over ``/etc/slurm``.  The rest
of the file system is shared, as a cluster shares ``/home`` and ``/scratch``:
submit jobs from a directory outside ``/tmp`` (``Testbed.scratch``).

Everything the testbed creates lives under the state directory (default
``/var/lib/hpcprov-testbed``, env ``HPCPROV_TESTBED_DIR``) or is named
``hpctb*``; ``down()`` removes all processes, namespaces, links and mounts.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import string
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PKG_DIR = Path(__file__).resolve().parent
MODULEFILES_DIR = PKG_DIR / "modulefiles"

STATE_DIR_ENV = "HPCPROV_TESTBED_DIR"
DEFAULT_STATE_DIR = "/var/lib/hpcprov-testbed"

CLUSTER_NAME = "testbed"
BRIDGE = "hpctb0"
NET_PREFIX = "10.251.0"
HOST_ADDR = f"{NET_PREFIX}.1"
NETNS_PREFIX = "hpctb-"
MAX_NODES = 4
ALL_PARTITION = "all"  # exists with 3+ nodes: every node, both node types

SLURMCTLD_PORT = 16817
SLURMD_PORT = 6818
SLURMDBD_PORT = 16819
MARIADB_PORT = 16306

# (command, Debian package) the testbed cannot work without.
REQUIRED_COMMANDS = [
    ("slurmctld", "slurmctld"),
    ("slurmd", "slurmd"),
    ("slurmstepd", "slurmd"),
    ("sbatch", "slurm-client"),
    ("srun", "slurm-client"),
    ("sinfo", "slurm-client"),
    ("scontrol", "slurm-client"),
    ("qsub", "slurm-wlm-torque"),
    ("munged", "munge"),
    ("sshd", "openssh-server"),
    ("ssh", "openssh-client"),
    ("ssh-keygen", "openssh-client"),
    ("ip", "iproute2"),
    ("tc", "iproute2"),
    ("nsenter", "util-linux"),
    ("unshare", "util-linux"),
    ("mpirun", "openmpi-bin"),
]
ACCOUNTING_COMMANDS = [
    ("slurmdbd", "slurmdbd"),
    ("sacct", "slurm-client"),
    ("mariadbd", "mariadb-server"),
    ("mariadb-install-db", "mariadb-server"),
]
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"


class TestbedError(RuntimeError):
    """A testbed operation failed; the message is one line meant for people."""

    __test__ = False  # not a pytest test class


@dataclass(frozen=True)
class Partition:
    name: str
    gpus_per_node: int
    sockets: int
    cores_per_socket: int
    memory_mb: int
    default: bool = False
    max_time: str = "2-00:00:00"

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket


# Miniatures of two KISTI Neuron partitions (core/memory figures as advertised
# by Neuron's node types; the nodes claim them via SlurmdParameters=config_overrides).
A100_PARTITION = Partition("amd_a100nv_8", 8, 2, 32, 1_000_000, default=True)
V100_PARTITION = Partition("cas_v100_4", 4, 2, 20, 384_000)


@dataclass(frozen=True)
class Node:
    name: str
    addr: str
    partition: Partition

    @property
    def netns(self) -> str:
        return NETNS_PREFIX + self.name

    @property
    def veth(self) -> str:
        return NETNS_PREFIX + self.name  # host side of the pair, <= 15 chars

    @property
    def gpus(self) -> int:
        return self.partition.gpus_per_node


def node_layout(count: int) -> list[Node]:
    """gpu01-gpu02 are A100 nodes (amd_a100nv_8), gpu03-gpu04 V100 nodes (cas_v100_4)."""
    if not 1 <= count <= MAX_NODES:
        raise TestbedError(f"nodes must be between 1 and {MAX_NODES}, got {count}")
    nodes = []
    for i in range(1, count + 1):
        part = A100_PARTITION if i <= 2 else V100_PARTITION
        nodes.append(Node(f"gpu{i:02d}", f"{NET_PREFIX}.{10 + i}", part))
    return nodes


def hostlist(names: list[str]) -> str:
    """gpu01,gpu02,gpu03 -> gpu[01-03] (contiguous two-digit suffixes only)."""
    if len(names) == 1:
        return names[0]
    nums = [int(n[3:]) for n in names]
    if nums == list(range(nums[0], nums[0] + len(nums))):
        return f"gpu[{nums[0]:02d}-{nums[-1]:02d}]"
    return "gpu[" + ",".join(f"{n:02d}" for n in nums) + "]"


# ---------------------------------------------------------------------------
# small process helpers


def _run(cmd: list[str], *, check: bool = True, env: dict | None = None,
         input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, input=input,
                              timeout=timeout)
    except FileNotFoundError as exc:
        raise TestbedError(f"command not found: {cmd[0]}") from exc
    except subprocess.TimeoutExpired as exc:
        raise TestbedError(f"timed out after {timeout:.0f}s: {' '.join(cmd)}") from exc
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        last = err[-1] if err else f"exit status {proc.returncode}"
        raise TestbedError(f"{' '.join(cmd[:3])} failed: {last}")
    return proc


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _written_pid(path: Path) -> int | None:
    """The pid in ``path`` once the daemon has written it whole, else None.

    Slurm's daemons create the file (empty) and write ``"<pid>\\n"`` a moment later,
    so an empty or unterminated file means "not written yet", not "dead".
    """
    try:
        text = path.read_text()
    except OSError:
        return None
    if not re.fullmatch(r"\d+\n", text):
        return None
    return int(text)


def _read_pid(path: Path) -> int | None:
    """The live process named in ``path`` (None when there is none, or not yet)."""
    pid = _written_pid(path)
    return pid if pid is not None and _pid_alive(pid) else None


def _log_tail(log: Path, lines: int = 3) -> str:
    """The last ``lines`` lines of ``log``, one line, for an error message."""
    try:
        tail = log.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return " | ".join(line.strip() for line in tail)


def _ns_inode(path: str | Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _proc_ns(pid: str, kind: str) -> int | None:
    try:
        link = os.readlink(f"/proc/{pid}/ns/{kind}")  # e.g. "net:[4026532281]"
    except OSError:
        return None
    return int(link[link.index("[") + 1:-1])


def _all_pids() -> list[str]:
    return [p for p in os.listdir("/proc") if p.isdigit()]


def _proc_text(pid: str, name: str) -> str:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _kill_and_wait(pids: set[int], timeout: float = 3.0) -> None:
    """SIGTERM, then SIGKILL whatever is still there after ``timeout``."""
    me = os.getpid()
    pids = {p for p in pids if p != me}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = {p for p in pids if _pid_alive(p)}
            if not pids:
                return
            time.sleep(0.02)


def _wait_for(what: str, predicate, timeout: float, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            hint = f" (see {log})" if log else ""
            raise TestbedError(f"timed out after {timeout:.0f}s waiting for {what}{hint}")
        time.sleep(0.02)


def _port_open(addr: str, port: int) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=0.5):
            return True
    except OSError:
        return False


def _port_free(port: int, addr: str = "0.0.0.0") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, port))
        except OSError:
            return False
    return True


def _mounts() -> list[str]:
    """Mount points of this mount namespace, from /proc/self/mountinfo."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            points.append(point.replace("\\040", " "))
    return points


# ---------------------------------------------------------------------------


class Testbed:
    """A Slurm cluster of ``nodes`` compute nodes in namespaces on this machine.

    >>> tb = Testbed(nodes=2)          # doctest: +SKIP
    >>> tb.up()                         # seconds; idempotent
    >>> subprocess.run(["sinfo"], env=tb.environ())
    >>> tb.down()                       # no process, namespace, link or mount left
    """

    __test__ = False  # not a pytest test class

    def __init__(self, nodes: int = 2, accounting: bool = True,
                 state_dir: str | os.PathLike | None = None, policy: bool = True):
        self.nodes: list[Node] = node_layout(nodes)
        self.accounting = accounting
        self.policy = policy
        self.state_dir = Path(state_dir or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)
        self.state_dir = self.state_dir.absolute()
        self.host = socket.gethostname().split(".")[0]

    # -- public facts ------------------------------------------------------

    @classmethod
    def from_state(cls, state_dir: str | os.PathLike | None = None) -> Testbed:
        """The testbed as last brought up in ``state_dir`` (defaults if never)."""
        sd = Path(state_dir or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)
        try:
            saved = json.loads((sd / "testbed.json").read_text())
        except (FileNotFoundError, ValueError):
            return cls(state_dir=sd)
        return cls(nodes=saved["nodes"], accounting=saved["accounting"],
                   policy=saved.get("policy", True), state_dir=sd)

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    @property
    def node_addrs(self) -> dict[str, str]:
        return {n.name: n.addr for n in self.nodes}

    @property
    def partitions(self) -> dict[str, list[str]]:
        parts: dict[str, list[str]] = {}
        for n in self.nodes:
            parts.setdefault(n.partition.name, []).append(n.name)
        return parts

    @property
    def default_partition(self) -> str:
        return A100_PARTITION.name

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def ssh_config(self) -> Path:
        return self.state_dir / "ssh" / "ssh_config"

    @property
    def ssh_key(self) -> Path:
        return self.state_dir / "ssh" / "id_ed25519"

    @property
    def scratch(self) -> Path:
        """Shared directory visible on the host and on every node (not /tmp)."""
        return self.state_dir / "scratch"

    @property
    def etc(self) -> Path:
        return self.state_dir / "etc"

    @property
    def munge_socket(self) -> Path:
        return self.state_dir / "munge" / "munge.socket"

    @property
    def modulefiles_dir(self) -> Path:
        """A copy of the package's modulefiles in the state dir: the repository may sit under
        /tmp, which is private to each node, so the nodes read this copy."""
        return self.state_dir / "modulefiles"

    def env(self) -> dict[str, str]:
        """Variables to add to a process's environment to use the testbed."""
        modulepath = os.environ.get("MODULEPATH", "")
        mine = {str(self.modulefiles_dir), str(MODULEFILES_DIR)}
        parts = [str(self.modulefiles_dir)] + [p for p in modulepath.split(":")
                                               if p and p not in mine]
        return {
            "SLURM_CONF": str(self.slurm_conf),
            STATE_DIR_ENV: str(self.state_dir),
            "MODULEPATH": ":".join(parts),
            "HPCPROV_TESTBED_SSH_CONFIG": str(self.ssh_config),
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        }

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """A full environment (``base`` or os.environ) plus :meth:`env`."""
        merged = dict(os.environ if base is None else base)
        merged.update(self.env())
        # pyenv's shims cd into PYENV_DIR (the caller's cwd), which may not exist on a node
        merged.pop("PYENV_DIR", None)
        return merged

    def node_command(self, node: str, argv: list[str]) -> list[str]:
        """argv prefixed so it runs inside ``node``'s namespaces (as root)."""
        n = self._node(node)
        ns = self.state_dir / "ns"
        return ["nsenter", f"--net=/run/netns/{n.netns}", f"--mount={ns / (n.name + '.mnt')}",
                f"--uts={ns / (n.name + '.uts')}", "--wd=/", "--", *argv]

    def run_on(self, node: str, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        """subprocess.run ``argv`` inside ``node`` with the testbed environment."""
        kwargs.setdefault("env", self.environ())
        return subprocess.run(self.node_command(node, argv), **kwargs)

    # -- checks --------------------------------------------------------------

    def problems(self) -> list[str]:
        """Why the testbed cannot be brought up here ([] if it can)."""
        probs = []
        if os.geteuid() != 0:
            probs.append("must run as root (it creates network namespaces and starts "
                         "Slurm daemons)")
        cmds = REQUIRED_COMMANDS + (ACCOUNTING_COMMANDS if self.accounting else [])
        missing = sorted({pkg for cmd, pkg in cmds if not shutil.which(cmd, path=_sbin_path())})
        if not os.path.exists(LMOD_INIT):
            missing.append("lmod")
        if missing:
            probs.append("missing packages: " + " ".join(missing)
                         + " (install with: bash testbed/install-deps.sh)")
        sd = str(self.state_dir)
        for private in ("/tmp", "/dev/shm", "/run"):
            if sd == private or sd.startswith(private + "/"):
                probs.append(f"state dir {sd} must not be under {private} "
                             "(node-local on the compute nodes)")
        return probs

    def _check(self) -> None:
        probs = self.problems()
        if probs:
            raise TestbedError("; ".join(probs))

    # -- status --------------------------------------------------------------

    def status(self) -> dict:
        """What is running. ``status()["up"]`` is True when the cluster is usable."""
        run = self.state_dir / "run"
        saved = self._saved()
        st: dict = {
            "state_dir": str(self.state_dir),
            "config": saved,
            "munged": _read_pid(run / "munged.pid"),
            "slurmctld": _read_pid(run / "slurmctld.pid"),
            "slurmdbd": _read_pid(run / "slurmdbd.pid"),
            "mariadb": _read_pid(run / "mariadb.pid"),
            "bridge": os.path.exists(f"/sys/class/net/{BRIDGE}"),
            "nodes": [],
        }
        node_state = self._sinfo_states() if st["slurmctld"] else {}
        for n in self.nodes:
            ndir = self.state_dir / "nodes" / n.name
            st["nodes"].append({
                "name": n.name,
                "addr": n.addr,
                "partition": n.partition.name,
                "gpus": n.gpus,
                "netns": n.netns,
                "netns_exists": os.path.exists(f"/run/netns/{n.netns}"),
                "slurmd": _read_pid(ndir / "slurmd.pid"),
                "sshd": _read_pid(ndir / "sshd.pid"),
                "state": node_state.get(n.name),
            })
        usable = bool(
            saved
            and saved.get("nodes") == len(self.nodes)
            and saved.get("accounting") == self.accounting
            and saved.get("policy") == self.policy
            and st["munged"] and st["slurmctld"] and st["bridge"]
            and (st["slurmdbd"] and st["mariadb"] if self.accounting else True)
            and all(n["slurmd"] and n["sshd"] and n["netns_exists"]
                    and (n["state"] or "").rstrip("*") in ("idle", "mixed", "allocated")
                    for n in st["nodes"])
        )
        st["up"] = usable
        st["env"] = self.env()
        return st

    def _saved(self) -> dict | None:
        try:
            return json.loads((self.state_dir / "testbed.json").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _sinfo_states(self) -> dict[str, str]:
        try:
            proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True,
                                  text=True, env=self.environ(), timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return {}
        states = {}
        for line in proc.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1].lower()
        return states

    # -- bring-up --------------------------------------------------------------

    def up(self, timeout: float = 60) -> Testbed:
        """Bring the cluster up (or leave it be if it already is, as configured)."""
        self._check()
        if self.status()["up"]:
            return self
        if self._anything_left():
            self.down()
        ports = [SLURMCTLD_PORT] + ([SLURMDBD_PORT, MARIADB_PORT] if self.accounting else [])
        busy = [str(p) for p in ports if not _port_free(p)]
        if busy:
            raise TestbedError(f"port(s) {', '.join(busy)} already in use on this machine "
                               "(another Slurm or testbed running?)")
        try:
            self._prepare_files()
            self._start_munge()
            self._start_network()
            self._start_node_namespaces()
            if self.accounting:
                self._start_accounting(timeout)
            self._start_slurmctld(timeout)
            for n in self.nodes:
                self._start_node_daemons(n)
            self._wait_nodes_idle(timeout)
        except BaseException:
            with contextlib.suppress(TestbedError):
                self.down()
            raise
        (self.state_dir / "testbed.json").write_text(json.dumps({
            "nodes": len(self.nodes), "accounting": self.accounting, "policy": self.policy,
            "host": self.host, "started": time.time(),
        }, indent=1) + "\n")
        return self

    def _prepare_files(self) -> None:
        sd = self.state_dir
        for sub in ("etc", "run", "log", "ctld", "ns", "munge", "ssh", "dev", "scratch"):
            (sd / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(sd, 0o755)
        os.chmod(sd / "scratch", 0o1777)
        # a fresh controller numbers jobs from 1 again, so each node's spool starts empty:
        # a step killed in an earlier run leaves its sockets there (stepd.slurm.pmix.1.0),
        # and the next step 1.0 with --mpi=pmix would fail to bind it
        for n in self.nodes:
            spool = sd / "nodes" / n.name / "spool"
            shutil.rmtree(spool, ignore_errors=True)
            spool.mkdir(parents=True)
        # stale runtime files from an earlier run (a killed slurmd leaves its pid file,
        # which would read as "died" before the new one writes its own);
        # logs of the previous run -> *.log.prev
        for f in [*(sd / "run").iterdir(), *(sd / "nodes").glob("*/*.pid")]:
            f.unlink()
        for log in [*(sd / "log").glob("*.log"), *(sd / "nodes").glob("*/*.log")]:
            log.replace(log.with_name(log.name + ".prev"))
        shutil.rmtree(sd / "ctld")
        (sd / "ctld").mkdir()

        # munge key (kept across runs)
        os.chmod(sd / "munge", 0o711)
        key = sd / "munge" / "munge.key"
        if not key.exists():
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(1024))

        # ssh: one host key for all nodes, one client key for root
        ssh = sd / "ssh"
        os.chmod(ssh, 0o700)
        for keyfile in ("ssh_host_ed25519_key", "id_ed25519"):
            if not (ssh / keyfile).exists():
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                      f"hpcprov-testbed-{keyfile}", "-f", str(ssh / keyfile)])
        (ssh / "authorized_keys").write_text((ssh / "id_ed25519.pub").read_text())
        os.chmod(ssh / "authorized_keys", 0o600)

        # fake GPUs: character devices (copies of /dev/null) for gres.conf
        max_gpus = max(n.gpus for n in self.nodes)
        for i in range(max_gpus):
            dev = sd / "dev" / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))

        self._write_configs()

    def _subst(self, template: str, **extra: str) -> str:
        text = (PKG_DIR / template).read_text()
        values = {
            "state": str(self.state_dir),
            "cluster": CLUSTER_NAME,
            "ctl_host": self.host,
            "ctl_addr": HOST_ADDR,
            "ctl_port": str(SLURMCTLD_PORT),
            "slurmd_port": str(SLURMD_PORT),
            "dbd_port": str(SLURMDBD_PORT),
            "db_port": str(MARIADB_PORT),
            "munge_socket": str(self.munge_socket),
        }
        values.update(extra)
        return string.Template(text).substitute(values)

    def _write_configs(self) -> None:
        etc = self.etc
        node_lines = []
        for n in self.nodes:
            p = n.partition
            node_lines.append(
                f"NodeName={n.name} NodeAddr={n.addr} NodeHostname={n.name} "
                f"Sockets={p.sockets} CoresPerSocket={p.cores_per_socket} ThreadsPerCore=1 "
                f"RealMemory={p.memory_mb} Gres=gpu:{p.gpus_per_node} State=UNKNOWN")
        part_lines = []
        for name, members in self.partitions.items():
            p = A100_PARTITION if name == A100_PARTITION.name else V100_PARTITION
            part_lines.append(
                f"PartitionName={name} Nodes={hostlist(members)} "
                f"Default={'YES' if p.default else 'NO'} MaxTime={p.max_time} State=UP")
        if len(self.nodes) > 2:  # every node in one partition: link searches need 3+
            part_lines.append(f"PartitionName={ALL_PARTITION} Nodes={hostlist(self.node_names)}"
                              f" Default=NO MaxTime={A100_PARTITION.max_time} State=UP")
        if self.accounting:
            accounting = "\n".join([
                "AccountingStorageType=accounting_storage/slurmdbd",
                f"AccountingStorageHost={HOST_ADDR}",
                f"AccountingStoragePort={SLURMDBD_PORT}",
                # with a non-default munge socket the dbd connection needs it too
                f"AccountingStoragePass=socket={self.munge_socket}",
                "AccountingStorageTRES=gres/gpu",
                "AccountingStoreFlags=job_comment,job_script",
                "JobAcctGatherFrequency=30",
            ])
        else:
            accounting = "AccountingStorageType=accounting_storage/none"
        job_submit = "JobSubmitPlugins=lua" if self.policy else "# JobSubmitPlugins: none"
        (etc / "slurm.conf").write_text(self._subst(
            "slurm.conf.in", nodes="\n".join(node_lines), partitions="\n".join(part_lines),
            accounting=accounting, job_submit=job_submit))

        gres = ["# Generated by hpcprov.testbed: fake GPUs (character devices, copies of "
                "/dev/null)", "AutoDetect=off"]
        for n in self.nodes:
            gres.append(f"NodeName={n.name} Name=gpu "
                        f"File={self.state_dir}/dev/nvidia[0-{n.gpus - 1}]")
        (etc / "gres.conf").write_text("\n".join(gres) + "\n")

        lua = etc / "job_submit.lua"
        if self.policy:
            lua.write_text((PKG_DIR / "job_submit.lua.in").read_text())
        elif lua.exists():
            lua.unlink()

        dbd = etc / "slurmdbd.conf"
        if self.accounting:
            if dbd.exists():
                dbd.unlink()
            fd = os.open(dbd, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self._subst("slurmdbd.conf.in"))
        elif dbd.exists():
            dbd.unlink()

        hosts = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
                 f"{HOST_ADDR}\t{self.host} hpctb-ctl"]
        hosts += [f"{n.addr}\t{n.name}" for n in self.nodes]
        (etc / "hosts").write_text("# Generated by hpcprov.testbed\n" + "\n".join(hosts) + "\n")

        entries = "\n".join(f"Host {n.name}\n    HostName {n.addr}\n" for n in self.nodes)
        self.ssh_config.write_text(self._subst("ssh_config.in", host_entries=entries))
        os.chmod(self.ssh_config, 0o644)
        path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        for n in self.nodes:
            (self.state_dir / "nodes" / n.name / "sshd_config").write_text(
                self._subst("sshd_config.in", addr=n.addr, node=n.name, path=path))

        try:
            base = Path("/etc/lmod/modulespath").read_text()
        except FileNotFoundError:
            base = ""
        shutil.rmtree(self.modulefiles_dir, ignore_errors=True)
        shutil.copytree(MODULEFILES_DIR, self.modulefiles_dir)
        (etc / "lmod-modulespath").write_text(
            base.rstrip("\n") + "\n# hpcprov testbed: KISTI Neuron-like modules\n"
            + f"{self.modulefiles_dir}\n")

    def _daemon_env(self) -> dict[str, str]:
        env = self.environ()
        env["PATH"] = _sbin_path()
        return env

    def _start_munge(self) -> None:
        sd = self.state_dir / "munge"
        _run(["munged", "--force", f"--socket={self.munge_socket}",
              f"--key-file={sd / 'munge.key'}", f"--pid-file={self.state_dir / 'run/munged.pid'}",
              f"--log-file={self.state_dir / 'log/munged.log'}",
              f"--seed-file={sd / 'munged.seed'}"], env=self._daemon_env())
        _wait_for("munged", lambda: self.munge_socket.exists(), 10,
                  self.state_dir / "log/munged.log")

    def _start_network(self) -> None:
        cmds = [
            f"link add {BRIDGE} type bridge stp_state 0 forward_delay 0",
            f"addr add {HOST_ADDR}/24 dev {BRIDGE}",
            f"link set {BRIDGE} up",
        ]
        for n in self.nodes:
            cmds += [
                f"netns add {n.netns}",
                f"link add {n.veth} type veth peer name eth0 netns {n.netns}",
                f"link set {n.veth} master {BRIDGE} up",
            ]
        _run(["ip", "-batch", "-"], input="\n".join(cmds) + "\n")
        for n in self.nodes:
            # no default route on purpose: name lookups fail fast instead of hanging
            _run(["ip", "-n", n.netns, "-batch", "-"], input="\n".join([
                "link set lo up",
                f"addr add {n.addr}/24 dev eth0",
                "link set eth0 up",
            ]) + "\n")

    def _start_node_namespaces(self) -> None:
        ns = self.state_dir / "ns"
        if str(ns) not in _mounts():
            _run(["mount", "--bind", str(ns), str(ns)])
            _run(["mount", "--make-private", str(ns)])
        for n in self.nodes:
            mnt, uts = ns / f"{n.name}.mnt", ns / f"{n.name}.uts"
            mnt.touch()
            uts.touch()
            _run(["unshare", f"--mount={mnt}", f"--uts={uts}", "--propagation", "private",
                  "--", "sh", str(PKG_DIR / "node-setup.sh"), str(self.state_dir), n.name])

    def _start_accounting(self, timeout: float) -> None:
        sd = self.state_dir
        db = sd / "db"
        db.mkdir(exist_ok=True)
        if str(db) not in _mounts():
            _run(["mount", "-t", "tmpfs", "-o", "size=1g,mode=700", "hpctb-db", str(db)])
        common = ["--no-defaults", f"--datadir={db / 'data'}", "--user=root"]
        _run(["mariadb-install-db", *common, "--auth-root-authentication-method=normal",
              "--skip-test-db", "--skip-name-resolve", "--innodb-log-file-size=16M"],
             timeout=timeout, env=self._daemon_env())
        with open(sd / "log" / "mariadb.log", "ab") as log:
            proc = subprocess.Popen(
                ["mariadbd", *common, f"--socket={db / 'mysqld.sock'}", f"--port={MARIADB_PORT}",
                 "--bind-address=127.0.0.1", f"--pid-file={sd / 'run/mariadb.pid'}",
                 "--skip-grant-tables", "--skip-name-resolve", "--skip-log-bin",
                 "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=16M",
                 "--innodb-flush-log-at-trx-commit=0", "--max-connections=200"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, env=self._daemon_env())
        (sd / "run" / "mariadb.pid").write_text(f"{proc.pid}\n")

        def db_ready():
            if proc.poll() is not None:
                raise TestbedError(f"mariadbd exited with {proc.returncode} "
                                   f"(see {sd / 'log/mariadb.log'})")
            return _port_open("127.0.0.1", MARIADB_PORT)

        _wait_for("MariaDB", db_ready, timeout, sd / "log/mariadb.log")
        _run(["slurmdbd"], env=self._daemon_env())
        dbd_log, dbd_pid = sd / "log/slurmdbd.log", sd / "run/slurmdbd.pid"

        def dbd_ready():
            self._daemon_died("slurmdbd", dbd_pid, dbd_log)
            return dbd_pid.exists() and _port_open(HOST_ADDR, SLURMDBD_PORT)

        _wait_for("slurmdbd", dbd_ready, timeout, dbd_log)

    def _daemon_died(self, name: str, pidfile: Path, log: Path) -> None:
        """Raise if ``pidfile`` names, in full, a process that is gone (the daemon died)."""
        pid = _written_pid(pidfile)
        if pid is not None and not _pid_alive(pid):
            tail = _log_tail(log)
            raise TestbedError(f"{name} died during start-up (see {log})"
                               + (f"; its log ends: {tail}" if tail else ""))

    def _start_slurmctld(self, timeout: float) -> None:
        _run(["slurmctld", "-c", "-f", str(self.slurm_conf)], env=self._daemon_env())
        log = self.state_dir / "log/slurmctld.log"
        pidfile = self.state_dir / "run/slurmctld.pid"

        def ready():
            self._daemon_died("slurmctld", pidfile, log)
            return pidfile.exists() and _port_open(HOST_ADDR, SLURMCTLD_PORT)

        _wait_for("slurmctld", ready, timeout, log)

    def _start_node_daemons(self, n: Node) -> None:
        env = self._daemon_env()
        _run(self.node_command(n.name, ["slurmd", "-N", n.name, "-f", str(self.slurm_conf)]),
             env=env)
        ndir = self.state_dir / "nodes" / n.name
        _run(self.node_command(n.name, [shutil.which("sshd", path=_sbin_path()) or "sshd",
                                        "-f", str(ndir / "sshd_config")]), env=env)

    def _wait_nodes_idle(self, timeout: float) -> None:
        names = set(self.node_names)

        def idle():
            self._daemon_died("slurmctld", self.state_dir / "run/slurmctld.pid",
                              self.state_dir / "log/slurmctld.log")
            for n in self.nodes:
                ndir = self.state_dir / "nodes" / n.name
                self._daemon_died(f"slurmd on {n.name}", ndir / "slurmd.pid",
                                  ndir / "slurmd.log")
            states = self._sinfo_states()
            return all(states.get(n, "").rstrip("*") == "idle" for n in names)

        _wait_for("compute nodes to become idle", idle, timeout,
                  self.state_dir / "log/slurmctld.log")

    # -- faults (for tests of what hpcprov does when a node or a link is bad) -------

    def _node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise TestbedError(f"no node {name!r} in this testbed ({', '.join(self.node_names)})")

    def kill_node(self, name: str) -> None:
        """Power a node off: its link goes down first (so peers get no FIN or RST, as
        with a real crash), then every process in its namespaces is killed."""
        n = self._node(name)
        _run(["ip", "link", "set", n.veth, "down"])
        net = _ns_inode(f"/run/netns/{n.netns}")
        mnt = _ns_inode(self.state_dir / "ns" / f"{n.name}.mnt")
        pids = {int(p) for p in _all_pids()
                if _proc_ns(p, "net") == net or _proc_ns(p, "mnt") == mnt}
        _kill_and_wait(pids, timeout=0.5)

    def slow_link(self, name: str, rate: str = "50mbit") -> None:
        """Shape a node's link both ways with a token bucket (tc tbf) to ``rate``."""
        n = self._node(name)
        if not re.fullmatch(r"\d+(\.\d+)?[kmg]?bit", rate):
            raise TestbedError(f"rate {rate!r}: use a tc rate such as 50mbit")
        tbf = ["root", "tbf", "rate", rate, "burst", "64kb", "latency", "400ms"]
        _run(["tc", "qdisc", "replace", "dev", n.veth, *tbf])
        _run(["ip", "netns", "exec", n.netns, "tc", "qdisc", "replace", "dev", "eth0", *tbf])

    def clear_link(self, name: str) -> None:
        """Undo slow_link()."""
        n = self._node(name)
        _run(["tc", "qdisc", "del", "dev", n.veth, "root"], check=False)
        _run(["ip", "netns", "exec", n.netns, "tc", "qdisc", "del", "dev", "eth0", "root"],
             check=False)

    # -- tear-down -------------------------------------------------------------

    def _testbed_netns(self) -> list[str]:
        try:
            return sorted(f for f in os.listdir("/run/netns") if f.startswith(NETNS_PREFIX))
        except FileNotFoundError:
            return []

    def _testbed_pids(self) -> set[int]:
        """Every process that belongs to the testbed (node namespaces + host daemons)."""
        ns_dir = self.state_dir / "ns"
        net_inodes = {_ns_inode(f"/run/netns/{name}") for name in self._testbed_netns()}
        net_inodes.discard(None)
        mnt_inodes = set()
        if ns_dir.exists():
            plain_dev = os.stat(ns_dir).st_dev
            for f in ns_dir.glob("*.mnt"):
                st = os.stat(f)
                if st.st_dev != plain_dev:  # a bind-mounted namespace, not the plain file
                    mnt_inodes.add(st.st_ino)
        sd = str(self.state_dir)
        daemons = {"slurmctld", "slurmdbd", "munged", "mariadbd", "mysqld", "slurmd",
                   "slurmstepd", "sshd"}
        pids = set()
        for pid in _all_pids():
            if _proc_ns(pid, "net") in net_inodes or _proc_ns(pid, "mnt") in mnt_inodes:
                pids.add(int(pid))
                continue
            comm = _proc_text(pid, "comm").strip()
            ours = sd in _proc_text(pid, "cmdline") or f"={sd}/" in _proc_text(pid, "environ")
            if (comm in daemons or comm.startswith("slurmstepd")) and ours:
                pids.add(int(pid))
        for name in ("munged", "slurmctld", "slurmdbd", "mariadb"):
            pid = _read_pid(self.state_dir / "run" / f"{name}.pid")
            if pid:
                pids.add(pid)
        pids.discard(os.getpid())
        return pids

    def _testbed_mounts(self) -> list[str]:
        sd = str(self.state_dir)
        return [m for m in _mounts() if m == sd or m.startswith(sd + "/")]

    def _testbed_links(self) -> list[str]:
        try:
            return sorted(x for x in os.listdir("/sys/class/net") if x.startswith("hpctb"))
        except FileNotFoundError:
            return []

    def _anything_left(self) -> bool:
        return bool(self._testbed_pids() or self._testbed_netns() or self._testbed_links()
                    or self._testbed_mounts())

    def leftovers(self) -> dict[str, list]:
        """What of the testbed still exists (all lists empty after down())."""
        return {
            "processes": sorted(self._testbed_pids()),
            "netns": self._testbed_netns(),
            "links": self._testbed_links(),
            "mounts": self._testbed_mounts(),
        }

    def down(self) -> None:
        """Stop everything the testbed started; safe to call when nothing runs."""
        if os.geteuid() != 0:
            raise TestbedError("must run as root to tear the testbed down")
        errors = []
        # 1. everything inside the node namespaces (jobs, slurmstepd, slurmd, sshd)
        #    and the host daemons
        _kill_and_wait(self._testbed_pids())
        leftover = {p for p in self._testbed_pids() if _pid_alive(p)}
        if leftover:
            errors.append(f"processes still running: {sorted(leftover)}")
        # 2. mounts: namespace files, the private ns dir, the database tmpfs
        for m in sorted(self._testbed_mounts(), key=len, reverse=True):
            proc = _run(["umount", m], check=False)
            if proc.returncode != 0:
                proc = _run(["umount", "-l", m], check=False)
                if proc.returncode != 0:
                    errors.append(f"umount {m}: {proc.stderr.strip()}")
        # 3. network: deleting a netns deletes its veth end, and with it the host end
        for name in self._testbed_netns():
            proc = _run(["ip", "netns", "del", name], check=False)
            if proc.returncode != 0:
                errors.append(f"ip netns del {name}: {proc.stderr.strip()}")
        for link in self._testbed_links():
            if os.path.exists(f"/sys/class/net/{link}"):
                _run(["ip", "link", "del", link], check=False)
        for f in ("testbed.json",):
            (self.state_dir / f).unlink(missing_ok=True)
        if (self.state_dir / "run").exists():
            for f in (self.state_dir / "run").iterdir():
                f.unlink()
        left = {k: v for k, v in self.leftovers().items() if v}
        if left:
            errors.append(f"left behind: {left}")
        if errors:
            raise TestbedError("tear-down incomplete: " + "; ".join(errors))

    # -- helpers -----------------------------------------------------------------

    def _node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise TestbedError(f"no such node: {name} (nodes: {', '.join(self.node_names)})")

    def describe(self) -> dict:
        """Static facts (names, addresses, partitions, env) as a dict."""
        return {
            "cluster": CLUSTER_NAME,
            "controller": {"host": self.host, "addr": HOST_ADDR, "port": SLURMCTLD_PORT},
            "nodes": [{"name": n.name, "addr": n.addr, "partition": n.partition.name,
                       "gpus": n.gpus, "netns": n.netns} for n in self.nodes],
            "partitions": [
                {**asdict(A100_PARTITION if p == A100_PARTITION.name else V100_PARTITION),
                 "nodes": hostlist(members)}
                for p, members in self.partitions.items()],
            "accounting": self.accounting,
            "policy": self.policy,
            "state_dir": str(self.state_dir),
            "scratch": str(self.scratch),
            "ssh_config": str(self.ssh_config),
            "modulefiles": str(self.modulefiles_dir),
            "env": self.env(),
        }


def _sbin_path() -> str:
    path = os.environ.get("PATH", "")
    extra = [d for d in ("/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/bin",
                         "/bin") if d not in path.split(":")]
    return ":".join([p for p in [path, *extra] if p])

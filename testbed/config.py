"""Every file the testbed generates, rendered as text from the cluster's shape.

Pure: no root, no processes, nothing written. :func:`render` returns
``{path relative to the state dir: text}``; ``statedir.write_files`` puts them on disk.
The templates (``*.in``) live next to this module.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

import hostlist

from .layout import (
    A100_PARTITION,
    ALL_PARTITION,
    CLUSTER_NAME,
    HOST_ADDR,
    MARIADB_PORT,
    PARTITIONS,
    SLURMCTLD_PORT,
    SLURMD_PORT,
    SLURMDBD_PORT,
    STATE_DIR_ENV,
    Node,
    node_layout,
)

PKG_DIR = Path(__file__).resolve().parent
MODULEFILES_DIR = PKG_DIR / "modulefiles"

# Rendered only when the option is on; a copy left from an earlier run is removed.
OPTIONAL_FILES = ("etc/job_submit.lua", "etc/slurmdbd.conf")
# Readable by root only: slurmdbd refuses a config others can read (it holds a password).
PRIVATE_FILES = ("etc/slurmdbd.conf",)


@dataclass(frozen=True)
class ClusterShape:
    """What the generated files depend on: the nodes, the options, where the state lives
    and the controller's host name. The paths below are all inside ``state_dir``."""

    nodes: tuple[Node, ...]
    state_dir: Path
    ctl_host: str
    accounting: bool = True
    policy: bool = True

    @classmethod
    def build(cls, nodes: int, state_dir: Path, ctl_host: str, accounting: bool = True,
              policy: bool = True) -> ClusterShape:
        """The shape of a testbed of ``nodes`` compute nodes (see ``layout.node_layout``)."""
        return cls(tuple(node_layout(nodes)), state_dir, ctl_host, accounting, policy)

    @property
    def node_names(self) -> list[str]:
        """Compute node names, in order."""
        return [n.name for n in self.nodes]

    @property
    def partitions(self) -> dict[str, list[str]]:
        """Partition name -> its nodes (the node types' partitions, not ``all``)."""
        parts: dict[str, list[str]] = {}
        for n in self.nodes:
            parts.setdefault(n.partition.name, []).append(n.name)
        return parts

    @property
    def etc(self) -> Path:
        """The generated Slurm config directory (``/etc/slurm`` on the nodes)."""
        return self.state_dir / "etc"

    @property
    def slurm_conf(self) -> Path:
        """The generated slurm.conf."""
        return self.etc / "slurm.conf"

    @property
    def ssh_config(self) -> Path:
        """ssh client config (``/etc/ssh/ssh_config`` on the nodes)."""
        return self.state_dir / "ssh" / "ssh_config"

    @property
    def ssh_key(self) -> Path:
        """root's testbed ssh key."""
        return self.state_dir / "ssh" / "id_ed25519"

    @property
    def scratch(self) -> Path:
        """Shared directory visible on the host and on every node (not /tmp)."""
        return self.state_dir / "scratch"

    @property
    def munge_socket(self) -> Path:
        """The testbed's own munged socket."""
        return self.state_dir / "munge" / "munge.socket"

    @property
    def modulefiles_dir(self) -> Path:
        """A copy of the package's modulefiles in the state dir: the repository may sit under
        /tmp, which is private to each node, so the nodes read this copy."""
        return self.state_dir / "modulefiles"

    def node_dir(self, node: str) -> Path:
        """A node's own directory: slurmd/sshd pid files and logs, spool, sshd_config."""
        return self.state_dir / "nodes" / node


def render(shape: ClusterShape, *, path: str, lmod_base: str) -> dict[str, str]:
    """Every generated file, by path relative to ``shape.state_dir``.

    ``path`` is the PATH ssh sessions on the nodes get; ``lmod_base`` the machine's
    ``/etc/lmod/modulespath``, to which the testbed's modulefiles are added.
    """
    files = {
        "etc/slurm.conf": slurm_conf(shape),
        "etc/gres.conf": gres_conf(shape),
        "etc/hosts": hosts(shape),
        "etc/lmod-modulespath": lmod_modulespath(shape, lmod_base),
        "ssh/ssh_config": ssh_config(shape),
    }
    if shape.policy:
        files["etc/job_submit.lua"] = job_submit_lua()
    if shape.accounting:
        files["etc/slurmdbd.conf"] = slurmdbd_conf(shape)
    for n in shape.nodes:
        files[f"nodes/{n.name}/sshd_config"] = sshd_config(shape, n, path)
    return files


def client_env(shape: ClusterShape, modulepath: str) -> dict[str, str]:
    """Variables to add to a process's environment to use the testbed.

    ``modulepath`` is the current MODULEPATH; the testbed's modulefiles go first, and the
    package's own copy (which the nodes may not see) is dropped.
    """
    mine = {str(shape.modulefiles_dir), str(MODULEFILES_DIR)}
    parts = [str(shape.modulefiles_dir)] + [p for p in modulepath.split(":")
                                            if p and p not in mine]
    return {
        "SLURM_CONF": str(shape.slurm_conf),
        STATE_DIR_ENV: str(shape.state_dir),
        "MODULEPATH": ":".join(parts),
        "HPCPROV_TESTBED_SSH_CONFIG": str(shape.ssh_config),
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }


# -- the files ----------------------------------------------------------------


def _template(shape: ClusterShape, name: str, **extra: str) -> str:
    """Template ``name`` with the cluster's values and ``extra`` substituted."""
    values = {
        "state": str(shape.state_dir),
        "cluster": CLUSTER_NAME,
        "ctl_host": shape.ctl_host,
        "ctl_addr": HOST_ADDR,
        "ctl_port": str(SLURMCTLD_PORT),
        "slurmd_port": str(SLURMD_PORT),
        "dbd_port": str(SLURMDBD_PORT),
        "db_port": str(MARIADB_PORT),
        "munge_socket": str(shape.munge_socket),
        **extra,
    }
    return string.Template((PKG_DIR / name).read_text()).substitute(values)


def node_lines(shape: ClusterShape) -> list[str]:
    """slurm.conf's NodeName lines: what each node advertises."""
    lines = []
    for n in shape.nodes:
        p = n.partition
        lines.append(
            f"NodeName={n.name} NodeAddr={n.addr} NodeHostname={n.name} "
            f"Sockets={p.sockets} CoresPerSocket={p.cores_per_socket} ThreadsPerCore=1 "
            f"RealMemory={p.memory_mb} Gres=gpu:{p.gpus_per_node} Features=gpu,{p.feature} "
            "State=UNKNOWN")
    return lines


def partition_lines(shape: ClusterShape) -> list[str]:
    """slurm.conf's PartitionName lines; with 3+ nodes also ``all`` (every node)."""
    lines = []
    for name, members in shape.partitions.items():
        p = PARTITIONS[name]
        lines.append(
            f"PartitionName={name} Nodes={hostlist.collect_hostlist(members)} "
            f"Default={'YES' if p.default else 'NO'} MaxTime={p.max_time} State=UP")
    if len(shape.nodes) > 2:  # every node in one partition: link searches need 3+
        lines.append(f"PartitionName={ALL_PARTITION} "
                     f"Nodes={hostlist.collect_hostlist(shape.node_names)} "
                     f"Default=NO MaxTime={A100_PARTITION.max_time} State=UP")
    return lines


def accounting_lines(shape: ClusterShape) -> list[str]:
    """slurm.conf's accounting settings: slurmdbd, or none."""
    if not shape.accounting:
        return ["AccountingStorageType=accounting_storage/none"]
    return [
        "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStorageHost={HOST_ADDR}",
        f"AccountingStoragePort={SLURMDBD_PORT}",
        # with a non-default munge socket the dbd connection needs it too
        f"AccountingStoragePass=socket={shape.munge_socket}",
        "AccountingStorageTRES=gres/gpu",
        "AccountingStoreFlags=job_comment,job_script",
        "JobAcctGatherFrequency=30",
    ]


def slurm_conf(shape: ClusterShape) -> str:
    """slurm.conf, from slurm.conf.in."""
    job_submit = "JobSubmitPlugins=lua" if shape.policy else "# JobSubmitPlugins: none"
    return _template(shape, "slurm.conf.in", nodes="\n".join(node_lines(shape)),
                     partitions="\n".join(partition_lines(shape)),
                     accounting="\n".join(accounting_lines(shape)), job_submit=job_submit)


def gres_conf(shape: ClusterShape) -> str:
    """gres.conf: each node's fake GPUs (character devices, copies of /dev/null)."""
    lines = ["# Generated by hpcprov.testbed: fake GPUs (character devices, copies of "
             "/dev/null)", "AutoDetect=off"]
    lines += [f"NodeName={n.name} Name=gpu File={shape.state_dir}/dev/nvidia[0-{n.gpus - 1}]"
              for n in shape.nodes]
    return "\n".join(lines) + "\n"


def job_submit_lua() -> str:
    """job_submit.lua: Neuron's submit policy (--comment required, no --mem)."""
    return (PKG_DIR / "job_submit.lua.in").read_text()


def slurmdbd_conf(shape: ClusterShape) -> str:
    """slurmdbd.conf, from slurmdbd.conf.in."""
    return _template(shape, "slurmdbd.conf.in")


def hosts(shape: ClusterShape) -> str:
    """The nodes' /etc/hosts: localhost, the controller and every node by name and by its
    name on the "high-speed network" (``gpu01-ib``, the same link here)."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             f"{HOST_ADDR}\t{shape.ctl_host} hpctb-ctl"]
    lines += [f"{n.addr}\t{n.name} {n.fast_name}" for n in shape.nodes]
    return "# Generated by hpcprov.testbed\n" + "\n".join(lines) + "\n"


def ssh_config(shape: ClusterShape) -> str:
    """ssh client config: every node by both names, the testbed key, no host key checks."""
    entries = "\n".join(f"Host {n.name} {n.fast_name}\n    HostName {n.addr}\n"
                        for n in shape.nodes)
    return _template(shape, "ssh_config.in", host_entries=entries)


def sshd_config(shape: ClusterShape, node: Node, path: str) -> str:
    """One node's sshd config: its address, and ``path`` as PATH for ssh sessions."""
    return _template(shape, "sshd_config.in", addr=node.addr, node=node.name, path=path)


def lmod_modulespath(shape: ClusterShape, base: str) -> str:
    """The nodes' /etc/lmod/modulespath: the machine's (``base``) plus the testbed's."""
    return (base.rstrip("\n") + "\n# hpcprov testbed: KISTI Neuron-like modules\n"
            + f"{shape.modulefiles_dir}\n")

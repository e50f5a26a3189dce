"""Grid Engine (Son of Grid Engine 8.1.9, Debian's build) beside Slurm on the testbed's
nodes: every file it needs, rendered as text from the cluster's shape.

Pure, like ``config``: no root, no processes, nothing written. :func:`render` returns
``{path relative to the state dir: text}``; ``gridengine.GridEngine`` writes them, loads
some with ``spooldefaults`` before the qmaster starts and the rest with ``qconf``.

The cell lives in the state dir: ``SGE_ROOT=STATE/sge``, ``SGE_CELL=default``, classic
(plain file) spooling in ``STATE/sge/qmaster``, the execds' spool in ``STATE/sge/spool/<host>``.
``SGE_ROOT/bin/<arch>`` (and ``utilbin``, ``lib``) are links to the unpacked packages'
``/usr/lib/gridengine`` (:data:`BIN_DIR`), as SGE's own installer lays a root out.

What the cluster offers, mirroring the Slurm side:

* one cluster queue per node type, named like its Slurm partition (``amd_a100nv_8``,
  ``cas_v100_4``), on a host group of the same name (``@amd_a100nv_8``): slots = the cores
  the node type advertises, ``h_rt`` limit = the partition's MaxTime;
* parallel environments ``mpi`` (``$fill_up``), ``mpi_rr`` (``$round_robin``), ``mpi1``,
  ``mpi2``, ``mpi4``, ``mpi8`` (that many slots on each host) and ``smp``
  (``$pe_slots``), all with ``control_slaves TRUE`` (tight integration, ``qrsh -inherit``)
  and ``job_is_first_task FALSE`` (as Open MPI's ``mpirun`` wants it);
* a consumable ``gpu`` (per slot) with ``gpu=8`` on the A100 nodes and ``gpu=4`` on the V100
  nodes: ``qsub -pe mpi 2 -l gpu=8`` gets two slots on two hosts.
"""

from __future__ import annotations

import platform
import shlex
from dataclasses import dataclass
from pathlib import Path

from .config import ClusterShape
from .errors import TestbedError
from .layout import HOST_ADDR, PARTITIONS, SGE_EXECD_PORT, SGE_QMASTER_PORT, Node

# Where testbed/install-deps.sh unpacks Debian's gridengine-{common,client,exec,master}
# (not installed with dpkg: gridengine-client conflicts with slurm-wlm-torque, whose qsub
# the Slurm testbed needs). Debian's binaries load their spooling library from
# /usr/lib/gridengine (compiled in), which install-deps.sh links to BIN_DIR.
PREFIX = Path("/opt/hpcprov-testbed/gridengine")
BIN_DIR = PREFIX / "usr" / "lib" / "gridengine"
SHARE_DIR = PREFIX / "usr" / "share" / "gridengine"
COMPILED_IN_DIR = Path("/usr/lib/gridengine")

CELL = "default"
GPU_COMPLEX = "gpu"
ARCHES = {"x86_64": "lx-amd64", "aarch64": "lx-arm64"}


@dataclass(frozen=True)
class ParallelEnv:
    """A parallel environment: its name and how it spreads slots over hosts."""

    name: str
    allocation_rule: str


PARALLEL_ENVS = (ParallelEnv("mpi", "$fill_up"), ParallelEnv("mpi_rr", "$round_robin"),
                 ParallelEnv("smp", "$pe_slots"),
                 # a fixed number of slots on each host, as sites name them by it (mpi8: 8
                 # per host): a job of N nodes x R ranks asks -pe mpiR N*R and gets R on
                 # each of N hosts, whatever else runs (hpcprov's gridengine.pe "mpi{per_node}")
                 *(ParallelEnv(f"mpi{n}", str(n)) for n in (1, 2, 4, 8)))


def arch(machine: str | None = None) -> str:
    """SGE's architecture name for this machine (``lx-amd64``)."""
    machine = machine or platform.machine()
    try:
        return ARCHES[machine]
    except KeyError:
        raise TestbedError(f"Grid Engine on the testbed: no SGE architecture known for "
                           f"{machine!r} (known: {', '.join(ARCHES)})") from None


# -- paths ------------------------------------------------------------------------


def sge_root(shape: ClusterShape) -> Path:
    """SGE_ROOT: the testbed's own Grid Engine root."""
    return shape.state_dir / "sge"


def common_dir(shape: ClusterShape) -> Path:
    """The cell's common directory (bootstrap, act_qmaster, accounting, settings.sh)."""
    return sge_root(shape) / CELL / "common"


def qmaster_spool(shape: ClusterShape) -> Path:
    """The qmaster's spool (classic spooling: one file per object; messages, qmaster.pid)."""
    return sge_root(shape) / "qmaster"


def execd_spool(shape: ClusterShape) -> Path:
    """The execds' spool; each execd keeps ``<host>/`` in it (execd.pid, messages)."""
    return sge_root(shape) / "spool"


def templates_dir(shape: ClusterShape) -> Path:
    """The generated object files that spooldefaults and qconf load."""
    return sge_root(shape) / "etc"


def qmaster_hosts(shape: ClusterShape) -> Path:
    """The /etc/hosts the qmaster sees (its own mount namespace)."""
    return templates_dir(shape) / "hosts"


# -- the files ----------------------------------------------------------------------


def render(shape: ClusterShape, *, host_addrs: list[str]) -> dict[str, str]:
    """Every generated Grid Engine file, by path relative to ``shape.state_dir``.

    ``host_addrs`` are the addresses this machine's name resolves to here (clients on the
    host reach the qmaster from one of them; the qmaster must name each one back).
    """
    root = "sge"
    common = f"{root}/{CELL}/common"
    etc = f"{root}/etc"
    files = {
        f"{common}/bootstrap": bootstrap(shape),
        f"{common}/act_qmaster": shape.ctl_host + "\n",
        f"{common}/host_aliases": host_aliases(shape),
        f"{common}/settings.sh": settings_sh(shape),
        f"{etc}/hosts": hosts(shape, host_addrs),
        f"{etc}/configuration": global_configuration(shape),
        f"{etc}/centry/{GPU_COMPLEX}": gpu_complex(),
        f"{etc}/sched_configuration": scheduler_configuration(),
    }
    for part, members in shape.partitions.items():
        files[f"{etc}/hostgroups/{part}"] = hostgroup(part, members)
        files[f"{etc}/queues/{part}"] = queue(part)
    for n in shape.nodes:
        files[f"{etc}/exechosts/{n.name}"] = exechost(n)
    for pe in PARALLEL_ENVS:
        files[f"{etc}/pe/{pe.name}"] = parallel_env(pe)
    return files


def client_env(shape: ClusterShape, path: str) -> dict[str, str]:
    """Variables a Grid Engine client (qsub, qstat, qacct, qdel, qconf, qhost, qrsh) needs.

    ``path`` is the current PATH; the packages' binaries go first (on this machine
    /usr/bin/qsub is Slurm's Torque wrapper).
    """
    parts = [str(BIN_DIR)] + [p for p in path.split(":") if p and p != str(BIN_DIR)]
    return {
        "SGE_ROOT": str(sge_root(shape)),
        "SGE_CELL": CELL,
        "SGE_QMASTER_PORT": str(SGE_QMASTER_PORT),
        "SGE_EXECD_PORT": str(SGE_EXECD_PORT),
        "PATH": ":".join(parts),
    }


def bootstrap(shape: ClusterShape) -> str:
    """The cell's bootstrap: classic spooling in the state dir, daemons as root."""
    return "\n".join([
        "# Version: 8.1.9",
        "# Generated by hpcprov.testbed",
        "admin_user              none",
        "default_domain          none",
        "ignore_fqdn             true",
        "spooling_method         classic",
        "spooling_lib            libspoolc",
        f"spooling_params         {common_dir(shape)};{qmaster_spool(shape)}",
        f"binary_path             {BIN_DIR}",
        f"qmaster_spool_dir       {qmaster_spool(shape)}",
        "security_mode           none",
        "listener_threads        2",
        "worker_threads          2",
        "scheduler_threads       1",
        "jvm_threads             0",
    ]) + "\n"


def host_aliases(shape: ClusterShape) -> str:
    """SGE's host_aliases: the qmaster's host under its one name. A client on the host
    names itself ``localhost`` (this machine's /etc/hosts lists 127.0.0.1 as localhost
    first); without the alias the qmaster would refuse it as "not an admin host"."""
    return f"{shape.ctl_host} localhost\n"


def settings_sh(shape: ClusterShape) -> str:
    """``. $SGE_ROOT/default/common/settings.sh``: a shell (or a job) gets the clients."""
    env = client_env(shape, "")
    lines = [f"{k}={shlex.quote(v)}; export {k}" for k, v in env.items() if k != "PATH"]
    lines.append(f"PATH={shlex.quote(str(BIN_DIR))}:\"$PATH\"; export PATH")
    return "# Generated by hpcprov.testbed: Grid Engine clients\n" + "\n".join(lines) + "\n"


def hosts(shape: ClusterShape, host_addrs: list[str]) -> str:
    """The qmaster's /etc/hosts: this machine by its name on every address it reaches the
    qmaster from (loopback first: that is the name a client on the host gets), and every
    node by its name (the qmaster names execds by their addresses)."""
    lines = [f"127.0.0.1\t{shape.ctl_host} localhost",
             "::1\tlocalhost ip6-localhost ip6-loopback",
             f"{HOST_ADDR}\t{shape.ctl_host} hpctb-ctl"]
    lines += [f"{a}\t{shape.ctl_host}" for a in host_addrs
              if not a.startswith("127.") and a not in (HOST_ADDR, "::1")]
    lines += [f"{n.addr}\t{n.name} {n.fast_name}" for n in shape.nodes]
    return "# Generated by hpcprov.testbed (Grid Engine qmaster)\n" + "\n".join(lines) + "\n"


def global_configuration(shape: ClusterShape) -> str:
    """The global cluster configuration (``qconf -sconf``), for ``spooldefaults``.

    Differences from Debian's default: root may run jobs (min_uid/min_gid 0, as the whole
    testbed runs as root); execds report every 5 s and are "unknown" (queue state u)
    after 20 s unheard, so a node stopped mid-run is noticed within ~25 s (hpcprov's
    executor deletes a job on it); accounting is written at once (qacct sees a job as soon
    as it ends); qdel kills by the job's additional group id too (ENABLE_ADDGRP_KILL); no mail.
    """
    settings = [
        ("conf_version", "0"),
        ("execd_spool_dir", str(execd_spool(shape))),
        ("mailer", "/bin/true"),
        ("xterm", "/usr/bin/xterm"),
        ("load_sensor", "none"),
        ("prolog", "none"),
        ("epilog", "none"),
        ("shell_start_mode", "unix_behavior"),
        ("login_shells", "bash,sh,ksh,csh,tcsh"),
        ("min_uid", "0"),
        ("min_gid", "0"),
        ("user_lists", "none"),
        ("xuser_lists", "none"),
        ("projects", "none"),
        ("xprojects", "none"),
        ("enforce_project", "false"),
        ("enforce_user", "auto"),
        ("load_report_time", "00:00:05"),
        ("max_unheard", "00:00:20"),
        ("reschedule_unknown", "00:00:00"),
        ("loglevel", "log_warning"),
        ("administrator_mail", "none"),
        ("set_token_cmd", "none"),
        ("pag_cmd", "none"),
        ("token_extend_time", "none"),
        ("shepherd_cmd", "none"),
        ("qmaster_params", "none"),
        ("execd_params", "ENABLE_ADDGRP_KILL=true"),
        ("reporting_params", "accounting=true reporting=false flush_time=00:00:15 "
                             "joblog=false sharelog=00:00:00 accounting_flush_time=00:00:00"),
        ("finished_jobs", "100"),
        ("gid_range", "65400-65500"),
        ("qlogin_command", "builtin"),
        ("qlogin_daemon", "builtin"),
        ("rlogin_command", "builtin"),
        ("rlogin_daemon", "builtin"),
        ("rsh_command", "builtin"),
        ("rsh_daemon", "builtin"),
        ("max_aj_instances", "2000"),
        ("max_aj_tasks", "75000"),
        ("max_u_jobs", "0"),
        ("max_jobs", "0"),
        ("auto_user_oticket", "0"),
        ("auto_user_fshare", "0"),
        ("auto_user_default_project", "none"),
        ("auto_user_delete_time", "86400"),
        ("delegated_file_staging", "false"),
        ("reprioritize", "0"),
        ("jsv_url", "none"),
        ("jsv_allowed_mod", "ac,h,i,e,o,j,M,N,p,w"),
    ]
    return _object(settings, header="# Version: 8.1.9\n#\n# DO NOT MODIFY THIS FILE MANUALLY!\n#\n")


def gpu_complex() -> str:
    """The ``gpu`` complex: an integer consumable, per slot, requestable, 0 by default."""
    return _object([("name", GPU_COMPLEX), ("shortcut", GPU_COMPLEX), ("type", "INT"),
                    ("relop", "<="), ("requestable", "YES"), ("consumable", "YES"),
                    ("default", "0"), ("urgency", "0")],
                   header="# Version: 8.1.9\n#\n# DO NOT MODIFY THIS FILE MANUALLY!\n#\n")


def scheduler_configuration() -> str:
    """The scheduler (``qconf -Msconf``): a run every second and right after each submit
    and each job end; no load-based placement (2 cores shared by every node)."""
    return _object([
        ("algorithm", "default"),
        ("schedule_interval", "0:0:1"),
        ("maxujobs", "0"),
        ("queue_sort_method", "seqno"),
        ("job_load_adjustments", "NONE"),
        ("load_adjustment_decay_time", "0:0:0"),
        ("load_formula", "slots"),
        ("schedd_job_info", "true"),
        ("flush_submit_sec", "1"),
        ("flush_finish_sec", "1"),
        ("params", "none"),
        ("reprioritize_interval", "0:0:0"),
        ("halftime", "168"),
        ("usage_weight_list", "cpu=1.000000,mem=0.000000,io=0.000000"),
        ("compensation_factor", "5.000000"),
        ("weight_user", "0.250000"),
        ("weight_project", "0.250000"),
        ("weight_department", "0.250000"),
        ("weight_job", "0.250000"),
        ("weight_tickets_functional", "0"),
        ("weight_tickets_share", "0"),
        ("share_override_tickets", "TRUE"),
        ("share_functional_shares", "TRUE"),
        ("max_functional_jobs_to_schedule", "200"),
        ("report_pjob_tickets", "TRUE"),
        ("max_pending_tasks_per_job", "50"),
        ("halflife_decay_list", "none"),
        ("policy_hierarchy", "OFS"),
        ("weight_ticket", "0.500000"),
        ("weight_waiting_time", "0.278000"),
        ("weight_deadline", "3600000.000000"),
        ("weight_urgency", "0.500000"),
        ("weight_priority", "0.000000"),
        ("max_reservation", "0"),
        ("default_duration", "INFINITY"),
    ])


def hostgroup(partition: str, members: list[str]) -> str:
    """A host group named like the Slurm partition (``@amd_a100nv_8``)."""
    return _object([("group_name", f"@{partition}"), ("hostlist", " ".join(members))])


def exechost(node: Node) -> str:
    """An execution host: its GPUs as the ``gpu`` consumable."""
    return _object([("hostname", node.name), ("load_scaling", "NONE"),
                    ("complex_values", f"{GPU_COMPLEX}={node.gpus}"),
                    ("user_lists", "NONE"), ("xuser_lists", "NONE"), ("projects", "NONE"),
                    ("xprojects", "NONE"), ("usage_scaling", "NONE"),
                    ("report_variables", "NONE")])


def parallel_env(pe: ParallelEnv) -> str:
    """A parallel environment with tight integration (``qrsh -inherit`` into its slots);
    one accounting record for the whole job (``qacct -j`` prints the job's exit status)."""
    return _object([("pe_name", pe.name), ("slots", "99999"), ("user_lists", "NONE"),
                    ("xuser_lists", "NONE"), ("start_proc_args", "NONE"),
                    ("stop_proc_args", "NONE"), ("allocation_rule", pe.allocation_rule),
                    ("control_slaves", "TRUE"), ("job_is_first_task", "FALSE"),
                    ("urgency_slots", "min"), ("accounting_summary", "TRUE"),
                    ("qsort_args", "NONE")])


def queue(partition: str) -> str:
    """A cluster queue per node type, named like its Slurm partition: its host group,
    the cores each node advertises as slots, the partition's MaxTime as ``h_rt``; jobs run
    as their ``#!`` line says (``unix_behavior``: ``#!/bin/bash -l`` loads modules)."""
    p = PARTITIONS[partition]
    h_rt = _hms(p.max_time)
    limits = [(f"{kind}_{res}", "INFINITY") for res in ("cpu", "fsize", "data", "stack",
                                                         "core", "rss", "vmem")
              for kind in ("s", "h")]
    return _object([
        ("qname", partition),
        ("hostlist", f"@{partition}"),
        ("seq_no", "0"),
        ("load_thresholds", "NONE"),
        ("suspend_thresholds", "NONE"),
        ("nsuspend", "1"),
        ("suspend_interval", "00:05:00"),
        ("priority", "0"),
        ("min_cpu_interval", "00:05:00"),
        ("processors", "UNDEFINED"),
        ("qtype", "BATCH INTERACTIVE"),
        ("ckpt_list", "NONE"),
        ("pe_list", " ".join(pe.name for pe in PARALLEL_ENVS)),
        ("rerun", "FALSE"),
        ("slots", str(p.cores)),
        ("tmpdir", "/tmp"),
        ("shell", "/bin/bash"),
        ("prolog", "NONE"),
        ("epilog", "NONE"),
        ("shell_start_mode", "unix_behavior"),
        ("starter_method", "NONE"),
        ("suspend_method", "NONE"),
        ("resume_method", "NONE"),
        ("terminate_method", "NONE"),
        ("notify", "00:00:60"),
        ("owner_list", "NONE"),
        ("user_lists", "NONE"),
        ("xuser_lists", "NONE"),
        ("subordinate_list", "NONE"),
        ("complex_values", "NONE"),
        ("projects", "NONE"),
        ("xprojects", "NONE"),
        ("calendar", "NONE"),
        ("initial_state", "default"),
        ("s_rt", "INFINITY"),
        ("h_rt", h_rt),
        *limits,
    ])


def _hms(slurm_time: str) -> str:
    """Slurm's ``D-HH:MM:SS`` as Grid Engine's ``HH:MM:SS`` (hours may pass 24)."""
    days, _, rest = slurm_time.rpartition("-")
    h, m, s = (int(x) for x in rest.split(":"))
    return f"{int(days or 0) * 24 + h}:{m:02d}:{s:02d}"


def _object(settings: list[tuple[str, str]], header: str = "") -> str:
    """A Grid Engine object file: ``name value`` lines, names padded as qconf prints them."""
    width = max(len(k) for k, _ in settings) + 1
    return header + "".join(f"{k.ljust(width)}{v}\n" for k, v in settings)

"""Grid Engine's drafting parsers (issue 43): `qconf -sql/-sq/-shgrp/-spl/-sp` and `qhost -F`
as Son of Grid Engine 8.1.9 prints them (the testbed's real cell reads them for real in
tests/testbed/), and Univa's longer `qhost` header."""

from __future__ import annotations

from collections.abc import Sequence

from hpcprov.core.commands import Completed
from hpcprov.core.yaml_writer import Block
from hpcprov.schedulers.discovery import gridengine as ge

SQ_GPU = """\
qname                 gpu.q
hostlist              @gpuhosts
seq_no                0
load_thresholds       np_load_avg=1.75
pe_list               make smp mpi \\
                      mpi_rr
slots                 1,[gpu01=4],[gpu02=4]
h_rt                  48:00:00
user_lists            NONE
"""

SQ_ALL = """\
qname                 all.q
hostlist              cpu01
pe_list               NONE
slots                 8
h_rt                  INFINITY
"""

HGRP = {"@gpuhosts": "group_name @gpuhosts\nhostlist gpu01 @more\n",
        "@more": "group_name @more\nhostlist gpu02\n"}

PE = {"mpi": "pe_name mpi\nslots 9999\nallocation_rule $fill_up\ncontrol_slaves TRUE\n",
      "mpi_rr": "pe_name mpi_rr\nslots 999\nallocation_rule $round_robin\n"
                "control_slaves TRUE\n",
      "smp": "pe_name smp\nslots 999\nallocation_rule $pe_slots\ncontrol_slaves FALSE\n",
      "make": "pe_name make\nslots 999\nallocation_rule $round_robin\n"
              "control_slaves TRUE\n"}

QHOST = """\
HOSTNAME                ARCH         NCPU NSOC NCOR NTHR  LOAD  MEMTOT  MEMUSE  SWAPTO  SWAPUS
----------------------------------------------------------------------------------------------
global                  -               -    -    -    -     -       -       -       -       -
cpu01                   lx-amd64        8    1    8    8  0.01   31.3G    1.2G     0.0     0.0
    hl:arch=lx-amd64
    hl:num_proc=8.000000
gpu01                   lx-amd64       64    2   32   64  0.50  503.6G   20.1G     0.0     0.0
    hl:arch=lx-amd64
    hc:gpu=4.000000
gpu02                   lx-arm64       72    1   72   72  0.10  480.0G   10.0G     0.0     0.0
    hc:gpu=4.000000
    hl:gpu_model=H100
"""


class Answers:
    def __init__(self, texts: dict[tuple[str, ...], str]) -> None:
        self.texts = texts
        self.asked: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], label: str | None = None) -> Completed:
        key = tuple(argv)
        self.asked.append(key)
        if key in self.texts:
            return Completed(0, self.texts[key], "")
        return Completed(1, "", f"{argv[-1]}: not found")


def cell() -> Answers:
    texts = {("qconf", "-sql"): "gpu.q\nall.q\n", ("qconf", "-spl"): "make\nmpi\nmpi_rr\nsmp\n",
             ("qconf", "-sq", "gpu.q"): SQ_GPU, ("qconf", "-sq", "all.q"): SQ_ALL,
             ("qhost", "-F"): QHOST}
    texts.update({("qconf", "-shgrp", g): t for g, t in HGRP.items()})
    texts.update({("qconf", "-sp", p): t for p, t in PE.items()})
    return Answers(texts)


def test_a_cell_is_read_into_queues_hosts_and_parallel_environments() -> None:
    run = cell()
    cluster = ge.discover(run)
    assert cluster.scheduler == "gridengine"
    gpu, cpu = cluster.queues
    assert gpu.name == "gpu.q" and gpu.nodes == ["gpu01", "gpu02"]  # nested host groups
    assert gpu.max_time == "2-00:00:00" and cpu.max_time is None  # INFINITY: no limit
    assert "pe mpi: allocation_rule $fill_up, tight integration (control_slaves TRUE)" \
        in gpu.notes
    assert any(n.startswith("slots 1, gpu01=4, gpu02=4") for n in gpu.notes)
    assert cpu.nodes == ["cpu01"] and not [n for n in cpu.notes if n.startswith("pe ")]
    assert gpu.default and not cpu.default
    nodes = cluster.nodes
    assert set(nodes) == {"cpu01", "gpu01", "gpu02"}  # no `global`
    assert nodes["gpu01"].gpus == 4 and nodes["gpu01"].cores == 32
    assert nodes["gpu01"].threads_per_core == 2 and nodes["gpu01"].cpus == 64
    assert nodes["gpu02"].arch == "aarch64" and nodes["gpu02"].gpu_model == "H100"
    assert nodes["cpu01"].memory_mb == int(31.3 * 1024) and nodes["cpu01"].gpus == 0
    assert nodes["gpu01"].queues == ("gpu.q",)
    assert ge.preferred_pe(cluster) == "mpi"
    assert all(a[0] in ("qconf", "qhost") for a in run.asked)  # reads only
    assert not [a for a in run.asked if a[1] not in ("-sql", "-sq", "-shgrp", "-spl", "-sp",
                                                     "-F")]


def test_a_missing_pe_command_is_a_note_not_a_failure() -> None:
    run = cell()
    del run.texts[("qconf", "-sp", "mpi_rr")]
    cluster = ge.discover(run)
    assert any("qconf -sp mpi_rr" in n for n in cluster.notes)
    assert "pe mpi_rr: allocation_rule ?" in cluster.queues[0].notes


def test_older_qhost_without_socket_columns() -> None:
    text = ("HOSTNAME                ARCH         NCPU  LOAD  MEMTOT  MEMUSE  SWAPTO  SWAPUS\n"
            "----------------------------------------------------------------------------\n"
            "node1                   lx26-amd64     16  0.00   62.9G    1.0G    4.0G     0.0\n")
    (node,) = ge.parse_hosts(text).values()
    assert node.cpus == 16 and node.cores == 16 and node.arch == "x86_64"


def test_values_grid_engine_writes() -> None:
    assert ge.h_rt("0:10:0") == "00:10:00" and ge.h_rt("3600") == "01:00:00"
    assert ge.h_rt("INFINITY") is None and ge.h_rt("1:2:3:4") is None
    assert ge.slots("2,[a=4],[b=8]") == (2, {"a": 4, "b": 8})
    assert ge.listed("NONE") == [] and ge.listed("a,b c") == ["a", "b", "c"]
    assert ge.config("a 1\\\n  2\nb\n") == {"a": "1 2", "b": ""}


# the testbed's real cell (SGE 8.1.9): 64 slots on 2-CPU hosts, a family of fixed-rule PEs
TESTBED_SQ = """\
qname                 amd_a100nv_8
hostlist              @amd_a100nv_8
pe_list               mpi smp mpi1 mpi2 mpi4 mpi8
slots                 64
h_rt                  48:00:00
"""
TESTBED_QHOST = """\
HOSTNAME                ARCH         NCPU NSOC NCOR NTHR  LOAD  MEMTOT  MEMUSE  SWAPTO  SWAPUS
----------------------------------------------------------------------------------------------
global                  -               -    -    -    -     -       -       -       -       -
gpu01                   lx-amd64        2    1    2    2  1.67   23.5G    1.4G     0.0     0.0
   hl:arch=lx-amd64
   hl:num_proc=2.000000
   hc:gpu=8.000000
gpu02                   lx-amd64        2    1    2    2  1.67   23.5G    1.4G     0.0     0.0
   hl:arch=lx-amd64
   hc:gpu=8.000000
"""


def sge_testbed_cell() -> Answers:
    texts = {("qconf", "-sql"): "amd_a100nv_8\n",
             ("qconf", "-spl"): "mpi\nmpi1\nmpi2\nmpi4\nmpi8\nsmp\n",
             ("qconf", "-sp", "mpi"): PE["mpi"], ("qconf", "-sp", "smp"): PE["smp"],
             ("qconf", "-sq", "amd_a100nv_8"): TESTBED_SQ, ("qhost", "-F"): TESTBED_QHOST,
             ("qconf", "-shgrp", "@amd_a100nv_8"): "group_name @amd_a100nv_8\n"
                                                   "hostlist gpu01 gpu02\n"}
    texts.update({("qconf", "-sp", f"mpi{n}"): f"pe_name mpi{n}\nallocation_rule {n}\n"
                  "control_slaves TRUE\n" for n in (1, 2, 4, 8)})
    return Answers(texts)


def items(block: Block | None) -> dict[str, object]:
    """A drafted block's keys and values (nested blocks as dicts)."""
    assert block is not None
    return {i.key: items(i.value) if isinstance(i.value, Block) else i.value
            for i in block.items}


def test_a_draft_writes_the_section_the_backend_reads() -> None:
    """The gridengine section's keys are the backend's (pe, pe_rule, gpu_resource); a family
    of fixed-rule PEs (mpi1, mpi2...) is mpi{per_node}, preferred to a $fill_up PE (which
    places a job without GPUs by free slots); torchrun's agents are started by mpirun."""
    cluster = ge.discover(cell())
    assert items(ge.DRAFTING.section(cluster, True)) == {
        "pe": "mpi", "pe_rule": "fill_up", "gpu_resource": "gpu"}
    fixed = ge.discover(sge_testbed_cell())
    assert items(ge.DRAFTING.section(fixed, True)) == {
        "pe": "mpi{per_node}", "pe_rule": "fixed", "gpu_resource": "gpu"}
    launchers, default = ge.DRAFTING.launchers(cluster)
    assert default == "mpirun"
    assert items(launchers)["torchrun"] == {"kind": "torchrun", "per_node_wrapper": "mpirun",
                                            "rdzv_host": "first_node"}


def test_slots_beyond_the_cpus_are_the_cpus_a_job_gets() -> None:
    # the testbed's queue gives its 2-CPU hosts 64 slots: 8 ranks per host must fit
    nodes = ge.discover(sge_testbed_cell()).nodes
    assert (nodes["gpu01"].cpus, nodes["gpu01"].cores) == (64, 64)
    # fewer slots than CPUs (a slot per GPU): the CPUs stay, for the ranks' threads
    gpu01 = ge.discover(cell()).nodes["gpu01"]
    assert (gpu01.cpus, gpu01.cores, gpu01.threads_per_core) == (64, 32, 2)

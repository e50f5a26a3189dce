"""Grid Engine's generated files on the testbed, rendered without root, processes or a
running cluster (``hpcprov.testbed.gridengine_config``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcprov.testbed import gridengine_config as gec
from hpcprov.testbed.config import ClusterShape
from hpcprov.testbed.errors import TestbedError
from hpcprov.testbed.layout import HOST_ADDR, SGE_EXECD_PORT, SGE_QMASTER_PORT

STATE = Path("/var/lib/hpcprov-testbed-unit")  # never created: rendering writes nothing


def _render(nodes: int, host_addrs: list[str] | None = None) -> dict[str, str]:
    shape = ClusterShape.build(nodes, STATE, "login1")
    return gec.render(shape, host_addrs=host_addrs or [])


def _fields(text: str) -> dict[str, str]:
    """A Grid Engine object file as {attribute: value} (comments left out)."""
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition(" ")
            out[key] = value.strip()
    return out


def test_two_nodes_one_queue_per_node_type_with_its_hosts_cores_gpus_and_time() -> None:
    files = _render(2)
    queue = _fields(files["sge/etc/queues/amd_a100nv_8"])
    assert queue["qname"] == "amd_a100nv_8"
    assert queue["hostlist"] == "@amd_a100nv_8"
    assert queue["slots"] == "64"            # 2 sockets x 32 cores, as slurm.conf says
    assert queue["h_rt"] == "48:00:00"       # the partition's MaxTime 2-00:00:00
    assert queue["pe_list"].split() == ["mpi", "mpi_rr", "smp", "mpi1", "mpi2", "mpi4", "mpi8"]
    assert queue["load_thresholds"] == "NONE"  # 2 shared cores must not put queues in alarm
    assert (queue["shell"], queue["shell_start_mode"]) == ("/bin/bash", "unix_behavior")
    assert _fields(files["sge/etc/hostgroups/amd_a100nv_8"])["hostlist"] == "gpu01 gpu02"
    assert "sge/etc/queues/cas_v100_4" not in files
    for node in ("gpu01", "gpu02"):
        host = _fields(files[f"sge/etc/exechosts/{node}"])
        assert (host["hostname"], host["complex_values"]) == (node, "gpu=8")


def test_four_nodes_add_the_v100_queue_with_four_gpus_and_forty_slots() -> None:
    files = _render(4)
    queue = _fields(files["sge/etc/queues/cas_v100_4"])
    assert (queue["slots"], queue["hostlist"]) == ("40", "@cas_v100_4")
    assert _fields(files["sge/etc/hostgroups/cas_v100_4"])["hostlist"] == "gpu03 gpu04"
    assert _fields(files["sge/etc/exechosts/gpu04"])["complex_values"] == "gpu=4"
    assert _fields(files["sge/etc/exechosts/gpu01"])["complex_values"] == "gpu=8"


def test_parallel_environments_fill_up_round_robin_and_pe_slots_tightly_integrated() -> None:
    files = _render(2)
    rules = {}
    for pe in ("mpi", "mpi_rr", "smp", "mpi1", "mpi2", "mpi4", "mpi8"):
        f = _fields(files[f"sge/etc/pe/{pe}"])
        assert f["pe_name"] == pe
        assert f["control_slaves"] == "TRUE"        # qrsh -inherit into the slots
        assert f["job_is_first_task"] == "FALSE"
        rules[pe] = f["allocation_rule"]
    assert rules == {"mpi": "$fill_up", "mpi_rr": "$round_robin", "smp": "$pe_slots",
                     "mpi1": "1", "mpi2": "2", "mpi4": "4", "mpi8": "8"}


def test_gpu_is_a_requestable_per_slot_consumable() -> None:
    f = _fields(_render(2)["sge/etc/centry/gpu"])
    assert (f["name"], f["type"], f["requestable"], f["consumable"], f["default"]) == \
        ("gpu", "INT", "YES", "YES", "0")


def test_cell_in_the_state_dir_with_classic_spooling_and_the_packages_binaries() -> None:
    files = _render(2)
    boot = _fields(files["sge/default/common/bootstrap"])
    assert boot["spooling_method"] == "classic"
    assert boot["spooling_params"] == f"{STATE}/sge/default/common;{STATE}/sge/qmaster"
    assert boot["qmaster_spool_dir"] == f"{STATE}/sge/qmaster"
    assert boot["binary_path"] == str(gec.BIN_DIR)
    assert boot["admin_user"] == "none"             # the daemons run as root
    assert files["sge/default/common/act_qmaster"] == "login1\n"
    assert files["sge/default/common/host_aliases"] == "login1 localhost\n"
    conf = _fields(files["sge/etc/configuration"])
    assert conf["execd_spool_dir"] == f"{STATE}/sge/spool"
    assert (conf["min_uid"], conf["min_gid"]) == ("0", "0")  # root's jobs run
    assert "accounting_flush_time=00:00:00" in conf["reporting_params"]  # qacct at once
    # a stopped node's queue instances read "u" within ~25 s (the executor names it)
    assert (conf["load_report_time"], conf["max_unheard"]) == ("00:00:05", "00:00:20")
    assert "ENABLE_ADDGRP_KILL=true" in conf["execd_params"]
    sched = _fields(files["sge/etc/sched_configuration"])
    assert (sched["schedule_interval"], sched["flush_submit_sec"],
            sched["flush_finish_sec"]) == ("0:0:1", "1", "1")


def test_qmaster_hosts_name_this_machine_on_each_address_and_every_node() -> None:
    text = _render(2, host_addrs=["127.0.1.1", "192.0.2.7", HOST_ADDR])["sge/etc/hosts"]
    rows = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    by_addr = {r[0]: r[1:] for r in rows}
    assert by_addr["127.0.0.1"][0] == "login1"     # a client on the host: loopback
    assert by_addr["192.0.2.7"] == ["login1"]
    assert by_addr[HOST_ADDR][0] == "login1"
    assert by_addr["10.251.0.11"] == ["gpu01", "gpu01-ib"]
    assert by_addr["10.251.0.12"] == ["gpu02", "gpu02-ib"]
    assert "127.0.1.1" not in by_addr            # loopback is named once, as login1
    assert sum(1 for r in rows if r[0] == HOST_ADDR) == 1


def test_client_env_and_settings_sh() -> None:
    shape = ClusterShape.build(2, STATE, "login1")
    env = gec.client_env(shape, f"/usr/bin:{gec.BIN_DIR}:/bin")
    assert env == {"SGE_ROOT": f"{STATE}/sge", "SGE_CELL": "default",
                   "SGE_QMASTER_PORT": str(SGE_QMASTER_PORT),
                   "SGE_EXECD_PORT": str(SGE_EXECD_PORT),
                   "PATH": f"{gec.BIN_DIR}:/usr/bin:/bin"}  # ahead of Slurm's Torque qsub
    settings = gec.render(shape, host_addrs=[])["sge/default/common/settings.sh"]
    assert f"SGE_ROOT={STATE}/sge; export SGE_ROOT" in settings
    assert f'PATH={gec.BIN_DIR}:"$PATH"; export PATH' in settings


def test_paths_with_spaces_are_quoted_in_settings_sh() -> None:
    shape = ClusterShape.build(2, Path("/var/lib/test bed"), "login1")
    settings = gec.render(shape, host_addrs=[])["sge/default/common/settings.sh"]
    assert "SGE_ROOT='/var/lib/test bed/sge'; export SGE_ROOT" in settings


def test_arch_names_and_an_unknown_machine_in_one_line() -> None:
    assert gec.arch("x86_64") == "lx-amd64"
    assert gec.arch("aarch64") == "lx-arm64"
    with pytest.raises(TestbedError, match=r"no SGE architecture known for 'riscv64'"):
        gec.arch("riscv64")


def test_object_files_are_name_value_lines_aligned() -> None:
    text = gec.parallel_env(gec.PARALLEL_ENVS[0])
    lines = text.splitlines()
    assert all(len(line.split(None, 1)) == 2 for line in lines)
    assert len({line.index(line.split()[1]) for line in lines}) == 1


def test_missing_unpacked_packages_are_one_line_naming_the_installer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcprov.testbed import gridengine

    monkeypatch.setattr(gec, "BIN_DIR", tmp_path / "usr/lib/gridengine")
    monkeypatch.setattr(gec, "PREFIX", tmp_path)
    (probs,) = gridengine.problems()
    assert probs == (f"Grid Engine is not unpacked in {tmp_path} (missing sge_qmaster, "
                     "sge_execd, sge_shepherd ...; install with: bash testbed/install-deps.sh)")
    assert "\n" not in probs


def test_the_compiled_in_library_path_must_lead_to_the_unpacked_binaries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcprov.testbed import gridengine

    bin_dir = tmp_path / "usr/lib/gridengine"
    bin_dir.mkdir(parents=True)
    for name in gridengine.REQUIRED:
        (bin_dir / name).touch()
    monkeypatch.setattr(gec, "BIN_DIR", bin_dir)
    monkeypatch.setattr(gec, "COMPILED_IN_DIR", tmp_path / "nowhere")
    (probs,) = gridengine.problems()
    assert probs.startswith(f"{tmp_path}/nowhere does not lead to {bin_dir} ")
    monkeypatch.setattr(gec, "COMPILED_IN_DIR", bin_dir)
    assert gridengine.problems() == []

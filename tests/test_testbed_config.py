"""The testbed's generated files, rendered without root, processes or a running cluster
(``hpcprov.testbed.config``), and written into a plain directory (``statedir.write_files``)."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import hostlist
import pytest

from hpcprov.testbed import config, statedir
from hpcprov.testbed.config import ClusterShape
from hpcprov.testbed.layout import HOST_ADDR, MARIADB_PORT, SLURMCTLD_PORT, SLURMDBD_PORT

STATE = Path("/var/lib/hpcprov-testbed-unit")  # never created: rendering writes nothing
PATH = "/opt/venv/bin:/usr/bin:/bin"


def _shape(nodes: int, accounting: bool = True, policy: bool = True,
           state_dir: Path = STATE) -> ClusterShape:
    return ClusterShape.build(nodes, state_dir, "login1", accounting, policy)


def _render(nodes: int, **options: bool) -> dict[str, str]:
    return config.render(_shape(nodes, **options), path=PATH, lmod_base="/usr/share/modulefiles\n")


def _conf_lines(text: str, key: str) -> list[dict[str, str]]:
    """slurm.conf-style lines starting with ``key=`` as {Key: value} dicts."""
    rows = []
    for line in text.splitlines():
        if line.startswith(key + "="):
            rows.append(dict(word.split("=", 1) for word in line.split()))
    return rows


def _settings(text: str) -> dict[str, str]:
    """Single-valued ``Key=value`` lines (comments and Node/Partition lines left out)."""
    return dict(line.split("=", 1) for line in text.splitlines()
                if "=" in line and not line.startswith("#") and " " not in line)


# -- slurm.conf: nodes and partitions --------------------------------------------


def test_two_nodes_are_one_a100_partition():
    conf = _render(2)["etc/slurm.conf"]
    nodes = _conf_lines(conf, "NodeName")
    assert [(n["NodeName"], n["NodeAddr"], n["NodeHostname"]) for n in nodes] == [
        ("gpu01", "10.251.0.11", "gpu01"), ("gpu02", "10.251.0.12", "gpu02")]
    for n in nodes:
        assert (n["Sockets"], n["CoresPerSocket"], n["RealMemory"], n["Gres"]) == (
            "2", "32", "1000000", "gpu:8")
    parts = _conf_lines(conf, "PartitionName")
    assert parts == [{"PartitionName": "amd_a100nv_8", "Nodes": "gpu[01-02]", "Default": "YES",
                      "MaxTime": "2-00:00:00", "State": "UP"}]


def test_four_nodes_add_the_v100_partition_and_all():
    conf = _render(4)["etc/slurm.conf"]
    nodes = {n["NodeName"]: n for n in _conf_lines(conf, "NodeName")}
    assert list(nodes) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert nodes["gpu04"]["NodeAddr"] == "10.251.0.14"
    assert (nodes["gpu03"]["CoresPerSocket"], nodes["gpu03"]["RealMemory"],
            nodes["gpu03"]["Gres"]) == ("20", "384000", "gpu:4")
    # each node type is also a feature, so profiles can route by constraint (-C a100)
    assert {name: n["Features"] for name, n in nodes.items()} == {
        "gpu01": "gpu,a100", "gpu02": "gpu,a100", "gpu03": "gpu,v100", "gpu04": "gpu,v100"}
    parts = {p["PartitionName"]: p for p in _conf_lines(conf, "PartitionName")}
    assert {name: (p["Nodes"], p["Default"]) for name, p in parts.items()} == {
        "amd_a100nv_8": ("gpu[01-02]", "YES"),
        "cas_v100_4": ("gpu[03-04]", "NO"),
        "all": ("gpu[01-04]", "NO"),
    }
    # every node of every partition is a defined node (what slurmctld would refuse)
    for p in parts.values():
        assert set(hostlist.expand_hostlist(p["Nodes"])) <= set(nodes)


def test_three_nodes_single_v100_node_and_all():
    parts = {p["PartitionName"]: p["Nodes"]
             for p in _conf_lines(_render(3)["etc/slurm.conf"], "PartitionName")}
    assert parts == {"amd_a100nv_8": "gpu[01-02]", "cas_v100_4": "gpu03", "all": "gpu[01-03]"}


def test_one_node():
    conf = _render(1)["etc/slurm.conf"]
    assert [n["NodeName"] for n in _conf_lines(conf, "NodeName")] == ["gpu01"]
    assert [p["Nodes"] for p in _conf_lines(conf, "PartitionName")] == ["gpu01"]


# -- slurm.conf: controller, paths, options ---------------------------------------


def test_controller_ports_and_paths_are_the_shapes():
    settings = _settings(_render(2)["etc/slurm.conf"])
    assert settings["ClusterName"] == "testbed"
    assert settings["SlurmctldHost"] == f"login1({HOST_ADDR})"
    assert settings["SlurmctldPort"] == str(SLURMCTLD_PORT)
    assert settings["AuthInfo"] == f"socket={STATE}/munge/munge.socket"
    assert settings["SlurmdPidFile"] == f"{STATE}/nodes/%n/slurmd.pid"
    for key in ("StateSaveLocation", "SlurmctldPidFile", "SlurmctldLogFile", "SlurmdSpoolDir",
                "SlurmdLogFile", "JobCompLoc"):
        assert settings[key].startswith(f"{STATE}/"), key


def test_accounting_on_and_off():
    on = _render(2, accounting=True)
    settings = _settings(on["etc/slurm.conf"])
    assert settings["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert settings["AccountingStoragePort"] == str(SLURMDBD_PORT)
    assert settings["AccountingStoragePass"] == f"socket={STATE}/munge/munge.socket"
    assert "job_comment" in settings["AccountingStoreFlags"]
    dbd = _settings(on["etc/slurmdbd.conf"])
    assert (dbd["DbdAddr"], dbd["DbdPort"], dbd["StoragePort"]) == (
        HOST_ADDR, str(SLURMDBD_PORT), str(MARIADB_PORT))
    assert dbd["PidFile"] == f"{STATE}/run/slurmdbd.pid"

    off = _render(2, accounting=False)
    assert _settings(off["etc/slurm.conf"])["AccountingStorageType"] == \
        "accounting_storage/none"
    assert "AccountingStorageHost" not in off["etc/slurm.conf"]
    assert "etc/slurmdbd.conf" not in off


def test_policy_on_and_off():
    on = _render(2, policy=True)
    assert _settings(on["etc/slurm.conf"])["JobSubmitPlugins"] == "lua"
    assert "--comment is required" in on["etc/job_submit.lua"]
    assert "function slurm_job_submit" in on["etc/job_submit.lua"]
    off = _render(2, policy=False)
    assert "JobSubmitPlugins" not in _settings(off["etc/slurm.conf"])
    assert "etc/job_submit.lua" not in off


@pytest.mark.parametrize("nodes", [1, 2, 3, 4])
def test_every_template_is_filled_in(nodes):
    for rel, text in _render(nodes).items():
        assert "$" not in text, rel  # a ${placeholder} left over, or one misspelt


# -- the other files ------------------------------------------------------------------


def test_file_set():
    assert sorted(_render(2)) == [
        "etc/gres.conf", "etc/hosts", "etc/job_submit.lua", "etc/lmod-modulespath",
        "etc/slurm.conf", "etc/slurmdbd.conf", "nodes/gpu01/sshd_config",
        "nodes/gpu02/sshd_config", "ssh/ssh_config"]
    assert "nodes/gpu04/sshd_config" in _render(4)


def test_gres_lists_each_nodes_fake_gpus():
    gres = _render(4)["etc/gres.conf"]
    assert "AutoDetect=off" in gres.splitlines()
    rows = {r["NodeName"]: r["File"] for r in _conf_lines(gres, "NodeName")}
    assert rows == {"gpu01": f"{STATE}/dev/nvidia[0-7]", "gpu02": f"{STATE}/dev/nvidia[0-7]",
                    "gpu03": f"{STATE}/dev/nvidia[0-3]", "gpu04": f"{STATE}/dev/nvidia[0-3]"}


def test_hosts_name_the_controller_and_every_node():
    lines = [line.split("\t") for line in _render(4)["etc/hosts"].splitlines()
             if not line.startswith("#")]
    by_addr = {addr: names for addr, names in lines}
    assert by_addr[HOST_ADDR] == "login1 hpctb-ctl"
    # each node by its name and its name on the "high-speed network" (the same link here)
    assert [by_addr[f"10.251.0.1{i}"] for i in range(1, 5)] == [
        "gpu01 gpu01-ib", "gpu02 gpu02-ib", "gpu03 gpu03-ib", "gpu04 gpu04-ib"]
    assert by_addr["127.0.0.1"] == "localhost"


def test_ssh_config_maps_names_to_addresses_with_the_testbed_key():
    text = _render(2)["ssh/ssh_config"]
    assert re.findall(r"Host (gpu\d\d gpu\d\d-ib)\n\s+HostName (\S+)", text) == [
        ("gpu01 gpu01-ib", "10.251.0.11"), ("gpu02 gpu02-ib", "10.251.0.12")]
    assert f"IdentityFile {STATE}/ssh/id_ed25519" in text
    assert "StrictHostKeyChecking no" in text


def test_sshd_config_per_node():
    files = _render(2)
    for i, node in enumerate(("gpu01", "gpu02"), start=1):
        text = files[f"nodes/{node}/sshd_config"]
        assert f"ListenAddress 10.251.0.1{i}\n" in text
        assert f"PidFile {STATE}/nodes/{node}/sshd.pid\n" in text
        assert f"HostKey {STATE}/ssh/ssh_host_ed25519_key\n" in text
        assert f"SetEnv PATH={PATH}\n" in text


def test_lmod_modulespath_keeps_the_machines_and_adds_the_testbeds():
    text = _render(2)["etc/lmod-modulespath"]
    assert text.splitlines()[0] == "/usr/share/modulefiles"
    assert text.splitlines()[-1] == f"{STATE}/modulefiles"


def test_client_env_puts_the_testbed_modules_first_once():
    shape = _shape(2)
    env = config.client_env(shape, f"/a:{config.MODULEFILES_DIR}:{STATE}/modulefiles:/b")
    assert env["MODULEPATH"] == f"{STATE}/modulefiles:/a:/b"
    assert env["SLURM_CONF"] == f"{STATE}/etc/slurm.conf"
    assert env["HPCPROV_TESTBED_DIR"] == str(STATE)
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1"
    assert config.client_env(shape, "")["MODULEPATH"] == f"{STATE}/modulefiles"


def test_rendering_writes_nothing():
    _render(4)
    assert not STATE.exists()


# -- writing them ----------------------------------------------------------------------


def test_write_files_modes_and_stale_optional_files(tmp_path):
    shape = _shape(2, state_dir=tmp_path)
    statedir.write_files(tmp_path, config.render(shape, path=PATH, lmod_base=""))
    assert stat.S_IMODE((tmp_path / "etc/slurmdbd.conf").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "ssh/ssh_config").stat().st_mode) == 0o644
    assert (tmp_path / "etc/slurm.conf").read_text() == config.slurm_conf(shape)
    hosts_inode = (tmp_path / "etc/hosts").stat().st_ino

    # brought up again without accounting and policy: their files must go
    plain = _shape(2, accounting=False, policy=False, state_dir=tmp_path)
    statedir.write_files(tmp_path, config.render(plain, path=PATH, lmod_base=""))
    assert not (tmp_path / "etc/slurmdbd.conf").exists()
    assert not (tmp_path / "etc/job_submit.lua").exists()
    assert "accounting_storage/none" in (tmp_path / "etc/slurm.conf").read_text()
    # rewritten in place: a node's bind mount of /etc/hosts would keep the old inode
    assert (tmp_path / "etc/hosts").stat().st_ino == hosts_inode

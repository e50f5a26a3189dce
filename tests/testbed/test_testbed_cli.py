"""Testbed CLI/API behaviour that needs no root and no cluster (runs everywhere)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from hpcprov.testbed import __main__ as cli
from hpcprov.testbed.cluster import Testbed, TestbedError, node_layout
from hpcprov.testbed.daemons import daemon_died


def test_node_layout_mirrors_neuron():
    nodes = node_layout(4)
    assert [(n.name, n.addr, n.partition.name, n.gpus) for n in nodes] == [
        ("gpu01", "10.251.0.11", "amd_a100nv_8", 8),
        ("gpu02", "10.251.0.12", "amd_a100nv_8", 8),
        ("gpu03", "10.251.0.13", "cas_v100_4", 4),
        ("gpu04", "10.251.0.14", "cas_v100_4", 4),
    ]
    assert Testbed(nodes=2).partitions == {"amd_a100nv_8": ["gpu01", "gpu02"]}
    assert [p["nodes"] for p in Testbed(nodes=4).describe()["partitions"]] == [
        "gpu[01-02]", "gpu[03-04]"]
    assert [p["nodes"] for p in Testbed(nodes=3).describe()["partitions"]] == [
        "gpu[01-02]", "gpu03"]
    with pytest.raises(TestbedError):
        node_layout(5)


def test_not_root_is_one_line_error(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    rc = cli.main(["--state-dir", str(tmp_path / "x"), "up"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("hpcprov testbed: must run as root")
    assert len(err.strip().splitlines()) == 1


def test_missing_packages_is_one_line_error(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda cmd, path=None: None)
    rc = cli.main(["--state-dir", "/var/lib/hpcprov-testbed-nonexistent", "up"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "missing packages: " in err and "slurmctld" in err and "install-deps.sh" in err
    assert len(err.strip().splitlines()) == 1


def test_state_dir_under_tmp_is_refused(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    probs = Testbed(state_dir="/tmp/tb").problems()
    assert any("must not be under /tmp" in p for p in probs)


def test_cli_errors_are_one_line():
    proc = subprocess.run([sys.executable, "-m", "hpcprov.testbed", "up", "--nodes", "9"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("hpcprov testbed: nodes must be between 1 and 4")
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)  # reaped by run(): no such process any more


def test_a_pid_file_being_written_is_not_a_dead_daemon(tmp_path):
    """Slurm creates its pid file empty and writes the pid a moment later (CI once
    caught slurmctld in between and called it dead)."""
    pidfile, log = tmp_path / "slurmctld.pid", tmp_path / "slurmctld.log"
    log.write_text("started\nfatal: something broke\n")
    for being_written in ("", "12"):
        pidfile.write_text(being_written)
        daemon_died("slurmctld", pidfile, log)  # no raise: still starting
    pidfile.write_text(f"{os.getpid()}\n")
    daemon_died("slurmctld", pidfile, log)  # alive
    pidfile.write_text(f"{_dead_pid()}\n")
    with pytest.raises(TestbedError, match=r"slurmctld died during start-up .*"
                                           r"its log ends: started \| fatal: something broke"):
        daemon_died("slurmctld", pidfile, log)

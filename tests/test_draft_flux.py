"""Flux discovery for `hpcprov site draft`: the parsers on outputs written from flux-core's
documented formats (tests/data/draft/flux-*.txt, each saying so), and the whole command
against tests/flux_emulator.py."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from hpcprov_tests import FakeRunner, cli_subprocess, recorded

from hpcprov.draft.plan import Findings
from hpcprov.draft.profile import draft_text
from hpcprov.schedulers.discovery import flux
from hpcprov.site.profiles import check_file

FLUX = FakeRunner({" ".join(flux.RESOURCES_CMD): recorded("flux-resource-list.txt"),
                   " ".join(flux.QUEUES_CMD): recorded("flux-queue-list.txt")})


def test_flux_resource_list_gives_nodes_cores_gpus_and_queues() -> None:
    nodes, queues = flux.parse_resources(recorded("flux-resource-list.txt"))
    assert len(nodes) == 18 and queues["pdebug"] == ["tioga17", "tioga18"]
    assert len(queues["pbatch"]) == 16
    assert (nodes["tioga3"].cores, nodes["tioga3"].gpus, nodes["tioga15"].state) == (
        96, 4, "down")


def test_flux_queue_list_gives_the_default_queue_and_its_limits() -> None:
    queues = {q.name: q for q in flux.parse_queues(recorded("flux-queue-list.txt"))}
    assert queues["pbatch"].default and not queues["pdebug"].default
    assert (queues["pbatch"].max_time, queues["pbatch"].default_time) == ("1-00:00:00",
                                                                          "01:00:00")
    assert (queues["pdebug"].max_time, queues["pdebug"].max_nodes) == ("01:00:00", 2)


def test_the_flux_draft_passes_site_check_and_starts_ranks_with_flux_run(
        tmp_path: Path) -> None:
    findings = Findings(cluster=flux.discover(FLUX), host="login1.cluster.example.org",
                        when="2024-01-09 10:00")
    path = tmp_path / "draft.yaml"
    path.write_text(draft_text(findings), encoding="utf-8")
    assert check_file(path) == []
    data = yaml.safe_load(path.read_text())
    assert data["scheduler"] == "flux" and data["default_launcher"] == "flux"
    assert data["launchers"]["flux"]["kind"] == "flux"
    assert set(data["partitions"]) == {"pbatch", "pdebug"}
    assert data["partitions"]["pbatch"]["gpus"]["count"] == 4


def test_flux_draft_through_the_emulator_and_its_jobscript(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "flux").symlink_to(Path(__file__).with_name("flux_emulator.py"))
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
           "FLUX_EMULATOR_DIR": str(tmp_path / "state"), "FLUX_EMULATOR_CORES": "8",
           "FLUX_EMULATOR_NGPUS": "2"}
    out = tmp_path / "flux.yaml"
    res = cli_subprocess("site", "draft", "--scheduler", "flux", "-o", str(out), env=env)
    assert res.rc == 0, res.err
    part = yaml.safe_load(out.read_text())["partitions"]["batch"]
    assert (part["cores_per_node"], part["gpus"]["count"], part["default"]) == (8, 2, True)
    assert part["limits"]["max_walltime"] == "1-00:00:00"
    script = cli_subprocess("jobscript", "--site", str(out), "--no-activate", "--",
                            "python", "x.py")
    assert script.rc == 0, script.err
    assert "# flux: -q batch" in script.out and "# flux: -g 1" in script.out
    assert "\nflux run -N 1 -n 2 " in script.out

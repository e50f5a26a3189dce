"""Settings by job size: a partition's ``env_by_nodes`` (NCCL_NET=Socket on one node, OFI
on several) reaches the job script's exports and mpirun's -x, and its
``limits.max_walltime_by_nodes`` caps --time by node count in lint."""

from __future__ import annotations

from pathlib import Path

import pytest
from hpcprov_tests import assert_one_line_error, cli, write_profile

from hpcprov.jobs.lint import lint
from hpcprov.request.job import JobRequest
from hpcprov.site.profiles import load_site

BINS = """\
extends: sockeye
name: bins
partitions:
  gpu:
    env_by_nodes:
      - {max_nodes: 1, env: {NCCL_NET: Socket}}
      - env: {NCCL_NET: OFI, FI_PROVIDER: verbs}
    limits:
      max_walltime: "72:00:00"
      max_walltime_by_nodes:
        - {max_nodes: 1, max_walltime: "48:00:00"}
        - {max_nodes: 4, max_walltime: "24:00:00"}
"""


def _script(capsys: pytest.CaptureFixture[str], path: Path, nodes: int) -> str:
    res = cli(capsys, "jobscript", "--site", str(path), "-N", str(nodes), "-t", "1:00:00",
              "-o", "account=a", "--no-activate", "--", "python", "x.py")
    assert res.rc == 0, res
    return res.out


def test_env_by_nodes_follows_the_jobs_node_count(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    path = write_profile(tmp_path, "bins", BINS)
    one, many = _script(capsys, path, 1), _script(capsys, path, 3)
    assert "export NCCL_NET=Socket" in one and "OFI" not in one and "FI_PROVIDER" not in one
    assert "export NCCL_NET=OFI" in many and "export FI_PROVIDER=verbs" in many
    assert "-x NCCL_NET" in many.splitlines()[-1]  # mpirun passes it on to its ranks


@pytest.mark.parametrize(("nodes", "time", "cap"), [
    (1, "40:00:00", None), (1, "50:00:00", "48:00:00"), (2, "30:00:00", "24:00:00"),
    (4, "24:00:00", None), (8, "30:00:00", None), (8, "80:00:00", "72:00:00")])
def test_walltime_caps_follow_the_jobs_node_count(tmp_path: Path, nodes: int, time: str,
                                                  cap: str | None) -> None:
    site = load_site(str(write_profile(tmp_path, "bins", BINS)))
    req = JobRequest(site=site, nodes=nodes, time=time, command=("python", "x.py"),
                     options={"account": "a"})
    found = [f for f in lint(req) if f.code == "time-limit"]
    if cap is None:
        assert found == []
    else:
        (f,) = found
        assert cap in f.message and f.fix == f"use --time {cap} or less"


@pytest.mark.parametrize(("text", "line", "needle"), [
    ("    env_by_nodes:\n      - env: {A: b}\n      - {max_nodes: 2, env: {A: c}}\n", 5,
     "must be the last"),
    ("    limits:\n      max_walltime_by_nodes:\n"
     "        - {max_nodes: 4, max_walltime: '1:00:00'}\n"
     "        - {max_nodes: 2, max_walltime: '2:00:00'}\n", 6, "smallest first"),
    ("    limits:\n      max_walltime_by_nodes:\n"
     "        - {max_nodes: 4, max_walltime: '1 day'}\n", 7, "not a wall-clock limit"),
])
def test_bins_out_of_order_or_unreadable_are_errors_at_their_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, line: int,
        needle: str) -> None:
    path = write_profile(tmp_path, "bad", (
        f"extends: sockeye\nname: bad\npartitions:\n  gpu:\n{text}"))
    assert_one_line_error(cli(capsys, "site", "check", str(path)), 2, f"{path}:{line}:", needle)

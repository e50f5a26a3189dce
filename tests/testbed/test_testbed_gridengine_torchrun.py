"""torchrun on the testbed's real Grid Engine with one agent per host started by Grid Engine
itself (issue 43: tasks started on each node by ``qrsh -inherit``, tight integration; the
parallel environment's control_slaves TRUE), no MPI launcher between."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import hpcprov_argv, write_profile

pytestmark = [pytest.mark.testbed, pytest.mark.slow]


def test_torchruns_agents_start_on_each_host_through_qrsh_inherit(
        gridengine, prefix: Path, tmp_path: Path) -> None:
    site = write_profile(tmp_path, "getr", "extends: testbed-gridengine\nname: getr\n"
                         "launchers:\n  torchrun: {kind: torchrun, per_node_wrapper: "
                         "scheduler, rdzv_host: first_node}\ndefault_launcher: torchrun\n")
    env = {**gridengine.environ(), "HPCPROV_HISTORY": str(tmp_path / "history")}
    rundir = gridengine.testbed.scratch / "pytest-validate" / f"ge-torchrun-{tmp_path.name}"
    proc = subprocess.run(
        [*hpcprov_argv(), "validate", "--site", str(site), "--device", "cpu", "--env",
         str(prefix), "--json", "--workdir", str(rundir), "-N", "2", "--checks", "allreduce",
         "--launchers", "torchrun", "--max-bytes", "65536", "--iters", "3"],
        capture_output=True, text=True, env=env, timeout=600)
    data = json.loads(proc.stdout or "{}")
    assert proc.returncode == 0, (data.get("outcomes"), proc.stderr)
    script = (rundir / "allreduce-torch-gloo-torchrun.sh").read_text()
    assert "hpcprov_qrsh_each python -m torch.distributed.run --nnodes=2" in script
    assert "mpirun" not in script.split("hpcprov_qrsh_each()", 1)[1]
    (job,) = data["jobs"]
    assert job["node_list"] in ("gpu01,gpu02", "gpu[01-02]") or set(
        job["node_list"].split(",")) == {"gpu01", "gpu02"}, job
    assert all(r["correct"] and r["nodes"] == 2 for r in job["records"])

"""`hpcprov validate` through MPICH's real Hydra mpiexec on the Slurm testbed: a site whose
only launcher is mpiexec (sites/testbed-mpiexec.yaml) gets env, allreduce and DDP training
on 2 nodes, each rank's torch environment made by the rank contract from Hydra's own
variables (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import hpcprov_argv

pytestmark = [pytest.mark.testbed, pytest.mark.slow]


def test_an_mpiexec_only_site_validates_on_two_nodes(testbed, prefix: Path,
                                                     tmp_path: Path) -> None:
    env = {**testbed.environ(), "HPCPROV_HISTORY": str(tmp_path / "history")}
    rundir = testbed.scratch / "pytest-validate" / f"mpiexec-{tmp_path.name}"
    common = ["validate", "--site", "testbed-mpiexec", "--device", "cpu", "--env", str(prefix),
              "--workdir", str(rundir), "-N", "2", "--max-bytes", "4194304", "--iters", "3",
              "--steps", "8"]
    planned = subprocess.run([*hpcprov_argv(), *common, "--dry-run", "--json"],
                             capture_output=True, text=True, env=env, timeout=120)
    assert planned.returncode == 0, planned.stderr
    scripts = {Path(s["path"]).name: s["text"] for s in json.loads(planned.stdout)["scripts"]}
    assert {"env.sh", "allreduce-torch-gloo.sh", "train-torch-ddp.sh"} <= set(scripts)
    assert "module load gcc/10.2.0 mpich/4.0" in scripts["allreduce-torch-gloo.sh"]
    proc = subprocess.run([*hpcprov_argv(), *common], capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "hpcprov: PASS: 3 of 3 checks ran, testbed-mpiexec/amd_a100nv_8" in proc.stdout
    # what ran is byte for byte what the dry run printed
    for name in ("env.sh", "allreduce-torch-gloo.sh", "train-torch-ddp.sh"):
        assert (rundir / name).read_text() == scripts[name], name
    outputs = {name: (rundir / f"{name}.out").read_text()
               for name in ("allreduce-torch-gloo", "train-torch-ddp")}
    for name, text in outputs.items():
        ranks = [json.loads(line.split(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith("HPCPROV_RANK ")]
        # two ranks, one per node, each told who it is by Hydra's variables
        assert sorted(r["rank"] for r in ranks) == [0, 1], name
        assert {r["rank_source"] for r in ranks} == {"hydra"}, name
        assert {r["host"] for r in ranks} == {"gpu01", "gpu02"}, name
    assert "| PASS" not in proc.stdout  # the table, not Markdown
    rows = [ln.split()[:2] for ln in proc.stdout.splitlines() if ln.startswith("PASS")]
    assert ["PASS", "allreduce-torch-gloo"] in rows and ["PASS", "train-torch-ddp"] in rows
    assert ["PASS", "env"] in rows

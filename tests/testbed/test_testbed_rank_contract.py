"""The rank contract on 2 real nodes (issue 26): one unmodified env:// DDP script, as a
user writes it, trains under every launcher that can run here, through the job script
`hpcprov jobscript` writes: srun, mpirun (Open MPI), horovodrun (Gloo), torchrun started
per node by srun, and torchrun started per node by mpirun."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from hpcprov_testbed_tests import DDP, generated_jobscript

pytestmark = pytest.mark.testbed

PROFILE = """\
name: testbed
extends: {bundled}
launchers:
  torchrun-mpi: {{kind: torchrun, per_node_wrapper: mpirun, rdzv_host: first_node}}
"""
LAUNCHERS = ["srun", "mpirun", "horovodrun", "torchrun", "torchrun-mpi"]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_an_unmodified_ddp_script_trains_on_two_nodes(client, capsys, torch, tmp_path: Path,
                                                      launcher: str) -> None:
    from hpcprov.site.loader import bundled_site_dir

    if launcher == "horovodrun" and shutil.which("horovodrun") is None:
        pytest.skip("horovodrun not installed (Horovod is built by the provisioner)")
    profile = tmp_path / "testbed.yaml"
    profile.write_text(PROFILE.format(bundled=bundled_site_dir() / "testbed.yaml"))
    client.write("ddp.py", DDP)
    script = generated_jobscript(capsys, str(profile), "-N", "2", "-G", "2", "-l", launcher,
                                 "-J", f"ddp-{launcher}", "--", sys.executable,
                                 str(client.workdir / "ddp.py"))
    job = client.sbatch(script, name=f"ddp-{launcher}.sh")
    assert job.state == "COMPLETED", (job, job.output)
    # (each rank prints one line; an MPI's output forwarding may run two together)
    lines = sorted(re.findall(r"DDP (rank=\d+ world=\d+ local=\d+ host=\S+? sum=\d+)",
                              job.output))
    want = sorted(f"rank={r} world=4 local={r % 2} host=gpu0{r // 2 + 1} sum=10"
                  for r in range(4))  # 1 + 2 + 3 + 4 on every rank
    if launcher.startswith("torchrun"):  # torchrun's agents number the nodes as they join
        got = sorted(ln.split(" host=")[0] + " sum=" + ln.split(" sum=")[1] for ln in lines)
        assert got == sorted(w.split(" host=")[0] + " sum=10" for w in want), job.output
        assert sorted(ln.split(" host=")[1].split()[0] for ln in lines) == [
            "gpu01", "gpu01", "gpu02", "gpu02"]
    else:
        assert lines == want, job.output

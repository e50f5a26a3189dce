"""hpcprov's own output, run for real on the testbed: job scripts from `hpcprov jobscript
--site testbed` for every launcher form, submitted with sbatch on 2 nodes."""

from __future__ import annotations

import shutil
import sys

import pytest
from hpcprov_testbed_tests import generated_jobscript, records

from hpcprov.app.cli import main as hpcprov

pytestmark = pytest.mark.testbed

# torch's environment contract only: every launcher gives each rank RANK, LOCAL_RANK and
# WORLD_SIZE (hpcprov's rank shim, or torchrun itself)
PROBE = r'''
import json, os, socket
e = os.environ
rec = {
    "rank": int(e["RANK"]),
    "local_rank": int(e["LOCAL_RANK"]),
    "world_size": int(e["WORLD_SIZE"]),
    "node_rank": int(e.get("NODE_RANK", e.get("GROUP_RANK", "-1"))),
    "source": e.get("HPCPROV_RANK_SOURCE"),
    "master_addr": e.get("MASTER_ADDR"),
    "host": socket.gethostname(),
    "modules": e.get("LOADEDMODULES", ""),
}
os.write(1, (json.dumps(rec) + "\n").encode())
'''



LAUNCHERS = ["srun", "torchrun", "mpirun", "horovodrun"]
# the starter the rank shim read each launcher's ranks from (None: torchrun's own)
SOURCES = {"srun": "slurm", "torchrun": None, "mpirun": "openmpi", "horovodrun": "horovod"}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_generated_jobscript_starts_ranks_on_two_nodes(client, capsys, launcher, torch):
    if launcher == "horovodrun" and shutil.which("horovodrun") is None:
        pytest.skip("horovodrun not installed (Horovod is built by the provisioner)")
    client.write("probe.py", PROBE)
    script = generated_jobscript(capsys, "testbed", "-N", "2", "-G", "2", "-l", launcher,
                                 "-J", f"probe-{launcher}", "--", sys.executable,
                                 str(client.workdir / "probe.py"))
    assert "module load gcc/10.2.0 cuda/11.4 cudampi/openmpi-4.1.1" in script
    job = client.sbatch(script, name=f"{launcher}.sh")
    assert job.state == "COMPLETED", (job, script)
    assert job.node_list == "gpu[01-02]"
    recs = sorted(records(job.output), key=lambda r: r["rank"])
    assert [r["rank"] for r in recs] == [0, 1, 2, 3], job.output
    assert {r["world_size"] for r in recs} == {4}
    assert sorted((r["host"], r["local_rank"]) for r in recs) == [
        ("gpu01", 0), ("gpu01", 1), ("gpu02", 0), ("gpu02", 1)]
    assert sorted((r["host"], r["node_rank"]) for r in recs) == [
        ("gpu01", 0), ("gpu01", 0), ("gpu02", 1), ("gpu02", 1)]
    assert {r["source"] for r in recs} == {SOURCES[launcher]}
    # the site's module line ran inside the job and the ranks inherited it
    assert all("cudampi/openmpi-4.1.1" in r["modules"] for r in recs)
    if launcher in ("srun", "mpirun", "torchrun"):
        masters = {r["master_addr"] for r in recs}
        assert len(masters) == 1 and masters <= {"gpu01", "gpu02"}, masters
        if launcher != "torchrun":  # torchrun names the host of its rank-0 agent
            assert masters == {"gpu01"}



def test_site_policy_enforced_by_lint_and_by_the_cluster(client, capsys):
    # hpcprov refuses --mem before anything reaches the queue ...
    rc = hpcprov(["jobscript", "--site", "testbed", "-o", "mem=1G", "--", "true"])
    err = capsys.readouterr().err
    assert rc == 2 and "forbidden-option" in err
    # ... and the cluster itself refuses a script without hpcprov's mandatory --comment
    script = generated_jobscript(capsys, "testbed", "-N", "1", "-G", "1", "--", "true")
    assert "#SBATCH --comment=python" in script
    stripped = "\n".join(ln for ln in script.splitlines() if "--comment" not in ln) + "\n"
    path = client.write("nocomment.sh", stripped)
    refused = client.run("sbatch", str(path), check=False)
    assert refused.returncode != 0 and "--comment is required" in refused.stderr


def test_gpu_request_above_partition_is_caught_before_submission(capsys):
    rc = hpcprov(["jobscript", "--site", "testbed", "-N", "2", "-G", "9", "--", "true"])
    assert rc == 2
    assert "gpus-exceed" in capsys.readouterr().err

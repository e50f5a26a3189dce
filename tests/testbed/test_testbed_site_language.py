"""What a real cluster beyond the bundled profiles needs, run for real on the testbed:

* nodes named on their high-speed network (``{host}-ib``): the testbed's /etc/hosts and ssh
  configuration give every node such an alias, so a profile can rendezvous on those names;
* a kind of node picked by constraint and QOS with no partition asked for: the testbed's
  job_submit.lua routes ``-q regular -C v100`` to the V100 nodes, as sites that route by
  constraint and QOS do.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprov_testbed_tests import generated_jobscript, records
from hpcprov_tests import hpcprov_argv

from hpcprov.testbed.cluster import Testbed

pytestmark = pytest.mark.testbed

FAST_NAMES = """\
name: testbed-ib
extends: testbed
partitions:
  amd_a100nv_8:
    network: {host_name: "{host}-ib"}
"""

ROUTED = """\
name: testbed-routed
extends: testbed
partitions:
  v100:
    description: the V100 nodes, picked by their feature and the QOS (no partition named)
    routing: options
    options: {constraint: v100, qos: regular}
    nodes: 2
    cores_per_node: 40
    gpus: {count: 4, model: fake}
    cpus_per_task: 10
    network: {gloo_socket_ifname: eth0}
"""

# torch.distributed over Gloo, the rendezvous from the launcher's environment; each rank
# says where it ran and which MASTER_ADDR it was given
ALLREDUCE = r'''
import json, os, socket
import torch, torch.distributed as dist
e = os.environ
rank = int(e.get("RANK") or e.get("OMPI_COMM_WORLD_RANK") or e["SLURM_PROCID"])
size = int(e.get("WORLD_SIZE") or e.get("OMPI_COMM_WORLD_SIZE") or e["SLURM_NTASKS"])
dist.init_process_group("gloo", rank=rank, world_size=size)
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
rec = {"rank": rank, "size": size, "sum": t[0].item(), "master": e.get("MASTER_ADDR"),
       "host": socket.gethostname()}
os.write(1, (json.dumps(rec) + "\n").encode())
dist.destroy_process_group()
'''

HOROVOD = r'''
import json, os, socket
import torch, horovod.torch as hvd
hvd.init()
t = hvd.allreduce(torch.full((1000,), float(hvd.rank() + 1)), op=hvd.Sum)
rec = {"rank": hvd.rank(), "size": hvd.size(), "sum": t[0].item(), "host": socket.gethostname()}
os.write(1, (json.dumps(rec) + "\n").encode())
'''


@pytest.mark.parametrize("launcher", ["srun", "mpirun", "torchrun"])
def test_ranks_rendezvous_on_the_nodes_fast_names(client, capsys, launcher, torch) -> None:
    site = client.write("ib.yaml", FAST_NAMES, 0o644)
    client.write("allreduce.py", ALLREDUCE)
    script = generated_jobscript(capsys, str(site), "-N", "2", "-G", "2", "-l", launcher,
                                 "-J", f"ib-{launcher}", "--", sys.executable,
                                 str(client.workdir / "allreduce.py"))
    job = client.sbatch(script, name=f"ib-{launcher}.sh", timeout=120)
    assert job.state == "COMPLETED", (job, script)
    recs = sorted(records(job.output), key=lambda r: r["rank"])
    assert [r["rank"] for r in recs] == [0, 1, 2, 3], job.output
    assert {r["sum"] for r in recs} == {float(1 + 2 + 3 + 4)}
    assert sorted(r["host"] for r in recs) == ["gpu01", "gpu01", "gpu02", "gpu02"]
    if launcher == "torchrun":
        # the agents met at the first node's fast name; torchrun then hands its ranks the
        # host of its rank-0 agent as MASTER_ADDR
        # (the template applies to the short name: a full name loses its domain first)
        assert '"$SLURM_JOB_NODELIST" | sed -n 1p | sed \'s/[.].*//\')"-ib:29500' in script
    else:
        assert {r["master"] for r in recs} == {"gpu01-ib"}


def test_horovod_runs_over_the_nodes_fast_names(client, capsys, torch) -> None:
    pytest.importorskip("horovod.torch", reason="Horovod is built by the provisioner")
    site = client.write("ib.yaml", FAST_NAMES, 0o644)
    client.write("hvd.py", HOROVOD)
    script = generated_jobscript(capsys, str(site), "-N", "2", "-G", "2", "-l", "horovodrun",
                                 "-J", "ib-horovodrun", "--", sys.executable,
                                 str(client.workdir / "hvd.py"))
    # horovodrun -H gpu01-ib:2,gpu02-ib:2 (each short name renamed)
    assert "sed 's/^\\([^.]*\\).*/\\1-ib:2/'" in script
    job = client.sbatch(script, name="ib-horovodrun.sh", timeout=180)
    assert job.state == "COMPLETED", (job, script)
    recs = sorted(records(job.output), key=lambda r: r["rank"])
    assert [r["rank"] for r in recs] == [0, 1, 2, 3], job.output
    assert {r["sum"] for r in recs} == {float(1 + 2 + 3 + 4)}
    assert sorted(r["host"] for r in recs) == ["gpu01", "gpu01", "gpu02", "gpu02"]



def test_a_kind_of_node_picked_by_constraint_and_qos(four_nodes: Testbed, tmp_path: Path,
                                                      prefix: Path) -> None:
    env = four_nodes.environ()
    work = four_nodes.scratch / "pytest" / "routed"
    work.mkdir(parents=True, exist_ok=True)
    site = work / "routed.yaml"
    site.write_text(ROUTED)
    script = subprocess.run([*hpcprov_argv(), "jobscript", "--site", str(site),
                             "--no-activate", "-p", "v100", "-N", "2", "-G", "1", "--",
                             "hostname"], capture_output=True, text=True, env=env, check=True)
    text = script.stdout
    assert "--partition" not in text
    assert "#SBATCH --constraint=v100" in text and "#SBATCH --qos=regular" in text
    path = work / "routed.sh"
    path.write_text(text)
    sub = subprocess.run(["sbatch", "--parsable", "--wait", str(path)], cwd=work, env=env,
                         capture_output=True, text=True, timeout=120)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    info = dict(re.findall(r"(\w+)=(\S*)", subprocess.run(
        ["scontrol", "show", "job", "-o", job], env=env, capture_output=True, text=True,
        check=True).stdout))
    # the site's routing sent it to the V100 nodes; the default partition has none
    assert (info["Partition"], info["QOS"], info["NodeList"]) == (
        "cas_v100_4", "regular", "gpu[03-04]")
    # and the validation suite finds those nodes (not a partition called v100) and runs there
    rundir = four_nodes.scratch / "pytest-validate" / tmp_path.name
    proc = subprocess.run(
        [*hpcprov_argv(), "validate", "--site", str(site), "--partition", "v100", "--device",
         "cpu", "--env", str(prefix), "--json", "--workdir", str(rundir), "--nodes", "2",
         "--checks", "pernode", "--steps", "4"],
        capture_output=True, text=True, env={**env, "HPCPROV_HISTORY": str(tmp_path / "h")},
        timeout=600)
    data = json.loads(proc.stdout or "{}")
    assert proc.returncode == 0, (data.get("outcomes"), proc.stderr)
    jobs = {j["id"]: j for j in data["jobs"]}
    assert {(j["node_list"], j["state"]) for j in jobs.values()} == {
        ("gpu03", "COMPLETED"), ("gpu04", "COMPLETED")}, data["jobs"]

"""The testbed's real Grid Engine (Son of Grid Engine 8.1.9, Debian's build) beside Slurm:
a qmaster on the host, an execd in each node's namespaces (gpu01, gpu02), queue
``amd_a100nv_8``, parallel environments ``mpi`` ($fill_up), ``mpi_rr`` ($round_robin) and
``smp``, the consumable ``gpu``. Jobs are submitted from the host with ``qsub -terse``."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable

import pytest
from hpcprov_testbed_tests import SgeClient

from hpcprov.testbed import gridengine_config as gec

pytestmark = pytest.mark.testbed


def _hostfile(output: str) -> list[list[str]]:
    """The $PE_HOSTFILE lines a job printed between its markers."""
    block = output.split("--hostfile--\n", 1)[1].split("--end--\n", 1)[0]
    return [line.split() for line in block.splitlines()]


def test_cluster_shape_as_the_clients_see_it(sge: SgeClient) -> None:
    assert sge.run("bash", "-c", "command -v qsub").stdout.strip() == str(gec.BIN_DIR / "qsub")
    hosts = sge.run("qhost").stdout.splitlines()[2:]
    assert [h.split()[:2] for h in hosts] == [["global", "-"], ["gpu01", "lx-amd64"],
                                              ["gpu02", "lx-amd64"]]
    assert sge.run("qconf", "-sql").stdout.split() == ["amd_a100nv_8"]
    assert sge.run("qconf", "-spl").stdout.split() == ["mpi", "mpi1", "mpi2", "mpi4", "mpi8",
                                                       "mpi_rr", "smp"]
    pe = dict(line.split(None, 1) for line in sge.run("qconf", "-sp", "mpi").stdout.splitlines())
    assert (pe["allocation_rule"].strip(), pe["control_slaves"].strip()) == ("$fill_up", "TRUE")
    gpus = re.findall(r"^(gpu\d+)\s.*\n.*\bhc:gpu=(\d+)\.0+$",
                      sge.run("qhost", "-F", "gpu").stdout, re.M)
    assert gpus == [("gpu01", "8"), ("gpu02", "8")]
    # a node's name as an argument resolves in the qmaster's namespace, not on the host
    admin = sge.ge.admin_command(["qconf", "-se", "gpu02"])
    out = subprocess.run(admin, env=sge.env, capture_output=True, text=True, check=True).stdout
    assert re.search(r"^complex_values\s+gpu=8$", out, re.M)


def test_fill_up_job_on_two_hosts_pe_hostfile_qrsh_inherit_modules_and_qacct(
        sge: SgeClient) -> None:
    # 8 GPUs per slot and 8 per host: $fill_up must take one slot on each host
    job_id = sge.qsub(r"""#!/bin/bash -l
echo "on=$(hostname) job=$JOB_ID nslots=$NSLOTS nhosts=$NHOSTS pe=$PE queue=$QUEUE"
echo --hostfile--
cat "$PE_HOSTFILE"
echo --end--
for host in $(cut -d' ' -f1 "$PE_HOSTFILE"); do
    "$SGE_ROOT/bin/$ARC/qrsh" -inherit "$host" hostname | sed 's/^/inherit: /'
done
module load gcc/10.2.0 && echo "CC=$CC"
exit 3
""", "-pe", "mpi", "2", "-l", "gpu=8", "-N", "fillup")
    job = sge.wait(job_id)
    assert f"job={job_id} nslots=2 nhosts=2 pe=mpi" in job.output, job.output
    hostfile = _hostfile(job.output)
    assert sorted((h[0], h[1], h[2]) for h in hostfile) == [
        ("gpu01", "1", "amd_a100nv_8@gpu01"), ("gpu02", "1", "amd_a100nv_8@gpu02")]
    assert re.search(r"^on=(gpu01|gpu02) ", job.output, re.M)
    assert sorted(re.findall(r"^inherit: (\S+)$", job.output, re.M)) == ["gpu01", "gpu02"]
    assert "CC=/usr/bin/gcc" in job.output  # the testbed's Lmod modules, in a batch job
    assert job.exit_status == 3
    assert job.accounting["jobname"].strip() == "fillup"
    assert job.accounting["granted_pe"].strip() == "mpi"
    assert job.accounting["slots"].strip() == "2"


def test_round_robin_spreads_slots_over_hosts(sge: SgeClient) -> None:
    job_id = sge.qsub("#!/bin/bash\necho --hostfile--\ncat \"$PE_HOSTFILE\"\necho --end--\n",
                      "-pe", "mpi_rr", "4")
    job = sge.wait(job_id)
    assert sorted((h[0], h[1]) for h in _hostfile(job.output)) == [("gpu01", "2"),
                                                                    ("gpu02", "2")]
    assert job.exit_status == 0


def test_qdel_ends_a_running_two_host_job_and_its_processes(sge: SgeClient) -> None:
    sleep = ["sleep", "3600.4242"]  # the tasks' command line, unique to this test
    job_id = sge.qsub(f"""#!/bin/bash
for host in $(cut -d' ' -f1 "$PE_HOSTFILE"); do
    "$SGE_ROOT/bin/$ARC/qrsh" -inherit "$host" {' '.join(sleep)} &
done
echo started
wait
""", "-pe", "mpi_rr", "2", name="sleeper.sh")
    netns = {_inode(f"/run/netns/{n.netns}"): n.name for n in sge.ge.testbed.nodes}

    def running_on_nodes() -> list[str]:
        """The nodes where a task runs (by the network namespace of the process: every
        node's /proc shows the whole machine)."""
        found = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().decode(errors="replace").split("\0")[:-1]
                node = netns.get(_inode(f"/proc/{pid}/ns/net"))
            except OSError:
                continue
            if argv == sleep and node:
                found.add(node)
        return sorted(found)

    try:
        _poll(lambda: running_on_nodes() == ["gpu01", "gpu02"], 60,
              "the job's tasks on both hosts")
        # "t" (a task being transferred) turns "r" once both tasks run
        _poll(lambda: re.search(rf"^\s*{job_id}\s.*\sr\s", sge.run("qstat").stdout, re.M),
              30, f"job {job_id} to be running (qstat state r)")
        sge.run("qdel", job_id)
        _poll(lambda: not sge.known(job_id), 60, f"job {job_id} to leave the qmaster")
    finally:
        sge.run("qdel", job_id, check=False)
    _poll(lambda: running_on_nodes() == [], 30, "the job's processes to end")
    acct = sge.accounting(job_id)
    assert acct["exit_status"].split()[0] == "137", acct  # SIGKILL, as qdel ends a job
    assert "started" in (sge.workdir / f"sleeper.sh.o{job_id}").read_text()


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def test_more_gpus_than_a_node_has_is_refused_at_submission(sge: SgeClient) -> None:
    sge.write("nine.sh", "#!/bin/bash\ntrue\n")
    proc = sge.run("qsub", "-terse", "-w", "e", "-l", "gpu=9", "nine.sh", check=False)
    assert proc.returncode != 0
    assert "no suitable queues" in proc.stdout + proc.stderr


def _poll(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``predicate`` until true (no fixed sleeps), or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)

"""Generated launch lines at 10,000 nodes: the shell that finds the first node and the
host:slots list must not fail under `set -eo pipefail` (a `scontrol ... | head -n 1` ends
scontrol with SIGPIPE on a long list, and pipefail then fails the whole job script)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import BUNDLED

from hpcprov.jobs.jobscript import build_jobscript
from hpcprov.request.job import JobRequest
from hpcprov.site.launcher_kinds import KINDS
from hpcprov.site.profiles import load_site

NODES = 10_000
# every program a launch line may start, replaced by a function that prints its words: each
# launcher kind's (named for its program; a function named "container" is never called), the
# schedulers' per-node starter and the container runtimes (python: torchrun runs as
# `python -m torch.distributed.run`)
LAUNCHERS = (*KINDS, "blaunch", "apptainer", "singularity", "ch-run", "python")


def _fake_schedulers(bindir: Path, work: Path) -> dict[str, str]:
    """scontrol printing 10,000 host names as the real one does (and dying of SIGPIPE when
    its reader stops early), and the host files PBS and LSF jobs get."""
    bindir.mkdir()
    scontrol = bindir / "scontrol"
    scontrol.write_text('#!/bin/bash\n[ "$1 $2" = "show hostnames" ] || exit 2\n'
                        f'for ((i = 1; i <= {NODES}; i++)); do echo "n$i"; done\n')
    scontrol.chmod(0o755)
    slots = work / "slots"
    slots.write_text("".join(f"n{i}\nn{i}\n" for i in range(1, NODES + 1)))
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
            "SLURM_JOB_NODELIST": f"n[1-{NODES}]", "SLURM_JOB_ID": "1",
            "PBS_NODEFILE": str(slots), "PBS_JOBID": "1.pbs", "LSB_DJOB_HOSTFILE": str(slots),
            "LSB_JOBID": "1"}


@pytest.mark.parametrize("site_name", BUNDLED)
def test_every_launch_line_survives_a_10000_node_job(tmp_path: Path, site_name: str) -> None:
    site = load_site(site_name)
    if site.scheduler.value == "none":
        pytest.skip("one node")
    env = _fake_schedulers(tmp_path / "bin", tmp_path)
    stubs = "".join(f'{name}() {{ printf "%s\\n" "$@" > /dev/null; }}\n' for name in LAUNCHERS)
    part = max(site.partitions, key=lambda p: site.partitions[p].nodes)
    for launcher in site.launchers:
        req = JobRequest(site=site, nodes=site.partitions[part].nodes, partition=part,
                         launcher=launcher, command=("python", "train.py"), image="img",
                         options={n: "x" for n in site.policies.required_options})
        launch = build_jobscript(req).rstrip().split("\n\n")[-1]  # setup lines + the launch
        script = f"set -eo pipefail\n{stubs}{launch}\necho survived\n"
        proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                              env=env, timeout=120, cwd=tmp_path)
        assert proc.returncode == 0 and proc.stdout.strip() == "survived", \
            (launcher, proc.returncode, proc.stderr[-500:], launch)

"""Job options and launch lines that were written wrong (issue: lrun's, part 2): PBS walltime
in days, --nodes dropped on 1-node Slurm jobs, torchrun's static rendezvous without node
ranks, per-task CPU masks on torchrun's one agent per node, a PBS option written twice, a
job without a time limit said nowhere, a mandatory time naming no profile key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprov_tests import cli, pbs_directives, write_profile

PBS = """\
name: pb
scheduler: pbs
modules: {{system: none}}
partitions:
  gpu:
    nodes: 8
    cores_per_node: 32
    gpus: {{count: 4}}
    limits: {{max_walltime: "7-00:00:00"{default}}}
    default: true
    options: {{{options}}}
launchers:
  mpirun: {{kind: mpirun, oversubscribe: true}}
default_launcher: mpirun
{more}"""


def pbs_profile(tmp_path: Path, default: str = ', default_walltime: "01:00:00"',
                more: str = "", options: str = "") -> str:
    return str(write_profile(tmp_path, "pb", PBS.format(default=default, more=more,
                                                        options=options)))


def test_a_pbs_walltime_in_days_is_written_in_hours(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """PBS reads no days: 7-00:00:00 is 168:00:00 (it was written as given)."""
    ref = pbs_profile(tmp_path)
    for given, written in (("7-00:00:00", "168:00:00"), ("1-12", "36:00:00"),
                           ("90", "01:30:00"), ("02:00:00", "02:00:00")):
        res = cli(capsys, "jobscript", "--site", ref, "-N", "1", "-t", given, "--", "python",
                  "t.py")
        assert res.rc == 0, res.err
        assert ["-l", f"walltime={written}"] in pbs_directives(res.out), (given, res.out)


def test_a_one_node_slurm_job_with_total_tasks_names_its_node(
        capsys: pytest.CaptureFixture[str]) -> None:
    """task_request: total wrote --ntasks alone on 1-node jobs: Slurm may then spread the
    tasks over several nodes."""
    res = cli(capsys, "jobscript", "--site", "technion", "-N", "1", "--", "python", "t.py")
    assert res.rc == 0, res.err
    assert "#SBATCH --nodes=1" in res.out.splitlines()
    assert "#SBATCH --ntasks=8" in res.out.splitlines()


# ------------------------------------------------ torchrun's static rendezvous, per node

STARTER = r'''#!{python}
"""A stub of srun/mpirun starting one process per node, each with its starter's variables."""
import os, re, subprocess, sys

argv = sys.argv[1:]
size = next(int(m.group(1)) for a in argv if (m := re.fullmatch(r"--ntasks=(\d+)", a))) \
    if {name!r} == "srun" else int(argv[argv.index("-np") + 1])
start = argv.index("bash")
procs = []
for node in range(size):
    env = dict(os.environ)
    if {name!r} == "srun":
        env.update(SLURM_PROCID=str(node), SLURM_NODEID=str(node), SLURM_NTASKS=str(size))
    else:
        env.update(OMPI_COMM_WORLD_RANK=str(node), OMPI_COMM_WORLD_SIZE=str(size))
    procs.append(subprocess.Popen(argv[start:], env=env))
sys.exit(max(p.wait() for p in procs))
'''
# torchrun's agent: prints the arguments it was given
AGENT = '#!/bin/sh\necho "AGENT $*"\n'
SCONTROL = '#!/bin/sh\nprintf "n1\\nn2\\n"\n'


def stub_bin(root: Path) -> Path:
    folder = root / "bin"
    folder.mkdir()
    for name in ("srun", "mpirun"):
        (folder / name).write_text(STARTER.format(python=sys.executable, name=name))
    (folder / "python").write_text(AGENT)
    (folder / "scontrol").write_text(SCONTROL)
    for path in folder.iterdir():
        path.chmod(0o755)
    return folder


@pytest.mark.parametrize("wrapper", ["srun", "mpirun"])
def test_static_rendezvous_gives_each_nodes_agent_its_node_rank(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, wrapper: str) -> None:
    """Without a rendezvous store nothing hands out node ranks: every agent was node 0.
    Each node's agent now takes --node_rank from its own starter's variables."""
    ref = str(write_profile(tmp_path, "ts", (
        "name: ts\nextends: testbed\nmodules: {system: none}\nlaunchers:\n"
        f"  torchrun: {{kind: torchrun, rdzv_backend: static, per_node_wrapper: {wrapper}}}\n"
        "default_launcher: torchrun\n")))
    res = cli(capsys, "jobscript", "--site", ref, "-N", "2", "--no-activate", "--",
              "python", "train.py", "--lr", "1")
    assert res.rc == 0, res.err
    (tmp_path / "job.sh").write_text(res.out)
    proc = subprocess.run(
        ["bash", str(tmp_path / "job.sh")], cwd=tmp_path, capture_output=True, text=True,
        timeout=60, env={"PATH": f"{stub_bin(tmp_path)}:/usr/bin:/bin", "HOME": str(tmp_path),
                         "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]",
                         "SLURM_SUBMIT_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    agents = sorted(ln.split()[1:] for ln in proc.stdout.splitlines()
                    if ln.startswith("AGENT "))
    assert len(agents) == 2, proc.stdout
    for node, words in enumerate(agents):
        assert words[:2] == ["-m", "torch.distributed.run"]
        assert f"--node_rank={node}" in words and "--rdzv_backend=static" in words
        # before the script: torchrun reads its own options there only
        assert words.index(f"--node_rank={node}") < words.index("train.py")
        assert words[-3:] == ["train.py", "--lr", "1"]


# ------------------------------------------------------------------- the job's time limit

def test_a_job_without_a_time_limit_is_said(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    """A partition without default_walltime wrote no time, silently: the scheduler's
    default (often short, or a refusal) applied. Now it is a warning naming the key and -t;
    with either, none."""
    ref = pbs_profile(tmp_path, default="")
    res = cli(capsys, "jobscript", "--site", ref, "-N", "1", "--", "python", "t.py")
    assert res.rc == 0, res.err
    assert not [d for d in pbs_directives(res.out) if d[-1].startswith("walltime=")]
    (warning,) = [ln for ln in res.err.splitlines() if "[no-time]" in ln]
    assert "(fix: set partitions.gpu.limits.default_walltime in the profile, or pass " \
        "-t/--time)" in warning
    timed = cli(capsys, "jobscript", "--site", ref, "-N", "1", "-t", "1:00:00", "--", "python",
                "t.py")
    assert timed.rc == 0 and "[no-time]" not in timed.err, timed.err
    (tmp_path / "d").mkdir()
    default = cli(capsys, "jobscript", "--site", pbs_profile(tmp_path / "d"), "-N", "1", "--",
                  "python", "t.py")
    assert default.rc == 0 and "[no-time]" not in default.err, default.err


REQUIRED_TIME = """\
policies:
  required_options:
    walltime: {reason: jobs without a limit are refused}
"""


def test_a_mandatory_time_names_default_walltime_and_is_met_by_t(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """required_options naming the time limit asked for `--option walltime=...`, which is
    refused (only -t sets the time), and -t did not meet it. Now -t or the partition's
    default_walltime meets it, and its refusal names both."""
    ref = pbs_profile(tmp_path, default="", more=REQUIRED_TIME)
    res = cli(capsys, "jobscript", "--site", ref, "-N", "1", "--", "python", "t.py")
    assert res.rc == 2
    (line,) = [ln for ln in res.err.splitlines() if "[missing-option]" in ln]
    assert line.endswith("(fix: set partitions.gpu.limits.default_walltime in the profile, "
                         "or pass -t/--time)"), line
    assert "--option" not in line
    timed = cli(capsys, "jobscript", "--site", ref, "-N", "1", "-t", "2:00:00", "--",
                "python", "t.py")
    assert timed.rc == 0, timed.err
    assert [d for d in pbs_directives(timed.out) if d[-1].startswith("walltime=")] == [
        ["-l", "walltime=2:00:00"]]
    # site check: the partition's smallest job says the same
    check = cli(capsys, "site", "check", ref)
    assert "partitions.gpu.limits.default_walltime" in check.out + check.err
    assert "-o walltime" not in check.out + check.err


def test_a_pbs_option_is_written_once_the_partitions_winning(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A partition's queue and join options beside the queue hpcprov names (queue_always)
    and its -j oe were written twice (#PBS -q gpu, then #PBS -q gpu_special): now once, the
    partition's value in place of hpcprov's."""
    ref = pbs_profile(tmp_path, more="pbs: {queue_always: true, join_output: true}\n",
                      options="queue: gpu_special, join: eo")
    script = cli(capsys, "jobscript", "--site", ref, "-N", "1", "--", "python", "t.py").out
    flags = [d[0] if d[0] != "-l" else "-l " + d[1].split("=")[0].lower()
             for d in pbs_directives(script)]
    assert len(flags) == len(set(flags)), flags
    directives = pbs_directives(script)
    assert ["-q", "gpu_special"] in directives and ["-j", "eo"] in directives
    # the interactive allocation alike
    res = cli(capsys, "launch", "--site", ref, "-N", "1", "--json", "--", "python", "t.py")
    allocate = json.loads(res.out)["allocate"]
    assert allocate.count("-q") == 1 and allocate.count("-j") == 1, allocate


@pytest.mark.parametrize("bind", ["mask_cpu:0xff,0xff00", "verbose,map_cpu:0,8"])
def test_torchruns_agent_step_takes_no_per_task_cpu_mask(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, bind: str) -> None:
    """A partition's per-task CPU masks went to torchrun's one agent per node too: the agent
    took the first task's mask, and its 8 ranks with it. The ranks' own srun keeps them."""
    ref = str(write_profile(tmp_path, "cb", (
        "name: cb\nextends: testbed\nmodules: {system: none}\npartitions:\n"
        f"  amd_a100nv_8: {{options: {{cpu-bind: '{bind}'}}}}\n"
        "launchers:\n  torchrun: {kind: torchrun}\n  srun: {kind: srun}\n")))
    agent = cli(capsys, "jobscript", "--site", ref, "-N", "2", "-t", "1:00:00", "-l",
                "torchrun", "--", "python", "train.py")
    assert agent.rc == 0, agent.err
    (line,) = [ln for ln in agent.out.splitlines() if ln.startswith("srun ")]
    assert "--cpu-bind" not in line and "torch.distributed.run" in line, line
    ranks = cli(capsys, "jobscript", "--site", ref, "-N", "2", "-t", "1:00:00", "-l", "srun",
                "--", "python", "train.py")
    assert ranks.rc == 0, ranks.err
    (line,) = [ln for ln in ranks.out.splitlines() if ln.startswith("srun ")]
    assert f"--cpu-bind={bind}" in line


def test_static_rendezvous_where_the_starter_gives_no_node_rank_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """blaunch (LSF's per-node starter) tells its processes no index: one line, the fix."""
    ref = str(write_profile(tmp_path, "ls", "name: ls\nextends: lsf-example\nlaunchers:\n"
                            "  torchrun: {kind: torchrun, rdzv_backend: static}\n"))
    res = cli(capsys, "jobscript", "--site", ref, "-N", "2", "-l", "torchrun", "--", "python",
              "t.py")
    assert res.rc == 2 and res.err_lines == [
        "hpcprov: error: launcher torchrun: rdzv_backend: static needs each node's rank, and "
        "LSF's per-node starter gives its agents none: set launchers.torchrun.rdzv_backend: "
        "c10d, or per_node_wrapper: mpirun"]

"""The job's geometry is set only by hpcprov's own flags (issue 27, class 8): a scheduler
option (``-o``) that would set the nodes, tasks, GPUs, time limit, queue or PBS chunks, in
any spelling the site's scheduler takes, is refused in one line that names the flag to use,
so lint judges exactly the job the script describes. Each repro below is one a reviewer
used to bypass lint; harmless options still pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hpcprov_tests import Result, assert_one_line_error, cli, write_profile

from hpcprov.core.findings import LintFailed
from hpcprov.jobs.api import plan_jobscript, request

NODES, TASKS, GPUS, TIME, QUEUE = ("-N/--nodes", "--tasks-per-node", "-G/--gpus-per-node",
                                   "-t/--time", "-p/--partition")
CHUNKS = "-N/--nodes, -G/--gpus-per-node, --tasks-per-node, --cpus-per-task"
# what each site needs to lint clean otherwise
NEEDS = {"neuron": ["-o", "comment=python"], "sockeye": ["-o", "account=st-x-1-gpu"],
         "lsf-example": []}


def jobscript(capsys: pytest.CaptureFixture[str], site: str, *args: str) -> Result:
    return cli(capsys, "jobscript", "--site", site, *NEEDS.get(site, []), *args,
               "--", "python", "train.py")


def refused(res: Result, flag: str) -> None:
    """Exit 2, no script, one line naming the hpcprov flag to use instead of -o."""
    line = assert_one_line_error(res, 2, "[geometry-option] -o ", f"(fix: use {flag}",
                                 "instead of -o)")
    assert line.startswith("hpcprov: error: ")
    assert res.out == ""


SLURM = [
    # nodes: min,max lists, long and short, '=' or a word of its own, value attached, and
    # the abbreviation sbatch reads as --nodes
    ("nodes=1,999", NODES), ("--nodes=1,999", NODES), ("--nodes 999", NODES),
    ("-N 999", NODES), ("-N999", NODES), ("N=999", NODES), ("node=999", NODES),
    ("nodes", NODES),
    # GPUs: any option that asks for them, and a --gres that would replace the site's
    ("gpus=512", GPUS), ("gpus-per-task=64", GPUS), ("--gpus-per-node=64", GPUS),
    ("-G 64", GPUS), ("-G64", GPUS), ("gpus-per-socket=64", GPUS), ("gres=gpu:64", GPUS),
    ("--gres=gpu:a100:64", GPUS), ("gres=nvme:1,gpu:64", GPUS), ("gres=nvme:1", GPUS),
    ("tres-per-task=gres/gpu:8", GPUS),
    # tasks
    ("ntasks=999", TASKS), ("-n 999", TASKS), ("ntasks-per-node=64", TASKS),
    ("tasks-per-node=64", TASKS), ("ntasks-per-gpu=8", TASKS),
    # time
    ("time=999:00:00", TIME), ("--time 999:00:00", TIME), ("-t 999:00:00", TIME),
    ("-t999:00:00", TIME), ("t=999:00:00", TIME),
    # the partition lint judges the job on
    ("partition=skl", QUEUE), ("-p skl", QUEUE), ("part=skl", QUEUE),
]


@pytest.mark.parametrize(("option", "flag"), SLURM)
def test_slurm_geometry_options_are_refused(capsys: pytest.CaptureFixture[str], option: str,
                                            flag: str) -> None:
    refused(jobscript(capsys, "neuron", "-o", option), flag)


@pytest.mark.parametrize(("option", "flag"), [
    ("select=999:ncpus=8", CHUNKS), ("-l select=999:ncpus=8", CHUNKS),
    ("l=select=999:ncpus=8", CHUNKS), ("-lselect=999", CHUNKS), ("Select=999", CHUNKS),
    ("place=pack", "-N/--nodes with --tasks-per-node"),
    ("l=place=scatter", "-N/--nodes with --tasks-per-node"),
    ("nodes=8", NODES), ("-l nodes=8", NODES), ("nodect=8", NODES),
    ("walltime=999:00:00", TIME), ("-l walltime=999:00:00", TIME),
    ("l=mem=4gb,walltime=999:00:00", TIME),
    ("ngpus=64", GPUS), ("mpiprocs=64", TASKS),
    ("ncpus=999", "--cpus-per-task with --tasks-per-node"),
    ("q=gpu", QUEUE), ("-q gpu", QUEUE), ("queue=gpu", QUEUE),
])
def test_pbs_geometry_options_are_refused(capsys: pytest.CaptureFixture[str], option: str,
                                          flag: str) -> None:
    refused(jobscript(capsys, "sockeye", "-o", option), flag)


@pytest.mark.parametrize(("option", "flag"), [
    ("n=999", TASKS), ("-n 999", TASKS), ("-n999", TASKS), ("ntasks=999", TASKS),
    ("nnodes=99", NODES), ("-nnodes 99", NODES), ("nodes=99", NODES),
    ("W=99:00", TIME), ("-W 99:00", TIME), ("time=99:00:00", TIME),
    ("gpu=num=64", GPUS), ("-gpu num=64", GPUS),
    ("R=span[ptile=1]", TASKS), ("-R rusage[ngpus_physical=64]", GPUS),
    # would replace the -R span[ptile=N] hpcprov places the tasks with
    ("resource=rusage[mem=4000]", TASKS),
    ("q=big", QUEUE), ("queue=big", QUEUE),
])
def test_lsf_geometry_options_are_refused(capsys: pytest.CaptureFixture[str], option: str,
                                          flag: str) -> None:
    refused(jobscript(capsys, "lsf-example", "-o", option), flag)


def test_each_refused_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    res = jobscript(capsys, "neuron", "-o", "nodes=999", "-o", "mail-type=END", "-o",
                    "gpus=512")
    assert res.rc == 2 and res.out == ""
    nodes, gpus = res.err_lines
    assert "[geometry-option] -o nodes=999 " in nodes and f"use {NODES}" in nodes
    assert "[geometry-option] -o gpus=512 " in gpus and f"use {GPUS}" in gpus


@pytest.mark.parametrize("command", [["launch"], ["launch", "--allocate"]])
def test_launch_refuses_them_too(capsys: pytest.CaptureFixture[str],
                                 command: list[str]) -> None:
    res = cli(capsys, *command, "--site", "neuron", "-o", "comment=python", "-o",
              "nodes=1,999", "--", "python", "train.py")
    refused(res, NODES)


def test_the_api_refuses_them() -> None:
    with pytest.raises(LintFailed, match=r"-o gpus-per-task=64 .*-G/--gpus-per-node"):
        plan_jobscript(request("neuron", ("comment=python", "gpus-per-task=64"),
                               command=("python", "train.py")))


def test_validate_refuses_them(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prefix = tmp_path / "env"  # looks provisioned: a dry run reads no more
    (prefix / ".hpcprov").mkdir(parents=True)
    (prefix / ".hpcprov" / "manifest.json").write_text("{}")
    common = ["validate", "--site", "neuron", "--dry-run", "--checks", "env",
              "--env", str(prefix), "--workdir", str(tmp_path / "run"), "-o", "comment=python"]
    res = cli(capsys, *common, "-o", "ntasks=999")
    assert res.rc == 2 and res.err_lines == [
        "hpcprov: error: -o 'ntasks=999' would set the jobs' tasks, which validate sets itself "
        "(--ranks-per-node): drop it"]
    res = cli(capsys, *common, "-o", "time=9:00:00")
    assert res.rc == 2 and "validate sets itself (--timeout)" in res.err
    ok = cli(capsys, *common, "-o", "mail-type=END", "--json")
    assert ok.rc == 0, ok.err
    scripts = "\n".join(s["text"] for s in json.loads(ok.out)["scripts"])
    assert "#SBATCH --mail-type=END" in scripts


SIZED = """\
name: sized
scheduler: pbs
partitions:
  small:
    nodes: 64
    cores_per_node: 48
    gpus: {count: 4}
    limits: {max_nodes_per_job: 4, max_walltime: "24:00:00"}
    default: true
  large:
    nodes: 64
    cores_per_node: 48
    gpus: {count: 4}
    limits: {min_nodes_per_job: 5, max_nodes_per_job: 32, max_walltime: "02:00:00"}
    by_job_size: true
launchers:
  mpirun: {kind: mpirun, oversubscribe: true}
default_launcher: mpirun
"""


def test_a_queue_by_size_is_judged_as_the_script_names_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    site = str(write_profile(tmp_path, "sized", SIZED))
    # the repro: judged on large (8 nodes) while the script named small and wrote
    # -l nodes=8 beside select, which PBS Pro refuses
    refused(jobscript(capsys, site, "-o", "nodes=8", "-t", "10:00:00"), NODES)
    # the flag: the script names the queue lint judged, with no old-style nodes
    ok = jobscript(capsys, site, "-N", "8", "-t", "01:00:00")
    assert ok.rc == 0, ok.err
    directives = [ln for ln in ok.out.splitlines() if ln.startswith("#PBS ")]
    assert "#PBS -q large" in directives
    assert any(ln.startswith("#PBS -l select=8:") for ln in directives)
    assert not [ln for ln in directives if ln.startswith("#PBS -l nodes")]
    # and large's own limit is the one applied
    over = jobscript(capsys, site, "-N", "8", "-t", "10:00:00")
    assert over.rc == 2 and "[time-limit]" in over.err and "large" in over.err


@pytest.mark.parametrize(("site", "args", "line"), [
    ("neuron", ["-o", "--mail-type=END"], "#SBATCH --mail-type=END"),
    ("neuron", ["-o", "--mail-type END"], "#SBATCH --mail-type=END"),
    ("neuron", ["-o", "mail-user=me@example.org", "-o", "exclusive"], "#SBATCH --exclusive"),
    # a generic resource on a job that asks for no GPUs replaces nothing
    ("neuron", ["-p", "skl", "-G", "0", "-o", "gres=nvme:1"], "#SBATCH --gres=nvme:1"),
    ("cc", ["-o", "account=def-pi"], "#SBATCH --account=def-pi"),
    ("cc", ["-o", "--account=def-pi", "-o", "cpus-per-task=2"], "#SBATCH --cpus-per-task=2"),
    ("sockeye", ["-o", "mail-type=abe"], "#PBS -m abe"),
    ("sockeye", ["-o", "mem=4gb"], "#PBS -l mem=4gb"),
    ("lsf-example", ["-o", "-P proj"], "#BSUB -P proj"),
    ("lsf-example", ["-o", "R=rusage[mem=4000]"], '#BSUB -R "rusage[mem=4000]"'),
    ("lsf-example", ["-o", "-x"], "#BSUB -x"),
])
def test_harmless_options_still_pass(capsys: pytest.CaptureFixture[str], site: str,
                                     args: list[str], line: str) -> None:
    res = jobscript(capsys, site, *args)
    assert res.rc == 0, res.err
    assert line in res.out.splitlines()

"""Grid Engine's planning half (issue 43, deliverable 1): `#$` directives, the geometry
through a parallel environment or the site's node units, lint, and a generated 2-node job
whose every rank gets torch's environment under a stub mpirun that sets only Open MPI's own
variables (the real cell: tests/testbed/test_testbed_gridengine*.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprov_tests import assert_one_line_error, cli, write_profile

from hpcprov.jobs.lint import lint
from hpcprov.jobs.ranks import CONTRACT
from hpcprov.request.job import JobRequest
from hpcprov.schedulers import gridengine as ge
from hpcprov.site.profiles import load_site

EXAMPLE = str(Path(__file__).parents[1] / "docs" / "examples" / "gridengine.yaml")


def directives(script: str) -> list[str]:
    return [ln.removeprefix("#$ ") for ln in script.splitlines() if ln.startswith("#$ ")]


def codes(req: JobRequest, level: str | None = None) -> set[str]:
    return {f.code for f in lint(req) if level is None or f.level == level}


def test_a_job_asks_for_its_slots_through_the_partitions_parallel_environment(
        capsys: pytest.CaptureFixture[str]) -> None:
    """2 nodes x 8 ranks: 16 slots of the PE of 8 slots per host (mpi{per_node}), one GPU
    per slot, the time limit as h_rt, the queue, -cwd and -j y; -V never."""
    res = cli(capsys, "jobscript", "--site", "testbed-gridengine", "-N", "2", "-t",
              "2:30:00", "-J", "ddp", "--", "python", "train.py")
    assert res.rc == 0, res.err
    assert directives(res.out) == ["-N ddp", "-S /bin/bash", "-cwd", "-q amd_a100nv_8",
                                   "-pe mpi8 16", "-l gpu=1", "-l h_rt=2:30:00", "-j y"]
    assert not [d for d in directives(res.out) if d.startswith("-V")]
    assert res.out.startswith("#!/bin/bash\n")
    one = cli(capsys, "jobscript", "--site", "testbed-gridengine", "-N", "1", "-G", "2",
              "--", "python", "train.py")
    assert "-pe mpi2 2" in directives(one.out) and "-l gpu=1" in directives(one.out)


def test_a_site_sized_in_node_units_writes_them_and_its_own_group_flag(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's site: `-l node_f=2 -l h_rt=0:10:00 -g GROUP`, no queue, no PE."""
    res = cli(capsys, "jobscript", "--site", EXAMPLE, "-N", "2", "-o", "group=tga-x", "--",
              "python", "train.py")
    assert res.rc == 0, res.err
    found = directives(res.out)
    assert {"-l node_f=2", "-l h_rt=0:10:00", "-g tga-x"} <= set(found)
    assert not [d for d in found if d.startswith(("-q", "-pe", "-l gpu"))]


STUB_MPIRUN = r'''#!{python}
"""A stub of Open MPI's mpirun: -np N -H host:slots,... ; each rank gets only Open MPI's own
variables and runs the command from the rank contract's bash on."""
import os, subprocess, sys
argv = sys.argv[1:]
size = int(argv[argv.index("-np") + 1])
hosts = argv[argv.index("-H") + 1].split(",")
per = int(hosts[0].split(":")[1])
start = argv.index("bash")
procs = []
for r in range(size):
    env = {{k: v for k, v in os.environ.items()}}
    env.update(OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE=str(size),
               OMPI_COMM_WORLD_LOCAL_RANK=str(r % per), OMPI_COMM_WORLD_LOCAL_SIZE=str(per))
    procs.append(subprocess.Popen(argv[start:], env=env))
sys.exit(max(p.wait() for p in procs))
'''
SHOW = ("import json, os; print('RANKENV ' + json.dumps({k: os.environ.get(k) for k in "
        f"{list(CONTRACT)!r}}}), flush=True)")


def test_every_rank_of_a_node_units_job_gets_torchs_environment(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The done-when case: 2 nodes of 4 ranks from the job's $PE_HOSTFILE, each rank its
    RANK, LOCAL_RANK, NODE_RANK, WORLD_SIZE and the first host as MASTER_ADDR, from Open
    MPI's variables alone (mpirun -H built from the host file)."""
    path = write_profile(tmp_path, "units", f"extends: {EXAMPLE}\nname: units\n"
                         "modules: {system: none}\n")
    res = cli(capsys, "jobscript", "--site", str(path), "-N", "2", "--no-activate", "-o",
              "group=tga-x", "--", sys.executable, "-c", SHOW)
    assert res.rc == 0, res.err
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").write_text(STUB_MPIRUN.format(python=sys.executable))
    (bin_dir / "mpirun").chmod(0o755)
    hostfile = tmp_path / "pe_hostfile"
    hostfile.write_text("r7i0n3.cluster 4 all.q@r7i0n3.cluster UNDEFINED\n"
                        "r7i0n4.cluster 4 all.q@r7i0n4.cluster UNDEFINED\n")
    (tmp_path / "job.sh").write_text(res.out)
    proc = subprocess.run(["bash", str(tmp_path / "job.sh")], cwd=tmp_path, text=True,
                          capture_output=True, timeout=120,
                          env={"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
                               "HOME": str(tmp_path), "PE_HOSTFILE": str(hostfile),
                               "JOB_ID": "4242", "NSLOTS": "8", "NHOSTS": "2"})
    assert proc.returncode == 0, proc.stderr
    ranks = [json.loads(ln.removeprefix("RANKENV ")) for ln in proc.stdout.splitlines()
             if ln.startswith("RANKENV ")]
    assert sorted(int(r["RANK"]) for r in ranks) == list(range(8))
    for r in ranks:
        rank = int(r["RANK"])
        assert (r["WORLD_SIZE"], r["LOCAL_WORLD_SIZE"]) == ("8", "4")
        assert (r["LOCAL_RANK"], r["NODE_RANK"]) == (str(rank % 4), str(rank // 4))
        assert r["MASTER_ADDR"] == "r7i0n3.cluster" and r["MASTER_PORT"] == "29500"


def test_lint_refuses_what_the_site_refuses(tmp_path: Path) -> None:
    site = load_site("testbed-gridengine")
    no_time = write_profile(tmp_path, "notime", "extends: testbed-gridengine\nname: notime\n"
                            "partitions:\n  amd_a100nv_8:\n    limits: {default_walltime: "
                            "null}\n")
    assert "no-h-rt" in codes(JobRequest(site=load_site(str(no_time)), nodes=2,
                                         command=("true",)), "error")
    assert "no-h-rt" not in codes(JobRequest(site=load_site(str(no_time)), nodes=2,
                                             time="1:00:00", command=("true",)))
    one_host = write_profile(tmp_path, "smp", "extends: testbed-gridengine\nname: smp\n"
                             "gridengine: {pe: smp, pe_rule: pe_slots}\n")
    assert "pe-one-host" in codes(JobRequest(site=load_site(str(one_host)), nodes=2,
                                             command=("true",)), "error")
    fill = write_profile(tmp_path, "fill", "extends: testbed-gridengine\nname: fill\n"
                         "gridengine: {pe: mpi, pe_rule: fill_up}\n")
    assert "pe-placement" in codes(JobRequest(site=load_site(str(fill)), nodes=2,
                                              gpus_per_node=0, tasks_per_node=2,
                                              command=("true",)), "warning")
    assert "pe-placement" not in codes(JobRequest(site=load_site(str(fill)), nodes=2,
                                                  command=("true",)))  # GPUs place it
    other_gpus = JobRequest(site=site, nodes=1, options={"ngpus": "2"}, command=("true",))
    assert "gpu-resource" in codes(other_gpus, "warning")


@pytest.mark.parametrize("option", ["pe=mpi 4", "h_rt=99:00:00", "l=h_rt=1:00:00,h_vmem=2G",
                                    "q=other", "gpu=2"])
def test_an_option_that_would_set_the_geometry_is_refused(
        capsys: pytest.CaptureFixture[str], option: str) -> None:
    res = cli(capsys, "jobscript", "--site", "testbed-gridengine", "-o", option, "--",
              "python", "t.py")
    assert_one_line_error(res, 2, "[geometry-option]")


def test_a_value_qsub_cannot_read_back_is_refused_and_a_blank_is_quoted(
        capsys: pytest.CaptureFixture[str]) -> None:
    """qsub drops quote characters from a #$ line and ends it at a #: such a value is
    refused in one line; a value with blanks is one word in double quotes."""
    res = cli(capsys, "jobscript", "--site", "testbed-gridengine", "-o", "A=cost#1", "--",
              "python", "t.py")
    assert_one_line_error(res, 2, "A=", "#")
    ok = cli(capsys, "jobscript", "--site", "testbed-gridengine", "-o", "ac=a b", "--",
             "python", "t.py")
    assert ok.rc == 0 and '-ac "a b"' in directives(ok.out)


def test_a_forbidden_flag_is_refused_under_its_declared_name(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """gridengine.flags {group: -g}: forbidding -g refuses the option under the site's
    name too (one flag, one option)."""
    path = write_profile(tmp_path, "nog", "extends: testbed-gridengine\nname: nog\n"
                         "gridengine: {flags: {group: -g}}\npolicies:\n"
                         "  forbidden_options: {g: groups are set by the site}\n")
    res = cli(capsys, "jobscript", "--site", str(path), "-o", "group=x", "--", "true")
    assert_one_line_error(res, 2, "[forbidden-option]", "-g")
    assert cli(capsys, "jobscript", "--site", str(path), "--", "true").rc == 0


def test_the_scheduler_state_and_accounting_are_read() -> None:
    qstat = """\
job-ID  prior   name     user   state submit/start at     queue                  master ja-task-ID
--------------------------------------------------------------------------------------------------
     12 0.55500 hpcprov  root   r     11/28/2026 13:20:01 amd_a100nv_8@gpu01     MASTER
                                                          amd_a100nv_8@gpu01     SLAVE
                                                          amd_a100nv_8@gpu02.ib  SLAVE
     13 0.00000 hpcprov  root   qw    11/28/2026 13:20:02
     14 0.55500 other    root   Eqw   11/28/2026 13:20:03
"""
    jobs = ge.qstat_jobs(qstat)
    assert jobs["12"] == ("r", ["gpu01", "gpu02"]) and jobs["13"] == ("qw", [])
    assert jobs["14"][0] == "Eqw"
    qacct = ("==============================================================\n"
             "qname        amd_a100nv_8\njobnumber    12\nfailed       0    \n"
             "exit_status  3\n")
    assert ge.exit_status(ge.qacct_fields(qacct)) == (3, "")
    killed = ge.qacct_fields("failed       100 : assumedly after job\nexit_status  137\n")
    code, why = ge.exit_status(killed)
    assert code == 137 and "100 : assumedly after job" in why
    assert ge.hh_mm_ss("2-00:00:00") == "48:00:00"

"""GPU binding per launcher (issue 45, defects 7-10): what each rank sees of its node's GPUs
is a fact of the launcher that starts it (``per_rank`` on a launcher, default the
partition's ``gpus.per_rank``). One profile holds an srun launcher that binds one GPU per
task and a torchrun launcher whose ranks see all; validate, lint, jobscript and the guide
read each launcher's own value.

The jobs validate plans run here under a stub srun that binds GPUs as Slurm's does (every
task of its geometry at once; with --gpus-per-task=N on its line, or SLURM_GPUS_PER_TASK
from the job, each task sees N GPUs of its own through the visibility variable) on a fake
GPU vendor (tests/fake_gpu: torch.cuda narrowed by that variable), and are judged by
validate/judge.py."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hpcprov_tests import REPO, cli, write_profile

from hpcprov.request.job import JobRequest
from hpcprov.site.profiles import load_site
from hpcprov.validate.judge import JobResult, judge, shaped_records
from hpcprov.validate.plan import Job, Options, job_script, placement, plan_jobs
from hpcprov.validate.run import command_for, copy_programs

FAKE_GPU = REPO / "tests" / "fake_gpu"

SRUN = r'''#!{python}
"""A stub srun that binds GPUs as Slurm's does: its options, then the command; every task
at once with Slurm's variables; --gpus-per-task=N (else SLURM_GPUS_PER_TASK, which sbatch
exports from the job's own) gives each task N GPUs of its own, named in STUB_VISIBLE (the
vendor's binding variable: CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES on AMD GPUs)."""
import os, subprocess, sys

argv, opts = sys.argv[1:], {{}}
while argv and argv[0].startswith("-"):
    name, _, value = argv.pop(0).partition("=")
    opts[name] = value
size = int(opts.get("--ntasks") or os.environ["SLURM_NTASKS"])
per = int(opts.get("--ntasks-per-node") or os.environ["SLURM_NTASKS_PER_NODE"])
each = opts.get("--gpus-per-task") or os.environ.get("SLURM_GPUS_PER_TASK")
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(f"{{size}} task(s), {{each or 'all'}} GPU(s) each\n")
procs = []
for r in range(size):
    local, env = r % per, dict(os.environ)
    env.update(SLURM_PROCID=str(r), SLURM_NTASKS=str(size), SLURM_LOCALID=str(local),
               SLURM_NODEID=str(r // per))
    if each:
        env[os.environ["STUB_VISIBLE"]] = ",".join(
            str(local * int(each) + g) for g in range(int(each)))
    procs.append(subprocess.Popen(argv, env=env))
sys.exit(max(p.wait() for p in procs))
'''
SCONTROL = '#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && echo localhost\nexit 0\n'

# one node of two GPUs; srun binds one GPU per task (its own args), torchrun's ranks see all
PROFILE = """\
name: perl
extends: testbed
modules: {{system: none}}
partitions:
  two:
    description: one node of two GPUs
    nodes: 1
    cores_per_node: 8
    gpus: {{count: 2, vendor: {vendor}{partition}}}
{options}launchers:
  srun: {{kind: srun, rendezvous_env: true{srun}}}
  torchrun: {{kind: torchrun{torchrun}}}
default_launcher: srun
"""
# the site's own words: srun binds one GPU per task, torchrun shows every GPU
BOUND_SRUN = dict(srun=", args: [--gpus-per-task=1], per_rank: one", torchrun="",
                  partition="", options="")
# the same said the other way round: the partition binds (Slurm's gpus_per_task request),
# and torchrun's one agent per node sees all of its node's GPUs
BOUND_PARTITION = dict(srun="", torchrun=", per_rank: all", partition=", per_rank: one",
                       options="slurm: {gpu_request: gpus_per_task}\n")


# AMD GPUs beside the testbed's NVIDIA ones: no Horovod (one build cannot serve both)
AMD = "horovod: {source: none}\n"


def profile(tmp_path: Path, vendor: str = "nvidia", **words: str) -> Path:
    return write_profile(tmp_path, "perl", PROFILE.format(vendor=vendor, **words))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stubs(root: Path, visible: str) -> dict[str, str]:
    """The stub srun and scontrol, and the environment a one-node job of two tasks runs in
    (what sbatch gives it), on two fake GPUs narrowed by ``visible``."""
    folder = root / "bin"
    folder.mkdir()
    (folder / "srun").write_text(SRUN.format(python=sys.executable))
    (folder / "scontrol").write_text(SCONTROL)
    for path in folder.iterdir():
        path.chmod(0o755)
    (folder / "python").symlink_to(sys.executable)
    return {"PATH": f"{folder}:/usr/bin:/bin", "HOME": str(root),
            "PYTHONPATH": str(FAKE_GPU), "HPCPROV_TEST_GPUS": "2", "OMP_NUM_THREADS": "1",
            "HPCPROV_TEST_GPU_VAR": visible, "STUB_VISIBLE": visible,
            "HPCPROV_TEST_GPU_LOG": str(root / "gpus.log"), "STUB_LOG": str(root / "srun.log"),
            "SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_ID": "7", "SLURM_NTASKS": "2",
            "SLURM_NTASKS_PER_NODE": "2"}


def sbatch_exports(script: Path) -> dict[str, str]:
    """What sbatch exports to a job from its own --gpus-per-task (srun reads it back)."""
    said = [ln.split("=", 1)[1] for ln in script.read_text().splitlines()
            if ln.startswith("#SBATCH --gpus-per-task=")]
    return {"SLURM_GPUS_PER_TASK": said[-1]} if said else {}


def options(path: Path, *checks: str) -> Options:
    return Options(JobRequest(load_site(str(path)), partition="two", activate=False), checks,
                   device="cuda", train_steps=2, launchers=("srun", "torchrun"))


def write_job(job: Job, o: Options, rundir: Path) -> Path:
    script = rundir / f"{job.id}.sh"
    script.write_text(job_script(job, o, str(rundir), command_for(job, o, rundir)))
    return script


def result(job: Job, code: int, output: str) -> JobResult:
    records, malformed = shaped_records(output)
    return JobResult(job.id, job.check, job.impl, 1, "COMPLETED" if code == 0 else "FAILED",
                     code, "localhost", records, output.splitlines()[-40:], 1.0,
                     malformed=malformed)


def torch_jobs(o: Options) -> list[Job]:
    """The jobs validate plans for torch.distributed (and the env check): Horovod's, which
    a site may start through srun too, need an MPI this machine does not have."""
    return [j for j in plan_jobs(o) if "horovod" not in j.impl]


def run_jobs(tmp_path: Path, o: Options, visible: str = "CUDA_VISIBLE_DEVICES"
             ) -> dict[str, JobResult]:
    """Every torch job validate plans (through each launcher), each run as its own job
    under the stub srun: job id -> its result as validate reads it."""
    env = stubs(tmp_path, visible)
    rundir = tmp_path / "run"
    rundir.mkdir()
    copy_programs(rundir)
    out = {}
    for job in torch_jobs(o):
        job = replace(job, port=free_port())
        script = write_job(job, o, rundir)
        proc = subprocess.run(["bash", str(script)], cwd=rundir, capture_output=True,
                              text=True, timeout=300, env={**env, **sbatch_exports(script)})
        out[job.id] = result(job, proc.returncode, proc.stdout + proc.stderr)
    return out


def failures(results: dict[str, JobResult]) -> list[str]:
    return [f"{o.name}: {o.detail}" for o in judge(list(results.values()), {})
            if o.status in ("fail", "error")]


# ------------------------------------------------- defect 7: per_rank on a launcher


@pytest.mark.slow
@pytest.mark.parametrize("words", [BOUND_SRUN, BOUND_PARTITION], ids=["srun", "partition"])
def test_validate_passes_srun_binding_one_gpu_per_task_and_torchrun_seeing_all(
        tmp_path: Path, words: dict[str, str]) -> None:
    """The issue's 'done when': one profile, srun's ranks bound one GPU each, torchrun's
    seeing both; validate's training through each passes under the binding starter. Before,
    one partition value was applied to both: one of the two launchers failed (device
    LOCAL_RANK 1 under srun's binding, or device 0 shared by torchrun's two ranks)."""
    o = options(profile(tmp_path, **words), "train")
    assert {j.id for j in torch_jobs(o)} == {"train-torch-ddp-srun",
                                             "train-torch-ddp-torchrun"}
    results = run_jobs(tmp_path, o)
    assert not failures(results), failures(results)
    assert {r.id: r.exit_code for r in results.values()} == {
        "train-torch-ddp-srun": 0, "train-torch-ddp-torchrun": 0}
    # srun bound each task to one GPU; torchrun's agent was given none of its own
    assert sorted((tmp_path / "srun.log").read_text().splitlines()) == [
        "1 task(s), all GPU(s) each" if words is BOUND_SRUN else "1 task(s), 2 GPU(s) each",
        "2 task(s), 1 GPU(s) each"]
    # RANK LOCAL_RANK GPU: srun's ranks each on their own GPU as device 0, torchrun's on
    # device LOCAL_RANK; each rank on its own GPU of the node either way
    assert sorted((tmp_path / "gpus.log").read_text().splitlines()) == [
        "0 0 0", "0 0 0", "1 1 1", "1 1 1"]


def test_each_launchers_jobs_carry_its_own_per_rank(tmp_path: Path) -> None:
    o = options(profile(tmp_path, **BOUND_SRUN), "env", "allreduce", "train")
    said = {j.id: j.args[j.args.index("--per-rank") + 1] for j in torch_jobs(o)}
    assert said == {"env-srun": "one", "env-torchrun": "all",
                    "allreduce-torch-nccl-srun": "one", "allreduce-torch-nccl-torchrun": "all",
                    "train-torch-ddp-srun": "one", "train-torch-ddp-torchrun": "all"}


def test_jobscript_tells_device_0_only_where_the_launcher_binds(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for i, words in enumerate((BOUND_SRUN, BOUND_PARTITION)):
        path = profile(tmp_path / str(i), **words)
        job = cli(capsys, "jobscript", "--site", str(path), "-p", "two", "-l", "srun",
                  "--", "python", "t.py")
        assert job.rc == 0 and "[gpu-per-rank]" in job.err and "device 0" in job.err, job.err
        job = cli(capsys, "jobscript", "--site", str(path), "-p", "two", "-l", "torchrun",
                  "--", "python", "t.py")
        assert job.rc == 0, job.err
        assert "gpu-per-rank" not in job.err and "gpu-binding" not in job.err, job.err


def test_site_check_puts_the_device_0_rule_at_the_launchers_per_rank(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = profile(tmp_path, **BOUND_SRUN)
    res = cli(capsys, "site", "check", str(path))
    assert res.rc == 0, res.err
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if "srun: {" in ln)
    (warning,) = [ln for ln in res.err.splitlines() if "device 0" in ln]
    assert warning == (
        f"hpcprov: warning: {path}:{line}: launchers.srun.per_rank: one: each rank it starts "
        "sees only its own GPU, as device 0: scripts must use device 0 "
        "(torch.cuda.set_device(0), or LOCAL_RANK % device_count()), not LOCAL_RANK")
    # srun's own binding, declared all: LOCAL_RANK is no device there, and the fix is srun's
    (tmp_path / "all").mkdir()
    undeclared = profile(tmp_path / "all", **{**BOUND_SRUN, "srun": ", args: "
                                              "[--gpus-per-task=1]"})
    res = cli(capsys, "site", "check", str(undeclared))
    (warning,) = [ln for ln in res.err.splitlines() if "LOCAL_RANK is no valid" in ln]
    assert "launchers.srun.args: --gpus-per-task=1 binds each task" in warning
    assert "or per_rank: one on launcher srun where only its ranks are bound" in warning


FLUX = """\
name: fluxbind
extends: flux-example
launchers:
  flux: {{kind: flux{args}}}
default_launcher: flux
"""


@pytest.mark.parametrize(("args", "bound"), [
    (", args: [-o, gpu-affinity=per-task]", "-o gpu-affinity=per-task"),
    (", args: [--setopt=gpu-affinity=per-task]", "--setopt=gpu-affinity=per-task"),
    (", args: ['-ogpu-affinity=map:0;1;2;3']", "-ogpu-affinity=map:0;1;2;3"),
    (", args: [-o, gpu-affinity=on]", None),      # flux run's default: every GPU of the job
    ("", None)])
def test_a_binding_in_a_flux_launchers_args_is_linted_as_sruns(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, args: str, bound: str | None
) -> None:
    path = write_profile(tmp_path, "fluxbind", FLUX.format(args=args))
    res = cli(capsys, "site", "check", str(path))
    assert res.rc == 0, res.err
    warned = [ln for ln in res.err.splitlines() if "LOCAL_RANK is no valid" in ln]
    job = cli(capsys, "jobscript", "--site", str(path), "-N", "2", "--", "python", "t.py")
    assert job.rc == 0, job.err
    if bound is None:
        assert warned == [] and "gpu-binding" not in job.err
        return
    (warning,) = warned
    assert f"launchers.flux.args: {bound} gives each task its own GPUs" in warning
    assert f"[gpu-binding] launchers.flux.args: {bound} gives each task" in job.err
    assert "set launchers.flux.per_rank: one" in job.err


# ------------------------------- defect 8: the vendor's visibility variable per binding


def test_amd_gpus_bound_by_slurm_are_named_by_rocr_visible_devices(tmp_path: Path) -> None:
    from hpcprov.validate.plan import visible_devices

    o = options(profile(tmp_path, "amd", **{**BOUND_SRUN, "options": AMD}), "train")
    # srun's binding sets ROCm's lower variable; torchrun's ranks: HIP's, which nothing set
    assert visible_devices(o, "srun") == "ROCR_VISIBLE_DEVICES"
    assert visible_devices(o, "torchrun") == "HIP_VISIBLE_DEVICES"
    said = {j.id: j.args[j.args.index("--visible-devices") + 1] for j in torch_jobs(o)}
    assert said == {"train-torch-ddp-srun": "ROCR_VISIBLE_DEVICES",
                    "train-torch-ddp-torchrun": "HIP_VISIBLE_DEVICES"}
    # NVIDIA: CUDA_VISIBLE_DEVICES whoever binds
    nv = options(profile(tmp_path / "nv", **BOUND_SRUN), "train")
    assert {visible_devices(nv, n) for n in ("srun", "torchrun")} == {"CUDA_VISIBLE_DEVICES"}


@pytest.mark.slow
def test_a_misdeclared_amd_binding_fails_naming_the_variable_slurm_set(tmp_path: Path) -> None:
    """srun binds each task to one AMD GPU through ROCR_VISIBLE_DEVICES while the profile says
    all: the check fails with one line naming ROCR_VISIBLE_DEVICES=1 (it named
    HIP_VISIBLE_DEVICES, unset, which points the user at the wrong variable)."""
    words = {**BOUND_SRUN, "srun": ", args: [--gpus-per-task=1]", "options": AMD}
    o = replace(options(profile(tmp_path, "amd", **words), "train"), launchers=("srun",))
    results = run_jobs(tmp_path, o, visible="ROCR_VISIBLE_DEVICES")
    (line,) = failures(results)
    assert "(ROCR_VISIBLE_DEVICES=1 on LOCAL_RANK 1)" in line, line
    assert "HIP_VISIBLE_DEVICES" not in line


# ---------------------- defect 9: a step of the one allocation asks for its own GPUs


def test_slurm_steps_ask_for_their_own_gpus_not_the_allocations(tmp_path: Path) -> None:
    from hpcprov.schedulers.base import Placement
    from hpcprov.schedulers.slurm import BACKEND

    steps = BACKEND.executor().steps
    assert steps is not None
    env, _ = steps.env(Placement(1, 1, ("n1",)), tmp_path / "h")
    for var in ("SLURM_GPUS_PER_TASK", "SLURM_TRES_PER_TASK", "SLURM_GPU_BIND"):
        assert var in env and env[var] is None        # unset: never the allocation's
    env, _ = steps.env(Placement(1, 2, ("n1",), gpus=(("gpus-per-task", "1"),)), tmp_path / "h")
    assert env["SLURM_GPUS_PER_TASK"] == "1"


@pytest.mark.slow
def test_steps_of_one_allocation_do_not_inherit_its_per_task_binding(tmp_path: Path) -> None:
    """The allocation asks for one GPU per task (srun's binding: what sbatch exports for
    --gpus-per-task=1); torchrun's agent and the env check, steps of it, got one GPU instead
    of the node's two. Each step now asks for what its own job asks for."""
    from hpcprov.schedulers.allocation import OneAllocation, pilot_lines
    from hpcprov.schedulers.local import LocalExecutor
    from hpcprov.schedulers.slurm import SlurmSteps

    o = options(profile(tmp_path, **BOUND_PARTITION), "env", "train")
    jobs = [replace(j, port=free_port()) for j in torch_jobs(o)]
    assert {j.id for j in jobs} == {"env-srun", "env-torchrun", "train-torch-ddp-srun",
                                    "train-torch-ddp-torchrun"}
    env = stubs(tmp_path, "CUDA_VISIBLE_DEVICES")
    rundir = tmp_path / "run"
    rundir.mkdir()
    copy_programs(rundir)

    class Slurmish(LocalExecutor):  # local processes, whose jobs run steps as Slurm's do
        steps = SlurmSteps()

    def allocation(queue: Path) -> str:
        return "\n".join(["#!/bin/bash", "export SLURM_GPUS_PER_TASK=1 "
                          "SLURM_TRES_PER_TASK=gres/gpu:1",
                          *pilot_lines(str(queue), "echo localhost", 300)]) + "\n"

    ex = OneAllocation(Slurmish(env), tmp_path / "alloc", allocation)
    handles = {}
    for job in jobs:
        script = write_job(job, o, rundir)
        handles[job.id] = ex.submit(script, rundir / f"{job.id}.out", rundir / f"{job.id}.exit",
                                    placement(job, o))
    try:
        ex.wait(list(handles.values()), 300)
    finally:
        ex.close()
    results = {j.id: result(j, -1 if handles[j.id].exit_code is None
                            else handles[j.id].exit_code,
                            (rundir / f"{j.id}.out").read_text()) for j in jobs}
    assert not failures(results), failures(results)
    assert {i: h.exit_code for i, h in handles.items()} == dict.fromkeys(handles, 0)
    seen = {j: [r["gpus_visible"] for r in results[j].records if r.get("check") == "env"]
            for j in ("env-srun", "env-torchrun")}
    assert seen == {"env-srun": [2], "env-torchrun": [2]}     # the node's GPUs, not one


# -------------------------------------------- defect 10: the guide's device-0 rule


def test_the_guide_carries_the_device_0_rule_per_launcher(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = profile(tmp_path, **BOUND_SRUN)
    res = cli(capsys, "guide", "--site", str(path), "-p", "two")
    assert res.rc == 0, res.err
    (rule,) = [ln for ln in res.out.splitlines() if "device 0" in ln]
    assert rule == (
        "- GPUs on two: each rank that launcher `srun` starts sees only its own GPU, as "
        "device 0: scripts must use device 0 (torch.cuda.set_device(0), or LOCAL_RANK % "
        "device_count()), not LOCAL_RANK; the ranks of `torchrun`, `mpirun`, `horovodrun` "
        "see all of the node's GPUs (device LOCAL_RANK).")
    # no launcher binds: no rule
    (tmp_path / "all").mkdir()
    plain = profile(tmp_path / "all", **{**BOUND_SRUN, "srun": ""})
    res = cli(capsys, "guide", "--site", str(plain), "-p", "two")
    assert res.rc == 0 and "device 0" not in res.out, res.out

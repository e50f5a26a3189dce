"""Overhead per job beside ReFrame: one 2-node allreduce job on the real Slurm testbed, run
through `hpcprov validate` and through a ReFrame check, one after the other."""

from __future__ import annotations

import json
import os
import pprint
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import BenchError, Context, Result
from benchmarks.bench_cli import _reframe
from benchmarks.bench_verdict import PREFIX
from hpcprov.core.shell import join, quote

NAME = "reframe"
TITLE = "Overhead per job beside ReFrame (one 2-node allreduce job on the testbed)"
SCRATCH = Path("/var/lib/hpcprov-testbed/scratch")  # the nodes see it (not /tmp)
PARTITION = "amd_a100nv_8"
NODES = 2
MASTER_PORT = "29500"  # what hpcprov's srun launcher exports (rendezvous_env)
PROGRAMS = ("allreduce.py", "runtime.py")
# hpcprov validate --quick's allreduce arguments for the torch gloo job (validate/plan.py)
PROGRAM_ARGS = ("--impl", "torch", "--dist-backend", "gloo", "--min-bytes", "8",
                "--max-bytes", str(4 * 1024 * 1024), "--iters", "5", "--device", "cpu")
JOB_ID = "allreduce-torch-gloo"  # hpcprov's name for that job
PHASE_SEED = 36  # the random pauses before the runs (see run())
HALF = 0.5  # the target: hpcprov's own overhead per job at most half ReFrame's (issue 36)
CHECK_CLASS = "HpcprovAllreduce"
MASTER_ADDR = ('MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)"',
               "export MASTER_ADDR")
METHOD = f"""\
The same job run by both tools, one tool after the other (the order alternates between
repeats): 2 nodes x 1 task of the testbed's `{PARTITION}` partition (the real Slurm testbed,
`python -m hpcprov.testbed up`, as root, accounting on), launched with `srun --mpi=pmix`,
running hpcprov's own allreduce program (`allreduce.py` with `runtime.py` beside it) as
`python allreduce.py {join(PROGRAM_ARGS)}` with MASTER_ADDR the job's first node and
MASTER_PORT {MASTER_PORT}, after the testbed's runtime modules are loaded with Lmod and the
venv of a prefix provisioned with `hpcprov setup --site testbed`
(`HPCPROV_BENCH_TESTBED_PREFIX`, default `{PREFIX}`) is activated.

- **hpcprov**: `python -m hpcprov validate --site SITE --nodes 2 --device cpu --env
  PREFIX --json --no-history --workdir DIR --allocation per-job --quick --checks allreduce`.
  `hpcprov validate` has no option to pick one implementation of the allreduce check, and on
  the testbed that check also submits the two Horovod jobs; SITE is therefore a profile that
  `extends` the bundled testbed profile and sets only `horovod.controllers: []`, so the plan
  holds the torch gloo job alone and its job script is the one `--site testbed` generates
  (the benchmark's unit test compares them). The profile is loaded once, untimed, before the
  runs, so the runs read it from hpcprov's profile cache as `--site testbed` does.
- **ReFrame** (`reframe-hpc` from PyPI in `.bench-cache/reframe-venv`): a generated
  `RunOnlyRegressionTest` (`num_tasks=2`, `num_tasks_per_node=1`, `num_cpus_per_task` the
  profile's, `--mpi=pmix` as launcher option, MASTER_ADDR in `prerun_cmds`, sanity: rank 0's
  `HPCPROV_DONE` record says ok) and a generated configuration: one system, one partition with
  ReFrame's `slurm` scheduler (`sacct` polling; `squeue` where accounting is off) and `srun`
  launcher, the testbed's `--partition`/`--comment` as access options, `nomod` modules system
  and one environment whose `prepare_cmds` load the modules and activate the venv exactly as
  hpcprov's job script does (with `env_vars` for the profile's variables), login shell for
  the job script as hpcprov's (`#!/bin/bash -l`). Run as `reframe -C config.py -c check.py -r
  --prefix DIR --nocolor` (report file, topology folder and stage/output folders under DIR).

Rows: each tool's whole process (`time.perf_counter` around the subprocess), the job's own
run time, and the overhead per job = process - job. Both job scripts record their start and
end the same way: hpcprov's EXIT trap (`status_trap` in validate/plan.py; the JSON's
`jobs[0].run_s`) is the first of the ReFrame partition's `prepare_cmds`, so both measure
from the script's first line (before the modules are loaded) to its exit. Each overhead
row's note splits it in three (medians, from epoch timestamps: the process's start and exit,
the tool's own record of when `sbatch` returned, the trap's): *before sbatch returned*
(Python start-up and imports, reading the site profile or the configuration and check,
planning or staging, writing the job script, `sbatch` itself); *sbatch to the job's first
line* (Slurm scheduling and starting the job, not the tool's doing); *the job's exit to the
process's* (noticing the end, reading the output, verdict or sanity check, clean-up, exit).
How soon the end is noticed is each tool's polling: hpcprov asks `scontrol show job` after
20 ms, the delay growing 1.5x per poll to 0.5 s, and `sinfo` about the job's nodes every
2 s, and between queries watches the job's status file, which the job's EXIT trap writes:
within 20 ms of it appearing it asks again, the delay starting over
(hpcprov/schedulers/base.py, slurm.py); ReFrame's asynchronous policy starts at 10 polls
per second and lowers the rate by 10% at every poll down to one poll every 10 s (its
defaults `poll_rate_max`, `poll_rate_decay`, `poll_rate_min`), each poll a `sacct` query,
so the longer the job, the later ReFrame notices its end. Slurm's part varies from job to
job whichever tool submits: slurmctld starts batch jobs on its one-second background tick
(docs/testbed.md), so a job waits 0 to 1 s for it, plus its start. Where in that second
a job is submitted would follow from the runs before it (how soon the previous tool noticed
its job's end, how long this one takes to submit), which favours neither tool on purpose:
before each run the benchmark pauses 0-1 s, drawn at random (seeded), so that the wait is
chance for both. The rows
*overhead less Slurm's start* therefore compare the harnesses themselves, what each tool
does before `sbatch` returns and after the job's exit: their target is half ReFrame's
(issue 36). The whole overhead's target stays ReFrame's median (issue 16): half of it
would ask hpcprov to make Slurm's tick come sooner.

What else differs: ReFrame's srun launcher adds `--cpus-per-task` to the `srun` line (Slurm
22.05 and later), where hpcprov's script exports `SRUN_CPUS_PER_TASK` (exported in both
here: the same effect); hpcprov's script runs under `set -eo pipefail`; the job names and
output files differ; hpcprov runs the program from its run folder, ReFrame from its stage
folder (a copy). ReFrame's Lmod integration is not used (`nomod`, the modules are loaded by
`prepare_cmds` as hpcprov's script does), which spares ReFrame its module queries on the
submitting host. The testbed's nodes share this machine's 2 cores, so the jobs' own times
are not those of a cluster; the overheads are the tools'."""


@dataclass(frozen=True)
class Spec:
    """The job both tools run, from the testbed profile and the prefix."""

    activate: str                 # the prefix's venv's activate script
    modules: tuple[str, ...]
    lmod_init: str
    env: tuple[tuple[str, str], ...]
    cpus_per_task: int
    access: tuple[str, ...]       # sbatch options every job of the site carries
    srun_options: tuple[str, ...]

    def prepare_cmds(self) -> list[str]:
        """Lines that load the modules and activate the venv (as hpcprov's job script)."""
        return [f"type module >/dev/null 2>&1 || source {quote(self.lmod_init)}",
                "module purge", join(["module", "load", *self.modules]),
                f"source {quote(self.activate)}"]

    def env_vars(self) -> list[list[str]]:
        """ReFrame's ``env_vars``: the profile's variables, srun's cpus, MASTER_PORT (ReFrame
        writes them unquoted: the values are quoted here)."""
        pairs = [*self.env, ("SRUN_CPUS_PER_TASK", str(self.cpus_per_task)),
                 ("MASTER_PORT", MASTER_PORT)]
        return [[k, quote(v)] for k, v in pairs]


def spec_for(site: Any, prefix: str) -> Spec:
    """The job's environment from a site (the testbed profile, loaded)."""
    part = site.partitions[PARTITION]
    srun = next(launcher for launcher in site.launchers.values() if launcher.kind == "srun")
    required = {name: opt.default for name, opt in site.policies.required_options.items()
                if opt.default is not None}
    activate = f"{prefix}/venvs/{site.python.env_name}/bin/activate"
    return Spec(activate=activate, modules=tuple(site.modules.runtime.load),
                lmod_init=site.modules.init, env=tuple(dict(site.env).items()),
                cpus_per_task=part.cpus_per_task or 1,
                access=(f"--partition={PARTITION}",
                        *(f"--{k}={v}" for k, v in sorted(required.items()))),
                srun_options=(f"--mpi={srun.mpi}",) if srun.mpi else ())


def reframe_config(spec: Spec, run: Path, scheduler: str, trap: list[str]) -> str:
    """The ReFrame configuration (Python) for the testbed: one system, one partition."""
    config = {
        "systems": [{
            "name": "testbed", "descr": "hpcprov's Slurm testbed", "hostnames": [".*"],
            "modules_system": "nomod",
            "partitions": [{
                "name": PARTITION, "descr": f"{NODES} nodes of {PARTITION}",
                "scheduler": scheduler, "launcher": "srun", "access": list(spec.access),
                "environs": ["hpcprov"], "max_jobs": 1,
                "prepare_cmds": trap,  # the job's start and end, as hpcprov's job records
            }],
        }],
        "environments": [{"name": "hpcprov", "prepare_cmds": spec.prepare_cmds(),
                          "env_vars": spec.env_vars()}],
        "general": [{"report_file": str(run / "report.json"),
                     "topology_prefix": str(run / "topology"), "colorize": False,
                     "use_login_shell": True}],
        "logging": [{"handlers": [{"type": "stream", "name": "stdout", "level": "info",
                                   "format": "%(message)s"}],
                     "handlers_perflog": []}],
    }
    return ('"""ReFrame configuration generated by hpcprov\'s benchmarks (bench_reframe.py)."""'
            f"\n\nsite_configuration = {pprint.pformat(config, width=96, sort_dicts=False)}\n")


CHECK = '''\
"""The 2-node allreduce check, generated by hpcprov's benchmarks (bench_reframe.py)."""

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import run_before, sanity_function


@rfm.simple_test
class {name}(rfm.RunOnlyRegressionTest):
    valid_systems = [{system!r}]
    valid_prog_environs = ["hpcprov"]
    sourcesdir = {sources!r}
    executable = "bash"
    executable_opts = {opts!r}
    num_tasks = {tasks!r}
    num_tasks_per_node = 1
    num_cpus_per_task = {cpus!r}
    prerun_cmds = {prerun!r}

    @run_before("run")
    def launcher_options(self):
        self.job.launcher.options = {srun!r}

    @sanity_function
    def rank_0_says_ok(self):
        return sn.assert_found(r'^HPCPROV_DONE .*"ok":true', self.stdout)
'''


def rank_contract() -> tuple[str, list[str]]:
    """(the line that defines hpcprov's per-rank shim, the words that start each rank
    through it): hpcprov's srun launch lines start every rank through the rank contract
    (hpcprov/jobs/rank_env.sh), so ReFrame's job does the same to be the same job."""
    from hpcprov.jobs.launchers import rank_shim_line
    from hpcprov.site.kinds import LauncherKind

    return rank_shim_line(LauncherKind.srun), ["-c", '"$hpcprov_rank"', "hpcprov-rank",
                                               str(NODES), "1", '"$MASTER_ADDR"', MASTER_PORT,
                                               "--"]


def reframe_check(spec: Spec, sources: Path, args: tuple[str, ...] = PROGRAM_ARGS) -> str:
    """The check file: ReFrame joins ``executable_opts`` unquoted, so they are quoted here
    (but the shim's own words, already shell text)."""
    shim_line, shim_words = rank_contract()
    return CHECK.format(name=CHECK_CLASS, system=f"testbed:{PARTITION}", sources=str(sources),
                        opts=[*shim_words, "python",
                              *(quote(a) for a in ("allreduce.py", *args))],
                        tasks=NODES, cpus=spec.cpus_per_task,
                        prerun=[*MASTER_ADDR, shim_line], srun=list(spec.srun_options))


def site_profile(folder: Path) -> Path:
    """A profile named testbed that extends the bundled one with no Horovod controllers, so
    `validate --checks allreduce` plans the torch gloo job alone."""
    from hpcprov.site.loader import bundled_site_dir

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "testbed.yaml"
    text = (f"# bench_reframe.py: the testbed's allreduce check without its Horovod jobs\n"
            f"extends: {json.dumps(str(bundled_site_dir() / 'testbed.yaml'))}\n"
            "horovod:\n  controllers: []\n")
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def _copy_programs(folder: Path) -> None:
    from importlib import resources

    folder.mkdir(parents=True, exist_ok=True)
    source = resources.files("hpcprov.validate") / "programs"
    for name in PROGRAMS:
        (folder / name).write_text((source / name).read_text())


@dataclass
class Run:
    """One tool's run: the process's wall time, the job's own run time, and where the rest
    went, from epoch timestamps: the process's start and exit (taken here), the submission
    (the tool's own record, taken when sbatch returned) and the job's first line and exit
    (its EXIT trap)."""

    wall: float
    job: float
    before: float  # process start -> sbatch returned: start-up, configuration, script, sbatch
    queue: float   # sbatch returned -> the job's first line: Slurm's
    after: float   # the job's exit -> the process's exit: noticing it, verdict, clean-up, exit

    @property
    def overhead(self) -> float:
        return self.wall - self.job

    @property
    def own(self) -> float:
        """The overhead without Slurm's part (sbatch to the job's first line)."""
        return self.overhead - self.queue


def _trap(path: Path) -> tuple[float, float] | None:
    """(start, end) epoch seconds the job's EXIT trap wrote (status_trap), or None."""
    try:
        _, start, end = path.read_text().split()[:3]
        return float(start), float(end)
    except (OSError, ValueError):
        return None


def _timed(argv: list[str], env: dict[str, str], cwd: Path | None = None
           ) -> tuple[subprocess.CompletedProcess[str], float, float, float]:
    """(the finished process, its wall seconds, its start and exit in epoch seconds)."""
    start, t0 = time.time(), time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=900,
                          stdin=subprocess.DEVNULL)
    return proc, time.perf_counter() - t0, start, time.time()


def _split(wall: float, job: float, began: float, submitted: float, trap: tuple[float, float],
           ended: float) -> Run:
    return Run(wall, job, submitted - began, trap[0] - submitted, ended - trap[1])


def _hpcprov(site: Path, env: dict[str, str], work: Path) -> Run:
    argv = [sys.executable, "-m", "hpcprov", "validate", "--site", str(site), "--nodes",
            str(NODES), "--device", "cpu", "--env", PREFIX, "--json", "--no-history",
            "--workdir", str(work), "--allocation", "per-job", "--quick",
            "--checks", "allreduce"]
    proc, wall, began, ended = _timed(argv, env)
    try:
        data = json.loads(proc.stdout or "{}")
    except ValueError:
        data = {}
    jobs = data.get("jobs") or []
    submitted = [e["t"] for e in data.get("events", []) if e.get("event") == "submitted"]
    trap = _trap(work / f"{JOB_ID}.exit")
    if [j.get("id") for j in jobs] != [JOB_ID] or jobs[0].get("run_s") is None \
            or jobs[0].get("state") != "COMPLETED" or jobs[0].get("exit_code") != 0 \
            or len(submitted) != 1 or trap is None:
        raise BenchError(f"hpcprov validate: rc {proc.returncode}, jobs "
                         f"{[(j.get('id'), j.get('state'), j.get('exit_code')) for j in jobs]}"
                         f": {proc.stderr[-500:]}")
    return _split(wall, jobs[0]["run_s"], began, submitted[0], trap, ended)


def _reframe_run(reframe: list[str], spec: Spec, scheduler: str, env: dict[str, str],
                 work: Path) -> Run:
    from hpcprov.validate.plan import status_trap

    exit_file = work / "reframe.exit"
    _copy_programs(work / "programs")
    (work / "config.py").write_text(reframe_config(spec, work, scheduler,
                                                   status_trap(str(exit_file))))
    (work / "check.py").write_text(reframe_check(spec, work / "programs"))
    argv = [*reframe, "-C", str(work / "config.py"), "-c", str(work / "check.py"), "-r",
            "--prefix", str(work / "rfm"), "--nocolor"]
    proc, wall, began, ended = _timed(argv, env, cwd=work)
    trap, submitted = _trap(exit_file), _submitted(work / "report.json")
    if proc.returncode != 0 or trap is None or submitted is None:
        raise BenchError(f"reframe: rc {proc.returncode}, trap {trap}, submitted {submitted}: "
                         f"{(proc.stdout + proc.stderr)[-800:]}")
    return _split(wall, trap[1] - trap[0], began, submitted, trap, ended)


def _submitted(report: Path) -> float | None:
    """When ReFrame's sbatch returned (the report's job_submit_time), or None."""
    try:
        case = json.loads(report.read_text())["runs"][0]["testcases"][0]
        return float(case["job_submit_time"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def _versions() -> str:
    import hpcprov

    try:
        slurm = subprocess.run(["sinfo", "--version"], capture_output=True, text=True,
                               timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        slurm = "Slurm (version unknown)"
    return f"hpcprov {hpcprov.__version__}, {slurm or 'Slurm (version unknown)'}"


LABELS = ("hpcprov: whole process", "hpcprov: the job's own run time",
          "hpcprov: overhead per job", "hpcprov: overhead less Slurm's start",
          "ReFrame: whole process", "ReFrame: the job's own run time",
          "ReFrame: overhead per job", "ReFrame: overhead less Slurm's start")


def _unavailable(why: str) -> list[Result]:
    return [Result(label, "s", status=f"not available: {why}") for label in LABELS]


def run(ctx: Context) -> list[Result]:
    from hpcprov.testbed.cluster import Testbed

    tb = Testbed.from_state()
    if os.geteuid() != 0 or not tb.status()["up"] \
            or not (Path(PREFIX) / ".hpcprov" / "manifest.json").exists():
        return _unavailable("needs root, the testbed up and a prefix set up for it "
                            f"(hpcprov setup --site testbed --prefix {PREFIX})")
    reframe, rf_version = _reframe(ctx)
    if reframe is None:
        return _unavailable(f"ReFrame: {rf_version}")
    env = tb.environ()
    from hpcprov.site.profiles import load_site

    site = site_profile(ctx.cache / "reframe-site")
    spec = spec_for(load_site(str(site)), PREFIX)  # untimed: caches the profile
    scheduler = "slurm" if tb.accounting else "squeue"
    repeat = 1 if ctx.quick else min(ctx.repeat, 3)
    runs: dict[str, list[Run]] = {"hpcprov": [], "reframe": []}
    phase = random.Random(PHASE_SEED)
    for i in range(repeat):
        order = ("hpcprov", "reframe") if i % 2 == 0 else ("reframe", "hpcprov")
        for tool in order:
            ctx.log(f"{tool}: run {i + 1} of {repeat}")
            # slurmctld starts batch jobs on a one-second tick: a pause of 0-1 s drawn at
            # random before each run, so that neither tool's own timing (how soon the one
            # before noticed its end, how long this one takes to submit) decides where in
            # that second its job is submitted
            time.sleep(phase.uniform(0.0, 1.0))
            with tempfile.TemporaryDirectory(dir=SCRATCH, prefix="bench-reframe-") as tmp:
                if tool == "hpcprov":
                    runs[tool].append(_hpcprov(site, env, Path(tmp) / "run"))
                else:
                    runs[tool].append(_reframe_run(reframe, spec, scheduler, env, Path(tmp)))
    return _results(ctx, runs, rf_version, scheduler)


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _where(runs: list[Run]) -> str:
    """The overhead's parts (medians): before sbatch, Slurm's start, after the job."""
    return (f"before sbatch returned {_median([r.before for r in runs]):.2f} s, sbatch to the "
            f"job's first line {_median([r.queue for r in runs]):.2f} s, the job's exit to "
            f"the process's {_median([r.after for r in runs]):.2f} s")


def _results(ctx: Context, runs: dict[str, list[Run]], rf_version: str, scheduler: str
             ) -> list[Result]:
    hp, rf = runs["hpcprov"], runs["reframe"]
    trap = "from the job script's first line to its EXIT trap"
    own = ("the tool's own part: before sbatch returned, and from the job's exit to the "
           "process's")
    results = [
        Result(LABELS[0], "s", [r.wall for r in hp], note=_versions()),
        Result(LABELS[1], "s", [r.job for r in hp], note=f"{trap} (the JSON's jobs[0].run_s)"),
        Result(LABELS[2], "s", [r.overhead for r in hp],
               target=_median([r.overhead for r in rf]),
               note=f"{_where(hp)}; target: ReFrame's median overhead (issue 16)"),
        Result(LABELS[3], "s", [r.own for r in hp], target=HALF * _median([r.own for r in rf]),
               note=f"{own}; target: half ReFrame's (issue 36)"),
        Result(LABELS[4], "s", [r.wall for r in rf],
               note=f"ReFrame {rf_version}, scheduler backend `{scheduler}`, launcher srun"),
        Result(LABELS[5], "s", [r.job for r in rf],
               note=f"{trap} (the same trap, first of the partition's prepare_cmds)"),
        Result(LABELS[6], "s", [r.overhead for r in rf], note=_where(rf)),
        Result(LABELS[7], "s", [r.own for r in rf], note=own),
    ]
    by = dict(zip(LABELS, (r.median for r in results), strict=True))
    hp_o, rf_o = by["hpcprov: overhead per job"], by["ReFrame: overhead per job"]
    hp_own, rf_own = by[LABELS[3]], by[LABELS[7]]
    if hp_o and rf_o and hp_own and rf_own:
        ctx.note(f"Per job, hpcprov took {hp_o:.1f} s around the job and ReFrame "
                 f"{rf_o:.1f} s ({hp_o / rf_o:.2f}x); without the time Slurm took from "
                 f"`sbatch` to the job's first line, which is the scheduler's and varies from "
                 f"job to job (0.1 to 1 s here, in slurmctld's allocation), {hp_own:.1f} s "
                 f"and {rf_own:.1f} s ({hp_own / rf_own:.2f}x). The jobs themselves ran "
                 f"{by[LABELS[1]]:.1f} s and {by[LABELS[5]]:.1f} s.")
    return results

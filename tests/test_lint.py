"""Lint: requests that would fail or misbehave on the cluster are refused before generation."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hpcprov_tests import cli, write_profile

from hpcprov.jobs.launchers import build_launch
from hpcprov.jobs.lint import Finding, LintFailed, check, lint, walltime_seconds
from hpcprov.provision.plan import build_plan
from hpcprov.provision.plan_lint import lint_plan
from hpcprov.request.job import JobRequest
from hpcprov.site.profiles import load_site

site = functools.cache(load_site)


def req(name: str, *command: str, **kw: object) -> JobRequest:
    return JobRequest(site=site(name), command=command or ("python", "train.py"), **kw)


def codes(findings: list[Finding], level: str | None = None) -> set[str]:
    return {f.code for f in findings if level is None or f.level == level}


NEURON = {"options": {"comment": "pytorch"}}
CC = {"options": {"account": "def-pi"}}
SOCKEYE = {"options": {"account": "st-pi-1-gpu"}}


# ------------------------------------------------------------ clean requests

@pytest.mark.parametrize(("name", "kw"), [
    ("neuron", {"nodes": 4, "gpus_per_node": 8, **NEURON}),  # the seed's batch job
    ("neuron", {"nodes": 2, "gpus_per_node": 4, "launcher": "horovodrun",
                "hosts": ("gpu[32-33]",)}),
    ("cc", {"nodes": 2, "launcher": "torchrun", **CC}),
    ("cc", {"nodes": 2, "launcher": "mpirun", **CC}),
    ("sockeye", {"nodes": 2, **SOCKEYE}),
    ("technion", {"nodes": 2}),
    ("taurus", {"nodes": 2}),
    ("local", {}),
])
def test_seed_requests_lint_clean(name: str, kw: dict[str, object]) -> None:
    findings = lint(req(name, **kw))
    assert codes(findings, "error") == set(), [str(f) for f in findings]
    assert check(req(name, **kw)) == [f for f in findings if f.level == "warning"]


# ----------------------------------------------------------------- geometry

def test_gpus_above_the_partition_count() -> None:
    findings = lint(req("neuron", gpus_per_node=16, **NEURON))
    assert "gpus-exceed" in codes(findings, "error")
    (f,) = [f for f in findings if f.code == "gpus-exceed"]
    assert "8" in f.message and "16" in f.message and "8" in f.fix
    assert "gpus-exceed" in codes(lint(req("neuron", partition="skl", gpus_per_node=1,
                                           **NEURON)), "error")


def test_srun_more_ranks_than_gpus_is_an_error_fewer_is_a_warning() -> None:
    more = lint(req("neuron", gpus_per_node=4, tasks_per_node=8, **NEURON))
    assert "tasks-gpus" in codes(more, "error")
    fewer = lint(req("neuron", gpus_per_node=8, tasks_per_node=4, **NEURON))
    assert "tasks-gpus" in codes(fewer, "warning")
    assert codes(fewer, "error") == set()
    assert "tasks-gpus" not in codes(lint(req("neuron", gpus_per_node=8, tasks_per_node=8,
                                              **NEURON)))


def test_ntasks_per_node_option_is_refused_whatever_its_value() -> None:
    # hpcprov sets it from --tasks-per-node and the launcher (torchrun: one task per node)
    for r in (req("cc", launcher="torchrun", nodes=2,
                  options={"account": "def-pi", "ntasks-per-node": "1"}),
              req("neuron", gpus_per_node=8, options={"comment": "python",
                                                      "ntasks-per-node": "8"})):
        assert codes(lint(r), "error") == {"geometry-option"}


def test_nodes_and_per_user_gpu_limits() -> None:
    # amd_a100nv_8 has 14 nodes (seed 001 queue table)
    assert "nodes-exceed" in codes(lint(req("neuron", nodes=15, **NEURON)), "error")
    assert "nodes-exceed" not in codes(lint(req("neuron", nodes=14, **NEURON)))
    # cas_v100_4: 4 GPUs per node, at most 40 GPUs per user (seed 001)
    assert "gpus-limit" in codes(lint(req("neuron", partition="cas_v100_4", nodes=11,
                                          **NEURON)), "error")
    assert "gpus-limit" not in codes(lint(req("neuron", partition="cas_v100_4", nodes=10,
                                              **NEURON)))
    assert "nodes-local" in codes(lint(req("local", nodes=2)), "error")


def test_cores_exceed() -> None:
    # 8 ranks x 9 CPUs > 64 cores of an amd_a100nv_8 node
    assert "cores-exceed" in codes(lint(req("neuron", cpus_per_task=9, **NEURON)), "error")
    assert "cores-exceed" not in codes(lint(req("neuron", cpus_per_task=8, **NEURON)))


# ----------------------------------------------------------------- policies

def test_forbidden_mem_on_neuron() -> None:
    findings = lint(req("neuron", options={"comment": "python", "mem": "100G"}))
    assert "forbidden-option" in codes(findings, "error")
    # taurus allows --mem (seed 003 recommends it)
    assert codes(lint(req("taurus", options={"mem": "250000"})), "error") == set()


def test_comment_must_be_one_of_the_applications() -> None:
    assert "option-choice" in codes(lint(req("neuron", options={"comment": "bogus"})), "error")
    assert "option-choice" not in codes(lint(req("neuron", options={"comment": "tensorflow"})))


@pytest.mark.parametrize(("name", "option", "value"), [
    ("cc", "account", "def-pi"), ("sockeye", "account", "st-pi-1-gpu"),
])
def test_mandatory_account(name: str, option: str, value: str) -> None:
    missing = lint(req(name))
    assert "missing-option" in codes(missing, "error")
    (f,) = [f for f in missing if f.code == "missing-option"]
    assert option in f.message and f"--option {option}=" in f.fix
    assert codes(lint(req(name, options={option: value})), "error") == set()


# ---------------------------------------------------------------- variables

def test_pbs_variable_in_a_slurm_job() -> None:
    findings = lint(req("neuron", "python", "x.py", "--hosts", "$PBS_NODEFILE", **NEURON))
    assert "pbs-variable" in codes(findings, "error")
    findings = lint(req("cc", "python", "x.py", "${PBS_JOBID}", **CC))
    assert "pbs-variable" in codes(findings, "error")


def test_slurm_variable_in_a_pbs_job() -> None:
    findings = lint(req("sockeye", "python", "x.py", "--nodes", "$SLURM_JOB_NODELIST",
                        **SOCKEYE))
    assert "slurm-variable" in codes(findings, "error")
    # its own variables are fine
    assert codes(lint(req("sockeye", "python", "x.py", "$PBS_NODEFILE", **SOCKEYE)),
                 "error") == set()


def test_pbs_variable_in_a_user_launcher_is_found(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "mixed", (
        "extends: neuron\n"
        "launchers:\n"
        "  mpirun: {kind: mpirun, args: [--hostfile, $PBS_NODEFILE]}\n"
    ))
    findings = lint(JobRequest(site=load_site(str(path)), command=("python", "x.py"),
                               launcher="mpirun", options={"comment": "python"}))
    assert "pbs-variable" in codes(findings, "error")


# ----------------------------------------------------------------- internet

@pytest.mark.parametrize("command", [
    ("pip", "install", "foo"),
    ("python", "-m", "pip", "install", "foo"),
    ("conda", "install", "-y", "numpy"),
    ("wget", "http://yann.lecun.com/exdb/mnist/train-images-idx3-ubyte.gz"),  # seed 004
    ("git", "clone", "https://github.com/horovod/horovod"),
])
def test_no_internet_on_cc_compute_nodes(command: tuple[str, ...]) -> None:
    findings = lint(req("cc", *command, launcher="srun", **CC))
    assert "no-internet" in codes(findings, "error")


def test_offline_pip_is_fine_on_cc() -> None:
    findings = lint(req("cc", "pip", "install", "--no-index", "foo", launcher="srun", **CC))
    assert "no-internet" not in codes(findings)
    # a site with internet on compute nodes does not complain at all
    assert "no-internet" not in codes(lint(req("neuron", "pip", "install", "foo", **NEURON)))


def test_mnist_download_on_sockeye_compute_is_refused() -> None:
    """Seed 004 downloads MNIST with wget; Sockeye compute nodes are offline."""
    findings = lint(req("sockeye", "wget", "http://yann.lecun.com/x.gz", **SOCKEYE))
    assert "no-internet" in codes(findings, "error")


# --------------------------------------------------------------------- time

@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90 * 60),                 # Slurm: minutes
    ("1:30", 90),                    # MM:SS
    ("8:00:00", 8 * 3600),           # the seed's interactive walltime
    ("24:00:00", 24 * 3600),         # the seed's batch walltime
    ("2-00:00:00", 48 * 3600),       # D-HH:MM:SS
    ("1-12", 36 * 3600),             # D-HH
    ("2-00:00", 48 * 3600),          # D-HH:MM
    ("tomorrow", None),
])
def test_walltime_seconds(text: str, seconds: int | None) -> None:
    assert walltime_seconds(text) == seconds


@pytest.mark.parametrize(("time", "error"), [
    ("48:00:00", False), ("2-00:00:00", False), ("2880", False),   # public docs: 48 h
    ("48:00:01", True), ("3-00:00:00", True), ("2881", True),
])
def test_time_above_the_partition_max(time: str, error: bool) -> None:
    findings = lint(req("neuron", time=time, **NEURON))
    assert ("time-limit" in codes(findings, "error")) is error


def test_unreadable_time_is_an_error() -> None:
    assert "time" in codes(lint(req("neuron", time="soon", **NEURON)), "error")


# --------------------------------------------------------------------- PBS

def test_pbs_mpirun_without_oversubscribe(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "sites"
    write_profile(user, "sockeye", (
        "extends: sockeye\n"
        "launchers:\n"
        "  mpirun: {oversubscribe: false}\n"
    ))
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(user))
    s = load_site("sockeye")  # the user's copy, extending the bundled one
    assert s.launchers["mpirun"].hostfile == "$PBS_NODEFILE"
    findings = lint(JobRequest(site=s, nodes=2, command=("python", "main.py"), **SOCKEYE))
    assert "pbs-slots" in codes(findings, "error")
    (f,) = [f for f in findings if f.code == "pbs-slots"]
    assert "oversubscribe" in f.fix
    # the bundled sockeye sets it (seed 004: mpirun needs --oversubscribe)
    assert "pbs-slots" not in codes(lint(req("sockeye", nodes=2, **SOCKEYE)))
    # with an explicit host list the node file is not used
    findings = lint(JobRequest(site=s, nodes=2, command=("python", "main.py"),
                               hosts=("se[01-02]",), **SOCKEYE))
    assert "pbs-slots" not in codes(findings)


# --------------------------------------------------------------- setup plan

def test_setup_on_cc_compute_is_offline() -> None:
    plan = build_plan(site("cc"), runs_on="compute")
    assert lint_plan(plan, site("cc")) == []
    assert not any(step.needs_network for step in plan.steps)


def test_setup_with_online_pip_on_offline_compute_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_profile(tmp_path, "cconline", "extends: cc\npython:\n  venv: {no_index: false}\n")
    s = load_site(str(path))
    findings = lint_plan(build_plan(s, runs_on="compute"), s)
    assert findings and codes(findings) == {"no-internet"}
    assert lint_plan(build_plan(s, runs_on="login"), s) == []
    res = cli(capsys, "setup", "--site", str(path), "--on", "compute", "--dry-run")
    assert res.rc == 2 and res.out == ""
    assert "Traceback" not in res.err
    assert all("no-internet" in line and "fix:" in line for line in res.err_lines)
    assert cli(capsys, "setup", "--site", str(path), "--on", "login", "--dry-run").rc == 0
    assert cli(capsys, "setup", "--site", "cc", "--on", "compute", "--dry-run").rc == 0


# ---------------------------------------------------------------------- CLI

@pytest.mark.parametrize(("argv", "code"), [
    (["launch", "--site", "neuron", "-G", "16"], "gpus-exceed"),
    (["jobscript", "--site", "neuron", "-o", "mem=10G"], "forbidden-option"),
    (["jobscript", "--site", "cc"], "missing-option"),
    (["launch", "--site", "neuron", "-t", "3-00:00:00"], "time-limit"),
    (["jobscript", "--site", "cc", "-o", "account=def-pi", "-l", "torchrun",
      "-o", "ntasks-per-node=4"], "geometry-option"),
])
def test_lint_errors_exit_2_with_a_fix(capsys: pytest.CaptureFixture[str], argv: list[str],
                                       code: str) -> None:
    res = cli(capsys, *argv, "--", "python", "train.py")
    assert res.rc == 2 and res.out == ""
    assert "Traceback" not in res.err
    (line,) = [line for line in res.err_lines if f"[{code}]" in line]
    assert line.startswith("hpcprov: error: ") and "(fix: " in line


def test_lint_warnings_print_but_do_not_stop(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "jobscript", "--site", "neuron", "-G", "8", "--tasks-per-node", "4",
              "-t", "1:00:00", "--", "python", "train.py")
    assert res.rc == 0
    assert res.out.startswith("#!")
    (line,) = res.err_lines
    assert line.startswith("hpcprov: warning: ") and "[tasks-gpus]" in line


def test_lint_failed_lists_one_line_per_error() -> None:
    with pytest.raises(LintFailed) as info:
        check(req("neuron", gpus_per_node=16, time="9-00:00:00",
                  options={"comment": "bogus", "mem": "1G"}))
    lines = str(info.value).splitlines()
    assert len(lines) == len([f for f in info.value.findings if f.level == "error"]) >= 4
    assert all("(fix: " in line for line in lines)


@pytest.mark.parametrize("launcher", ["horovodrun", "mpirun"])
def test_host_list_must_match_the_node_count(launcher: str) -> None:
    r = req("neuron", nodes=2, gpus_per_node=2, launcher=launcher, hosts=("gpu33",), **NEURON)
    argv = build_launch(r, "allocation").argv
    ranks = int(argv[argv.index("-np") + 1])
    slots = sum(int(h.rsplit(":", 1)[1]) for h in argv[argv.index("-H") + 1].split(","))
    assert ranks <= slots or "error" in {f.level for f in lint(r)}


@pytest.mark.parametrize(("text", "gb"), [("4000", 4000 / 1024), ("100G", 100.0), ("1T", 1024.0),
                                         ("512M", 0.5), ("2gb", 2.0), ("lots", None)])
def test_memory_sizes_are_read_as_sbatch_reads_them(text: str, gb: float | None) -> None:
    from hpcprov.jobs.lint import memory_gb

    assert memory_gb(text) == gb


def test_memory_above_a_node_is_an_error_with_the_node_size() -> None:
    s = site("testbed")
    pname, part = s.partition()
    assert part.memory_gb is not None
    ok = JobRequest(site=s, nodes=1, command=("python", "x.py"),
                    options={"mem": f"{int(part.memory_gb)}G"})
    assert "memory-exceed" not in codes(lint(ok), "error")
    big = JobRequest(site=s, nodes=1, command=("python", "x.py"),
                     options={"mem": f"{int(part.memory_gb) + 1}G"})
    (finding,) = [f for f in lint(big) if f.code == "memory-exceed"]
    assert f"{part.memory_gb:g} GB of a {pname} node" in finding.message


@pytest.mark.parametrize("option", [
    "nodes=999", "nodes=2-99", "gres=gpu:64", "gres=gpu:a100:64", "gpus-per-node=16",
    "time=999:00:00"])  # PBS's walltime: tests/test_geometry_flags.py
def test_a_flag_spelled_as_an_option_is_refused(option: str) -> None:
    name, _, value = option.partition("=")
    req = JobRequest(site=site("neuron"), nodes=1, command=("python", "x.py"),
                     options={"comment": "pytorch", name: value})
    assert codes(lint(req), "error") == {"geometry-option"}


# ------------------------------------------------------- what a rank sees of its GPUs

BOUND = """\
name: {name}
extends: testbed
modules: {{system: none}}
partitions:
  cas_v100_4:
    gpus: {{per_rank: {per_rank}}}
    options: {{gpu-bind: "{bind}"}}
"""


@pytest.mark.parametrize(("per_rank", "bind", "warned"), [
    ("all", "closest", {"gpu-binding"}),        # bound, declared all: LOCAL_RANK is no device
    ("all", "map_gpu:0,1,2,3", {"gpu-binding"}),
    ("all", "none", set()),                     # no binding: device LOCAL_RANK is the rank's
    ("all", "verbose,none", set()),
    ("one", "closest", {"gpu-per-rank"}),       # declared: scripts must use device 0
])
def test_a_gpu_job_is_warned_what_device_its_script_must_take(
        tmp_path: Path, per_rank: str, bind: str, warned: set[str]) -> None:
    path = write_profile(tmp_path, "bound", BOUND.format(name="bound", per_rank=per_rank,
                                                         bind=bind))
    job = JobRequest(site=load_site(str(path)), partition="cas_v100_4",
                     command=("python", "train.py"))
    findings = [f for f in lint(job) if f.code in ("gpu-binding", "gpu-per-rank")]
    assert {f.code for f in findings} == warned
    assert all(f.level == "warning" for f in findings)
    for f in findings:
        if f.code == "gpu-binding":
            assert f.message.startswith(f"partitions.cas_v100_4.options: gpu-bind={bind} ")
            assert "LOCAL_RANK is no valid device index there" in f.message
            assert f.fix.startswith("set partitions.cas_v100_4.gpus.per_rank: one")
        else:
            assert "device 0" in f.message and "not LOCAL_RANK" in f.fix
    # a job without GPUs takes no device: nothing to say
    cpu = JobRequest(site=load_site(str(path)), partition="cas_v100_4", gpus_per_node=0,
                     command=("python", "train.py"))
    assert not {f.code for f in lint(cpu)} & {"gpu-binding", "gpu-per-rank"}


def test_the_slurm_section_asking_gpus_per_task_binds_every_gpu_partition(
        tmp_path: Path) -> None:
    from hpcprov.jobs.lint import gpu_binding_findings

    path = write_profile(tmp_path, "gpt", "name: gpt\nextends: testbed\n"
                         "slurm: {gpu_request: gpus_per_task}\n")
    found = gpu_binding_findings(load_site(str(path)))
    assert [loc for loc, _ in found] == [("slurm", "gpu_request")]
    assert "declare gpus.per_rank: one on partitions amd_a100nv_8, cas_v100_4, all" in found[0][1]
    # mpirun's set_cuda_visible_devices gives every rank all the GPUs: no binding
    assert gpu_binding_findings(load_site("sockeye")) == []

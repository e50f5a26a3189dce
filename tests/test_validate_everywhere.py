"""Validation that validates every site (issue 32): allreduce and training through every
launcher kind that starts ranks, what cannot be planned said (SKIPPED rows, or one line for
a check named on the command line), a dry run before setup that writes nothing, and the
queue validate submits to being the one jobscript picks."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hpcprov_tests import REPO, assert_one_line_error, cli, hpcprov_argv, write_profile

from hpcprov.request.job import JobRequest
from hpcprov.site.launcher_kinds import KINDS
from hpcprov.site.profiles import load_site
from hpcprov.validate.plan import Options, plan_jobs

EXAMPLES = REPO / "docs" / "examples"


def dry_run(capsys: pytest.CaptureFixture[str], site: str, tmp_path: Path, *args: str
            ) -> dict:
    from hpcprov.site.profiles import load_site

    # a site whose Python is its image (a file of the site's) has no environment to name:
    # --env is refused there
    env = [] if load_site(site).python.backend == "container" else \
        ["--env", str(tmp_path / "env")]
    res = cli(capsys, "validate", "--site", site, "--dry-run", "--json", *env,
              "--workdir", str(tmp_path / "run"), *args)
    assert res.rc == 0, res.err
    return json.loads(res.out)


def script_names(data: dict) -> set[str]:
    return {Path(s["path"]).stem for s in data["scripts"]}


def launch_line(data: dict, name: str) -> str:
    """The line of a planned script that starts the ranks (it carries the rank shim)."""
    text = next(s["text"] for s in data["scripts"] if Path(s["path"]).stem == name)
    return next(ln for ln in text.splitlines() if not ln.startswith("#")
                and ("hpcprov-rank" in ln or "torch.distributed.run" in ln))


JSRUN = """\
name: js
extends: lsf-example
launchers:
  jsrun: {kind: jsrun, rendezvous_env: true}
default_launcher: jsrun
"""

# LLNL's lrun (jsrun's wrapper), its ranks' GPU binding off
LRUN = JSRUN.replace("jsrun: {kind: jsrun", "lrun: {kind: lrun, args: [--gpubind=off]").replace(
    "default_launcher: jsrun", "default_launcher: lrun").replace("name: js", "name: jl")

IBRUN = """\
name: ib
scheduler: slurm
partitions:
  gpu: {nodes: 8, cores_per_node: 56, gpus: {count: 4}, default: true}
horovod: {source: pip, version: "0.28.1", frameworks: [pytorch], controllers: [mpi]}
launchers:
  ibrun: {kind: ibrun, rendezvous_env: true}
default_launcher: ibrun
"""

MPIEXEC_HVD = """\
name: mx
scheduler: pbs
partitions:
  gpu: {nodes: 8, cores_per_node: 64, gpus: {count: 4}, default: true}
horovod: {source: pip, version: "0.28.1", frameworks: [pytorch], controllers: [mpi]}
launchers:
  pals: {kind: mpiexec, flavor: pals, rendezvous_env: true}
default_launcher: pals
"""


@pytest.mark.parametrize(("site", "text", "first_word"), [
    ("pbs-pals", None, "mpiexec"),                  # PBS + HPE PALS
    ("slurm-apptainer", None, "srun"),              # a container launcher: srun + apptainer
    ("torchrun-mpi", None, "mpirun"),               # torchrun per node, started by mpirun
    ("edf", None, "srun"),                          # srun --environment=EDF
    ("js", JSRUN, "jsrun"),                         # IBM LSF's jsrun
    ("jl", LRUN, "lrun"),                           # LLNL's lrun
    ("ib", IBRUN, "ibrun"),                         # TACC's ibrun
    ("mx", MPIEXEC_HVD, "mpiexec"),                 # mpiexec, Horovod over MPI
])
def test_every_launcher_kind_plans_allreduce_and_ddp_training(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site: str, text: str | None,
        first_word: str) -> None:
    path = write_profile(tmp_path / "sites", site, text) if text else EXAMPLES / f"{site}.yaml"
    data = dry_run(capsys, str(path), tmp_path, "-o", "account=proj")
    names = script_names(data)
    allreduce = {n for n in names if n.startswith("allreduce-torch-")}
    assert allreduce and "train-torch-ddp" in names and "env" in names, names
    assert data["skipped"] == [] or all(s["name"].startswith(("allreduce-horovod",
                                                               "train-horovod"))
                                        for s in data["skipped"])
    for name in (*allreduce, "train-torch-ddp"):
        assert launch_line(data, name).split()[0] == first_word, name
        # the ranks read torch's contract: the shim, or torchrun itself
        assert "hpcprov-rank" in launch_line(data, name) or "torch.distributed.run" in launch_line(
            data, name)


def test_horovod_over_mpi_runs_through_mpiexec_where_the_site_builds_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_profile(tmp_path / "sites", "mx", MPIEXEC_HVD)
    data = dry_run(capsys, str(path), tmp_path, "-o", "account=proj")
    names = script_names(data)
    assert {"allreduce-horovod-mpi", "train-horovod-torch"} <= names
    assert launch_line(data, "allreduce-horovod-mpi").startswith("mpiexec ")
    assert data["skipped"] == []


def test_every_kind_but_horovodrun_can_carry_torch_distributed() -> None:
    """The registry says it: a kind that starts ranks has a place in validation's order
    (horovodrun starts Horovod's ranks, with its own controller)."""
    for name, kind in KINDS.items():
        assert (kind.torch_order is None) == (kind.horovod == "controller"), name


def test_launchers_all_runs_the_checks_through_every_launcher(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    site = load_site("cc")
    # cc names no default image: its container launcher is said, not dropped
    data = dry_run(capsys, "cc", tmp_path, "--launchers", "all", "-o", "account=def-x")
    # what the site as a whole lacks is said too (issue 45, defect 4): Horovod's Gloo
    # controller, which no launcher of cc starts
    site_wide = {"allreduce-horovod-nccl-via-gloo"}
    skipped = {s["name"]: s for s in data["skipped"]}
    assert set(skipped) == {"env-container", "allreduce-container", "train-container",
                            *site_wide}
    assert all("set containers.default_image" in s["detail"] for n, s in skipped.items()
               if n not in site_wide)
    cc = write_profile(tmp_path / "sites", "cc2", "extends: cc\nname: cc2\ncontainers:\n"
                       "  images: {pt: /img/pt.sif}\n  default_image: pt\n")
    data = dry_run(capsys, str(cc), tmp_path, "--launchers", "all", "--checks",
                   "allreduce,train", "-o", "account=def-x")
    assert {s["name"] for s in data["skipped"]} == site_wide
    names = script_names(data)
    for launcher in site.launchers:
        assert f"allreduce-torch-nccl-{launcher}" in names, (launcher, names)
        assert f"train-torch-ddp-{launcher}" in names
    assert launch_line(data, "allreduce-torch-nccl-mpirun").startswith("mpirun ")
    assert "torch.distributed.run" in launch_line(data, "train-torch-ddp-torchrun")
    assert "apptainer exec" in launch_line(data, "allreduce-torch-nccl-container")
    # one launcher by name: that one only
    one = dry_run(capsys, "cc", tmp_path, "--launchers", "mpirun", "-o", "account=def-x")
    assert {n for n in script_names(one) if n.startswith("allreduce")} == {
        "allreduce-torch-nccl-mpirun", "allreduce-horovod-nccl-via-mpi-mpirun"}


def test_launchers_all_on_a_horovodrun_site_gives_it_horovods_checks(tmp_path: Path) -> None:
    site = load_site("local")
    jobs = plan_jobs(Options(JobRequest(site, partition="local"), ("allreduce", "train"),
                             launchers=tuple(site.launchers)))
    by_launcher: dict[str, set[str]] = {}
    for j in jobs:
        by_launcher.setdefault(j.launcher, set()).add(j.id)
    assert by_launcher["horovodrun"] == {"allreduce-horovod-gloo-horovodrun",
                                         "train-horovod-torch-horovodrun"}
    assert {"allreduce-torch-gloo-mpirun", "allreduce-horovod-mpi-mpirun"} <= by_launcher[
        "mpirun"]
    assert "train-torch-ddp-torchrun" in by_launcher["torchrun"]


def test_an_unknown_launcher_is_one_line(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    res = cli(capsys, "validate", "--site", "cc", "--dry-run", "--env", str(tmp_path),
              "--launchers", "srun,nope")
    assert_one_line_error(res, 2, "no launcher 'nope'", "all")


HOROVODRUN_ONLY = """\
name: hvdonly
scheduler: slurm
partitions:
  gpu: {nodes: 4, cores_per_node: 32, gpus: {count: 4}, default: true}
horovod: {source: none}
launchers:
  horovodrun: {kind: horovodrun, controller: gloo}
default_launcher: horovodrun
"""

SRUN_ONLY_HOROVOD = """\
name: srunhvd
scheduler: slurm
partitions:
  gpu: {nodes: 4, cores_per_node: 32, gpus: {count: 4}, default: true}
horovod: {source: pip, version: "0.28.1", frameworks: [pytorch], controllers: [gloo, mpi]}
launchers:
  srun: {kind: srun, rendezvous_env: true}
default_launcher: srun
"""


def test_a_check_that_cannot_be_planned_is_a_skipped_row_with_its_reason(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_profile(tmp_path / "sites", "srunhvd", SRUN_ONLY_HOROVOD)
    data = dry_run(capsys, str(path), tmp_path)
    skipped = {s["name"]: s for s in data["skipped"]}
    assert set(skipped) == {"allreduce-horovod-gloo", "allreduce-horovod-mpi", "train-horovod"}
    assert all(s["status"] == "skipped" for s in skipped.values())
    assert "add one (kind: horovodrun, controller: gloo)" in skipped[
        "allreduce-horovod-gloo"]["detail"]
    assert "add a launcher of kind mpirun" in skipped["allreduce-horovod-mpi"]["detail"]
    # the terminal dry run says each on stderr
    res = cli(capsys, "validate", "--site", str(path), "--dry-run", "--env", str(tmp_path))
    assert res.rc == 0
    assert [ln.split(":")[0] for ln in res.err_lines] == ["hpcprov"] * 3
    assert all(" SKIPPED " in ln for ln in res.err_lines)


@pytest.mark.parametrize(("text", "name", "want"), [
    (SRUN_ONLY_HOROVOD, "srunhvd",
     {"allreduce-horovod-gloo", "allreduce-horovod-mpi", "train-horovod"}),
    (HOROVODRUN_ONLY, "hvdonly", {"allreduce-torch-nccl", "train-torch-ddp"}),
])
def test_the_skipped_rows_are_the_same_with_launchers_all(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, name: str,
        want: set[str]) -> None:
    """Issue 45, defect 4: `--launchers all` dropped the SKIPPED rows the default run
    prints (a part of the site left out in silence)."""
    path = write_profile(tmp_path / "sites", name, text)
    default = {s["name"] for s in dry_run(capsys, str(path), tmp_path)["skipped"]}
    every = {s["name"] for s in dry_run(capsys, str(path), tmp_path, "--launchers", "all")
             ["skipped"]}
    assert default == want and want <= every, (default, every)


def test_a_named_check_that_cannot_run_is_one_line_before_anything_is_submitted(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_profile(tmp_path / "sites", "hvdonly", HOROVODRUN_ONLY)
    for checks in ("allreduce,train", "train"):
        res = cli(capsys, "validate", "--site", str(path), "--checks", checks, "--env",
                  str(tmp_path / "env"), "--workdir", str(tmp_path / "run"))
        assert_one_line_error(res, 2, "--checks", "cannot run on site hvdonly",
                              "no launcher of the site starts torch.distributed's ranks")
    assert not (tmp_path / "run").exists()
    # the default checks: env runs, the rest are SKIPPED rows
    data = dry_run(capsys, str(path), tmp_path)
    assert script_names(data) == {"env", "allocation"}
    assert {s["name"] for s in data["skipped"]} == {"allreduce-torch-nccl", "train-torch-ddp"}
    # and site check flags the site at its launchers
    res = cli(capsys, "site", "check", str(path))
    assert res.rc == 0
    assert any("validate can plan only its env check here" in ln and "hvdonly.yaml:" in ln
               for ln in res.err_lines), res.err


def _fake_run(jobs: list[dict]) -> dict:
    return {"site": "srunhvd", "partition": "gpu", "nodes": 2, "started": "now",
            "seconds": 1.0, "jobs_seconds": 1.0, "overhead_s": 0.0, "rundir": "/r",
            "scheduler": "slurm", "ok": True, "stopped": None, "events": [],
            "submissions": 1, "jobs": jobs,
            "outcomes": [{"check": "env", "name": "env imports", "status": "pass",
                          "measured": None, "expected": "", "unit": "", "nodes": "n1",
                          "detail": "torch"}]}


def test_skipped_rows_reach_every_report_and_the_verdict_counts_the_checks(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import hpcprov.validate.api as api

    path = write_profile(tmp_path / "sites", "srunhvd", SRUN_ONLY_HOROVOD)
    prefix = tmp_path / "env"
    (prefix / ".hpcprov").mkdir(parents=True)
    (prefix / ".hpcprov" / "manifest.json").write_text("{}")
    jobs = [{"id": j, "check": j.split("-")[0], "impl": "x", "state": "COMPLETED",
             "exit_code": 0, "node_list": "n1", "seconds": 1, "run_s": None, "records": [],
             "reason": ""} for j in ("env", "allreduce-torch-nccl", "train-torch-ddp")]
    monkeypatch.setattr(api, "run_validation", lambda *a, **k: _fake_run(jobs))
    junit, report = tmp_path / "v.xml", tmp_path / "v.md"
    args = ("validate", "--site", str(path), "--env", str(prefix), "--workdir",
            str(tmp_path / "run"), "--no-history", "--junit", str(junit), "--report",
            str(report))
    res = cli(capsys, *args)
    assert res.rc == 0, res.err
    rows = [ln.split()[:2] for ln in res.out.splitlines()]
    assert ["SKIPPED", "allreduce-horovod-mpi"] in rows
    assert ["SKIPPED", "train-horovod"] in rows
    assert "hpcprov: PASS: 3 of 3 checks ran (3 part(s) SKIPPED), srunhvd/gpu" in res.out
    suite = ET.fromstring(junit.read_text().split("?>", 1)[1])
    assert suite.get("skipped") == "3"
    skipped = [c for c in suite if c.find("skipped") is not None]
    assert {c.get("name") for c in skipped} == {"allreduce-horovod-gloo",
                                                "allreduce-horovod-mpi", "train-horovod"}
    md = report.read_text()
    assert "3 of 3 checks ran (3 part(s) SKIPPED)" in md
    assert "| skipped | train-horovod |" in md
    data = json.loads(cli(capsys, *args, "--json").out)
    assert data["checks"] == {"asked": ["env", "allreduce", "train"],
                              "ran": ["env", "allreduce", "train"], "skipped": 3}
    assert sum(o["status"] == "skipped" for o in data["outcomes"]) == 3


def _files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def test_a_dry_run_before_setup_needs_no_manifest_and_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"),
           "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config"),
           "USER": "someone"}
    env.pop("HPCPROV_HISTORY", None)
    env.pop("HPCPROV_NO_CACHE", None)
    workdir, prefix = tmp_path / "run", tmp_path / "never-set-up"
    before = _files_under(tmp_path)
    for site in ("testbed", "neuron", str(EXAMPLES / "pbs-pals.yaml")):
        proc = subprocess.run([*hpcprov_argv(), "validate", "--site", site, "--dry-run",
                               "--env", str(prefix), "--workdir", str(workdir), "-o",
                               "account=proj"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert f"# ==> {workdir}/env.sh <==" in proc.stdout
        assert f"# ==> {workdir}/train-torch-ddp.sh <==" in proc.stdout
    assert not workdir.exists() and not prefix.exists()
    assert _files_under(tmp_path) == before  # no cache, no history, no lock
    # a real run still asks for the environment
    proc = subprocess.run([*hpcprov_argv(), "validate", "--site", "testbed", "--env",
                           str(prefix), "--workdir", str(workdir)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "not a provisioned environment" in proc.stderr


SIZED_SLURM = """\
name: qos
scheduler: slurm
partitions:
  regular:
    nodes: 64
    cores_per_node: 64
    gpus: {count: 4}
    limits: {max_nodes_per_job: 4, max_walltime: "24:00:00"}
    default: true
  big:
    routing: options
    options: {qos: big, partition: regular}
    nodes: 64
    cores_per_node: 64
    gpus: {count: 4}
    limits: {min_nodes_per_job: 5, max_nodes_per_job: 32, max_walltime: "02:00:00"}
    by_job_size: true
launchers:
  srun: {kind: srun}
default_launcher: srun
"""

SIZED_PBS = """\
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


@pytest.mark.parametrize(("name", "text", "magic", "picked"), [
    ("sized", SIZED_PBS, "#PBS -q ", "#PBS -q large"),
    ("qos", SIZED_SLURM, "#SBATCH --qos", "#SBATCH --qos=big"),
])
def test_validate_submits_to_the_queue_jobscript_picks(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str, magic: str,
        picked: str) -> None:
    path = str(write_profile(tmp_path / "sites", name, text))
    res = cli(capsys, "jobscript", "--site", path, "-N", "8", "-t", "01:00:00", "--",
              "python", "x.py")
    assert res.rc == 0, res.err
    assert [ln for ln in res.out.splitlines() if ln.startswith(magic)] == [picked]
    data = dry_run(capsys, path, tmp_path, "-N", "8")
    for script in data["scripts"]:
        if "/allocation" in script["path"]:
            continue
        queues = [ln for ln in script["text"].splitlines() if ln.startswith(magic)]
        # the 8-node jobs go where jobscript sends 8 nodes; the 1-node baselines where 1 goes
        want = [picked] if "-1node" not in script["path"] else [
            ln for ln in cli(capsys, "jobscript", "--site", path, "-N", "1", "-t", "01:00:00",
                             "--", "python", "x.py").out.splitlines() if ln.startswith(magic)]
        assert queues == want, (script["path"], queues)


def test_validate_never_plans_a_job_jobscript_refuses(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 45, defect 1: sockeye (PBS) charges every job to an allocation; jobscript
    refused a job without -o account=, validate --dry-run planned every job without it and
    exited 0 (a real run: each job rejected by qsub). Now validate refuses in one line
    naming the option and the fix, exit 2, before anything is written or submitted."""
    res = cli(capsys, "jobscript", "--site", "sockeye", "-N", "2", "--", "python", "t.py")
    assert res.rc == 2 and "[missing-option]" in res.err
    res = cli(capsys, "validate", "--site", "sockeye", "--dry-run", "-N", "2", "--env",
              str(tmp_path / "env"), "--workdir", str(tmp_path / "run"))
    assert_one_line_error(res, 2, "would be refused, as hpcprov jobscript refuses it",
                          "[missing-option]", "account", "nothing was submitted")
    assert not (tmp_path / "run").exists()
    data = dry_run(capsys, "sockeye", tmp_path, "-N", "2", "-o", "account=st-pi-1-gpu")
    assert data["scripts"] and all("st-pi-1-gpu" in s["text"] for s in data["scripts"])


def test_validate_never_plans_a_multi_node_run_on_one_machine(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 45, defect 6: with `scheduler: none` (a site whose scheduler hpcprov does not
    know), `validate --dry-run -N 2` planned "2-node" jobs on one host (mpirun -H
    localhost:4, MASTER_ADDR=localhost) with no word; jobscript refused the same job. Now
    validate refuses it in one line, as jobscript does."""
    path = write_profile(tmp_path / "sites", "nosched", "extends: local\nname: nosched\n"
                         "partitions:\n  local: {nodes: 4}\n")  # its scheduler: unknown
    res = cli(capsys, "jobscript", "--site", str(path), "-N", "2", "--", "python", "t.py")
    assert res.rc == 2 and "[nodes-local]" in res.err
    res = cli(capsys, "validate", "--site", str(path), "--dry-run", "-N", "2", "--env",
              str(tmp_path / "env"), "--workdir", str(tmp_path / "run"))
    assert_one_line_error(res, 2, "would be refused", "[nodes-local]", "has no scheduler",
                          "nothing was submitted")

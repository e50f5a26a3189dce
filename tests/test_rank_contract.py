"""The rank contract (issue 26): every rank gets torch.distributed's environment (RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT) from
whichever starter launched it, through the shim every generated launch line carries
(hpcprov/jobs/rank_env.sh, its table from hpcprov/jobs/ranks.py); per-rank wrapper values
are each rank's own, and nothing in them executes.

Proved three ways: the shim under each starter's variables (as the starters set them);
generated job scripts run by stub starters that start every rank with those variables
(srun, mpiexec of Hydra and of PALS, jsrun, which cannot run here); and an unmodified DDP
script trained by the real mpirun and horovodrun through the generated job script. The
testbed proves srun, mpirun, horovodrun and torchrun on 2 nodes
(tests/testbed/test_testbed_rank_contract.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprov_tests import cli, write_profile

from hpcprov import schedulers
from hpcprov.jobs.launchers import rank_shim_line
from hpcprov.site.kinds import LauncherKind

SLURM = schedulers.backend("slurm")

CONTRACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
            "MASTER_PORT", "HPCPROV_RANK_SOURCE")
# what each rank prints: its contract, as JSON on one line
SHOW = ("import json, os; print('RANKENV ' + json.dumps({k: os.environ.get(k) for k in "
        f"{list(CONTRACT)!r} + ['HPCPROV_TEST_WRAPPED']}}), flush=True)")
# a Slurm batch step's own variables, which every rank started inside a job inherits
BATCH = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}


def shim_line(kind: LauncherKind) -> str:
    """The shim line of ``kind`` in a Slurm job: a container kind's ranks carry the
    variables of the job's task starter, srun's."""
    starters = SLURM.task_starters if kind is LauncherKind.container else None
    return rank_shim_line(kind, starters)


def shim(kind: LauncherKind, env: dict[str, str], *args: str) -> dict[str, str | None]:
    """One rank: the shim of ``kind`` run by bash with ``env``, showing its contract."""
    script = shim_line(kind) + '\nexec bash -c "$hpcprov_rank" hpcprov-rank "$@"\n'
    proc = subprocess.run(["bash", "-c", script, "job", *args, "--", sys.executable, "-c", SHOW],
                          env={"PATH": os.environ["PATH"], **env}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RANKENV ")]
    return json.loads(line.removeprefix("RANKENV "))


@pytest.mark.parametrize(("kind", "env", "want"), [
    (LauncherKind.srun, {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
                         "SLURM_NODEID": "1"}, ("5", "8", "1", "4", "1", "slurm")),
    # Open MPI's mpirun inside a batch script: the batch step's SLURM_PROCID=0 must not win
    # (OMPI_COMM_WORLD_NODE_RANK counts processes on the node, not nodes: not read)
    (LauncherKind.mpirun, {**BATCH, "OMPI_COMM_WORLD_RANK": "6", "OMPI_COMM_WORLD_SIZE": "8",
                           "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
                           "OMPI_COMM_WORLD_NODE_RANK": "2"}, ("6", "8", "2", "4", "1", "openmpi")),
    # Intel MPI's mpirun is Hydra
    (LauncherKind.mpirun, {**BATCH, "PMI_RANK": "3", "PMI_SIZE": "8", "MPI_LOCALRANKID": "3",
                           "MPI_LOCALNRANKS": "4"}, ("3", "8", "3", "4", "0", "hydra")),
    # HPE Cray's PALS: its own ids, the size from Cray PMI (which sets PMI_RANK too)
    (LauncherKind.mpiexec, {**BATCH, "PALS_RANKID": "5", "PMI_RANK": "5", "PMI_SIZE": "8",
                            "PALS_LOCAL_RANKID": "1", "PALS_NODEID": "1"},
     ("5", "8", "1", "4", "1", "pals")),
    (LauncherKind.mpiexec, {**BATCH, "PMI_RANK": "7", "PMI_SIZE": "8", "PMI_LOCAL_RANK": "3",
                            "PMI_LOCAL_SIZE": "4"}, ("7", "8", "3", "4", "1", "cray-pmi")),
    (LauncherKind.mpiexec, {**BATCH, "PMI_RANK": "2", "PMI_SIZE": "8", "MPI_LOCALRANKID": "2"},
     ("2", "8", "2", "4", "0", "hydra")),
    # a starter that says only the rank (PMIx): the rest from the geometry hpcprov planned
    (LauncherKind.mpiexec, {**BATCH, "PMIX_RANK": "6"}, ("6", "8", "2", "4", "1", "pmix")),
    (LauncherKind.jsrun, {"JSM_NAMESPACE_RANK": "4", "JSM_NAMESPACE_SIZE": "8",
                          "JSM_NAMESPACE_LOCAL_RANK": "0", "JSM_NAMESPACE_LOCAL_SIZE": "4"},
     ("4", "8", "0", "4", "1", "jsrun")),
    (LauncherKind.horovodrun, {**BATCH, "HOROVOD_RANK": "1", "HOROVOD_SIZE": "8",
                               "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "4",
                               "HOROVOD_CROSS_RANK": "0"}, ("1", "8", "1", "4", "0", "horovod")),
    # horovodrun --mpi starts its ranks with mpirun
    (LauncherKind.horovodrun, {**BATCH, "OMPI_COMM_WORLD_RANK": "7", "OMPI_COMM_WORLD_SIZE": "8",
                               "OMPI_COMM_WORLD_LOCAL_RANK": "3"},
     ("7", "8", "3", "4", "1", "openmpi")),
    (LauncherKind.container, {"SLURM_PROCID": "2", "SLURM_NTASKS": "8", "SLURM_LOCALID": "2"},
     ("2", "8", "2", "4", "0", "slurm")),
])
def test_each_starters_variables_become_torchs(kind: LauncherKind, env: dict[str, str],
                                               want: tuple[str, ...]) -> None:
    got = shim(kind, env, "8", "4", "node01", "29555")
    assert (got["RANK"], got["WORLD_SIZE"], got["LOCAL_RANK"], got["LOCAL_WORLD_SIZE"],
            got["NODE_RANK"], got["HPCPROV_RANK_SOURCE"]) == want
    assert (got["MASTER_ADDR"], got["MASTER_PORT"]) == ("node01", "29555")


def test_an_exported_rendezvous_wins_and_no_starter_in_a_world_of_one_is_one_rank() -> None:
    got = shim(LauncherKind.srun, {"MASTER_ADDR": "fast0", "MASTER_PORT": "1234"},
               "1", "1", "node01", "29555")
    assert (got["RANK"], got["WORLD_SIZE"], got["HPCPROV_RANK_SOURCE"]) == ("0", "1", "single")
    assert (got["MASTER_ADDR"], got["MASTER_PORT"]) == ("fast0", "1234")
    # a Slurm variable under an MPI starter is the batch step's, never a rank
    assert shim(LauncherKind.mpirun, BATCH, "1", "1", "n", "1")["HPCPROV_RANK_SOURCE"] == "single"
    # a starter's value that is not a number is not a rank
    got = shim(LauncherKind.srun, {"SLURM_PROCID": "1;id", "SLURM_NTASKS": "8"}, "1", "1", "n", "1")
    assert got["HPCPROV_RANK_SOURCE"] == "single"


def stripped(kind: LauncherKind, env: dict[str, str], size: str) -> subprocess.CompletedProcess:
    """One rank of ``kind``'s shim run with ``env`` (its starter's variables stripped, as a
    wrapper that cleans the environment leaves it) in a planned world of ``size``."""
    script = shim_line(kind) + '\nexec bash -c "$hpcprov_rank" hpcprov-rank "$@"\n'
    return subprocess.run(["bash", "-c", script, "job", size, "4", "n", "1", "--",
                           sys.executable, "-c", SHOW], env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("kind", "env", "looked"), [
    (LauncherKind.mpiexec, BATCH, "PALS_RANKID, PMI_RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK"),
    # (srun's ranks may carry Flux's variables: Slurm-like wrappers over Flux)
    (LauncherKind.srun, {"SLURM_NTASKS": "8"}, "SLURM_PROCID, FLUX_TASK_RANK"),
    # a value that is no number is no rank either
    (LauncherKind.srun, {"SLURM_PROCID": "1;id", "SLURM_NTASKS": "8"},
     "SLURM_PROCID, FLUX_TASK_RANK"),
    (LauncherKind.jsrun, {}, "JSM_NAMESPACE_RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK"),
    (LauncherKind.container, {}, "SLURM_PROCID, FLUX_TASK_RANK"),
])
def test_no_starter_in_a_planned_world_of_eight_stops_the_rank_naming_the_kind(
        kind: LauncherKind, env: dict[str, str], looked: str) -> None:
    """Every rank a launcher started without its variables (a wrapper that strips them)
    became RANK 0 of WORLD_SIZE 1: eight ranks each trained alone, and the job passed. Now
    the rank stops at once, with one line naming the kind and what it looked for."""
    proc = stripped(kind, env, "8")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "RANKENV" not in proc.stdout  # the command never ran
    assert proc.stderr.splitlines() == [
        f"hpcprov: rank of launcher kind {kind.value}: none of {looked} is set, but 8 ranks "
        "were planned: the launcher did not start this rank as one of 8 (a wrapper that "
        "strips its variables?)"]
    # a world of one: the single fallback stays
    alone = stripped(kind, env, "1")
    assert alone.returncode == 0 and alone.stderr == "", alone.stderr
    assert '"HPCPROV_RANK_SOURCE": "single"' in alone.stdout


HOSTILE = ["$(touch {pwned})", "`touch {pwned}`", "'; touch {pwned}; '", "${{IFS}}x*",
           "$(touch {pwned})$SLURM_LOCALID"]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_wrapper_value_is_each_ranks_own_and_never_executes(tmp_path: Path,
                                                              value: str) -> None:
    pwned = tmp_path / "pwned"
    word = value.format(pwned=pwned)
    for local in ("0", "3"):
        env = {"SLURM_PROCID": local, "SLURM_NTASKS": "8", "SLURM_LOCALID": local}
        got = shim(LauncherKind.srun, env, "8", "4", "n", "1", "env",
                   f"HPCPROV_TEST_WRAPPED={word}<$SLURM_LOCALID|${{LOCAL_RANK}}>")
        # a variable reference is the rank's value (IFS too); nothing else is evaluated:
        # no command runs, no glob expands, nothing splits
        literal = word.replace("$SLURM_LOCALID", local).replace("${IFS}", " \t\n")
        assert got["HPCPROV_TEST_WRAPPED"] == f"{literal}<{local}|{local}>"
    assert not pwned.exists()


# ------------------------------------------- generated job scripts under stub starters

STARTER = r'''#!{python}
"""A stub of {name}: starts every rank of its geometry at once, each with the variables the
real starter sets, and runs the command (from the rank contract's bash on)."""
import os, subprocess, sys

name, argv = {name!r}, sys.argv[1:]
def opt(*names):
    for i, a in enumerate(argv):
        for n in names:
            if a == n:
                return int(argv[i + 1])
            if a.startswith(n + "="):
                return int(a.split("=", 1)[1])
    return None
if name == "flux" and argv[0] == "hostlist":  # flux hostlist -n 0 local: the first node
    print("n1")
    sys.exit(0)
start = argv.index("apptainer" if "apptainer" in argv else "bash")  # the rank's command
if name == "srun":
    size = opt("--ntasks") or int(os.environ["SLURM_NTASKS"])
    per = opt("--ntasks-per-node") or int(os.environ["SLURM_NTASKS_PER_NODE"])
elif name == "jsrun":
    size, per = opt("--nrs"), opt("--rs_per_host")
elif name == "lrun":  # LLNL's: -N<nodes> -T<tasks per node>, no space (lrun's spelling)
    glued = {{a[:2]: int(a[2:]) for a in argv[:start] if a[:2] in ("-N", "-T") and a[2:]}}
    per = glued["-T"]
    size = glued["-N"] * per
elif name == "flux":  # flux run -N NODES -n TASKS
    size = opt("-n")
    per = size // opt("-N")
elif name == "ibrun":  # TACC's: the job's tasks unless told -n
    size = opt("-n") or int(os.environ["SLURM_NTASKS"])
    per = int(os.environ["SLURM_NTASKS_PER_NODE"])
else:
    size, per = opt("-n", "-np"), opt("-ppn", "--ppn")
procs = []
for r in range(size):
    local, node = r % per, r // per
    given = {{
        "srun": {{"SLURM_PROCID": r, "SLURM_NTASKS": size, "SLURM_LOCALID": local,
                  "SLURM_NODEID": node}},
        "jsrun": {{"JSM_NAMESPACE_RANK": r, "JSM_NAMESPACE_SIZE": size,
                   "JSM_NAMESPACE_LOCAL_RANK": local, "JSM_NAMESPACE_LOCAL_SIZE": per}},
        "hydra": {{"PMI_RANK": r, "PMI_SIZE": size, "MPI_LOCALRANKID": local,
                   "MPI_LOCALNRANKS": per}},
        "mvapich": {{"MV2_COMM_WORLD_RANK": r, "MV2_COMM_WORLD_SIZE": size,
                     "MV2_COMM_WORLD_LOCAL_RANK": local, "MV2_COMM_WORLD_LOCAL_SIZE": per}},
        "pals": {{"PALS_RANKID": r, "PMI_RANK": r, "PMI_SIZE": size, "PALS_LOCAL_RANKID": local,
                  "PALS_NODEID": node}},
        "flux": {{"FLUX_TASK_RANK": r, "FLUX_JOB_SIZE": size, "FLUX_TASK_LOCAL_ID": local}},
    }}[os.environ.get("STUB_FLAVOR", name)]
    env = {{**os.environ, **{{k: str(v) for k, v in given.items()}}}}
    procs.append(subprocess.Popen(argv[start:], env=env))
sys.exit(max(p.wait() for p in procs))
'''
SCONTROL = '#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && printf "n1\\nn2\\n"\nexit 0\n'


def stub_bin(root: Path) -> Path:
    folder = root / "bin"
    folder.mkdir()
    for name in ("srun", "mpiexec", "jsrun", "ibrun", "lrun", "flux"):
        path = folder / name
        path.write_text(STARTER.format(python=sys.executable, name=name))
        path.chmod(0o755)
    (folder / "scontrol").write_text(SCONTROL)
    (folder / "scontrol").chmod(0o755)
    return folder


def run_job(script: str, root: Path, env: dict[str, str]) -> list[dict[str, str | None]]:
    (root / "job.sh").write_text(script)
    proc = subprocess.run(["bash", str(root / "job.sh")], cwd=root, capture_output=True,
                          text=True, timeout=120, env={
                              "PATH": f"{stub_bin(root)}:{Path(sys.executable).parent}:"
                                      "/usr/bin:/bin", "HOME": str(root), **env})
    assert proc.returncode == 0, proc.stderr
    return [json.loads(ln.removeprefix("RANKENV ")) for ln in proc.stdout.splitlines()
            if ln.startswith("RANKENV ")]


NO_MODULES = "modules: {system: none}\n"  # the stubs run no module system
MPIEXEC = NO_MODULES + """\
name: mx
extends: testbed
launchers:
  hydra: {kind: mpiexec, wrapper: [env, "HPCPROV_TEST_WRAPPED=gpu$LOCAL_RANK"]}
  pals: {kind: mpiexec, flavor: pals}
  ibrun: {kind: ibrun, wrapper: [env, "HPCPROV_TEST_WRAPPED=gpu$LOCAL_RANK"]}
default_launcher: hydra
"""


@pytest.mark.parametrize(("site", "launcher", "flavor", "env"), [
    ("tb", "srun", "srun", {**BATCH, "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "7",
                            "SLURM_NTASKS": "16", "SLURM_NTASKS_PER_NODE": "8"}),
    ("mx", "hydra", "hydra", {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "7", **BATCH}),
    ("mx", "pals", "pals", {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "7", **BATCH}),
    # a launcher kind added as one unit (issue 26): TACC's ibrun over MVAPICH2
    ("mx", "ibrun", "mvapich", {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "7", **BATCH,
                                "SLURM_NTASKS": "16", "SLURM_NTASKS_PER_NODE": "8"}),
    ("js", "jsrun", "jsrun", {"LSB_JOBID": "7"}),
    # LLNL's lrun: its ranks carry jsrun's JSM_NAMESPACE_* only
    ("jl", "lrun", "jsrun", {"LSB_JOBID": "7"}),
])
def test_a_generated_job_gives_every_rank_its_own_contract(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site: str, launcher: str,
        flavor: str, env: dict[str, str]) -> None:
    profiles = {"mx": MPIEXEC, "tb": NO_MODULES + "name: tb\nextends: testbed\n",
                "js": NO_MODULES + "name: js\nextends: lsf-example\nlaunchers:\n"
                "  jsrun: {kind: jsrun}\n",
                "jl": NO_MODULES + "name: jl\nextends: lsf-example\nlaunchers:\n"
                "  lrun: {kind: lrun}\n"}
    ref = str(write_profile(tmp_path, site, profiles[site])) if site in profiles else site
    if site in ("js", "jl"):
        hosts = tmp_path / "hosts"
        hosts.write_text("h1\nh1\nh2\nh2\n")
        env = {**env, "LSB_DJOB_HOSTFILE": str(hosts)}
    res = cli(capsys, "jobscript", "--site", ref, "-N", "2", "-l", launcher, "--no-activate",
              "-o", "comment=pytorch", "--", sys.executable, "-c", SHOW)
    assert res.rc == 0, res.err
    ranks = run_job(res.out, tmp_path, {**env, "STUB_FLAVOR": flavor})
    size = len(ranks)
    per = size // 2
    assert size >= 2 and sorted(int(r["RANK"]) for r in ranks) == list(range(size))
    for r in ranks:
        rank = int(r["RANK"])
        assert (r["WORLD_SIZE"], r["LOCAL_WORLD_SIZE"]) == (str(size), str(per))
        assert (r["LOCAL_RANK"], r["NODE_RANK"]) == (str(rank % per), str(rank // per))
        assert r["MASTER_PORT"] and r["MASTER_ADDR"] in ("n1", "h1")
        if launcher in ("hydra", "ibrun"):  # the wrapper's $LOCAL_RANK: this rank's
            assert r["HPCPROV_TEST_WRAPPED"] == f"gpu{rank % per}"


# --------------------------------------------- an unmodified DDP script, real starters

DDP = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env://: nothing read from any launcher by hand
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
# one file per rank: mpirun forwards the ranks' stdout through one stream, where two
# ranks' lines can meet without a newline between them
with open(f"ddp.{dist.get_rank()}.out", "w") as out:
    out.write(f"{dist.get_rank()} {dist.get_world_size()} {os.environ['LOCAL_RANK']} "
              f"{int(t.item())}")
dist.destroy_process_group()
"""


@pytest.mark.ranks  # real ranks on this host, MASTER_PORT 29500 (conftest: the host group)
@pytest.mark.parametrize("launcher", ["mpirun", "horovodrun"])
def test_an_unmodified_ddp_script_trains_under_the_generated_launch(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, launcher: str) -> None:
    pytest.importorskip("torch.distributed")
    if launcher == "mpirun" and shutil.which("mpirun") is None:
        pytest.skip("no mpirun here")
    if launcher == "horovodrun":
        pytest.importorskip("horovod.torch")
        if shutil.which("horovodrun") is None:
            pytest.skip("no horovodrun on PATH")
    (tmp_path / "ddp.py").write_text(DDP)
    res = cli(capsys, "jobscript", "--site", "local", "-l", launcher, "--tasks-per-node", "2",
              "--no-activate", "--", sys.executable, "ddp.py")
    assert res.rc == 0, res.err
    (tmp_path / "job.sh").write_text(res.out)
    env = {k: v for k, v in os.environ.items() if k not in CONTRACT}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1")
    proc = subprocess.run(["bash", "job.sh"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(f.read_text() for f in tmp_path.glob("ddp.*.out"))
    assert lines == ["0 2 0 3", "1 2 1 3"], proc.stdout + proc.stderr  # 1 + 2 on every rank


# ------------------------------------------------- a job's first lines tell the truth


def test_a_job_without_its_environment_stops_at_once_naming_the_prefix_and_setup(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A job script written right after `site draft` died with `.../bin/activate: No such
    file or directory`, naming no fix."""
    prefix = tmp_path / "never set up"
    res = cli(capsys, "jobscript", "--site", "local", "--prefix", str(prefix), "--",
              "echo", "ran")
    assert res.rc == 0, res.err
    (tmp_path / "job.sh").write_text(res.out)
    proc = subprocess.run(["bash", "job.sh"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "ran" not in proc.stdout
    (line,) = proc.stderr.splitlines()
    assert str(prefix) in line and "hpcprov setup --site local" in line


def test_a_job_runs_in_the_sites_workdir(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    workdir = tmp_path / "work dir"
    path = write_profile(tmp_path, "wd", f"extends: local\npaths:\n  workdir: '{workdir}'\n")
    res = cli(capsys, "jobscript", "--site", str(path), "--no-activate", "--", "pwd")
    assert res.rc == 0, res.err
    (tmp_path / "job.sh").write_text(res.out)
    proc = subprocess.run(["bash", "job.sh"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].endswith(f":{workdir}")  # horovodrun: [0]<stdout>:


def test_an_image_without_horovod_is_checked_by_importing_its_frameworks(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """setup ran horovodrun -cb inside an image even with horovod.source: none, so it failed
    on every NGC-style PyTorch image."""
    from hpcprov.site.profiles import load_site

    image = next(iter(load_site("neuron").containers.images))
    plain = write_profile(tmp_path, "img", "extends: neuron\nhorovod: {source: none}\n")
    for site, has_horovod in ((str(plain), False), ("neuron", True)):
        res = cli(capsys, "setup", "--site", site, "--container", image, "--dry-run")
        assert res.rc == 0, res.err
        assert ("horovodrun -cb" in res.out) is has_horovod
        # frameworks_import.py, on the image's Python's stdin, imports them
        assert (" python - torch" in res.out) is not has_horovod


def test_validate_dry_run_prints_the_scripts_the_run_writes_byte_for_byte(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`hpcprov validate --dry-run`: every job script (and the allocation's) it would submit;
    then the real run writes exactly those (here its jobs stop at their environment check:
    the prefix only looks provisioned)."""
    prefix = tmp_path / "prefix"
    (prefix / ".hpcprov").mkdir(parents=True)
    (prefix / ".hpcprov" / "manifest.json").write_text("{}")
    args = ["validate", "--site", "local", "--env", str(prefix), "--workdir",
            str(tmp_path / "run"), "--checks", "env,allreduce", "--no-history", "--timeout", "60"]
    res = cli(capsys, *args, "--dry-run", "--json")
    assert res.rc == 0, res.err
    planned = {s["path"]: s["text"] for s in json.loads(res.out)["scripts"]}
    assert planned and not (tmp_path / "run").exists()  # nothing written, nothing run
    assert all("bash -c \"$hpcprov_rank\"" in text or "torch.distributed.run" in text
               for text in planned.values())
    cli(capsys, *args)  # the real run (its jobs fail: no environment)
    written = {str(p): p.read_text() for p in (tmp_path / "run").glob("*.sh")}
    assert written == planned


def test_the_guides_interactive_block_adds_the_sites_module_folders(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The interactive block of the guide loaded modules without `module use` of the site's
    module folders, so its `module load` failed where a job script's worked."""
    path = write_profile(tmp_path, "mu", "extends: testbed\nmodules:\n  use: [/apps/modules/all]\n")
    guide = cli(capsys, "guide", "--site", str(path)).out
    interactive = guide.split("## 2. Run interactively", 1)[1].split("\n## 3.", 1)[0]
    lines = interactive.splitlines()
    use = lines.index("module use /apps/modules/all")
    assert use < next(i for i, ln in enumerate(lines) if ln.startswith("module load "))


def test_lint_and_the_guide_name_pbs_options_as_pbs_names_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The guide and lint called PBS options --account (qsub's is -A)."""
    res = cli(capsys, "jobscript", "--site", "sockeye", "--", "true")
    assert res.rc == 2 and "-A (account) is mandatory on sockeye" in res.err
    assert "--account" not in res.err.split("(fix:")[0]
    guide = cli(capsys, "guide", "--site", "sockeye").out
    assert "`-A (account)` is mandatory" in guide and "`--account`" not in guide


def test_ibrun_typed_in_an_allocation_carries_the_geometry(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """In a job script ibrun takes the job's tasks; typed by hand in an allocation it is
    told them (-n N -o 0), and its ranks still start through the rank contract."""
    ref = str(write_profile(tmp_path, "mx", MPIEXEC))
    res = cli(capsys, "launch", "--site", ref, "-N", "2", "-l", "ibrun", "--", "python", "t.py")
    assert res.rc == 0, res.err
    line = res.out.strip().splitlines()[-1]
    assert line.startswith("ibrun -n 16 -o 0 bash -c \"$hpcprov_rank\" hpcprov-rank 16 8 ")
    job = cli(capsys, "jobscript", "--site", ref, "-N", "2", "-l", "ibrun", "--no-activate",
              "--", "python", "t.py")
    assert job.rc == 0, job.err
    assert any(ln.startswith('ibrun bash -c "$hpcprov_rank"') for ln in job.out.splitlines())
    assert 'hpcprov_sets=("mvapich MV2_COMM_WORLD_RANK' in job.out


# ------------------------------------------- containers compose with any launcher (point 5)

APPTAINER = r'''#!{python}
"""A stub of apptainer exec: drops its verb, flags and image, and runs the rest with the
image named in HPCPROV_TEST_IMAGE (as the rank would see it inside)."""
import os, sys
argv = sys.argv[1:]
assert argv[0] == "exec", argv
i = 1
while argv[i].startswith("-"):
    i += 1
os.environ["HPCPROV_TEST_WRAPPED"] = "image " + argv[i]
os.execvp(argv[i + 1], argv[i + 1:])
'''

PBS_IMAGE = NO_MODULES + """\
name: pbsimg
extends: sockeye
containers:
  runtime: apptainer
  gpu_flag: --nv
  images: {pytorch: $HOME/images/pytorch.sif}
  default_image: pytorch
launchers:
  pals: {kind: mpiexec, flavor: pals, runtime: apptainer}
default_launcher: pals
"""


def test_on_pbs_mpiexec_starts_every_rank_in_the_image_with_its_contract(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Containers were Slurm-only: `mpiexec ... apptainer exec IMAGE` on PBS could not be
    said. Now a runtime on any launcher starts each rank in the image, the rank contract
    inside it, the host's Python variables out."""
    ref = str(write_profile(tmp_path, "pbsimg", PBS_IMAGE))
    res = cli(capsys, "jobscript", "--site", ref, "-N", "2", "--tasks-per-node", "2",
              "--gpus-per-node", "2", "-o", "account=st-x-1-gpu", "--", "python", "-c", SHOW)
    assert res.rc == 0, res.err
    launch = next(ln for ln in res.out.splitlines() if ln.startswith("mpiexec "))
    assert launch.startswith('mpiexec -n 4 --ppn 2 apptainer exec --nv "${HOME}/images/'
                             'pytorch.sif" bash -c "$hpcprov_rank" hpcprov-rank 4 2 ')
    assert "unset PYTHONPATH PYTHONHOME PYTHONUSERBASE VIRTUAL_ENV" in res.out
    assert "/activate" not in res.out  # the image brings its Python: none activated
    bindir = tmp_path / "extra"
    bindir.mkdir()
    (bindir / "apptainer").write_text(APPTAINER.format(python=sys.executable))
    (bindir / "apptainer").chmod(0o755)
    (bindir / "python").symlink_to(sys.executable)
    nodes = tmp_path / "nodefile"
    nodes.write_text("n1\nn1\nn2\nn2\n")
    script = res.out.replace("set -eo pipefail", f'set -eo pipefail\nPATH="{bindir}:$PATH"', 1)
    ranks = run_job(script, tmp_path, {"STUB_FLAVOR": "pals", "PBS_NODEFILE": str(nodes),
                                       "PBS_JOBID": "7.pbs", "PBS_O_WORKDIR": str(tmp_path),
                                       "PYTHONPATH": "/host/site-packages"})
    assert sorted(int(r["RANK"]) for r in ranks) == [0, 1, 2, 3]
    for r in ranks:
        assert (r["WORLD_SIZE"], r["LOCAL_RANK"]) == ("4", str(int(r["RANK"]) % 2))
        assert r["MASTER_ADDR"] == "n1" and r["HPCPROV_RANK_SOURCE"] == "pals"
        assert r["HPCPROV_TEST_WRAPPED"] == f"image {tmp_path}/images/pytorch.sif"


@pytest.mark.parametrize(("body", "needle"), [
    ("launchers:\n  m: {kind: mpiexec, runtime: pyxis}\n", "pyxis is an option of srun"),
    ("launchers:\n  m: {kind: mpirun, runtime: edf}\n", "edf is an option of srun"),
    ("launchers:\n  m: {kind: torchrun, runtime: pyxis}\n", "pyxis is an option of srun"),
    ("launchers:\n  m: {kind: horovodrun, runtime: apptainer}\n", "does not read runtime"),
    ("containers:\n  env: {A: \"it's\"}\n", "holds no single quote"),
    ("containers:\n  annotations: {'a b': x}\n", "not an annotation key"),
])
def test_a_runtime_where_it_cannot_go_is_refused_at_its_line(
        tmp_path: Path, body: str, needle: str) -> None:
    from hpcprov.site.profiles import check_file

    path = write_profile(tmp_path, "bad", "extends: testbed\nname: bad\n" + body)
    errors = check_file(path)
    assert errors and any(needle in str(e) for e in errors), [str(e) for e in errors]
    assert all(e.line >= 3 for e in errors)


EDF = NO_MODULES + """\
name: edf
extends: testbed
containers:
  runtime: enroot
  images: {ngc: $SCRATCH/images/pytorch-25.01.sqsh}
  default_image: ngc
  mounts: [$SCRATCH:$SCRATCH, /users/shared:/shared]
  workdir: $SCRATCH/work
  env: {NCCL_DEBUG: WARN}
  annotations:
    com.hooks.aws_ofi_nccl.enabled: "true"
    com.hooks.aws_ofi_nccl.variant: cuda12
launchers:
  edf: {kind: container, runtime: edf}
default_launcher: edf
"""


def test_an_edf_engine_gets_its_environment_file_written_by_the_job(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An EDF-based engine (TOML environment files, srun --environment) could not be said:
    the job now writes the file from the profile and srun starts each rank in it."""
    import tomllib

    ref = str(write_profile(tmp_path, "edf", EDF))
    res = cli(capsys, "jobscript", "--site", ref, "-N", "2", "--no-activate", "--",
              "python", "train.py")
    assert res.rc == 0, res.err
    srun = next(ln for ln in res.out.splitlines() if ln.startswith("srun "))
    assert '--environment="$hpcprov_edf" bash -c "$hpcprov_rank"' in srun
    # the lines that write the file, run as the job's shell runs them
    lines = res.out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("hpcprov_toml()"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("} > "))
    scratch = tmp_path / "scratch 'dir"  # a space in a path: it stays one value
    proc = subprocess.run(["bash", "-c", "\n".join(lines[start:end + 1]) + '\necho "$hpcprov_edf"'],
                          cwd=tmp_path, capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "SCRATCH": str(scratch).replace("'", ""),
                               "SLURM_JOB_ID": "42"})
    assert proc.returncode == 0, proc.stderr
    written = Path(proc.stdout.strip())  # a new file of a random name (mktemp), 0600
    assert written.parent == tmp_path and written.name.startswith(".hpcprov-edf-42.")
    assert written.suffix == ".toml" and written.stat().st_mode & 0o777 == 0o600
    scratch_dir = str(scratch).replace("'", "")
    assert tomllib.loads(written.read_text()) == {
        "image": f"{scratch_dir}/images/pytorch-25.01.sqsh",
        "mounts": [f"{scratch_dir}:{scratch_dir}", "/users/shared:/shared"],
        "workdir": f"{scratch_dir}/work",
        "env": {"NCCL_DEBUG": "WARN"},
        "annotations": {"com": {"hooks": {"aws_ofi_nccl": {"enabled": "true",
                                                           "variant": "cuda12"}}}},
    }


def test_an_image_path_may_be_a_glob_the_job_resolves_when_it_runs(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A site that keeps versioned images (pytorch_24.01.sif, pytorch_25.01.sif) could not
    name "the newest": the path was quoted whole. A * or ? in it is now a glob the job's
    shell resolves (the last match by name); none matching stops the job, naming it."""
    ref = str(write_profile(tmp_path, "pbsimg", PBS_IMAGE.replace(
        "$HOME/images/pytorch.sif", "$HOME/images/pytorch_*.sif")))
    res = cli(capsys, "jobscript", "--site", ref, "-N", "2", "--tasks-per-node", "2",
              "-o", "account=st-x-1-gpu", "--", "python", "-c", SHOW)
    assert res.rc == 0, res.err
    assert 'hpcprov_images=("${HOME}/images/pytorch_"*.sif)' in res.out
    bindir = tmp_path / "extra"
    bindir.mkdir()
    (bindir / "apptainer").write_text(APPTAINER.format(python=sys.executable))
    (bindir / "apptainer").chmod(0o755)
    nodes = tmp_path / "nodefile"
    nodes.write_text("n1\nn1\nn2\nn2\n")
    script = res.out.replace("set -eo pipefail", f'set -eo pipefail\nPATH="{bindir}:$PATH"', 1)
    env = {"STUB_FLAVOR": "pals", "PBS_NODEFILE": str(nodes), "PBS_JOBID": "7.pbs",
           "PBS_O_WORKDIR": str(tmp_path)}
    (tmp_path / "job.sh").write_text(script)
    none = subprocess.run(["bash", str(tmp_path / "job.sh")], cwd=tmp_path, text=True,
                          capture_output=True, timeout=60,
                          env={"PATH": f"{stub_bin(tmp_path)}:/usr/bin:/bin",
                               "HOME": str(tmp_path), **env})
    assert none.returncode == 1
    assert "no container image matches $HOME/images/pytorch_*.sif" in none.stderr
    images = tmp_path / "images"
    images.mkdir()
    for version in ("24.01", "25.01", "23.10"):
        (images / f"pytorch_{version}.sif").write_text("")
    (tmp_path / "bin").rename(tmp_path / "bin-old")  # run_job makes its own stubs
    ranks = run_job(script, tmp_path, env)
    assert len(ranks) == 4
    assert {r["HPCPROV_TEST_WRAPPED"] for r in ranks} == {f"image {images}/pytorch_25.01.sif"}


def test_lrun_writes_its_options_without_a_space(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """lrun refuses ``-N 2``: its nodes and tasks per node are one word each (-N2 -T4), in a
    job script and typed in an allocation alike, before the launcher's args (-M, jsrun's)
    and the rank contract."""
    ref = str(write_profile(tmp_path, "jl", NO_MODULES + (
        "name: jl\nextends: lsf-example\npartitions:\n  gpuv100: {gpus: {count: 4}}\n"
        "launchers:\n  lrun: {kind: lrun, args: [--gpubind=off, -M, -gpu]}\n")))
    for command in ("jobscript", "launch"):
        res = cli(capsys, command, "--site", ref, "-N", "2", "--tasks-per-node", "4",
                  "-l", "lrun", "--", "python", "t.py")
        assert res.rc == 0, res.err
        (line,) = [ln for ln in res.out.splitlines() if ln.startswith("lrun ")]
        assert line.startswith("lrun -N2 -T4 --gpubind=off -M -gpu bash -c \"$hpcprov_rank\" "
                               "hpcprov-rank 8 4 "), line


# ------------------------- the task starter is the scheduler's, else the site's MPI (issue 34)

CONTAINER = NO_MODULES + """\
name: box
extends: BASE
containers:
  runtime: apptainer
  images: {pytorch: $HOME/images/pytorch.sif}
  default_image: pytorch
launchers:
  box: {kind: container}
MORE\
default_launcher: box
"""


def _with_apptainer(script: str, tmp_path: Path) -> str:
    bindir = tmp_path / "extra"
    bindir.mkdir()
    (bindir / "apptainer").write_text(APPTAINER.format(python=sys.executable))
    (bindir / "apptainer").chmod(0o755)
    return script.replace("set -eo pipefail", f'set -eo pipefail\nPATH="{bindir}:$PATH"', 1)


@pytest.mark.parametrize(("base", "more", "starts", "source"), [
    # PBS has no task starter: the site's MPI launcher (PALS' mpiexec) starts the ranks
    # (the first of the site's MPI launchers in its order, where the default is none)
    ("sockeye", "  mpirun: null\n  pals: {kind: mpiexec, flavor: pals}\n",
     "mpiexec -n 4 --ppn 2 apptainer", "pals"),
    # LSF: the site's jsrun
    ("lsf-example", "  mpirun: null\n  js: {kind: jsrun}\n", "jsrun --nrs=4 --tasks_per_rs=1",
     "jsrun"),
    # Flux: its own flux run
    ("flux-example", "", "flux run -N 2 -n 4 -c ", "flux"),
])
def test_a_container_launcher_runs_on_pbs_lsf_and_flux_with_no_kind_of_its_own(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, base: str, more: str,
        starts: str, source: str) -> None:
    """The container kind started its ranks with srun only ("it needs a Slurm site"): a
    container on PBS, LSF or Flux needed a new kind each time. Now the job's task starter
    starts them, the scheduler's own or the site's MPI launcher, and each rank's contract
    reads that starter's variables inside the image."""
    ref = str(write_profile(tmp_path, "box", CONTAINER.replace("BASE", base).replace(
        "MORE", more)))
    res = cli(capsys, "jobscript", "--site", ref, "-N", "2", "--tasks-per-node", "2",
              "-o", "account=st-x-1-gpu", "--", "python", "-c", SHOW)
    assert res.rc == 0, res.err
    launch = next(ln for ln in res.out.splitlines() if ln.startswith(starts.split()[0] + " "))
    assert launch.startswith(starts), launch
    assert 'apptainer exec "${HOME}/images/pytorch.sif" bash -c "$hpcprov_rank"' in launch
    assert f'hpcprov_sets=("{source} ' in res.out
    hosts = tmp_path / "hosts"
    hosts.write_text("n1\nn1\nn2\nn2\n")
    env = {"PBS_NODEFILE": str(hosts), "PBS_JOBID": "7.pbs", "PBS_O_WORKDIR": str(tmp_path),
           "LSB_JOBID": "7", "LSB_DJOB_HOSTFILE": str(hosts), "FLUX_JOB_ID": "f7",
           "STUB_FLAVOR": source, "PYTHONPATH": "/host/site-packages"}
    ranks = run_job(_with_apptainer(res.out, tmp_path), tmp_path, env)
    assert sorted(int(r["RANK"]) for r in ranks) == [0, 1, 2, 3]
    for r in ranks:
        assert (r["WORLD_SIZE"], r["LOCAL_RANK"]) == ("4", str(int(r["RANK"]) % 2))
        assert r["HPCPROV_RANK_SOURCE"] == source and r["MASTER_ADDR"] == "n1"
        assert r["HPCPROV_TEST_WRAPPED"] == f"image {tmp_path}/images/pytorch.sif"


@pytest.mark.parametrize(("base", "more", "starts"), [
    # PBS: the site's MPI launcher, one process per node (its flavor: PALS' --ppn)
    ("sockeye", "  mpirun: null\n  pals: {kind: mpiexec, flavor: pals}\n",
     "mpiexec -n 2 --ppn 1 python -m "),
    # ... its default mpirun, with the profile's host file, the PATH that finds the
    # environment's Python (issue 45) and its args
    ("sockeye", "", 'mpirun -np 2 --hostfile "${PBS_NODEFILE}" --map-by ppr:1:node -x PATH '
     '-bind-to'),
    ("lsf-example", "", 'blaunch -u "$hpcprov_hosts" python -m torch.distributed.run'),
    ("flux-example", "", "flux run -N 2 -n 2 -c "),
])
def test_torchrun_starts_one_agent_per_node_on_every_scheduler(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, base: str, more: str,
        starts: str) -> None:
    """torchrun's agents started only where the scheduler had a per-node starter: on PBS a
    2-node torchrun ran one agent on the first node and waited for the second forever. Now
    the site's MPI launcher starts one per node where the scheduler cannot."""
    body = NO_MODULES + f"name: tr\nextends: {base}\nlaunchers:\n" \
        "  tr: {kind: torchrun}\n" + more + "default_launcher: tr\n"
    ref = str(write_profile(tmp_path, "tr", body))
    res = cli(capsys, "jobscript", "--site", ref, "-N", "2", "-o", "account=st-x-1-gpu",
              "--", "python", "train.py")
    assert res.rc == 0, res.err
    line = res.out.rstrip().splitlines()[-1]
    assert line.startswith(starts), line
    assert "torch.distributed.run --nnodes=2 " in line


def test_a_pbs_site_with_nothing_to_start_tasks_says_so_everywhere(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A container-only PBS site: no task starter of PBS's own, no MPI launcher. The job
    line, validate's plan and site check each say what is missing and the fix."""
    body = NO_MODULES + """\
name: bare
extends: sockeye
containers:
  runtime: apptainer
  images: {pytorch: /images/pytorch.sif}
  default_image: pytorch
launchers:
  mpirun: null
  torchrun: null
  box: {kind: container}
default_launcher: box
"""
    ref = str(write_profile(tmp_path, "bare", body))
    why = ("launcher box (container) needs something to start its ranks: PBS jobs have no "
           "task starter of their own and the site has no MPI launcher")
    res = cli(capsys, "jobscript", "--site", ref, "-N", "2", "-o", "account=st-x-1-gpu",
              "--", "python", "t.py")
    assert res.rc == 2 and why in res.err and len(res.err.strip().splitlines()) == 1
    dry = cli(capsys, "validate", "--site", ref, "-N", "2", "-o", "account=st-x-1-gpu",
              "--workdir", str(tmp_path / "run"), "--env", str(tmp_path / "p"),
              "--dry-run")
    assert "SKIPPED" in dry.err and why in dry.err
    check = cli(capsys, "site", "check", ref)
    assert why in check.out + check.err


def test_torchrun_runs_inside_the_container_one_agent_per_node(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """torchrun inside the container: a torchrun launcher with a runtime starts each node's
    agent in the site's image (its ranks are the agent's children, so they are in it too);
    the host's Python stays out and no environment is activated."""
    body = NO_MODULES + """\
name: trimg
extends: testbed
containers:
  runtime: apptainer
  gpu_flag: --nv
  images: {pytorch: /images/pytorch.sif}
  default_image: pytorch
launchers:
  trimg: {kind: torchrun, runtime: apptainer}
default_launcher: trimg
"""
    ref = str(write_profile(tmp_path, "trimg", body))
    res = cli(capsys, "jobscript", "--site", ref, "-N", "2", "--gpus-per-node", "2",
              "--", "python", "train.py")
    assert res.rc == 0, res.err
    line = res.out.rstrip().splitlines()[-1]
    assert line.startswith("srun --ntasks-per-node=1 --ntasks=2 ")
    assert " apptainer exec --nv /images/pytorch.sif python -m torch.distributed.run " \
        "--nnodes=2 --nproc_per_node=2 " in line
    assert "unset PYTHONPATH PYTHONHOME PYTHONUSERBASE VIRTUAL_ENV" in res.out
    assert "/activate" not in res.out


def test_srun_args_where_srun_starts_nothing_are_refused_not_dropped(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    body = NO_MODULES + """\
name: tr
extends: sockeye
launchers:
  tr: {kind: torchrun, srun_args: [--cpu-bind=none]}
default_launcher: tr
"""
    ref = str(write_profile(tmp_path, "tr", body))
    res = cli(capsys, "jobscript", "--site", ref, "-N", "2", "-o", "account=st-x-1-gpu",
              "--", "python", "train.py")
    assert res.rc == 2 and len(res.err.strip().splitlines()) == 1
    assert "srun_args '--cpu-bind=none' cannot be honoured: launcher mpirun (mpirun) " \
        "starts this site's tasks, not srun" in res.err

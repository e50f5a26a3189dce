"""Fixtures for tests that run on the real Slurm testbed (``hpcprov.testbed``).

``testbed`` (session): a 2-node cluster with accounting, brought up once and torn
down at the end. Not root or packages missing -> the tests are skipped with the
reason, unless ``HPCPROV_REQUIRE_TESTBED=1`` (CI), where they fail instead.
``HPCPROV_TESTBED_KEEP=1`` leaves the cluster up after the session.

``slurm`` (function): a small client bound to the testbed and to a fresh shared
working directory (under the testbed's scratch dir, visible on every node;
``/tmp`` is node-local on the compute nodes).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hpcprov_tests import hpcprov_argv

from hpcprov.testbed.cluster import Testbed, TestbedError

# Test modules import helpers from here as ``hpcprov_testbed_tests`` (tests/ is no package).
sys.modules.setdefault("hpcprov_testbed_tests", sys.modules[__name__])

REQUIRE = os.environ.get("HPCPROV_REQUIRE_TESTBED") == "1"
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def _unavailable(reason: str):
    if REQUIRE:
        pytest.fail(f"testbed required (HPCPROV_REQUIRE_TESTBED=1) but unavailable: {reason}",
                    pytrace=False)
    pytest.skip(f"testbed unavailable: {reason}")


@pytest.fixture(scope="session")
def torch():
    """PyTorch, or skip (fail under HPCPROV_REQUIRE_TESTBED=1: CI installs torch==2.13.0)."""
    try:
        import torch
    except ImportError as exc:
        if REQUIRE:
            pytest.fail(f"torch is needed by the testbed tests: {exc}", pytrace=False)
        pytest.skip("torch not installed (pip install torch==2.13.0)")
    return torch


@pytest.fixture(scope="session")
def testbed():
    tb = Testbed(nodes=2, accounting=True)
    problems = tb.problems()
    if problems:
        _unavailable("; ".join(problems))
    try:
        tb.up()
    except TestbedError as exc:
        pytest.fail(f"testbed bring-up failed: {exc}", pytrace=False)
    shutil.rmtree(tb.scratch / "pytest", ignore_errors=True)
    yield tb
    if os.environ.get("HPCPROV_TESTBED_KEEP") != "1":
        tb.down()


@dataclass
class Job:
    id: str
    state: str
    exit_code: str  # "rc:signal", as Slurm prints it
    node_list: str
    output: str

    @property
    def rc(self) -> int:
        return int(self.exit_code.split(":")[0])


class Client:
    """A scheduler's commands run from the host ("login node") in a working folder, with the
    scheduler's client environment."""

    def __init__(self, workdir: Path, env: dict[str, str]):
        self.workdir = workdir
        self.env = env

    def run(self, *argv: str, check: bool = True, timeout: float = 60,
            **kwargs) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(argv), cwd=self.workdir, env=self.env, capture_output=True,
                              text=True, timeout=timeout, **kwargs)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} -> {proc.returncode}\n"
                                 f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def write(self, name: str, text: str, mode: int = 0o755) -> Path:
        path = self.workdir / name
        path.write_text(text)
        path.chmod(mode)
        return path


class SlurmClient(Client):
    """Run Slurm commands against the testbed from the host ("login node")."""

    def __init__(self, tb: Testbed, workdir: Path):
        super().__init__(workdir, tb.environ())
        self.tb = tb

    def job_info(self, job_id: str) -> dict[str, str]:
        out = self.run("scontrol", "show", "job", "-o", job_id).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait(self, job_id: str, timeout: float = 90) -> dict[str, str]:
        """Poll until the job reaches a terminal state (no fixed sleeps)."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            info = self.job_info(job_id)
            if info.get("JobState") in TERMINAL:
                return info
            if time.monotonic() > deadline:
                self.run("scancel", job_id, check=False)
                raise AssertionError(f"job {job_id} not done after {timeout}s: {info}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def sbatch(self, script: str, *args: str, timeout: float = 90,
               name: str = "job.sh") -> Job:
        """Submit ``script`` (its text), wait for it, return state + output."""
        path = self.write(name, script)
        out_file = self.workdir / (path.stem + "-%j.out")
        proc = self.run("sbatch", "--parsable", f"--output={out_file}", *args, str(path))
        job_id = proc.stdout.strip().split(";")[0]
        info = self.wait(job_id, timeout)
        out_path = Path(str(out_file).replace("%j", job_id))
        output = out_path.read_text() if out_path.exists() else ""
        return Job(job_id, info["JobState"], info.get("ExitCode", ""), info.get("NodeList", ""),
                   output)


@pytest.fixture
def slurm(testbed: Testbed, request) -> SlurmClient:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:80]
    workdir = testbed.scratch / "pytest" / name
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    return SlurmClient(testbed, workdir)


@pytest.fixture
def python() -> str:
    """The interpreter running the tests; the nodes share its file system."""
    return sys.executable


@contextlib.contextmanager
def reconfigured(testbed: Testbed, **config: object) -> Iterator[Testbed]:
    """The session's testbed brought up otherwise (node count, accounting), then back."""
    testbed.down()
    other = Testbed(**{"nodes": len(testbed.nodes), "accounting": testbed.accounting,
                       "policy": testbed.policy, **config},
                    state_dir=testbed.state_dir)
    other.up()
    try:
        yield other
    finally:
        other.down()
        testbed.up()


@pytest.fixture
def four_nodes(testbed: Testbed) -> Iterator[Testbed]:
    """The session's testbed as 4 nodes (gpu03-04 are V100 nodes; partition `all`), back
    to 2 afterwards."""
    with reconfigured(testbed, nodes=4) as big:
        yield big


@pytest.fixture(scope="session")
def prefix(testbed: Testbed, wheelhouse: Path) -> Path:
    """The testbed profile set up for real once (a wheelhouse hit) in the shared scratch."""
    target = testbed.scratch / "pytest-validate" / "prefix"
    shutil.rmtree(target.parent, ignore_errors=True)
    env = {**testbed.environ(), "HPCPROV_WHEELHOUSE": str(wheelhouse)}
    proc = subprocess.run([*hpcprov_argv(), "setup", "--site", "testbed", "--prefix",
                           str(target)], capture_output=True, text=True, env=env, timeout=3600)
    assert proc.returncode == 0, proc.stderr
    return target


def until(what, within_s: float) -> bool:
    """Poll ``what()`` until true or ``within_s`` seconds passed (a deadline, not a timing)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if what():
            return True
        time.sleep(0.2)
    return bool(what())


# an unmodified env:// DDP script: each rank prints one line of what it got and summed
DDP = """\
import os, socket
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"DDP rank={dist.get_rank()} world={dist.get_world_size()} "
      f"local={os.environ['LOCAL_RANK']} host={socket.gethostname()} sum={int(t.item())}",
      flush=True)
dist.destroy_process_group()
"""


def records(text: str) -> list[dict[str, object]]:
    """The JSON objects the ranks of a job printed, in output order."""
    return [json.loads(m) for m in re.findall(r"\{[^{}]*\}", text)]


def generated_jobscript(capsys: pytest.CaptureFixture[str], site: str, *args: str) -> str:
    """`hpcprov jobscript --site SITE --no-activate ARGS`, run in-process; its script."""
    from hpcprov.app.cli import main as hpcprov

    rc = hpcprov(["jobscript", "--site", site, "--no-activate", *args])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


@pytest.fixture
def client(slurm: SlurmClient) -> SlurmClient:
    """The slurm client, with this interpreter's bin dir (python, torchrun) first on PATH."""
    bindir = str(Path(sys.executable).parent)
    slurm.env = {**slurm.env, "PATH": bindir + os.pathsep + slurm.env.get("PATH", "")}
    return slurm


# -- Grid Engine beside Slurm (hpcprov.testbed.gridengine) ------------------------------


@pytest.fixture(scope="session")
def gridengine_session(testbed: Testbed):
    """Grid Engine (qmaster + one execd per node) on the session's testbed, brought up once;
    stopped at the end unless HPCPROV_TESTBED_KEEP=1."""
    from hpcprov.testbed import gridengine

    probs = gridengine.problems()
    if probs:
        _unavailable("; ".join(probs))
    ge = gridengine.GridEngine(testbed)
    try:
        ge.up()
    except TestbedError as exc:
        pytest.fail(f"Grid Engine bring-up failed: {exc}", pytrace=False)
    yield ge
    if os.environ.get("HPCPROV_TESTBED_KEEP") != "1":
        with contextlib.suppress(TestbedError):
            ge.down()


@pytest.fixture
def gridengine(gridengine_session):
    """The session's Grid Engine, up (a test that brought the testbed up otherwise, e.g.
    ``four_nodes``, stops it: it comes back here, in seconds)."""
    try:
        return gridengine_session.up()
    except TestbedError as exc:
        pytest.fail(f"Grid Engine bring-up failed: {exc}", pytrace=False)


@dataclass
class SgeJob:
    id: str
    output: str
    accounting: dict[str, str]  # `qacct -j ID`: the job's one record (PEs summarise)

    @property
    def exit_status(self) -> int:
        return int(self.accounting["exit_status"].split()[0])


class SgeClient(Client):
    """Run Grid Engine's clients against the testbed from the host ("login node")."""

    def __init__(self, ge, workdir: Path):
        super().__init__(workdir, ge.environ())
        self.ge = ge

    def qsub(self, script: str, *args: str, name: str = "job.sh") -> str:
        """Submit ``script`` (its text) with ``qsub -terse``; the job id (checked)."""
        path = self.write(name, script)
        out = self.run("qsub", "-terse", "-cwd", "-j", "y", "-o", str(self.workdir), *args,
                       str(path)).stdout.strip()
        assert re.fullmatch(r"\d+", out), f"qsub -terse printed {out!r}"
        return out

    def known(self, job_id: str) -> bool:
        """Whether the qmaster still lists the job (pending or running)."""
        return self.run("qstat", "-j", job_id, check=False).returncode == 0

    def accounting(self, job_id: str, timeout: float = 30) -> dict[str, str]:
        """``qacct -j ID`` as {field: value}, polled until the record is there."""
        deadline = time.monotonic() + timeout
        while True:
            proc = self.run("qacct", "-j", job_id, check=False)
            if proc.returncode == 0:
                return dict(line.split(None, 1) for line in proc.stdout.splitlines()
                            if len(line.split(None, 1)) == 2 and not line.startswith("="))
            if time.monotonic() > deadline:
                raise AssertionError(f"no accounting for job {job_id} after {timeout}s: "
                                     f"{proc.stderr.strip()}")
            time.sleep(0.1)

    def wait(self, job_id: str, timeout: float = 90) -> SgeJob:
        """Poll until the job has left the qmaster; its output and accounting."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        while self.known(job_id):
            if time.monotonic() > deadline:
                self.run("qdel", job_id, check=False)
                raise AssertionError(f"job {job_id} not done after {timeout}s:\n"
                                     + self.run("qstat", "-j", job_id, check=False).stdout)
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)
        outputs = sorted(self.workdir.glob(f"*.o{job_id}"))
        output = outputs[0].read_text() if outputs else ""
        return SgeJob(job_id, output, self.accounting(job_id))


@pytest.fixture
def sge(gridengine, request) -> SgeClient:
    """A Grid Engine client with a fresh working directory in the shared scratch."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:80]
    workdir = gridengine.testbed.scratch / "pytest-sge" / name
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    return SgeClient(gridengine, workdir)

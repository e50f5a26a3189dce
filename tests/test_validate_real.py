"""`hpcprov validate --site local` for real: jobs as local processes in a provisioned prefix;
a pass, then a broken environment that must fail loudly while keeping what still works."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import hpcprov_argv, setup_local

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
    """A prefix of this module's own: the test removes Horovod from it."""
    return setup_local(tmp_path_factory.mktemp("validate") / "prefix", wheelhouse)


def validate(prefix: Path, tmp_path: Path, *args: str) -> tuple[int, dict]:
    env = {**os.environ, "HPCPROV_HISTORY": str(tmp_path / "history")}
    proc = subprocess.run([*hpcprov_argv(), "validate", "--site", "local", "--nodes", "1",
                           "--env", str(prefix), "--workdir", str(tmp_path / "run"), "--json",
                           "--max-bytes", "1048576", "--iters", "3", "--steps", "8", *args],
                          capture_output=True, text=True, env=env, timeout=900)
    return proc.returncode, json.loads(proc.stdout or "{}")


def test_local_validation_passes_then_catches_a_broken_environment(prefix: Path,
                                                                   tmp_path: Path) -> None:
    rc, data = validate(prefix, tmp_path, "--checks", "env,allreduce,train")
    assert rc == 0, data.get("outcomes")
    names = {o["name"]: o for o in data["outcomes"]}
    assert names["env horovodrun -cb"]["status"] == "pass"
    assert names["train-torch-ddp in sync"]["status"] == "pass"
    assert names["train-horovod-torch in sync"]["status"] == "pass"
    assert (tmp_path / "history" / "local").is_dir()  # stored for --compare

    # Horovod removed from the environment: env and every Horovod job fail, torch still runs
    python = prefix / "venvs" / "horovod" / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "horovod"], check=True,
                   capture_output=True, timeout=300)
    rc, data = validate(prefix, tmp_path, "--checks", "env,allreduce", "--compare", "latest")
    assert rc == 1 and not data["ok"]
    status = {o["name"]: o["status"] for o in data["outcomes"]}
    assert status["env imports"] == "fail"
    assert status["allreduce-horovod-gloo"] == "error"
    assert status["allreduce-torch-gloo correctness"] == "pass"  # partial results kept
    assert {j["id"] for j in data["jobs"]} >= {"allreduce-torch-gloo", "allreduce-horovod-mpi"}

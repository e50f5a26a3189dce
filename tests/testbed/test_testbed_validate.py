"""`hpcprov validate` on the real Slurm testbed: 2 nodes, a provisioned prefix, every
allreduce implementation the site has, JSON + JUnit + Markdown out, exit 0 only on a pass."""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hpcprov_tests import hpcprov_argv

pytestmark = [pytest.mark.testbed, pytest.mark.slow]


@pytest.fixture(scope="module")
def prefix(testbed, wheelhouse: Path) -> Path:  # noqa: ANN001
    target = testbed.scratch / "pytest-validate" / "prefix"
    shutil.rmtree(target.parent, ignore_errors=True)
    env = {**testbed.environ(), "HPCPROV_WHEELHOUSE": str(wheelhouse)}
    proc = subprocess.run([*hpcprov_argv(), "setup", "--site", "testbed", "--prefix",
                           str(target)], capture_output=True, text=True, env=env, timeout=3600)
    assert proc.returncode == 0, proc.stderr
    return target


def validate(testbed, prefix: Path, tmp_path: Path, *args: str  # noqa: ANN001
             ) -> tuple[subprocess.CompletedProcess[str], dict]:  # type: ignore[type-arg]
    env = {**testbed.environ(), "HPCPROV_HISTORY": str(tmp_path / "history")}
    rundir = testbed.scratch / "pytest-validate" / tmp_path.name
    proc = subprocess.run(
        [*hpcprov_argv(), "validate", "--site", "testbed", "--env", str(prefix), "--json",
         "--workdir", str(rundir), "--max-bytes", "4194304", "--iters", "3", "--steps", "8",
         *args], capture_output=True, text=True, env=env, timeout=900)
    return proc, json.loads(proc.stdout or "{}")


def test_allreduce_across_two_nodes_passes_with_every_implementation(
        testbed, prefix: Path, tmp_path: Path) -> None:  # noqa: ANN001
    junit, report = tmp_path / "v.xml", tmp_path / "v.md"
    proc, data = validate(testbed, prefix, tmp_path, "--nodes", "2", "--checks", "allreduce",
                          "--junit", str(junit), "--report", str(report))
    assert proc.returncode == 0, (data.get("outcomes"), proc.stderr)
    assert data["ok"] and data["scheduler"] == "slurm"
    jobs = {j["id"]: j for j in data["jobs"]}
    assert {"allreduce-torch-gloo", "allreduce-horovod-gloo", "allreduce-horovod-mpi"} <= set(jobs)
    for j in jobs.values():
        assert j["state"] == "COMPLETED" and j["exit_code"] == 0
        assert j["node_list"] == "gpu[01-02]"
        sizes = [r["size_bytes"] for r in j["records"]]
        assert sizes[0] == 8 and sizes[-1] == 4194304
        assert all(r["correct"] and r["ranks"] == 2 and r["nodes"] == 2 for r in j["records"])
    suite = ET.fromstring(junit.read_text().split("?>", 1)[1])
    assert suite.get("failures") == "0" and int(suite.get("tests")) >= 3
    assert "| pass | allreduce-torch-gloo correctness |" in report.read_text()
    assert "![busbw against message size](v-busbw.png)" in report.read_text()
    assert (tmp_path / "v-busbw.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert data["overhead_s"] < 5  # measured properly in benchmarks/; a sanity bound here


def test_a_job_that_cannot_run_fails_the_run_and_says_why(testbed, prefix: Path,  # noqa: ANN001
                                                          tmp_path: Path) -> None:
    # a job that cannot start within the pending timeout is cancelled, and the run fails
    proc, data = validate(testbed, prefix, tmp_path, "--nodes", "2", "--checks", "allreduce",
                          "--pending-timeout", "3", "-o", "begin=now+3600")
    assert proc.returncode == 1
    assert not data["ok"]
    errors = [o for o in data["outcomes"] if o["status"] == "error"]
    assert len(errors) == 3 and all("still pending after 3 s" in o["detail"]
                                    for o in errors), errors
    assert all(j["state"] == "PENDING_TIMEOUT" for j in data["jobs"])

"""`hpcprov setup --site testbed` for real: the site's Lmod modules loaded through the real
module system, a venv with torch 2.13.0 and Horovod (PyTorch, MPI, Gloo), proven; then the
provisioned prefix runs a Horovod allreduce across two nodes through sbatch."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hpcprov_tests import hpcprov_argv, write_profile

pytestmark = [pytest.mark.testbed, pytest.mark.slow]

HVD_ALLREDUCE = r'''
import json, os, socket
import torch
import horovod
import horovod.torch as hvd
hvd.init()
t = torch.full((1000,), float(hvd.rank() + 1))
out = hvd.allreduce(t, op=hvd.Sum, name="tb")
os.write(1, (json.dumps({"rank": hvd.rank(), "size": hvd.size(), "sum": out[0].item(),
                         "host": socket.gethostname(), "horovod": horovod.__file__}) + "\n")
         .encode())
'''


def _hpcprov(env: dict[str, str], *args: str, timeout: float = 3600
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*hpcprov_argv(), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def provisioned(testbed, wheelhouse: Path) -> Path:
    prefix = testbed.scratch / "pytest-provision" / "prefix"
    shutil.rmtree(prefix.parent, ignore_errors=True)
    env = {**testbed.environ(), "HPCPROV_WHEELHOUSE": str(wheelhouse)}
    proc = _hpcprov(env, "setup", "--site", "testbed", "--prefix", str(prefix), "--json")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert json.loads(proc.stdout)["status"] == "ready"
    return prefix


def test_setup_loads_the_sites_lmod_modules_and_proves_horovod(provisioned: Path) -> None:
    manifest = json.loads((provisioned / ".hpcprov" / "manifest.json").read_text())
    loaded = manifest["modules"]["loaded"]
    for name in ("gcc/10.2.0", "cuda/11.4", "cudampi/openmpi-4.1.1"):
        assert name in loaded, loaded
    assert manifest["versions"]["horovod"] == "0.28.1"
    assert {"PyTorch"} <= set(manifest["check_build"]["found"]["frameworks"])
    assert {"MPI", "Gloo"} <= set(manifest["check_build"]["found"]["controllers"])
    build_log = next((provisioned / ".hpcprov" / "logs").glob("*-build-horovod.log")).read_text()
    # the build step ran with the build modules loaded (cmake/3.16.9 is only in that set)
    assert "cmake/3.16.9" in (provisioned / ".hpcprov" / "setup.sh").read_text()
    assert "hpcprov: wheelhouse hit" in build_log or "hpcprov: cached in the wheelhouse" \
        in build_log


def test_the_provisioned_prefix_runs_horovod_on_two_nodes(provisioned: Path, slurm,
                                                          capsys) -> None:
    from hpcprov.app.cli import main as hpcprov

    slurm.write("hvd_allreduce.py", HVD_ALLREDUCE)
    python = provisioned / "venvs" / "horovod" / "bin" / "python"
    rc = hpcprov(["jobscript", "--site", "testbed", "--prefix", str(provisioned), "-N", "2",
                  "-G", "2", "-l", "horovodrun", "--", str(python),
                  str(slurm.workdir / "hvd_allreduce.py")])
    script, err = capsys.readouterr()
    assert rc == 0, err
    assert f"source {provisioned}/venvs/horovod/bin/activate" in script
    job = slurm.sbatch(script, name="hvd.sh", timeout=180)
    assert job.state == "COMPLETED", (job, script)
    recs = [json.loads(m) for m in re.findall(r"\{[^{}]*\}", job.output)]
    assert sorted(r["rank"] for r in recs) == [0, 1, 2, 3], job.output
    assert {r["sum"] for r in recs} == {10.0} and {r["size"] for r in recs} == {4}
    assert {r["host"] for r in recs} == {"gpu01", "gpu02"}
    assert all(r["horovod"].startswith(str(provisioned)) for r in recs)


def test_a_missing_module_stops_setup_at_preflight_with_its_name(testbed, tmp_path: Path,
                                                                 wheelhouse: Path) -> None:
    sites = tmp_path / "sites"
    write_profile(sites, "tb-missing", "extends: testbed\nname: tb-missing\nmodules:\n"
                  "  build:\n    load: [gcc/10.2.0, cuda/99.9, cudampi/openmpi-4.1.1]\n")
    prefix = testbed.scratch / "pytest-provision" / "missing"
    shutil.rmtree(prefix, ignore_errors=True)
    env = {**testbed.environ(), "HPCPROV_SITES_PATH": str(sites),
           "HPCPROV_WHEELHOUSE": str(wheelhouse)}
    proc = _hpcprov(env, "setup", "--site", "tb-missing", "--prefix", str(prefix), timeout=300)
    assert proc.returncode == 1
    assert "step preflight failed" in proc.stderr
    assert "module(s) not available here: cuda/99.9" in proc.stderr
    assert "cudampi" not in proc.stderr.split("not available here:")[1].split("(")[0]
    assert not (prefix / "venvs").exists()
    shutil.rmtree(prefix, ignore_errors=True)

"""A GPU vendor is one unit (issue 26): Intel GPUs, added as one entry of
hpcprov/site/gpu_vendors.py, reach the model, mpirun, doctor, site draft and validate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hpcprov_tests import cli, words, write_profile

from hpcprov.core.shell import join
from hpcprov.draft.plan import summarize
from hpcprov.draft.profile import _gpus
from hpcprov.draft.run import local_gpus
from hpcprov.schedulers.discovery import slurm
from hpcprov.site.gpu_vendors import VENDORS, count, read
from tests.test_draft_slurm import recorded_run

# what sycl-ls prints on a node of 6 GPU Max 1550 cards, FLAT hierarchy: 12 tiles, each a
# Level Zero device (trimmed to 3), beside the OpenCL view of the same and a CPU
_MAX = "Intel(R) Data Center GPU Max 1550"
SYCL_LS = "\n".join([
    "[opencl:cpu][opencl:0] Intel(R) OpenCL, Intel(R) Xeon(R) CPU Max 9470C OpenCL 3.0 "
    "(Build 0) [2024.18.6.0.02_160000]",
    f"[opencl:gpu][opencl:1] Intel(R) OpenCL Graphics, {_MAX} OpenCL 3.0 NEO  [24.13.29138]",
    *(f"[level_zero:gpu][level_zero:{i}] Intel(R) Level-Zero, {_MAX} 1.3 [1.3.29138]"
      for i in range(3)),
]) + "\n"

INTEL = """\
name: xe
extends: testbed
modules: {system: none}
partitions:  # every GPU partition of the testbed on Intel GPU Max nodes
  amd_a100nv_8: {gpus: {count: 8, vendor: intel, model: Data Center GPU Max 1550}}
  cas_v100_4: {gpus: {count: 4, vendor: intel, model: Data Center GPU Max 1550}}
  all: {gpus: {count: 4, vendor: intel, model: Data Center GPU Max 1550}}
launchers:
  mpirun: {kind: mpirun, set_cuda_visible_devices: true}
horovod: {gpu_operations: null, gpu_allreduce: null}
"""


def test_the_vendors_commands_read_what_sycl_ls_prints() -> None:
    intel = VENDORS["intel"]
    assert count(intel.counter, SYCL_LS) == 3  # the Level Zero GPUs, not OpenCL's or the CPU
    assert read(intel.models, SYCL_LS) == ["Intel(R) Data Center GPU Max 1550"] * 3


def test_an_intel_gpu_profile_validates_and_horovod_on_them_is_refused_at_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ok = write_profile(tmp_path, "xe", INTEL)
    assert cli(capsys, "site", "check", str(ok)).rc == 0
    bad = write_profile(tmp_path, "xe-hvd", INTEL.replace(
        "horovod: {gpu_operations: null, gpu_allreduce: null}", "horovod:\n  gpu_operations: nccl"))
    res = cli(capsys, "site", "check", str(bad))
    assert res.rc != 0
    assert "Horovod has no build for Intel GPUs" in res.out + res.err


def test_mpirun_limits_each_rank_to_the_intel_gpus_by_level_zeros_variable(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_profile(tmp_path, "xe", INTEL)
    res = cli(capsys, "launch", "--site", str(path), "-N", "2", "-l", "mpirun", "--", "python",
              "x.py")
    assert res.rc == 0, res.err
    last = words(res.out.strip().splitlines()[-1])
    assert "ZE_AFFINITY_MASK=0,1,2,3,4,5,6,7" in last
    assert not [w for w in last if w.startswith("CUDA_VISIBLE_DEVICES")]


def test_validate_runs_torch_xpu_over_xccl_and_counts_tiles_with_sycl_ls(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_profile(tmp_path, "xe", INTEL)
    prefix = tmp_path / "env"  # looks provisioned: a dry run reads no more
    (prefix / ".hpcprov").mkdir(parents=True)
    (prefix / ".hpcprov" / "manifest.json").write_text("{}")
    res = cli(capsys, "validate", "--site", str(path), "--dry-run", "--json",
              "--checks", "env,allreduce", "--env", str(prefix))
    assert res.rc == 0, res.err
    scripts = "\n".join(s["text"] for s in json.loads(res.out)["scripts"])
    launches = [ln for ln in scripts.splitlines() if "hpcprov-rank" in ln]  # not the digests
    allreduce = next(ln for ln in launches if "allreduce.py" in ln)
    argv = words(allreduce)
    at = argv.index("--dist-backend")
    assert argv[at:at + 4] == ["--dist-backend", "xccl", "--fallback-backend",
                               "ccl:oneccl_bindings_for_pytorch"]
    assert argv[argv.index("--device") + 1] == "xpu"
    env = words(next(ln for ln in launches if "envcheck.py" in ln))
    assert env[env.index("--gpu-device") + 1] == "xpu"
    assert env[env.index("--gpu-count-command") + 1] == "sycl-ls"
    assert env[env.index("--visible-devices") + 1] == "ZE_AFFINITY_MASK"
    # another vendor's device is refused in one line
    wrong = cli(capsys, "validate", "--site", str(path), "--dry-run", "--device", "cuda",
                "--env", str(tmp_path / "env"))
    assert wrong.rc == 2 and "intel GPUs (torch device xpu)" in wrong.err
    assert len(wrong.err.strip().splitlines()) == 1


def test_site_draft_finds_intel_gpus_with_sycl_ls_and_writes_the_vendor() -> None:
    def run(argv: list[str]) -> SimpleNamespace:
        if argv[0] == "sycl-ls":
            return SimpleNamespace(returncode=0, stdout=SYCL_LS)
        return SimpleNamespace(returncode=127, stdout="")

    gpus = local_gpus(run)
    assert (gpus.vendor, gpus.command) == ("intel", "sycl-ls")
    summaries, _ = summarize(slurm.discover(recorded_run()), gpus, "gpu03.cluster")
    part = summaries["cas_v100_4"]  # the partition this host (gpu03) is a node of
    assert part.gpu_vendor == "intel" and "sycl-ls" in part.sources["gpu_vendor"]
    written = {item.key: item.value for item in _gpus(part, []).items}
    assert written["vendor"] == "intel"
    assert written["model"] == "Intel(R) Data Center GPU Max 1550"


def test_doctor_and_the_env_check_count_intel_gpus_with_the_vendors_command(
        tmp_path: Path) -> None:
    from hpcprov.provision import library

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sycl-ls").write_text(f"#!/bin/bash\ncat <<'EOF'\n{SYCL_LS}EOF\n")
    (bindir / "sycl-ls").chmod(0o755)
    intel = VENDORS["intel"]
    probe = subprocess.run(["bash", "-c", library.functions()["hpcprov_probe_host"] + "\n"
                            + join(["hpcprov_probe_host", intel.counter.pattern,
                                    *intel.counter.argv])],
                           capture_output=True, text=True, timeout=30,
                           env={"PATH": f"{bindir}:/usr/bin:/bin"})
    assert "gpus=3" in probe.stdout.split(), probe.stdout + probe.stderr
    # the env check without torch: the same command, limited by ZE_AFFINITY_MASK
    programs = Path(__file__).resolve().parents[1] / "validate" / "programs"
    proc = subprocess.run(
        [sys.executable, str(programs / "envcheck.py"), "--in-process", "--imports", "json",
         "--gpu-device", "xpu", "--gpu-count-command", "sycl-ls", "--gpu-count-pattern",
         intel.counter.pattern, "--visible-devices", "ZE_AFFINITY_MASK"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={"PATH": f"{bindir}:/usr/bin:/bin", "ZE_AFFINITY_MASK": "0,1",
             "PYTHONPATH": "/nonexistent", "HOME": str(tmp_path),
             "PYTHONNOUSERSITE": "1"})
    record = json.loads(next(ln for ln in proc.stdout.splitlines()
                             if ln.startswith("HPCPROV_RESULT")).split(" ", 1)[1])
    if record["gpu_source"] == "torch":  # torch imported: it counts (no xpu here: 0)
        assert record["gpus_visible"] == 0
    else:
        assert (record["gpus_visible"], record["gpu_source"]) == (2, "sycl-ls")
    assert (record["visible_devices_var"], record["visible_devices"]) == (
        "ZE_AFFINITY_MASK", "0,1")


def test_the_programs_run_on_any_device_type_and_fall_back_to_an_older_backend(
        tmp_path: Path) -> None:
    programs = Path(__file__).resolve().parents[1] / "validate" / "programs"
    sys.path.insert(0, str(programs))
    try:
        import runtime
    finally:
        sys.path.remove(str(programs))
    (tmp_path / "fake_ccl_bindings.py").write_text("import os\nos.environ['FAKE_CCL'] = '1'\n")
    sys.path.insert(0, str(tmp_path))
    try:
        dist = SimpleNamespace(is_backend_available=lambda name: name != "xccl")
        assert runtime.pick_backend(dist, "xccl", "ccl:fake_ccl_bindings") == "ccl"
        import os
        assert os.environ.pop("FAKE_CCL") == "1"  # the bindings were imported first
        assert runtime.pick_backend(dist, "nccl", "ccl:fake_ccl_bindings") == "nccl"
    finally:
        sys.path.remove(str(tmp_path))
    # a device type torch lacks, or has none of: exit 2 naming it, before any rendezvous
    torch = pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, str(programs / "allreduce.py"), "--device", "xpu",
                           "--max-bytes", "64", "--iters", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert f"--device xpu, but torch {torch.__version__} sees no xpu device" in proc.stderr
    bad = subprocess.run([sys.executable, str(programs / "allreduce.py"), "--device", "x;y"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "invalid device_word value" in bad.stderr

"""The CUDA architectures a Horovod build is given, from the partitions' GPU models."""

from __future__ import annotations

from pathlib import Path

import pytest
from hpcprov_tests import write_profile

from hpcprov.site.cuda_arch import (
    capability,
    cc_list,
    cuda_of_modules,
    parse_nvcc,
    probe_nvcc,
    targets_of,
)
from hpcprov.site.profiles import load_site


@pytest.mark.parametrize(("model", "cc"), [
    ("V100-SXM2-32GB", "70"), ("Tesla V100-PCIE", "70"), ("A100-SXM4-80GB", "80"),
    ("NVIDIA A100-PCIE-40GB", "80"), ("H100 80GB HBM3", "90"), ("H200", "90"),
    ("GH200", "90"), ("A40", "86"), ("RTX A6000", "86"), ("L40S", "89"), ("T4", "75"),
    ("P100-PCIE-16GB", "60"), ("B200", "100"), ("MI250X", None), ("fake (mknod)", None)])
def test_a_gpu_model_has_its_compute_capability(model: str, cc: str | None) -> None:
    assert capability(model) == cc


def test_a_site_builds_for_each_of_its_gpu_models_once() -> None:
    # V100 and A100 partitions; H200 and GH200 build with CUDA 12 modules of their own
    ccs, unknown = cc_list(load_site("neuron"))
    assert ccs == ["70", "80"] and unknown == []
    assert cc_list(load_site("local")) == ([], [])


def test_unknown_models_are_named_not_guessed() -> None:
    ccs, unknown = cc_list(load_site("testbed"))
    assert ccs == [] and unknown == ["fake (mknod /dev/null copies)"]


def test_the_build_gets_the_sites_architectures_and_the_plan_warns_on_unknown_ones(
        tmp_path, monkeypatch) -> None:
    from hpcprov.provision.horovod import site_build_env
    from hpcprov.provision.plan import build_plan
    from hpcprov.provision.plan_lint import lint_plan

    neuron = load_site("neuron")
    assert site_build_env(neuron)["HOROVOD_BUILD_CUDA_CC_LIST"] == "70,80"
    assert "HOROVOD_BUILD_CUDA_CC_LIST" not in site_build_env(load_site("local"))
    sites = tmp_path / "sites"
    write_profile(sites, "gpubed", "extends: testbed\nname: gpubed\n"
                                       "horovod: {gpu_operations: nccl}\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(sites))
    gpubed = load_site("gpubed")
    assert "HOROVOD_BUILD_CUDA_CC_LIST" not in site_build_env(gpubed)
    codes = [f.code for f in lint_plan(build_plan(gpubed), gpubed)]
    assert "cuda-arch" in codes
    assert "cuda-arch" not in [f.code for f in lint_plan(build_plan(neuron), neuron)]


# ---- CUDA's architecture window ------------------------------------------------------------

def test_the_cuda_13_row_agrees_with_the_real_nvcc() -> None:
    nvcc = probe_nvcc()
    if nvcc is None:
        pytest.skip("no nvcc on PATH")
    row = targets_of(*map(int, nvcc.version.split(".")), "table")
    assert row is not None and (row.low, row.high) == (nvcc.low, nvcc.high), nvcc


@pytest.mark.parametrize(("names", "version"), [
    (["gcc/10.2.0", "cuda/11.4", "cudampi/openmpi-4.1.1"], "11.4"),
    (["ARM_cuda/12.4"], "12.4"), (["CUDA/12.1.1"], "12.1"), (["cudatoolkit/11.8"], "11.8"),
    (["cudampi/openmpi-4.1.1", "gcc/12"], None), (["fosscuda/2020b"], None)])
def test_the_cuda_of_a_module_set_is_read_from_its_cuda_module(names, version) -> None:
    found = cuda_of_modules(names)
    assert (found.version if found else None) == version


GPU_SITE = """name: {name}
scheduler: none
modules: {modules}
partitions:
  gpu: {{nodes: 1, cores_per_node: 8, gpus: {{count: 4, model: {model}}}, default: true}}
python: {{backend: venv, frameworks: {{pytorch: {{version: "2.14.1"}}}}}}
horovod: {{source: pip, version: "0.28.1", frameworks: [pytorch], controllers: [gloo],
          gpu_operations: nccl}}
launchers: {{horovodrun: {{kind: horovodrun, controller: gloo}}}}
default_launcher: horovodrun
"""


def gpu_site(tmp_path, name: str, model: str, cuda: str | None) -> Path:
    modules = ("{system: lmod, build: {load: [gcc/12, " + cuda + "]}}" if cuda
               else "{system: none}")
    return write_profile(tmp_path, name, GPU_SITE.format(name=name, model=model,
                                                         modules=modules))


@pytest.mark.parametrize(("model", "cuda", "fix"), [
    ("V100-SXM2-32GB", "cuda/13.0", "CUDA 12.x or older"),
    ("H100 80GB HBM3", "cuda/11.4", "CUDA 11.8 or newer"),
    ("K80", None, None)])
def test_site_check_and_setup_refuse_gpus_the_builds_cuda_cannot_target(
        tmp_path, capsys, model: str, cuda: str | None, fix: str | None) -> None:
    from hpcprov_tests import cli

    path = gpu_site(tmp_path, "gpus", model, cuda)
    check = cli(capsys, "site", "check", str(path))
    setup = cli(capsys, "setup", "--site", str(path), "--dry-run")
    if fix is None:  # a model without a known architecture: not refused
        assert check.rc == 0 and setup.rc == 0, (check.err, setup.err)
        return
    assert check.rc == 2 and setup.rc == 2
    (line,) = check.err.strip().splitlines()      # one line, at the key, with the fix
    assert line.startswith(f"{path}:5: partitions.gpu: its GPUs ({model}, sm_")
    assert f"module {cuda}" in line and fix in line
    assert "[cuda-target]" in setup.err and fix in setup.err
    assert "#!/bin/bash" not in setup.out         # nothing planned to run


def test_without_build_modules_the_nvcc_at_hand_decides(tmp_path, capsys) -> None:
    from hpcprov_tests import cli

    nvcc = probe_nvcc()
    if nvcc is None:
        pytest.skip("no nvcc on PATH")
    v100 = cli(capsys, "site", "check", str(gpu_site(tmp_path, "v100", "V100-SXM2", None)))
    h100 = cli(capsys, "site", "check", str(gpu_site(tmp_path, "h100", "H100", None)))
    assert h100.rc == 0, h100.err
    if nvcc.covers(70):
        assert v100.rc == 0
    else:  # this project's machines: CUDA 13
        assert v100.rc == 2 and f"CUDA {nvcc.version} (nvcc on PATH)" in v100.err


def test_the_nvcc_probe_reads_version_and_architectures() -> None:
    got = parse_nvcc("Cuda compilation tools, release 12.4, V12.4.131",
                     "compute_50\ncompute_52\ncompute_90\n")
    assert got is not None and (got.version, got.low, got.high) == ("12.4", 50, 90)
    assert parse_nvcc("garbage", "") is None

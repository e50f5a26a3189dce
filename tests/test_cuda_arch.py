"""The CUDA architectures a Horovod build is given, from the partitions' GPU models."""

from __future__ import annotations

import pytest
from hpcprov_tests import write_profile

from hpcprov.profiles import load_site
from hpcprov.cuda_arch import capability, cc_list


@pytest.mark.parametrize(("model", "cc"), [
    ("V100-SXM2-32GB", "70"), ("Tesla V100-PCIE", "70"), ("A100-SXM4-80GB", "80"),
    ("NVIDIA A100-PCIE-40GB", "80"), ("H100 80GB HBM3", "90"), ("H200", "90"),
    ("GH200", "90"), ("A40", "86"), ("RTX A6000", "86"), ("L40S", "89"), ("T4", "75"),
    ("P100-PCIE-16GB", "60"), ("B200", "100"), ("MI250X", None), ("fake (mknod)", None)])
def test_a_gpu_model_has_its_compute_capability(model: str, cc: str | None) -> None:
    assert capability(model) == cc


def test_a_site_builds_for_each_of_its_gpu_models_once() -> None:
    ccs, unknown = cc_list(load_site("neuron"))  # V100, A100, H200, GH200 partitions
    assert ccs == ["70", "80", "90"] and unknown == []
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
    assert site_build_env(neuron)["HOROVOD_BUILD_CUDA_CC_LIST"] == "70,80,90"
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

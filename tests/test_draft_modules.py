"""The module sets of a draft: recorded `module -t avail`/`spider` listings (Lmod and
Environment Modules) parsed, and one module chosen per kind with its alternatives."""

from __future__ import annotations

from pathlib import Path

import pytest
from hpcprov_tests import recorded

from hpcprov.draft.modules import (
    Module,
    choose,
    cuda_aware,
    offered,
    parse_listing,
    parse_probe,
    plan_modules,
    same_family,
)

DATA = Path(__file__).parent / "data" / "draft"




def names(mods: list[Module]) -> list[str]:
    return [m.name for m in mods]


def test_an_lmod_terse_listing_skips_headings_and_directories() -> None:
    mods = parse_listing(recorded("lmod-avail.txt"))
    assert "gcc/10.2.0" in names(mods) and "cudampi/openmpi-4.1.1" in names(mods)
    assert not [n for n in names(mods) if n.endswith((":", "/"))]
    assert [m.name for m in mods if m.default] == ["cuda/11.4"]


def test_a_tcl_listing_reads_default_and_symbol_marks() -> None:
    mods = parse_listing(recorded("tcl-avail.txt"))
    assert {m.name for m in mods if m.default} == {"gcc/12.3.0", "cuda/12.2"}
    assert "openmpi/4.1.5-cuda12.2" in names(mods) and "dot" in names(mods)


def test_messages_and_blank_lines_are_not_modules() -> None:
    text = "Lmod has detected the following error: x\n\n  \ngcc/9.3.0 (L)\n<D> junk\n"
    assert names(parse_listing(text)) == ["gcc/9.3.0"]


def test_the_lmod_listing_gives_neurons_module_sets_with_gpus() -> None:
    listing = parse_listing(recorded("lmod-avail.txt"))
    plan = plan_modules(parse_probe("lmod=8.7.1\nmodules=\ninit=/usr/share/lmod/lmod/init/"
                                    "bash\n"), listing, [], gpus=True)
    assert plan.system.kind == "lmod" and plan.system.init.endswith("init/bash")
    assert plan.build == ["gcc/10.2.0", "cuda/11.4", "cudampi/openmpi-4.1.1",
                          "nccl/2.8.4-cuda11.4", "cmake/3.26.2", "python/3.9.5"]
    assert plan.runtime == [m for m in plan.build if not m.startswith("cmake")]
    mpi = next(c for c in plan.choices if c.kind == "mpi")
    assert mpi.why.startswith("CUDA-aware by its name")
    assert mpi.alternatives == ["cudampi/openmpi-3.1.5", "mpi/openmpi-4.1.1",
                                "mpi/mvapich2-2.3.6"]
    nccl = next(c for c in plan.choices if c.kind == "nccl")
    assert "built for cuda/11.4" in nccl.why  # not the higher nccl built for CUDA 12.1
    assert plan.others == {"PyTorch": ["pytorch/1.12.0"], "TensorFlow": ["tensorflow/2.10.0"],
                           "conda": ["conda/pytorch_1.11.0"]}


def test_without_gpus_there_is_no_cuda_nor_nccl_and_mpi_is_plain() -> None:
    plan = plan_modules(parse_probe("lmod=8.7\n"), parse_listing(recorded("lmod-avail.txt")),
                        [], gpus=False)
    assert plan.build == ["gcc/10.2.0", "mpi/openmpi-4.1.1", "cmake/3.26.2", "python/3.9.5"]
    assert [c.kind for c in plan.choices] == ["compiler", "mpi", "cmake", "python"]


def test_the_tcl_listing_prefers_defaults_and_a_cuda_aware_mpi_for_that_cuda() -> None:
    plan = plan_modules(parse_probe("lmod=\nmodules=5.3.1\ninit=/usr/share/Modules/init/"
                                    "bash\n"), parse_listing(recorded("tcl-avail.txt")), [],
                        gpus=True)
    assert plan.system.kind == "tcl"
    assert plan.build == ["gcc/12.3.0", "cuda/12.2", "openmpi/4.1.5-cuda12.2",
                          "cmake/3.27.7"]
    assert plan.others == {"conda": ["anaconda3/2023.09"]}
    nccl = next(c for c in plan.choices if c.kind == "nccl")
    assert nccl.chosen is None and nccl.why == "not offered by module -t avail"


def test_spider_names_what_avail_hides_behind_a_hierarchy() -> None:
    avail = parse_listing("gcc/11.3.0\ncuda/11.8\ncmake/3.24.2\n")
    spider = parse_listing(recorded("lmod-spider.txt"))
    mpi = choose("mpi", avail, spider, gpus=True)
    assert mpi.chosen is None and mpi.spider_only == ["openmpi/4.1.4"]


def test_no_module_command_is_no_module_system() -> None:
    assert parse_probe("").kind == "none"


@pytest.mark.parametrize(("name", "aware"), [
    ("cudampi/openmpi-4.1.1", True), ("openmpi/4.1.5-cuda12.2", True),
    ("mvapich2-gdr/2.3.7", True), ("openmpi/4.1.5", False), ("mpich/4.1", False)])
def test_cuda_aware_by_name(name: str, aware: bool) -> None:
    assert cuda_aware(Module(name)) is aware


def test_a_profiles_module_is_offered_by_name_or_family() -> None:
    listing = parse_listing("gcc/11.3.0\ncuda/12.2\n")
    assert offered("gcc/11.3.0", listing) and offered("gcc", listing)
    assert not offered("gcc/10.2.0", listing)
    assert same_family("gcc/10.2.0", listing) == ["gcc/11.3.0"]

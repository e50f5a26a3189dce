"""A scheduler is a unit (issue 12): a backend module, the module of its drafting part and
its line in ``kinds.SCHEDULER_BACKENDS`` are all `hpcprov site draft` needs. A toy backend
registered here, with no other change, is found on PATH by its marker command, offered by
``--scheduler``, and drafted with its own title, discovery, launchers and profile section."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from hpcprov_tests import cli

from hpcprov import schedulers
from hpcprov.core.yaml_writer import Block
from hpcprov.draft.run import detect_scheduler
from hpcprov.schedulers.base import Backend
from hpcprov.schedulers.facts import Cluster, Drafting, Node, Queue, Run
from hpcprov.site.kinds import SCHEDULER_BACKENDS

MODULE = "hpcprov_tests_toy_scheduler"
DISCOVERY = "hpcprov_tests_toy_scheduler_discovery"


class Toy(Backend):
    name = "toy"
    title = "ToySched"
    marker = "toyq"
    discovery = DISCOVERY


class ToyDrafting(Drafting):
    def discover(self, run: Run) -> Cluster:
        proc = run(["toyq", "-l"])
        names = proc.stdout.split()
        return Cluster("toy", version="0.1", queues=[Queue("work", names, default=True)],
                       nodes={n: Node(n, cpus=8, cores=8, memory_mb=16384) for n in names},
                       sources={"queues": "toyq -l", "nodes": "toyq -l"})

    def launchers(self, cluster: Cluster) -> tuple[Block, str]:
        toyrun = Block()
        toyrun.add("kind", "mpirun")
        b = Block()
        b.add("toyrun", toyrun, "toyq's own mpirun")
        return b, "toyrun"

    def section(self, cluster: Cluster, gpus: bool) -> Block:
        b = Block()
        b.add("flavour", "vanilla")
        return b


def _modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy backend and its drafting part, each a module of its own (as new files would
    be), importable by name."""
    module = types.ModuleType(MODULE)
    module.BACKEND = Toy()
    monkeypatch.setitem(sys.modules, MODULE, module)
    drafting = types.ModuleType(DISCOVERY)
    drafting.DRAFTING = ToyDrafting()
    monkeypatch.setitem(sys.modules, DISCOVERY, drafting)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The toy backend's modules, registered last (as a new line would be)."""
    _modules(monkeypatch)
    monkeypatch.setitem(SCHEDULER_BACKENDS, "toy", MODULE)
    schedulers.backend.cache_clear()
    yield
    schedulers.backend.cache_clear()


def _bin(tmp_path: Path, *commands: str) -> str:
    """A PATH holding only these commands; toyq prints two node names."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for command in commands:
        (bindir / command).write_text("#!/bin/sh\necho toy01 toy02\n")
        (bindir / command).chmod(0o755)
    return str(bindir)


def _drafted_before_toy() -> list[Backend]:
    """The registered backends the draft asks besides the toy (those with a marker command),
    in registry order: read from the registry, so that a new scheduler changes no test."""
    return [schedulers.backend(name) for name in SCHEDULER_BACKENDS
            if name != "toy" and schedulers.backend(name).marker]


def test_the_draft_finds_a_registered_backend_by_its_marker(toy: None,
                                                            tmp_path: Path) -> None:
    assert detect_scheduler({"PATH": _bin(tmp_path, "toyq")}) == "toy"
    # registry order decides: Slurm's scontrol beside it still means Slurm
    assert detect_scheduler({"PATH": _bin(tmp_path, "toyq", "scontrol")}) == "slurm"
    before = _drafted_before_toy()
    markers = ", ".join(str(b.marker) for b in [*before, schedulers.backend("toy")])
    with pytest.raises(Exception, match=re.escape(f"looked for {markers})")):
        detect_scheduler({"PATH": str(tmp_path / "nothing")})
    assert [b.name for b in schedulers.drafting()] == [*(b.name for b in before), "toy"]


def test_registry_order_is_detection_order(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    path = _bin(tmp_path, "scontrol", "pbsnodes", "bqueues")
    assert detect_scheduler({"PATH": path}) == "slurm"  # Debian's slurm-wlm-torque case
    _modules(monkeypatch)
    monkeypatch.setattr(schedulers, "SCHEDULER_BACKENDS", {"toy": MODULE, **SCHEDULER_BACKENDS})
    schedulers.backend.cache_clear()
    try:
        assert detect_scheduler({"PATH": _bin(tmp_path, "toyq")}) == "toy"
    finally:
        schedulers.backend.cache_clear()


def test_the_cli_offers_and_drafts_a_registered_backend(toy: None, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    res = cli(capsys, "site", "draft", "--help")
    offered = "|".join([*(b.name for b in _drafted_before_toy()), "toy"])
    assert res.rc == 0 and f"--scheduler [{offered}]" in res.out
    monkeypatch.setenv("PATH", _bin(tmp_path, "toyq"))
    for args in ((), ("--scheduler", "toy")):
        res = cli(capsys, "site", "draft", *args)
        assert res.rc == 0, res.err
        assert "(ToySched 0.1)" in res.out  # the header's title
        assert 'description: "ToySched cluster drafted by' in res.out
        assert 'scheduler: "toy"' in res.out
        assert "  toyq -l  [" in res.out  # discovery ran through the draft's recorder
        assert 'nodes: 2' in res.out and 'default_launcher: "toyrun"' in res.out
        assert 'toy:\n  flavour: "vanilla"' in res.out
        assert "srun" not in res.out and "LSF" not in res.out


def test_every_drafting_backend_names_its_drafting_part() -> None:
    """A backend with a marker names the module of its drafting part, loaded on demand; one
    without says that the draft cannot ask it."""
    for b in schedulers.drafting():
        assert isinstance(b.drafting(), Drafting), b.name
    with pytest.raises(NotImplementedError, match="hpcprov site draft cannot ask no scheduler"):
        schedulers.backend("none").drafting()

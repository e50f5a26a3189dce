"""A scheduler is a unit (issue 12): a backend module and its line in
``kinds.SCHEDULER_BACKENDS`` are all `hpcprov site draft` needs. A toy backend registered
here, with no other change, is found on PATH by its marker command, offered by
``--scheduler``, and drafted with its own title, discovery, launchers and profile section."""

from __future__ import annotations

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
from hpcprov.schedulers.facts import Cluster, Node, Queue, Run
from hpcprov.site.kinds import SCHEDULER_BACKENDS

MODULE = "hpcprov_tests_toy_scheduler"


class Toy(Backend):
    name = "toy"
    title = "ToySched"
    marker = "toyq"

    def discover(self, run: Run) -> Cluster:
        proc = run(["toyq", "-l"])
        names = proc.stdout.split()
        return Cluster("toy", version="0.1", queues=[Queue("work", names, default=True)],
                       nodes={n: Node(n, cpus=8, cores=8, memory_mb=16384) for n in names},
                       sources={"queues": "toyq -l", "nodes": "toyq -l"})

    def draft_launchers(self, cluster: Cluster) -> tuple[Block, str]:
        toyrun = Block()
        toyrun.add("kind", "mpirun")
        b = Block()
        b.add("toyrun", toyrun, "toyq's own mpirun")
        return b, "toyrun"

    def draft_section(self, cluster: Cluster, gpus: bool) -> Block:
        b = Block()
        b.add("flavour", "vanilla")
        return b


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The toy backend as a module of its own, registered last (as a new line would be)."""
    module = types.ModuleType(MODULE)
    module.BACKEND = Toy()
    monkeypatch.setitem(sys.modules, MODULE, module)
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


def test_the_draft_finds_a_registered_backend_by_its_marker(toy: None,
                                                            tmp_path: Path) -> None:
    assert detect_scheduler({"PATH": _bin(tmp_path, "toyq")}) == "toy"
    # registry order decides: Slurm's scontrol beside it still means Slurm
    assert detect_scheduler({"PATH": _bin(tmp_path, "toyq", "scontrol")}) == "slurm"
    with pytest.raises(Exception, match=r"looked for scontrol, pbsnodes, bqueues, flux, toyq\)"):
        detect_scheduler({"PATH": str(tmp_path / "nothing")})
    assert [b.name for b in schedulers.drafting()] == ["slurm", "pbs", "lsf", "flux", "toy"]


def test_registry_order_is_detection_order(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    path = _bin(tmp_path, "scontrol", "pbsnodes", "bqueues")
    assert detect_scheduler({"PATH": path}) == "slurm"  # Debian's slurm-wlm-torque case
    module = types.ModuleType(MODULE)
    module.BACKEND = Toy()
    monkeypatch.setitem(sys.modules, MODULE, module)
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
    assert res.rc == 0 and "--scheduler [slurm|pbs|lsf|flux|toy]" in res.out
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

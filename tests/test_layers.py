"""Every module of hpcprov has a place in the layering contracts that CI checks (.ci/lint),
so a new module cannot escape them by not being listed."""

from __future__ import annotations

from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
UPPER = {"hpcprov.cli", "hpcprov.docgen", "hpcprov.guide"}
MAPPED = {"provision", "validate", "sites", "testbed"}  # their own layers (package-dir)


def _contracts() -> list[dict]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return config["tool"]["importlinter"]["contracts"]


def test_every_core_module_is_bound_by_the_core_contract() -> None:
    core = next(c for c in _contracts() if c["type"] == "forbidden")
    listed = set(core["source_modules"])
    here = {f"hpcprov.{p.stem}" for p in (REPO / "hpcprov").glob("*.py")
            if p.stem != "__init__"}
    here |= {f"hpcprov.{p.name}" for p in (REPO / "hpcprov").iterdir()
             if p.is_dir() and (p / "__init__.py").exists()}
    assert here - UPPER - listed == set(), "add the module to the core contract"
    assert listed - here - {f"hpcprov.{m}" for m in MAPPED} == set(), "a listed module is gone"


def test_the_upper_layers_are_the_layers_contract() -> None:
    layers = next(c for c in _contracts() if c["type"] == "layers")["layers"]
    named = {m.strip() for layer in layers for m in layer.split("|")}
    assert named >= UPPER and {"hpcprov.provision", "hpcprov.validate"} <= named

"""The site declared once (hpcprov/site/types.py): plain dataclasses that pydantic validates
(hpcprov/site/model.py), whose JSON the profile cache reads back without pydantic."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprov_tests import BUNDLED, REPO

from hpcprov.site.codec import dump, load
from hpcprov.site.kinds import LauncherKind, Scheduler
from hpcprov.site.loader import bundled_site_dir, resolve
from hpcprov.site.model import json_schema, validate
from hpcprov.site.profiles import validated
from hpcprov.site.sections import SCHEDULER_SECTIONS
from hpcprov.site.types import Gpus, Partition, Site

EXAMPLES = sorted((REPO / "docs" / "examples").glob("**/*.yaml"))


@pytest.mark.parametrize("path", [*(bundled_site_dir() / f"{n}.yaml" for n in BUNDLED),
                                  *EXAMPLES], ids=lambda p: p.stem)
def test_a_validated_profile_is_its_json_read_back(path: Path) -> None:
    """One typed form: what pydantic validates is what the cache's JSON reads back (the
    same classes, enum members, data and order), and the JSON validates to it again."""
    site, errors = validated(resolve(path))
    assert errors == [] and type(site) is Site
    text = json.dumps(dump(site))
    back = load(Site, json.loads(text))
    assert back == site and back is not site and type(back) is Site
    assert json.dumps(dump(back)) == text
    assert validate(json.loads(text)) == site  # a fixed point of the validation
    assert isinstance(site.scheduler, Scheduler)
    assert all(isinstance(la.kind, LauncherKind) for la in back.launchers.values())


def test_the_classes_import_no_pydantic(tmp_path: Path) -> None:
    probe = ("import sys, hpcprov.site.types\n"
             "assert 'pydantic' not in sys.modules and 'yaml' not in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_each_scheduler_section_is_a_field_of_the_site() -> None:
    names = [f.name for f in dataclasses.fields(Site)]
    for name, section in SCHEDULER_SECTIONS.items():
        assert name in names and dataclasses.is_dataclass(section)
    assert names[-1] == "unverified"


def test_a_field_check_is_located_at_its_field() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as exc:
        validate({"cores_per_node": 8, "limits": {"max_walltime": "01:00:00",
                                                  "default_walltime": "02:00:00"}}, Partition)
    (err,) = exc.value.errors()
    assert err["loc"] == ("limits", "default_walltime")
    assert "longer than max_walltime" in err["msg"]


def test_descriptions_and_bounds_reach_the_schema() -> None:
    gpus = json_schema(Gpus)["properties"]["count"]
    assert gpus["maximum"] == 64 and gpus["minimum"] == 0 and "GPUs per node" in gpus["description"]
    assert json_schema()["additionalProperties"] is False


def test_building_a_part_checks_it_as_validation_does() -> None:
    with pytest.raises(ValueError, match="single line|control"):
        Gpus(model="A100\nrm -rf ~")
    with pytest.raises(TypeError):
        Gpus(colour="green")
    assert dataclasses.replace(Gpus(count=4), vendor="amd") == Gpus(count=4, vendor="amd")


def test_no_module_rewrites_a_pydantic_schema() -> None:
    """Fields reach pydantic through its public API (hpcprov/site/declare.py): no module of
    the project implements pydantic's core-schema hook, whose generated layout a pydantic
    release may change."""
    hook = "def " + "__get_pydantic_core_schema__"
    found = [str(p.relative_to(REPO)) for folder in ("hpcprov", "provision", "validate",
                                                     "sites", "testbed", "tests")
             for p in (REPO / folder).rglob("*.py") if hook in p.read_text(encoding="utf-8")]
    assert found == []


def test_a_fields_constraint_is_checked_before_its_own_checks() -> None:
    """A value both out of its pattern and against the text rule is reported by the
    pattern (the constraint first, then the text rule and the field's checks), at its
    field, beside another field's own check."""
    from pydantic import ValidationError

    from hpcprov.site.types import Policies

    with pytest.raises(ValidationError) as exc:
        validate({"proxy": {"http": "http://proxy\n:3128"},
                  "required_options": {"account": {"default": "$USER"}}}, Policies)
    errors = [(e["loc"], e["msg"]) for e in exc.value.errors()]
    assert [loc for loc, _ in errors] == [("required_options", "account", "default"),
                                          ("proxy", "http")]
    assert "would be written literally" in errors[0][1]
    assert "should match pattern" in errors[1][1]


def test_each_backend_reads_its_own_section_typed() -> None:
    from hpcprov import schedulers
    from hpcprov.core.errors import HpcprovError
    from hpcprov.site.profiles import load_site
    from hpcprov.site.sections import SlurmOptions

    site = load_site("neuron")  # a Slurm site
    slurm = schedulers.backend("slurm")
    assert type(slurm.section(site)) is SlurmOptions and slurm.section(site).shell
    other = dataclasses.replace(site, scheduler=Scheduler("pbs"), slurm=None, pbs=None)
    with pytest.raises(HpcprovError, match="no slurm settings"):
        slurm.section(other)

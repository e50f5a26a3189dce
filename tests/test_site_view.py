"""The snapshot a loaded site is (hpcprov/site/view.py): the model's data and behaviour
without pydantic, including the variants the CLI derives from it."""

from __future__ import annotations

import json

from hpcprov.site.kinds import Scheduler
from hpcprov.site.loader import bundled_site_dir
from hpcprov.site.model import PythonStack
from hpcprov.site.overrides import with_overrides
from hpcprov.site.profiles import load_site, validate_file
from hpcprov.site.view import SiteView, View, snapshot


def test_a_snapshot_has_the_models_data_methods_and_enums() -> None:
    model = validate_file(bundled_site_dir() / "neuron.yaml")
    site = snapshot(model)
    assert isinstance(site, SiteView) and isinstance(site.partitions["amd_a100nv_8"], View)
    assert site.model_dump(mode="json") == model.model_dump(mode="json")
    assert site.scheduler is Scheduler.slurm and site.model_dump()["scheduler"] is Scheduler.slurm
    assert site.partition() == (model.partition()[0], site.partitions[model.partition()[0]])
    assert site.prefix() == model.prefix()
    assert site.modules_for().model_dump() == model.modules_for().model_dump()


def test_model_copy_leaves_the_original_alone() -> None:
    site = load_site("neuron")
    other = site.model_copy(update={"description": "changed"})
    assert other.description == "changed" and site.description != "changed"
    assert other.partitions is site.partitions  # shallow, as pydantic's default
    assert other != site and site == load_site("neuron")


def test_cli_variants_stay_dumpable_for_the_manifest() -> None:
    """--env NAME and --container IMAGE derive a site with new parts; the manifest writes
    site.profile_data() of it."""
    named = with_overrides(load_site("local"), env_name="myenv")
    assert named.python.env_name == "myenv" and isinstance(named.python, View)
    assert json.loads(json.dumps(named.model_dump(mode="json")))["python"]["env_name"] == "myenv"
    neuron = load_site("neuron")
    image = next(iter(neuron.containers.images))
    boxed = with_overrides(neuron, container=image)
    dumped = json.loads(json.dumps(boxed.model_dump(mode="json")))
    assert dumped["python"]["backend"] == "container"
    assert dumped["python"]["container"]["image"] == image
    assert dumped["horovod"]["source"] == "container"
    # what the manifest holds validates as the model again
    assert PythonStack.model_validate(dumped["python"]).container.image == image


def test_a_model_object_put_in_by_hand_still_dumps_as_data() -> None:
    site = load_site("local")
    stack = PythonStack.model_validate({**site.python.model_dump(), "env_name": "raw"})
    mixed = site.model_copy(update={"python": stack})
    assert json.loads(json.dumps(mixed.model_dump(mode="json")))["python"]["env_name"] == "raw"

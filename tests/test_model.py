"""The site model and profile loading: bundled profiles, strict keys, `extends`, search path,
packaging."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from hpcprov_tests import BUNDLED, REPO, SEED_SITES, cli, write_profile

from hpcprov.core.errors import ProfileError, UsageError
from hpcprov.site.codec import dump
from hpcprov.site.kinds import Scheduler
from hpcprov.site.loader import available_sites, bundled_site_dir
from hpcprov.site.model import json_schema, validate
from hpcprov.site.profiles import check_file, load_site, site_names

# ------------------------------------------------------------------ packaging


def test_bundled_profiles_are_found_next_to_the_package() -> None:
    directory = bundled_site_dir()
    assert directory.is_dir()
    assert sorted(p.stem for p in directory.glob("*.yaml")) == BUNDLED
    assert set(SEED_SITES) <= set(BUNDLED) == set(site_names())


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_profile_validates(name: str) -> None:
    path = bundled_site_dir() / f"{name}.yaml"
    assert check_file(path) == []
    site = load_site(name)
    assert site.name == name
    # a loaded profile is a fixed point of the model (dump -> validate gives it back)
    assert validate(dump(site)) == site
    # its default launcher and every partition's default resolve
    assert site.default_launcher in site.launchers
    pname, _ = site.partition()
    assert pname in site.partitions


@pytest.mark.slow
def test_wheel_contains_profiles_and_mapped_packages(tmp_path: Path) -> None:
    """A normal (non-editable) install must carry sites/*.yaml and the mapped folders."""
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache",
        ".venv", ".hpcprov", "tests",
        # what CI and the GPU kit leave in the checkout (GBs: a PyTorch folder, a prefix)
        ".ci-cache", ".gpu-bundle", ".mypy_cache"))
    out = tmp_path / "wheels"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    wheels = list(out.glob("hpcprov-*.whl"))
    assert len(wheels) == 1
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    for site in sorted((REPO / "sites").glob("*.yaml")):
        assert f"hpcprov/sites/{site.name}" in names
    for required in ("hpcprov/provision/plan.py", "hpcprov/provision/horovod.py",
                     "hpcprov/validate/__init__.py", "hpcprov/sites/__init__.py",
                     "hpcprov/app/cli.py"):
        assert required in names, required
    assert not any(n.startswith(("sites/", "provision/", "validate/")) for n in names)
    # every module of the source is in the wheel (a new subpackage missing from
    # pyproject's list was absent from installs, and import-linter never saw it)
    for top, mapped in (("hpcprov", "hpcprov"), ("provision", "hpcprov/provision"),
                        ("validate", "hpcprov/validate")):
        for module in sorted((REPO / top).rglob("*.py")):
            rel = module.relative_to(REPO / top).as_posix()
            assert "__pycache__" in rel or f"{mapped}/{rel}" in names, (top, rel)

    # unpacked like an installer would (pure Python: a plain unzip), outside the source tree,
    # the profiles are still found
    target = tmp_path / "target"
    zipfile.ZipFile(wheels[0]).extractall(target)
    probe = ("import hpcprov, hpcprov.site.loader as l, hpcprov.provision.plan as p;"
             "from hpcprov.site.profiles import load_site;"
             "print(hpcprov.__file__); print(l.bundled_site_dir()); print(p.__file__);"
             "print(load_site('neuron').name)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin",
                                             "HOME": str(tmp_path)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    init, sites_dir, plan, name = proc.stdout.split("\n")[:4]
    assert Path(init).is_relative_to(target)
    assert Path(sites_dir).is_relative_to(target)
    assert Path(plan).is_relative_to(target)
    assert name == "neuron"


# -------------------------------------------------------------- unknown keys

UNKNOWN_KEYS = [
    # (YAML text extending local, line of the bad key, dotted path, suggestion or None)
    ("partitons: {}\n", 2, "partitons", "partitions"),
    ("partitions:\n  local:\n    nodse: 2\n", 4, "partitions.local.nodse", "nodes"),
    ("partitions:\n  local:\n    gpus: {cont: 2}\n", 4, "partitions.local.gpus.cont", "count"),
    ("partitions:\n  local:\n    limits:\n      max_walltme: '1:00:00'\n", 5,
     "partitions.local.limits.max_walltme", "max_walltime"),
    ("partitions:\n  local:\n    references:\n      bw: {vale: 1, value: 1, unit: GB/s}\n", 5,
     "partitions.local.references.bw.vale", "value"),
    ("launchers:\n  mpirun:\n    kind: mpirun\n    oversubscrib: true\n", 5,
     "launchers.mpirun.oversubscrib", "oversubscribe"),
    ("python:\n  venv:\n    no_indx: true\n", 4, "python.venv.no_indx", "no_index"),
    ("python:\n  frameworks:\n    pytorch: {versoin: '2.0', version: '2.0'}\n", 4,
     "python.frameworks.pytorch.versoin", "version"),
    ("horovod:\n  gpu_operation: nccl\n", 3, "horovod.gpu_operation", "gpu_operations"),
    ("policies:\n  required_options:\n    account: {exampel: def-x}\n", 4,
     "policies.required_options.account.exampel", "example"),
    ("modules:\n  system: lmod\n  build:\n    lod: [gcc]\n", 5, "modules.build.lod", "load"),
    ("scheduler: slurm\nslurm:\n  gpu_requests: gres\n", 4, "slurm.gpu_requests", "gpu_request"),
    ("zzzzzz: 1\n", 2, "zzzzzz", None),
]


@pytest.mark.parametrize(("body", "line", "dotted", "hint"), UNKNOWN_KEYS,
                         ids=[u[2] for u in UNKNOWN_KEYS])
def test_unknown_keys_are_rejected_at_any_depth(tmp_path: Path, body: str, line: int,
                                                dotted: str, hint: str | None) -> None:
    path = write_profile(tmp_path, "typo", "extends: local\n" + body)
    errors = check_file(path)
    assert len(errors) == 1, [str(e) for e in errors]
    err = errors[0]
    assert (err.file, err.line) == (str(path), line)
    assert str(err).startswith(f"{path}:{line}: {dotted}: unknown key")
    if hint:
        assert f"did you mean '{hint}'" in str(err)
    else:
        assert "did you mean" not in str(err)
    with pytest.raises(ProfileError) as info:
        load_site(str(path))
    assert str(info.value).startswith(f"{path}:{line}:")


def test_schema_forbids_unknown_keys_too(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "site", "schema")
    assert res.rc == 0
    schema = json.loads(res.out)
    assert "partitions" in schema["properties"]
    assert "launchers" in schema["properties"]
    assert schema.get("additionalProperties") is False
    assert set(schema["required"]) >= {"partitions", "launchers", "default_launcher"}
    # nested models are closed as well (editor completion flags typos)
    for name in ("Partition", "Launcher", "Gpus", "VenvSpec"):
        assert schema["$defs"][name]["additionalProperties"] is False


# --------------------------------------------------------------- model rules

MODEL_RULES = [
    ("partitions:\n  extra: {nodes: 1, cores_per_node: 1, default: true}\n",
     "more than one default partition"),
    ("default_launcher: nope\n", "'nope' is not one of the launchers"),
    ("env:\n  1BAD: x\n", "not a valid environment variable name"),
    ("horovod:\n  env: {'BAD-NAME': x}\n", "not a valid environment variable name"),
    ("launchers:\n  mpirun: {kind: mpirun, export_env: ['A B']}\n",
     "not a valid environment variable name"),
    ("launchers:\n  mpirun: {kind: mpirun, hosts: hostfile}\n", "hosts: hostfile needs"),
    ("python:\n  backend: container\n", "needs a 'container:' section"),
    ("containers:\n  default_image: missing\n", "default_image 'missing' is not in images"),
    ("launchers:\n  mpirun: {kind: fancyrun}\n", "launchers.mpirun.kind"),
    # horovodrun's controller is a typed key, not a word searched for in args
    ("launchers:\n  horovodrun: {kind: horovodrun, args: [-v, --gloo]}\n",
     "--gloo is horovodrun's controller: say it as 'controller: gloo'"),
    ("launchers:\n  horovodrun: {kind: horovodrun, controller: ucx}\n",
     "launchers.horovodrun.controller"),
    ("launchers:\n  mpirun: {kind: mpirun, controller: gloo}\n",
     "a mpirun launcher does not read controller"),
    ("python:\n  env_name: 'a b'\n", "python.env_name"),
    ("partitions:\n  local:\n    gpus: {count: -1}\n", "partitions.local.gpus.count"),
]


@pytest.mark.parametrize(("body", "needle"), MODEL_RULES, ids=[m[1][:30] for m in MODEL_RULES])
def test_model_rules_give_located_errors(tmp_path: Path, body: str, needle: str) -> None:
    path = write_profile(tmp_path, "rules", "extends: local\n" + body)
    errors = check_file(path)
    assert errors, "profile should be refused"
    assert any(needle in str(e) for e in errors), [str(e) for e in errors]
    # located in the child file, never in the bundled parent that is fine
    assert all(e.file == str(path) and e.line >= 2 for e in errors), [str(e) for e in errors]


def test_partition_lookup_prefers_the_named_then_the_default() -> None:
    neuron = load_site("neuron")
    default = [n for n, p in neuron.partitions.items() if p.default]
    assert neuron.partition()[0] == default[0] == "amd_a100nv_8"  # the seed's batch partition
    assert neuron.partition("skl")[0] == "skl"
    with pytest.raises(UsageError, match=r"^--partition 'nope': site neuron has no such "
                       r"partition \(it has cas_v100nv_8, .*amd_a100nv_8, .*skl"):
        neuron.partition("nope")
    # a partition's own modules replace the site's (gh200_1 needs ARM_ modules after a purge)
    arm = neuron.modules_for("gh200_1")
    assert arm.runtime.purge and all(m.startswith("ARM_") for m in arm.runtime.load)
    assert neuron.modules_for("amd_a100nv_8") == neuron.modules


# -------------------------------------------------------------------- extends


def test_extends_child_overrides_scalars_and_merges_mappings() -> None:
    parent, child = load_site("sockeye"), load_site("sockeye-slurm")
    assert parent.scheduler == Scheduler.pbs and child.scheduler == Scheduler.slurm
    assert child.name == "sockeye-slurm" and child.extends == "sockeye"
    # mappings merge: the parent's partition, modules and policies come through
    assert child.partitions == parent.partitions
    assert child.modules == parent.modules
    assert child.policies.required_options.keys() == parent.policies.required_options.keys()
    # launchers: the child adds srun, keeps the parent's torchrun description, overrides wrapper
    assert set(child.launchers) == {"mpirun", "torchrun", "srun"}
    assert child.launchers["torchrun"].description == parent.launchers["torchrun"].description
    assert parent.launchers["torchrun"].per_node_wrapper == "none"
    assert child.launchers["torchrun"].per_node_wrapper == "srun"
    # scalars and lists inside a merged mapping are replaced
    assert parent.launchers["mpirun"].oversubscribe and not child.launchers["mpirun"].oversubscribe
    assert child.launchers["mpirun"].args == [] != parent.launchers["mpirun"].args


def test_extends_lists_replace_and_nested_values_merge(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "mine", (
        "extends: neuron\n"
        "login_hosts: [mylogin*]\n"
        "partitions:\n"
        "  amd_a100nv_8:\n"
        "    nodes: 2\n"
        "modules:\n"
        "  runtime:\n"
        "    load: [gcc/12]\n"
    ))
    site, neuron = load_site(str(path)), load_site("neuron")
    assert site.name == "mine"  # the file's own name, not the parent's
    assert site.login_hosts == ["mylogin*"]
    part, base = site.partitions["amd_a100nv_8"], neuron.partitions["amd_a100nv_8"]
    assert part.nodes == 2
    assert (part.gpus, part.cores_per_node, part.default) == (base.gpus, base.cores_per_node, True)
    assert set(site.partitions) == set(neuron.partitions)
    assert site.modules.runtime.load == ["gcc/12"]
    assert site.modules.runtime.purge is True  # sibling key kept from the parent
    assert site.modules.build == neuron.modules.build


def test_error_in_a_parent_file_is_located_in_the_parent(tmp_path: Path) -> None:
    parent = write_profile(tmp_path, "parent", (
        "extends: local\n"
        "partitions:\n"
        "  local:\n"
        "    nodes: many\n"
    ))
    child = write_profile(tmp_path, "child", "extends: parent.yaml\ndescription: child\n")
    errors = check_file(child)
    assert [(e.file, e.line) for e in errors] == [(str(parent), 4)]


def test_extends_by_relative_path_is_relative_to_the_child(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    write_profile(tmp_path / "profiles", "base", "extends: local\ndescription: from base\n")
    child = write_profile(tmp_path / "profiles" / "team", "child",
                          "extends: ../base.yaml\n")
    monkeypatch.chdir(tmp_path)  # not the child's folder
    site = load_site(str(child))
    assert site.description == "from base"
    assert site.name == "child"


# --------------------------------------------------------------- search path


def test_user_profile_from_a_directory_on_the_search_path(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    user = tmp_path / "user-sites"
    write_profile(user, "mycluster", (
        "extends: neuron\n"
        "description: my lab's copy of neuron\n"
        "partitions:\n  amd_a100nv_8: {nodes: 3}\n"
    ))
    assert "mycluster" not in available_sites()
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(user))
    assert available_sites()["mycluster"] == user / "mycluster.yaml"
    site = load_site("mycluster")
    assert site.partitions["amd_a100nv_8"].nodes == 3
    res = cli(capsys, "sites")
    assert res.rc == 0
    assert any(line.split()[0] == "mycluster" for line in res.out.splitlines())
    res = cli(capsys, "jobscript", "--site", "mycluster", "-N", "3", "--", "python", "t.py")
    assert res.rc == 0, res.err
    assert "#SBATCH --nodes=3" in res.out


def test_user_profile_in_the_xdg_config_folder(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config"
    write_profile(config / "hpcprov" / "sites", "xdgsite", "extends: local\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    assert load_site("xdgsite").name == "xdgsite"


def test_user_profile_from_a_file_path(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = write_profile(tmp_path, "byfile", "extends: taurus\ndescription: by path\n")
    assert load_site(str(path)).description == "by path"
    res = cli(capsys, "site", "show", str(path), "--json")
    assert res.rc == 0, res.err
    data = json.loads(res.out)
    assert data["name"] == "byfile" and data["description"] == "by path"
    assert validate(data) == load_site(str(path))


def test_user_profile_named_like_a_bundled_one_may_extend_it(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    user = tmp_path / "user-sites"
    write_profile(user, "neuron", (
        "extends: neuron\n"
        "paths:\n  scratch: /scratch2/$USER\n"
    ))
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(user))
    assert available_sites()["neuron"] == user / "neuron.yaml"  # the user's copy wins
    site = load_site("neuron")
    assert site.paths.scratch == "/scratch2/$USER"
    # everything else comes from the bundled profile
    bundled = validate(yaml.safe_load(
        (bundled_site_dir() / "neuron.yaml").read_text(encoding="utf-8")))
    assert site.partitions == bundled.partitions
    assert site.launchers == bundled.launchers


def test_a_bundled_child_follows_a_user_override_of_its_parent(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    user = tmp_path / "user-sites"
    write_profile(user, "sockeye", "extends: sockeye\ndescription: patched sockeye\n")
    monkeypatch.setenv("HPCPROV_SITES_PATH", str(user))
    assert load_site("sockeye-slurm").scheduler == Scheduler.slurm
    assert load_site("sockeye").description == "patched sockeye"


# ------------------------------------------------------------------- schema


def test_site_schema_is_json_with_partitions(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "site", "schema")
    assert res.rc == 0
    schema = json.loads(res.out)
    assert "partitions" in schema["properties"]
    assert schema == json_schema()


def test_a_section_of_another_scheduler_is_refused_at_its_line(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "mixed", "extends: testbed\npbs:\n  shell: /bin/sh\n")
    errors = check_file(path)
    assert [(e.file, e.line) for e in errors] == [(str(path), 2)]
    assert "scheduler is slurm, so a pbs: section configures nothing" in errors[0].problem


def test_a_profile_changing_scheduler_does_not_inherit_the_old_section(tmp_path: Path) -> None:
    from hpcprov.site.profiles import validate_file

    path = write_profile(tmp_path, "moved", "extends: sockeye\nscheduler: slurm\n"
                         "launchers:\n  srun: {kind: srun}\ndefault_launcher: srun\n")
    site = validate_file(path)
    assert site.pbs is None and site.slurm is not None
    assert load_site("sockeye").pbs is not None and load_site("sockeye").slurm is None

"""Issue 45, defect 5 and deliverable 8: Horovod over MPI through srun, where a site starts
its MPI programs with `srun --mpi=...` and forbids mpirun (the run itself:
tests/testbed/test_testbed_validate.py, on the testbed's real Slurm and Open MPI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hpcprov_tests import cli, write_profile

from hpcprov.jobs import roles
from hpcprov.site.profiles import load_site

SRUN_ONLY = ("extends: testbed\nname: {name}\nlaunchers:\n  mpirun: null\n  horovodrun: null\n"
             "  srun: {{kind: srun, mpi: {mpi}, rendezvous_env: true}}\n")


def _planned(capsys: pytest.CaptureFixture[str], path: Path, tmp_path: Path
             ) -> dict[str, Any]:
    res = cli(capsys, "validate", "--site", str(path), "--dry-run", "--json", "-N", "2",
              "--checks", "allreduce", "--env", str(tmp_path / "env"), "--workdir",
              str(tmp_path / "run"))
    assert res.rc == 0, res.err
    data: dict[str, Any] = json.loads(res.out)
    return data


@pytest.mark.parametrize("mpi", ["pmix", "pmi2"])
def test_an_srun_naming_the_mpis_plugin_runs_horovods_mpi_check(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, mpi: str) -> None:
    path = write_profile(tmp_path, "srunonly", SRUN_ONLY.format(name="srunonly", mpi=mpi))
    data = _planned(capsys, path, tmp_path)
    scripts = {Path(s["path"]).name: s["text"] for s in data["scripts"]}
    assert f"srun --mpi={mpi} " in scripts["allreduce-horovod-mpi.sh"]
    assert not [s for s in data["skipped"] if s["name"] == "allreduce-horovod-mpi"]


def test_an_srun_without_the_plugin_is_named_in_the_skipped_rows_fix(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Without `mpi:` srun starts the ranks with the site's default plugin, which may not be
    the MPI's: the row says to name it on this launcher, not to add the forbidden mpirun
    first, and names no launcher kind of another scheduler (flux)."""
    path = write_profile(tmp_path, "noplugin", SRUN_ONLY.format(name="noplugin", mpi="null"))
    data = _planned(capsys, path, tmp_path)
    (row,) = [s for s in data["skipped"] if s["name"] == "allreduce-horovod-mpi"]
    assert "launchers.srun.mpi" in row["detail"] and "flux" not in row["detail"]


def test_mpirun_stays_horovods_mpi_launcher_where_the_site_has_one() -> None:
    """The testbed's default launcher is an srun naming pmix; Horovod's MPI check keeps to
    its mpirun, as before (srun only where no MPI launcher has the role, or named with
    --launchers)."""
    site = load_site("testbed")
    assert roles.horovod_launchers(site)["horovod-mpi"] == "mpirun"
    assert roles.horovod_role(site, "srun") == "horovod-mpi"


@pytest.mark.parametrize(("scheduler", "absent", "present"), [
    ("pbs", ("srun", "flux"), ("mpirun", "torchrun")),
    ("slurm", ("flux",), ("srun", "mpirun")),
])
def test_the_fix_for_no_torch_launcher_names_only_kinds_the_scheduler_runs(
        tmp_path: Path, scheduler: str, absent: tuple[str, ...], present: tuple[str, ...]
        ) -> None:
    """Issue 45, defect 20: the fix of a site with no torch launcher listed srun and flux on
    a PBS site, where neither can start anything."""
    path = write_profile(tmp_path, "hvd", f"name: hvd\nscheduler: {scheduler}\npartitions:\n"
                         "  gpu: {nodes: 4, cores_per_node: 32, gpus: {count: 4}, "
                         "default: true}\nhorovod: {source: none}\nlaunchers:\n"
                         "  hvd: {kind: horovodrun, controller: gloo}\n"
                         "default_launcher: hvd\n")
    why = roles.no_torch_launcher(load_site(str(path)))
    kinds = why.rsplit("add a launcher of kind ", 1)[1].removesuffix(" to the profile").split(", ")
    assert not set(absent) & set(kinds) and set(present) <= set(kinds), why

"""Defects the type checker found (issue 35), each fixed with a test that fails without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprov_tests import cli, write_profile


def test_the_guide_names_the_runtime_an_unset_one_means(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A profile with images and no containers.runtime: setup and the jobs use singularity,
    and the guide said "Runtime: None."."""
    ref = str(write_profile(tmp_path, "img", "extends: testbed\nname: img\ncontainers:\n"
                            "  images: {pytorch: /images/pytorch.sif}\n"))
    res = cli(capsys, "guide", "--site", ref)
    assert res.rc == 0, res.err
    assert "Runtime: singularity." in res.out and "Runtime: None" not in res.out


def test_launcher_key_errors_come_in_one_order_whatever_the_hash_seed(tmp_path: Path) -> None:
    """Two keys a launcher's kind does not read: the order of the errors (and so the one
    jobscript shows first) followed the hash seed of the process."""
    path = write_profile(tmp_path, "k", "extends: local\nname: k\nlaunchers:\n"
                         "  x: {kind: srun, oversubscribe: true, flavor: pals, hosts: hostfile}\n")
    probe = ("import sys; from pathlib import Path; from hpcprov.site.profiles import "
             "check_file; print([e.problem for e in check_file(Path(sys.argv[1]))])")
    seen = {subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True,
                           text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
            for seed in range(6)}
    assert len(seen) == 1, seen

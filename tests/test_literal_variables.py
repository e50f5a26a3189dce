"""A value computed on each rank (``--master_addr=$MASTER_ADDR``) cannot be a launcher's
argument: hpcprov quotes every launcher word, so the launcher would get it as written, and
the launcher runs once, not per rank. ``site check`` refuses such an argument at its line
and says to put it in ``wrapper``, whose $NAME and ${NAME} each rank replaces through the
rank shim's rule (test_rank_contract: its own value, nothing executed); a job command
naming a variable gets a warning."""

from __future__ import annotations

from pathlib import Path

import pytest
from hpcprov_tests import assert_one_line_error, cli, write_profile

from hpcprov.jobs.lint import lint
from hpcprov.request.job import JobRequest
from hpcprov.site.profiles import load_site


@pytest.mark.parametrize("word", ["--master_addr=$MASTER_ADDR", "${LOCAL_RANK}",
                                  "--x=$(touch pwned)$RANK"])
def test_a_launcher_argument_naming_a_variable_is_refused_at_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, word: str) -> None:
    path = write_profile(tmp_path, "args", (
        "extends: sockeye\nname: args\nlaunchers:\n  mpirun:\n    kind: mpirun\n"
        f"    args:\n      - --tag-output\n      - '{word}'\n"))
    line = assert_one_line_error(cli(capsys, "site", "check", str(path)), 2,
                                 f"{path}:8:", "launchers.mpirun.args", "wrapper")
    assert word in line
    assert not (tmp_path / "pwned").exists()


def test_the_same_value_in_wrapper_passes(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    path = write_profile(tmp_path, "wrap", (
        "extends: sockeye\nname: wrap\nlaunchers:\n  mpirun:\n    kind: mpirun\n"
        "    args: [--tag-output]\n    wrapper: [env, 'ADDR=$MASTER_ADDR']\n"))
    res = cli(capsys, "site", "check", str(path))
    assert res.rc == 0 and "literal" not in res.err, res


def test_a_command_naming_a_variable_is_warned() -> None:
    site = load_site("sockeye")
    req = JobRequest(site=site, nodes=2, command=("python", "x.py", "--a=${MASTER_ADDR}"),
                     options={"account": "a"})
    (found,) = [f for f in lint(req) if f.code == "literal-variable"]
    assert found.level == "warning" and "${MASTER_ADDR}" in found.message
    plain = JobRequest(site=site, nodes=2, command=("python", "x.py", "--a=$5"),
                       options={"account": "a"})
    assert "literal-variable" not in {f.code for f in lint(plain)}

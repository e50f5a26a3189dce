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
    req = JobRequest(site=site, nodes=2, command=("python", "x.py", "--a=${SCRATCH}"),
                     options={"account": "a"})
    (found,) = [f for f in lint(req) if f.code == "literal-variable"]
    assert found.level == "warning" and "${SCRATCH}" in found.message
    plain = JobRequest(site=site, nodes=2, command=("python", "x.py", "--a=$5"),
                       options={"account": "a"})
    assert "literal-variable" not in {f.code for f in lint(plain)}


# Issue 45, defect 19: sites' guides pass the rank contract on the command line.
GUIDE_COMMAND = ("python", "train.py", "--master_addr=$MASTER_ADDR", "--node_rank=${NODE_RANK}")


@pytest.mark.parametrize("launcher", ["mpirun", "srun"])
def test_the_contracts_names_in_a_command_are_not_warned_where_each_rank_replaces_them(
        launcher: str) -> None:
    """The rank contract replaces $MASTER_ADDR and ${NODE_RANK} in the command on each rank
    (test_the_rank_contract_replaces_its_own_names_in_the_command): no warning, and no
    wrapper needed. A command run by a shell (bash -c), which expands them itself on each
    rank, is not warned either; any other name still is."""
    site = load_site("sockeye" if launcher == "mpirun" else "neuron")
    opts = {"account": "a"} if launcher == "mpirun" else {"comment": "python"}
    codes = {f.code for f in lint(JobRequest(site=site, nodes=2, command=GUIDE_COMMAND,
                                             options=opts, launcher=launcher))}
    assert "literal-variable" not in codes
    shell = ("bash", "-c", "python train.py --dir=$SCRATCH --node_rank=$NODE_RANK")
    assert "literal-variable" not in {f.code for f in lint(JobRequest(
        site=site, nodes=2, command=shell, options=opts, launcher=launcher))}
    other = ("python", "train.py", "--node_rank=$NODE_RANK", "--dir=$SCRATCH")
    (found,) = [f for f in lint(JobRequest(site=site, nodes=2, command=other, options=opts,
                                           launcher=launcher)) if f.code == "literal-variable"]
    assert "$SCRATCH" in found.message and "NODE_RANK" in found.message  # names the rule


def test_torchrun_which_runs_no_rank_shell_still_warns_the_contracts_names() -> None:
    """torchrun gives its ranks the variables but runs the program itself: a name in the
    command reaches it as written, and the warning says to read it from the environment."""
    site = load_site("cc")
    (found,) = [f for f in lint(JobRequest(site=site, nodes=2, command=GUIDE_COMMAND,
                                           launcher="torchrun", options={"account": "def-a"}))
                if f.code == "literal-variable"]
    assert "os.environ" in found.fix


def test_the_rank_contract_replaces_its_own_names_in_the_command(tmp_path: Path) -> None:
    """Each rank runs the command with the contract's $NAME and ${NAME} replaced by its own
    values (rank 1 of 2 on the second node here, started by srun), every other $NAME, a lone
    '$' and a command substitution left as written: nothing in the command is evaluated."""
    import os
    import subprocess

    from hpcprov.jobs.launchers.common import rank_shim_line

    script = tmp_path / "rank.sh"
    script.write_text(rank_shim_line("srun") + "\n" + 'bash -c "$hpcprov_rank" hpcprov-rank '
                      "2 1 node-a 29511 -- printf '<%s>\\n' \"$@\"\n")
    words = ["--master_addr=$MASTER_ADDR", "--node_rank=${NODE_RANK}", "${RANK}/$WORLD_SIZE",
             "$HOME", "$(touch pwned)$LOCAL_RANK", "cost$", "${MASTER_PORT}x"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    env.update(SLURM_PROCID="1", SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_NODEID="1")
    out = subprocess.run(["bash", str(script), *words], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["<--master_addr=node-a>", "<--node_rank=1>", "<1/2>",
                                "<$HOME>", "<$(touch pwned)0>", "<cost$>", "<29511x>"]
    assert not (tmp_path / "pwned").exists()

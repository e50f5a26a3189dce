"""`hpcprov site draft` as a command, against stub Slurm commands and a stub `module`
answering recorded text: the draft passes `site check` and gives a job script; a hung
command is named within the timeout; `--diff` finds what maintenance changed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from hpcprov_tests import assert_one_line_error, cli_subprocess, recorded, unshimmed

DATA = Path(__file__).parent / "data" / "draft"




STUB = """#!/bin/bash
# answers from files in $STUB_DIR, named after the arguments; $STUB_HANG hangs the command
[ "${STUB_HANG-}" = "${0##*/} $*" ] && exec sleep 30
f="$STUB_DIR/${0##*/} $*"
[ -f "$f" ] || { echo "${0##*/}: error: $* unknown to the stub" >&2; exit 1; }
cat "$f"
"""

FILES = {
    "scontrol show partition -o": "slurm-show-partition.txt",
    "scontrol show node -o": "slurm-show-node.txt",
    "scontrol show config": "slurm-show-config.txt",
    "sinfo -h -o %P|%a|%D|%t": "slurm-sinfo.txt",
    "sacctmgr -n -P show qos format=Name,MaxWall,MaxJobsPU,MaxTRESPU":
        "slurm-sacctmgr-qos.txt",
    "srun --mpi=list": "slurm-mpi-list.txt",
}


@pytest.fixture
def cluster(tmp_path: Path) -> dict[str, str]:
    """The environment of a login node whose Slurm and Lmod answer recorded text."""
    bindir, answers = tmp_path / "bin", tmp_path / "answers"
    bindir.mkdir()
    answers.mkdir()
    for tool in ("scontrol", "sinfo", "sacctmgr", "srun"):
        (bindir / tool).write_text(STUB)
        (bindir / tool).chmod(0o755)
    for command, name in FILES.items():
        (answers / command).write_text(recorded(name))
    (answers / "scontrol --version").write_text("slurm 22.05.8\n")
    (answers / "avail").write_text(recorded("lmod-avail.txt"))
    return {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
            "STUB_DIR": str(answers), "LMOD_VERSION": "8.7.20",
            # `module` as Lmod exports it to child shells; it prints the listing on stderr
            "BASH_FUNC_module%%": '() {  if [ "$*" = "-t avail" ]; then '
                                  'cat "$STUB_DIR/avail" >&2; fi; }'}


def test_the_draft_passes_check_and_gives_a_job_script(cluster: dict[str, str],
                                                      tmp_path: Path) -> None:
    out = tmp_path / "x.yaml"
    res = cli_subprocess("site", "draft", "-o", str(out), env=cluster, cwd=tmp_path)
    assert res.rc == 0, res.err
    assert "answer its QUESTION lines" in res.err
    assert cli_subprocess("site", "check", str(out)).rc == 0
    data = yaml.safe_load(out.read_text())
    assert data["modules"]["runtime"]["load"] == [
        "gcc/10.2.0", "cuda/11.4", "cudampi/openmpi-4.1.1", "nccl/2.8.4-cuda11.4",
        "python/3.9.5"]
    assert "scontrol show node -o  [" in out.read_text()  # the commands it ran, timed
    job = cli_subprocess("jobscript", "--site", str(out), "-N", "2", "--", "python", "x.py",
                         cwd=tmp_path)
    assert job.rc == 0, job.err
    assert "#SBATCH --partition=amd_a100nv_8" in job.out
    assert "#SBATCH --gres=gpu:a100:8" in job.out
    assert "srun --mpi=pmix python x.py" in [unshimmed(line) for line in job.out.splitlines()]
    again = cli_subprocess("site", "draft", "-o", str(out), env=cluster)
    assert_one_line_error(again, 2, "exists; pass --force")


def test_a_hung_scheduler_command_is_named_within_the_timeout(cluster: dict[str, str]) -> None:
    cluster["STUB_HANG"] = "scontrol show partition -o"
    start = time.monotonic()
    res = cli_subprocess("site", "draft", "--timeout", "1", env=cluster)
    took = time.monotonic() - start
    assert_one_line_error(res, 2, "scontrol show partition -o did not answer within 1 s")
    assert took < 15


def test_a_hung_module_avail_is_named_and_the_draft_goes_on(cluster: dict[str, str],
                                                            tmp_path: Path) -> None:
    cluster["BASH_FUNC_module%%"] = "() {  sleep 5; }"
    cluster["STUB_HANG"] = "sacctmgr -n -P show qos format=Name,MaxWall,MaxJobsPU,MaxTRESPU"
    out = tmp_path / "x.yaml"
    start = time.monotonic()
    res = cli_subprocess("site", "draft", "--timeout", "1", "-o", str(out), env=cluster)
    assert res.rc == 0, res.err
    assert time.monotonic() - start < 20
    assert "hpcprov: warning: module -t avail did not answer within 1 s" in res.err
    assert "hpcprov: warning: sacctmgr -n -P show qos" in res.err
    text = out.read_text()
    assert "#   module -t avail  [" in text and "did not answer within 1 s" in text
    assert cli_subprocess("site", "check", str(out)).rc == 0
    assert "max_gpus_per_user" not in text  # the QOS limits were not learned


def test_diff_finds_what_maintenance_changed(cluster: dict[str, str], tmp_path: Path) -> None:
    before = tmp_path / "before.yaml"
    assert cli_subprocess("site", "draft", "-o", str(before), env=cluster).rc == 0
    same = cli_subprocess("site", "draft", "--diff", str(before), env=cluster)
    assert same.rc == 0 and "matches what the cluster says" in same.out, same.out + same.err
    answers = Path(cluster["STUB_DIR"])
    # maintenance: cas_v100_4 removed, its nodes now carry H100s in a new partition;
    # CUDA 11.4 and its NCCL retired
    parts = (answers / "scontrol show partition -o").read_text().replace(
        "PartitionName=cas_v100_4", "PartitionName=eme_h100_4")
    (answers / "scontrol show partition -o").write_text(parts)
    nodes = (answers / "scontrol show node -o").read_text().replace("gpu:v100:4", "gpu:h100:4")
    (answers / "scontrol show node -o").write_text(nodes.replace("cas_v100_4", "eme_h100_4"))
    avail = (answers / "avail").read_text().replace("cuda/11.4(default)\n", "").replace(
        "nccl/2.8.4-cuda11.4\n", "")
    (answers / "avail").write_text(avail)
    res = cli_subprocess("site", "draft", "--diff", str(before), "--json", env=cluster)
    assert res.rc == 1, res.err
    diffs = json.loads(res.out)["differences"]
    assert sorted((d["path"], d["profile"]) for d in diffs) == [
        ("modules.build.load, modules.runtime.load", "cuda/11.4"),
        ("modules.build.load, modules.runtime.load", "nccl/2.8.4-cuda11.4"),
        ("partitions.cas_v100_4", "it exists"),
        ("partitions.eme_h100_4", "nothing (no such partition)")]
    new = next(d for d in diffs if d["path"] == "partitions.eme_h100_4")
    assert new["cluster"] == "2 nodes of 40 cores, 4 GPUs (h100)"
    text = cli_subprocess("site", "draft", "--diff", str(before), env=cluster)
    assert text.rc == 1
    assert "partitions.cas_v100_4: the profile says it exists" in text.out
    assert "the profile says cuda/11.4, the cluster offers cuda/10.1, cuda/12.1" in text.out
    assert "the profile says nccl/2.8.4-cuda11.4, the cluster offers nccl/2.18.1-cuda12.1" \
        in text.out


def test_diff_of_a_bundled_profile_uses_its_scheduler(cluster: dict[str, str]) -> None:
    res = cli_subprocess("site", "draft", "--diff", "neuron", env=cluster)
    assert res.rc == 1
    assert "partitions.amd_a100nv_8.nodes: the profile says 14, the cluster 2" in res.out
    assert "partitions.all: the profile says nothing (no such partition)" in res.out


def test_no_scheduler_on_path_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}
    res = cli_subprocess("site", "draft", env=env)
    assert_one_line_error(res, 2, "no scheduler commands on PATH")


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    assert_one_line_error(cli_subprocess("site", "draft", "--json"), 2,
                          "--json goes with --diff")
    assert_one_line_error(cli_subprocess("site", "draft", "--diff", "neuron", "-o",
                                         str(tmp_path / "x.yaml")), 2, "drop --output")


def test_another_schedulers_commands_on_path_are_said_with_the_flag_that_drafts_them(
        cluster: dict[str, str], tmp_path: Path) -> None:
    """Slurm and Grid Engine both on PATH: the draft is of the first in hpcprov's order, and
    says so on stderr and in its header, naming --scheduler for the other; slurm-wlm-torque's
    pbsnodes beside Slurm is Slurm's own wrapper and is not named; --scheduler says nothing."""
    bindir = Path(cluster["PATH"].split(os.pathsep)[0])
    for tool in ("qconf", "pbsnodes"):
        (bindir / tool).write_text(STUB)
        (bindir / tool).chmod(0o755)
    out = tmp_path / "x.yaml"
    res = cli_subprocess("site", "draft", "-o", str(out), env=cluster, cwd=tmp_path)
    assert res.rc == 0, res.err
    said = ("Grid Engine (qconf) also on PATH: this draft is of Slurm, the first found in "
            "hpcprov's order; --scheduler gridengine drafts that one")
    assert f"hpcprov: warning: {said}" in res.err.splitlines()
    assert "pbsnodes" not in res.err
    assert f"# {said}." in out.read_text().splitlines()
    assert cli_subprocess("site", "check", str(out)).rc == 0
    chosen = cli_subprocess("site", "draft", "--scheduler", "slurm", env=cluster, cwd=tmp_path)
    assert chosen.rc == 0 and "also on PATH" not in chosen.err + chosen.out

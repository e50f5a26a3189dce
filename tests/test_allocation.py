"""One allocation per validation run (hpcprov/schedulers/allocation.py): the pilot script and
the executor that runs jobs as its steps, for real, with local processes as the scheduler
(the real Slurm side is in tests/testbed/test_testbed_validate.py)."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hpcprov_tests import process_gone

from hpcprov.core.shell import quote
from hpcprov.schedulers.allocation import OneAllocation, pilot_lines
from hpcprov.schedulers.base import Placement, Steps
from hpcprov.schedulers.local import LocalExecutor
from hpcprov.site.profiles import load_site


class TwoNodes(Steps):
    """Steps of an 'allocation' that has two named nodes, which see theirs in STEP_NODES (as
    Slurm's see SLURM_JOB_NODELIST)."""

    def nodes(self) -> str:
        return "printf 'n1\\nn2\\n'"

    def env(self, place: Placement, hostfile: Path) -> tuple[dict[str, str], str | None]:
        env = {"STEP_NODES": ",".join(place.nodes), "STEP_TASKS": str(place.tasks_per_node)}
        if place.starts_tasks:
            env["STEP_HOSTFILE"] = str(hostfile)
            return env, "".join(f"{n}\n" for n in place.nodes)
        return env, None


def job(tmp_path: Path, name: str, body: str) -> tuple[Path, Path, Path]:
    """A job script that records its status as hpcprov's job scripts do (EXIT trap)."""
    script, out, status = (tmp_path / f"{name}.sh", tmp_path / f"{name}.out",
                           tmp_path / f"{name}.exit")
    record = "printf '%s 0 0\\n' \"$?\" > " + quote(str(status))
    script.write_text(f"trap {quote(record)} EXIT\n{body}\n")
    return script, out, status


class TwoNodeExecutor(LocalExecutor):
    """Local processes as the scheduler's jobs, run as steps of TwoNodes' allocation."""

    steps = TwoNodes()


def executor(tmp_path: Path, idle_s: int = 300) -> OneAllocation:
    def script(queue: Path) -> str:
        return "\n".join(["#!/bin/bash", *pilot_lines(str(queue), TwoNodes().nodes(),
                                                      idle_s)]) + "\n"

    return OneAllocation(TwoNodeExecutor(), tmp_path / "alloc", script)


def test_jobs_run_as_steps_of_one_allocation_on_their_nodes(tmp_path: Path) -> None:
    ex = executor(tmp_path)
    a = ex.submit(*job(tmp_path, "a", 'echo "a on $STEP_NODES x$STEP_TASKS"'),
                  Placement(2, 1))
    ex.wait([a], 60)
    b = ex.submit(*job(tmp_path, "b", 'echo "b on $STEP_NODES"; exit 3'), Placement(1, 2))
    c = ex.submit(*job(tmp_path, "c", 'echo "c on $STEP_NODES"; cat "$STEP_HOSTFILE"'),
                  Placement(1, 1, ("n2",), starts_tasks=True))
    ex.wait([b, c], 60)
    assert (a.state, a.exit_code, a.nodes) == ("COMPLETED", 0, "n[1-2]")
    assert (b.state, b.exit_code) == ("FAILED", 3)
    assert (tmp_path / "a.out").read_text() == "a on n1,n2 x1\n"
    assert (tmp_path / "b.out").read_text() == "b on n1\n"            # the first node
    assert (tmp_path / "c.out").read_text() == "c on n2\nn2\n"        # pinned, host file
    ex.close()
    (alloc,) = ex.allocations
    assert alloc.done and alloc.exit_code == 0                        # END: it finished
    started = [e for e in ex.events if e["event"] == "started"]       # the local 'submit'
    assert len(started) == 1 and started[0]["job"] == alloc.job_id
    assert {a.job_id, b.job_id, c.job_id} == {f"{alloc.job_id}.{i}" for i in (1, 2, 3)}


def test_only_an_executor_whose_jobs_run_as_steps_holds_one_allocation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="local jobs cannot run other jobs as steps"):
        OneAllocation(LocalExecutor(), tmp_path / "alloc", lambda queue: "")


def test_a_step_past_its_time_is_stopped_with_its_processes(tmp_path: Path) -> None:
    ex = executor(tmp_path)
    pidfile = tmp_path / "child.pid"
    h = ex.submit(*job(tmp_path, "hang", f"sleep 300 & echo $! > {quote(str(pidfile))}; wait"),
                  Placement(1, 1))
    ex.wait([h], 2)
    assert h.state == "TIMEOUT" and "not finished after 2 s" in h.reason
    child = int(pidfile.read_text())
    # gone or a zombie (read without racing its exit: the shared helper polls safely)
    assert process_gone(child, within_s=30)
    ex.close()
    assert ex.allocations[0].done


def test_a_step_that_needs_nodes_the_allocation_lacks_is_not_started(tmp_path: Path) -> None:
    ex = executor(tmp_path)
    far = ex.submit(*job(tmp_path, "far", "echo never"), Placement(1, 1, ("n9",)))
    big = ex.submit(*job(tmp_path, "big", "echo never"), Placement(3, 1))
    ex.wait([far, big], 60)
    assert far.state == big.state == "NOT_IN_ALLOCATION"
    assert "needs n9, the allocation has n1, n2" in far.reason
    assert "needs 3 node(s)" in big.reason
    assert not (tmp_path / "far.out").exists()
    ex.close()


def test_when_the_allocation_dies_its_steps_end_with_it_and_a_new_one_is_made(
        tmp_path: Path) -> None:
    ex = executor(tmp_path)
    h = ex.submit(*job(tmp_path, "long", "sleep 300"), Placement(1, 1))
    end = time.monotonic() + 30
    while h.started is None and time.monotonic() < end:              # until it runs
        ex.refresh([h])
        time.sleep(0.05)
    first = ex.allocations[0]
    assert first.proc is not None
    os.killpg(first.proc.pid, 9)                                      # the allocation ends
    ex.wait([h], 30)
    assert h.state == "FAILED" and f"allocation {first.job_id} ended" in h.reason
    again = ex.submit(*job(tmp_path, "again", "echo fine"), Placement(1, 1))
    ex.wait([again], 60)
    assert again.state == "COMPLETED" and len(ex.allocations) == 2
    ex.close()


def test_a_pilot_left_alone_ends_by_itself(tmp_path: Path) -> None:
    """Its harness gone (no END ever comes), the allocation gives its nodes back."""
    queue = tmp_path / "q"
    queue.mkdir()
    script = tmp_path / "pilot.sh"
    script.write_text("\n".join(pilot_lines(str(queue), "echo n1", idle_s=1)) + "\n")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "no step for 1 s: ending the allocation" in proc.stdout
    assert (queue / "nodes").read_text() == "n1\n"


@pytest.mark.parametrize("hostile", ["a b", "$(touch x)", "it's"])
def test_the_pilot_quotes_its_queue_folder(tmp_path: Path, hostile: str) -> None:
    queue = tmp_path / hostile
    queue.mkdir()
    (queue / "END").write_text("")
    script = tmp_path / "pilot.sh"
    script.write_text("\n".join(pilot_lines(str(queue), "echo n1")) + "\n")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (queue / "nodes").read_text() == "n1\n" and not (tmp_path / "x").exists()


# ---- planning: the allocation's script and request, the options ---------------------------

def test_the_allocation_script_holds_the_runs_nodes_and_runs_the_pilot(tmp_path: Path) -> None:
    from hpcprov.request.job import JobRequest
    from hpcprov.validate.plan import Options, allocation_script, placement, plan_jobs

    run = JobRequest(load_site("testbed"), partition="amd_a100nv_8", nodes=2, prefix="/p")
    o = Options(run, ("env", "allreduce", "train"), device="cpu")
    text = allocation_script(o, tmp_path / "q")
    assert "#SBATCH --nodes=2" in text and "#SBATCH --partition=amd_a100nv_8" in text
    assert "#SBATCH --job-name=hpcprov-validate" in text
    assert ('\nhpcprov_allocation_nodes() {\n  scontrol show hostnames "$SLURM_JOB_NODELIST"\n}\n'
            in text)
    assert 'hpcprov_allocation_nodes > "$q/nodes.part"' in text
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # the pernode check pins the whole partition's nodes to the one allocation
    every = Options(run, ("pernode",), device="cpu", node_names=("gpu01", "gpu02", "gpu03"))
    text = allocation_script(every, tmp_path / "q")
    assert "#SBATCH --nodes=3" in text and "#SBATCH --nodelist=gpu01,gpu02,gpu03" in text
    assert "#SBATCH --ntasks-per-node=2" in text
    places = {j.id: placement(j, o) for j in plan_jobs(o)}
    assert places["train-torch-ddp-1node"] == Placement(1, 1, (), starts_tasks=True)
    assert places["allreduce-horovod-gloo"] == Placement(2, 1, (), starts_tasks=False)
    pinned = {j.id: placement(j, every) for j in plan_jobs(every)}
    assert pinned["pernode-gpu02"].nodes == ("gpu02",)


def test_slurm_steps_see_only_their_nodes_and_srun_gets_a_host_file(tmp_path: Path) -> None:
    from hpcprov.schedulers.slurm import BACKEND

    steps = BACKEND.executor().steps
    assert steps is not None
    env, hosts = steps.env(Placement(2, 2, ("gpu01", "gpu03"), starts_tasks=True),
                           tmp_path / "h")
    assert env["SLURM_JOB_NODELIST"] == "gpu[01,03]" and env["SLURM_NNODES"] == "2"
    assert env["SLURM_NTASKS"] == "4" and env["SLURM_TASKS_PER_NODE"] == "2(x2)"
    assert env["SLURM_HOSTFILE"] == str(tmp_path / "h")
    assert env["SLURM_DISTRIBUTION"] == "arbitrary"
    assert hosts == "gpu01\ngpu01\ngpu03\ngpu03\n"
    env, hosts = steps.env(Placement(1, 1, ("gpu02",)), tmp_path / "h")
    assert hosts is None and "SLURM_HOSTFILE" not in env


def test_one_allocation_is_slurms_default_and_refused_where_steps_cannot_run(
        tmp_path: Path) -> None:
    from hpcprov.core.errors import UsageError
    from hpcprov.jobs.layout import manifest_file
    from hpcprov.validate.api import QUICK, ValidateOptions, prepare

    manifest_file(tmp_path / "env").parent.mkdir(parents=True)
    manifest_file(tmp_path / "env").write_text("{}")        # a provisioned prefix

    def prepared(site: str, **kw: object):
        return prepare(ValidateOptions(site=site, nodes=1, prefix=str(tmp_path / "env"),
                                       workdir=str(tmp_path / "run"), **kw))

    with pytest.raises(UsageError, match="--allocation one: PBS"):
        prepared("sockeye", allocation="one")
    with pytest.raises(UsageError, match="choose from one, per-job"):
        prepared("testbed", allocation="all")
    # quick: its sizes where the options are left at their defaults; explicit ones win
    fast = prepared("testbed", quick=True, iters=7)
    assert fast.options.max_bytes == QUICK["max_bytes"] and fast.options.iters == 7
    assert fast.options.train_steps == QUICK["steps"]
    # ... and no 1-node training baselines: the smoke run does not measure scaling
    from hpcprov.validate.plan import Options, plan_jobs

    def trains(opts: Options) -> list[str]:
        two = replace(opts, job=replace(opts.job, nodes=2), checks=("train",))
        return [j.id for j in plan_jobs(two)]

    full = prepared("testbed")
    assert any(j.endswith("-1node") for j in trains(full.options))
    assert trains(fast.options) == [j for j in trains(full.options)
                                    if not j.endswith("-1node")] != []

"""The benchmark framework's bookkeeping (no measurement here: benchmarks are not tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprov_tests import unshimmed

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import benchmarks as bench  # noqa: E402
from benchmarks import bench_reframe as bench_reframe_module  # noqa: E402


def _section(name: str, results: list[bench.Result], date: str) -> dict[str, object]:
    machine = {"cpu": "Test CPU", "cores": 2, "usable_cores": 2, "memory_gib": 4.0,
               "kernel": "Linux 6", "python": "CPython 3.11", "load": [0.1, 0.2, 0.3]}
    return {"name": name, "title": name.title(), "method": f"How {name} is measured.",
            "notes": [], "run": {"date": date, "commit": "abc1234", "machine": machine,
                                 "repeat": 3, "quick": False},
            "results": [r.to_json() for r in results]}


def test_targets_are_judged_on_the_median_or_the_worst_case() -> None:
    assert bench.Result("a", "s", [0.1, 0.3, 0.2], target=0.25).passed is True
    assert bench.Result("a", "s", [0.1, 0.3, 0.2], target=0.25, on="max").passed is False
    assert bench.Result("a", "s", [0.1], target=None).passed is None
    assert bench.Result("a", "s", status="pending: later", target=1).passed is None
    r = bench.Result("a", "rounds", [2, 3], target=3, on="max")
    assert bench.Result.from_json(r.to_json()) == r


def test_running_some_benchmarks_keeps_the_other_sections(tmp_path: Path) -> None:
    bench.save("scale", _section("scale", [bench.Result("plan", "s", [0.01])], "2026-01-02"),
               tmp_path)
    bench.save("cli", _section("cli", [bench.Result("help", "s", [0.5], target=0.2)],
                               "2026-01-01"), tmp_path)
    bench.save("cli", _section("cli", [bench.Result("help", "s", [0.15], target=0.2)],
                               "2026-01-03"), tmp_path)
    text = bench.render(bench.load_all(tmp_path))
    assert text.index("## Cli (`cli`)") < text.index("## Scale (`scale`)")
    assert "| help | 150 ms |  | 1 | <= 200 ms | yes |" in text
    assert "| plan | 10 ms |" in text and "500 ms" not in text
    assert "Latest run: 2026-01-03" in text


def test_every_benchmark_module_declares_what_the_runner_needs() -> None:
    from benchmarks.__main__ import modules

    found = modules()
    assert {"cli", "scale"} <= set(found)
    for name, mod in found.items():
        assert name == mod.NAME and mod.TITLE and mod.METHOD and callable(mod.run)


def test_the_fidelity_job_runs_hpcprovs_measurement_and_the_bare_loop_in_one_process() -> None:
    """interleaved_allreduce.py: both loops on one process group, block by block, the order
    rotating; its BLOCK lines are what the fidelity benchmark's ratios are made of."""
    pytest.importorskip("torch")
    from benchmarks import bench_fidelity

    script = REPO / "benchmarks" / "interleaved_allreduce.py"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
         "2", str(script), "--program", str(bench_fidelity._program()), "--sizes",
         "4096,65536", "--iters", "2", "--warmup", "1", "--blocks", "3"],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()
               if line.startswith("BLOCK ")]  # rank 0 only
    assert [(r["size_bytes"], r["block"]) for r in records] == [
        (4096, 0), (4096, 1), (4096, 2), (65536, 0), (65536, 1), (65536, 2)]
    first = [next(k for k in r if k not in ("size_bytes", "block")) for r in records[:3]]
    assert first == ["HPCPROV", "BARE", "BARE2"]  # each block starts with another one
    assert all(r[k] > 0 for r in records for k in ("HPCPROV", "BARE", "BARE2"))

    per_block = bench_fidelity.ratios(proc.stdout)
    control = bench_fidelity.ratios(proc.stdout, "BARE2", "BARE")
    assert [sorted(b) for b in per_block] == [[4096, 65536]] * 3
    assert per_block[1][65536] == pytest.approx(records[4]["HPCPROV"] / records[4]["BARE"])
    assert control[2][4096] == pytest.approx(records[2]["BARE2"] / records[2]["BARE"])


def test_the_scale_benchmarks_site_is_a_validated_profile_with_the_big_partition() -> None:
    """bench_scale builds its 1,000-node partition from the neuron profile's merged data
    (what the profile wrote, not its defaults) and validates it as any profile."""
    from benchmarks import bench_scale

    site = bench_scale.big_site()
    assert site.partitions["big"].nodes == bench_scale.NODES
    assert site.partitions["big"].gpus == site.partition()[1].gpus


def _reframe_spec(prefix: str, *env: tuple[str, str]) -> bench_reframe_module.Spec:
    """The ReFrame job's spec from the bundled testbed profile, with more variables."""
    from dataclasses import replace

    from hpcprov.site.profiles import load_site

    spec = bench_reframe_module.spec_for(load_site("testbed"), prefix)
    return replace(spec, env=(*spec.env, *env))


def test_the_reframe_job_is_the_job_hpcprov_generates_for_its_allreduce_check(
        tmp_path: Path) -> None:
    """bench_reframe: the site it gives `hpcprov validate` plans the torch gloo allreduce
    alone, with the job script `--site testbed` generates; the ReFrame job's environment,
    launch and program are the lines of that script."""
    from dataclasses import replace

    from hpcprov.core.shell import join
    from hpcprov.request.job import JobRequest
    from hpcprov.site.profiles import load_site
    from hpcprov.validate.plan import Options, job_script, plan_jobs
    from hpcprov.validate.run import command_for

    b = bench_reframe_module
    prefix, rundir = "/scratch/bench/prefix", tmp_path / "run"
    quick = {"max_bytes": 4 * 1024 * 1024, "iters": 5}
    testbed = Options(JobRequest(load_site("testbed"), partition=b.PARTITION, nodes=b.NODES,
                                 prefix=prefix), ("allreduce",), device="cpu", **quick)
    bench_site = replace(testbed, job=replace(
        testbed.job, site=load_site(str(b.site_profile(tmp_path / "site")))))
    [job] = plan_jobs(bench_site)
    assert job.id == b.JOB_ID and len(plan_jobs(testbed)) > 1  # the Horovod jobs left out
    script = job_script(job, bench_site, str(rundir), command_for(job, bench_site, rundir))
    original = next(j for j in plan_jobs(testbed) if j.id == b.JOB_ID)
    assert script == job_script(original, testbed, str(rundir),
                                command_for(original, testbed, rundir))

    spec = _reframe_spec(prefix)
    lines = script.splitlines()
    assert all(cmd in lines for cmd in spec.prepare_cmds())
    assert all(f"export {k}={v}" in lines for k, v in spec.env_vars())
    assert all(cmd in lines for cmd in b.MASTER_ADDR)
    assert join(["srun", *spec.srun_options, "python", str(rundir / "allreduce.py"),
                 *b.PROGRAM_ARGS]) in [unshimmed(line) for line in lines]
    shim_line, shim_words = b.rank_contract()  # ReFrame's job starts its ranks the same way
    assert shim_line in script
    (srun,) = [line for line in lines if line.startswith("srun ")]
    assert " ".join(["bash", *shim_words]) in srun.replace(
        '"$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)"', '"$MASTER_ADDR"')
    assert all(f"#SBATCH {opt}" in lines for opt in spec.access)
    assert f"#SBATCH --cpus-per-task={spec.cpus_per_task}" in lines


def test_the_reframe_configuration_and_check_are_python_with_their_shell_values_quoted(
        tmp_path: Path) -> None:
    import ast
    import shlex

    b = bench_reframe_module
    spec = _reframe_spec("/scratch/my prefix", ("GREETING", "a b; c"))
    trap = ["t0=$(date +%s.%N)", "trap 'echo done' EXIT"]
    text = b.reframe_config(spec, tmp_path / "run dir", "slurm", trap)
    scope: dict[str, object] = {}
    exec(compile(text, "config.py", "exec"), scope)
    config = scope["site_configuration"]
    assert isinstance(config, dict)
    [system] = config["systems"]
    [part] = system["partitions"]
    assert (part["scheduler"], part["launcher"], part["prepare_cmds"]) == ("slurm", "srun", trap)
    assert part["access"] == ["--partition=amd_a100nv_8", "--comment=python"]
    [environ] = config["environments"]
    assert "source '/scratch/my prefix/venvs/horovod/bin/activate'" in environ["prepare_cmds"]
    assert ["GREETING", "'a b; c'"] in environ["env_vars"]
    assert ["MASTER_PORT", "29500"] in environ["env_vars"]
    assert config["general"][0]["report_file"] == str(tmp_path / "run dir" / "report.json")

    check = b.reframe_check(spec, tmp_path / "my programs", (*b.PROGRAM_ARGS, "--x", "a b'"))
    tree = ast.parse(check)
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    attrs = {t.id: ast.literal_eval(n.value) for n in cls.body if isinstance(n, ast.Assign)
             for t in n.targets if isinstance(t, ast.Name)}
    # ReFrame joins executable_opts with spaces: the shell must split them back
    # (after the rank contract's words: each rank starts through it, as hpcprov's do)
    assert shlex.split(" ".join(attrs["executable_opts"])) == [
        "-c", "$hpcprov_rank", "hpcprov-rank", "2", "1", "$MASTER_ADDR", "29500", "--",
        "python", "allreduce.py", *b.PROGRAM_ARGS, "--x", "a b'"]
    assert attrs["executable"] == "bash" and b.rank_contract()[0] in attrs["prerun_cmds"]
    assert attrs["sourcesdir"] == str(tmp_path / "my programs")
    assert (attrs["num_tasks"], attrs["num_tasks_per_node"], attrs["num_cpus_per_task"]) == (
        2, 1, 4)
    assert "--mpi=pmix" in check and attrs["valid_systems"] == ["testbed:amd_a100nv_8"]


def test_the_reliability_table_counts_each_case_once_by_its_rule(tmp_path: Path) -> None:
    """benchmarks/reliability.py: a JUnit report's cases land in the first matching rule's
    row; passed held, failed and xfailed were tried and did not hold, skipped was not tried;
    slow cases only collected are counted apart; what no rule names is listed, not counted."""
    from benchmarks import reliability as rel

    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_second_user" name="test_a[x]"/>'
        '<testcase classname="tests.test_second_user" name="test_a[y]">'
        '<failure message="boom">trace</failure></testcase>'
        '<testcase classname="tests.test_second_user" name="test_b">'
        '<skipped type="pytest.xfail" message="known hole"/></testcase>'
        '<testcase classname="tests.test_second_user" name="test_c">'
        '<skipped type="pytest.skip" message="needs root"/></testcase>'
        '<testcase classname="tests.test_hostile_input" name="test_fifo_given_to_site"/>'
        '<testcase classname="tests.test_hostile_input" name="test_one_match_gives_no_warning"/>'
        '</testsuite></testsuites>')
    slow = ["tests/test_provision_real.py::test_interrupt_crash_lock_and_resume",
            "tests/test_provision_real.py::test_tensorflow_and_pytorch_variant"]
    rows, uncounted = rel.tally(rel.cases_from_junit(report), slow)
    by = {r.category: r for r in rows}
    second = by[rel.SECOND]
    assert (second.tried, second.held, len(second.skipped)) == (3, 1, 1)
    assert second.skipped == ["tests/test_second_user.py::test_c: needs root"]
    assert [c.split(": ")[1] for c in second.not_held] == ["failed", "xfailed"]
    assert (by[rel.SPECIAL].tried, by[rel.SPECIAL].held) == (1, 1)
    assert by[rel.REAL].collected == 1 and by[rel.REAL].tried == 0
    assert uncounted == ["tests/test_hostile_input.py::test_one_match_gives_no_warning",
                         "tests/test_provision_real.py::test_tensorflow_and_pytorch_variant"]
    text = rel.markdown(rows, {"date": "d", "commit": "c", "command": "x", "seconds": "1"})
    assert "| **Total run** | **4** | **2** | **2** | **1** |" in text
    assert "collected only (slow" in text


def test_the_reliability_script_counts_every_rule_it_names() -> None:
    """The script runs (collecting only: cheap), and each rule still names some test."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.reliability", "--collect-only",
                           "--json"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    from benchmarks import reliability as rel

    counted = {r["category"]: r["collected_only"] for r in data["rows"]}
    assert set(counted) == set(rel.ORDER) and all(counted.values()), counted
    for rule in rel.RULES:
        assert (REPO / rule.file).is_file(), rule
    assert data["commit"] and data["command"].endswith("--collect-only")

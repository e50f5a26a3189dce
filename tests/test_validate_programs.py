"""The programs the validation suite runs inside jobs (validate/programs/), run for real.

They are run the way a job runs them, with two local ranks: torch.distributed over Gloo
through torchrun, and Horovod over Gloo through horovodrun (skipped when horovod.torch does
not import in this interpreter). The TensorFlow tests need TensorFlow and horovod.tensorflow
in this interpreter and are skipped without them.
"""

from __future__ import annotations

import ast
import functools
import importlib.resources
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hpcprov_tests import REPO

from hpcprov.validate.judge import parse_records
from hpcprov.validate.run import copy_programs

PROGRAMS = ("allreduce.py", "train.py", "envcheck.py")
RUNTIME = "runtime.py"  # beside the programs in every job: rank discovery, the records
FRAMEWORKS = {"torch", "tensorflow", "horovod", "numpy"}
LINE = re.compile(r"(HPCPROV_[A-Z]+) (\{.*\})\s*$")
# launcher variables that must not leak into the runs from the environment of the tests
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                 "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS",
                 "SLURM_LOCALID", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK")
SMALL = ("--max-bytes", "1048576", "--iters", "3", "--warmup", "1")


def source(name: str) -> str:
    return importlib.resources.files("hpcprov.validate.programs").joinpath(name).read_text()


@pytest.fixture
def programs(tmp_path: Path) -> Path:
    """The programs copied into a job directory, as the validation suite does."""
    job = tmp_path / "job"
    job.mkdir()
    copy_programs(job)
    return job


def load(name: str) -> ModuleType:
    """A program imported as a module (its functions, without running main)."""
    path = REPO / "validate" / "programs" / name
    spec = importlib.util.spec_from_file_location(f"hpcprov_program_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def job_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env["OMP_NUM_THREADS"] = "1"  # two ranks on the test machine's cores
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run:
    """A finished run: exit status, output, and the HPCPROV_* records it printed."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.rc, self.out, self.err = proc.returncode, proc.stdout, proc.stderr
        self.records: list[tuple[str, dict]] = []
        for line in self.out.splitlines():  # horovodrun prefixes "[0]<stdout>:"
            match = LINE.search(line)
            if match:
                self.records.append((match.group(1), json.loads(match.group(2))))

    def tagged(self, tag: str) -> list[dict]:
        return [record for t, record in self.records if t == tag]

    @property
    def results(self) -> list[dict]:
        return self.tagged("HPCPROV_RESULT")

    @property
    def done(self) -> dict:
        (done,) = self.tagged("HPCPROV_DONE")
        return done

    def __repr__(self) -> str:  # what a failed assertion shows
        return f"rc={self.rc}\n--- stdout\n{self.out[-4000:]}\n--- stderr\n{self.err[-4000:]}"


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> Run:
    proc = subprocess.run(argv, cwd=cwd, env=env or job_env(), capture_output=True, text=True,
                          timeout=600)
    return Run(proc)


def torchrun(job: Path, program: str, *args: str) -> Run:
    return run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node", "2", str(job / program), *args], job)


@functools.cache
def importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True


def horovodrun(job: Path, program: str, *args: str) -> Run:
    if not importable("horovod.torch"):
        pytest.skip("horovod.torch does not import in this interpreter")
    exe = Path(sys.executable).parent / "horovodrun"
    launcher = [str(exe)] if exe.exists() else [shutil.which("horovodrun") or "horovodrun"]
    return run([*launcher, "--gloo", "-np", "2", "-H", "localhost:2", *shim(2, 2, "horovod"),
                sys.executable, str(job / program), *args], job)


def shim(size: int, per_node: int, kind: str = "slurm") -> list[str]:
    """Each rank started through the rank contract, as hpcprov's launch lines start it."""
    from hpcprov.jobs.launchers import rank_shim_line
    from hpcprov.site.kinds import LauncherKind

    text = rank_shim_line(LauncherKind.horovodrun if kind == "horovod" else LauncherKind.srun)
    code = shlex.split(text.split("=", 1)[1])[0]  # the shim's text, as a job script holds it
    return ["bash", "-c", code, "hpcprov-rank", str(size), str(per_node), "127.0.0.1",
            str(free_port()), "--"]


def needs_tensorflow() -> None:
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed in this interpreter")
    if not importable("horovod.tensorflow"):
        pytest.skip("horovod.tensorflow does not import in this interpreter")


# ------------------------------------------------------------------ standalone files


@pytest.mark.parametrize("name", [*PROGRAMS, RUNTIME])
def test_programs_are_standalone_package_data(name: str) -> None:
    """Shipped in the package, and runnable without hpcprov: the standard library (and, for
    the programs, runtime.py beside them) at the top, the frameworks imported lazily inside
    functions, nothing newer than Python 3.8."""
    text = source(name)
    assert text.startswith("#!/usr/bin/env python3\n")
    tree = ast.parse(text, feature_version=(3, 8))
    compile(text, name, "exec")

    def roots(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Import):
            return {alias.name.split(".")[0] for alias in node.names}
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            return {node.module.split(".")[0]}
        return set()

    top = set().union(*(roots(node) for node in tree.body))
    everywhere = set().union(*(roots(node) for node in ast.walk(tree)))
    sibling = set() if name == RUNTIME else {"runtime"}
    assert top <= set(sys.stdlib_module_names) | sibling, top - set(sys.stdlib_module_names)
    assert everywhere <= set(sys.stdlib_module_names) | FRAMEWORKS | sibling
    assert "hpcprov" not in everywhere


def test_sizes_bandwidth_and_rank_discovery() -> None:
    allreduce = load("allreduce.py")
    assert allreduce.size_list(8, 268435456, 4)[:3] == [8, 32, 128]
    assert allreduce.size_list(8, 268435456, 4)[-2:] == [134217728, 268435456]
    assert allreduce.size_list(8, 1000, 5) == [8, 40, 200, 1000]  # max always included
    assert allreduce.size_list(64, 64, 4) == [64]
    algbw, busbw = allreduce.bandwidth(10**9, 0.5, 8)
    assert (algbw, busbw) == (2.0, 2.0 * 2 * 7 / 8)
    assert allreduce.bandwidth(4096, 1e-3, 1)[1] == 0.0  # one rank moves nothing
    runtime = load(RUNTIME)
    discover = runtime.discover_ranks
    assert discover({}) == (0, 1, 0, "single")
    # the programs read torch's contract only: a starter's own variables are the shim's
    slurm = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}
    assert discover(slurm) == (0, 1, 0, "single")
    torchrun_env = {"RANK": "7", "WORLD_SIZE": "8", "LOCAL_RANK": "3"}
    assert discover({**slurm, **torchrun_env}) == (7, 8, 3, "torchrun")
    shimmed = {**torchrun_env, "HPCPROV_RANK_SOURCE": "openmpi"}
    assert discover(shimmed) == (7, 8, 3, "openmpi")
    assert discover({"RANK": "1", "WORLD_SIZE": ""}) == (0, 1, 0, "single")  # both, or none
    train = load("train.py")
    assert train.in_sync(0.0, 5.0) and train.in_sync(5.9e-6, 5.0)
    assert not train.in_sync(6.1e-6, 5.0)


def test_the_programs_share_one_runtime_and_define_no_protocol_of_their_own() -> None:
    for name in PROGRAMS:
        module = load(name)
        assert module.emit.__module__ == "runtime"
        assert Path(sys.modules["runtime"].__file__) == REPO / "validate" / "programs" / RUNTIME
        tree = ast.parse(source(name))
        defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assigned = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                    for target in node.targets if isinstance(target, ast.Name)}
        assert not defined & {"emit", "discover_ranks", "discover_rank"}, name
        assert not assigned & {"RANK_ENV", "hpcprov_sets"}, name


def test_a_record_the_programs_emit_is_what_the_judge_reads(
        capsys: pytest.CaptureFixture[str]) -> None:
    """One definition: the runtime.py the programs import prints, hpcprov's judge (which
    imports the same file as a package module) parses, behind launcher prefixes too."""
    from hpcprov.validate.judge import JobResult, judge, parse_records
    from hpcprov.validate.programs import runtime as judged

    runtime = load(RUNTIME)  # as a program imports it: the file, not the package module
    assert Path(judged.__file__) == Path(runtime.__file__)
    record = {"check": "allreduce", "size_bytes": 1048576, "busbw_GBps": 1.5, "correct": True,
              "ranks": 2, "hosts": ["n1"], "note": "a } and a \" inside"}
    assert runtime.announce(1, 1, "torchrun") == socket.gethostname()
    runtime.emit(runtime.RESULT, record)
    runtime.emit(runtime.DONE, {"check": "allreduce", "ok": True})
    out = capsys.readouterr().out
    assert out.endswith("\n") and len(out.splitlines()) == 3
    prefixed = "".join(f"[{i}]<stdout>:{line}\n" for i, line in enumerate(out.splitlines()))
    assert parse_records(out) == parse_records(prefixed) == [record]
    assert [tag for tag, _ in judged.parse_output(prefixed)] == [judged.RANK, judged.RESULT,
                                                                  judged.DONE]
    (outcome, info) = judge([JobResult("a", "allreduce", "torch-gloo", 1, "COMPLETED", 0, "n1",
                                       parse_records(out), [], 1.0)], {})
    assert (outcome.name, outcome.status, info.measured) == ("a correctness", "pass", 1.5)
    # what is not a record: mixed lines, other tags, no JSON object
    for line in ('HPCPROV_RESULT {"check": "allreduce", "size', "HPCPROV_CB [X] NCCL",
                 judged.CHILD + ' {"version": "1"}', 'HPCPROV_RESULT ["a"]', "plain"):
        assert judged.parse_line(line) is None, line


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P is new in 3.11")
def test_the_programs_find_runtime_beside_them_even_under_python_safe_path(
        programs: Path, tmp_path: Path) -> None:
    """python -P (or PYTHONSAFEPATH) leaves the script's directory off sys.path: the
    programs put it there themselves, so runtime.py beside them still imports."""
    for name in PROGRAMS:
        result = run([sys.executable, "-P", str(programs / name), "--no-such-option"],
                     tmp_path)
        assert result.rc == 2 and "unrecognized arguments" in result.err, result


@pytest.mark.parametrize(("program", "args", "message"), [
    ("allreduce.py", ["--min-bytes", "6"], "multiples of 4"),
    ("allreduce.py", ["--min-bytes", "64", "--max-bytes", "32"], "smaller than"),
    ("allreduce.py", ["--factor", "1"], "at least 2"),
    ("allreduce.py", ["--impl", "horovod", "--dist-backend", "gloo"], "--impl torch"),
    ("train.py", ["--framework", "tensorflow", "--api", "ddp"], "tape, keras"),
    ("train.py", ["--framework", "tensorflow", "--no-sync"], "--framework torch"),
    ("train.py", ["--api", "horovod", "--dist-backend", "gloo"], "--api ddp"),
])
def test_bad_arguments_exit_2(programs: Path, program: str, args: list[str],
                              message: str) -> None:
    result = run([sys.executable, str(programs / program), *args], programs)
    assert result.rc == 2, result
    assert message in result.err


# ------------------------------------------------------------------ allreduce


def check_allreduce(result: Run, impl: str, sizes: list[int], iters: int = 3,
                    ranks: int = 2) -> None:
    assert result.rc == 0, result
    ranks_seen = result.tagged("HPCPROV_RANK")
    assert sorted(r["rank"] for r in ranks_seen) == list(range(ranks)), result
    assert {r["host"] for r in ranks_seen} == {socket.gethostname()}
    records = result.results
    assert [r["size_bytes"] for r in records] == sizes, result
    for r in records:
        assert r["check"] == "allreduce" and r["impl"] == impl and r["device"] == "cpu"
        assert r["correct"] is True, r
        assert r["ranks"] == ranks and r["nodes"] == 1 and r["hosts"] == [socket.gethostname()]
        assert r["iters"] == iters
        assert 0 < r["time_min_s"] <= r["time_s"]
        assert r["time_min_s"] <= r["time_median_s"]  # each rank's median >= its fastest
        # nccl-tests' definitions, recomputed from the reported numbers
        assert r["algbw_GBps"] == pytest.approx(r["size_bytes"] / r["time_s"] / 1e9, rel=1e-12)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * (ranks - 1) / ranks,
                                                rel=1e-12)
    assert result.done == {"check": "allreduce", "ok": True}
    assert parse_records(result.out) == records  # the judge reads what the test reads


SIZES_8_TO_1M = [8 * 4**i for i in range(9)] + [1048576]  # 8, 32, ..., 524288, 1 MiB


@pytest.mark.slow
def test_allreduce_torch_gloo(programs: Path) -> None:
    result = torchrun(programs, "allreduce.py", *SMALL)
    check_allreduce(result, "torch.gloo", SIZES_8_TO_1M)
    assert {r["rank_source"] for r in result.tagged("HPCPROV_RANK")} == {"torchrun"}


@pytest.mark.slow
def test_allreduce_horovod(programs: Path) -> None:
    result = horovodrun(programs, "allreduce.py", "--impl", "horovod", *SMALL)
    check_allreduce(result, "horovod", SIZES_8_TO_1M)
    assert {r["rank_source"] for r in result.tagged("HPCPROV_RANK")} == {"horovod"}


@pytest.mark.slow
def test_allreduce_reports_wrong_sums(programs: Path) -> None:
    """A rank whose result is off (the hidden --fault-rank) fails every size, on rank 0's
    report too, and the exit status."""
    result = torchrun(programs, "allreduce.py", "--fault-rank", "1", "--max-bytes", "4096",
                      "--iters", "2", "--warmup", "1")
    assert result.rc != 0, result
    assert [r["size_bytes"] for r in result.results] == [8, 32, 128, 512, 2048, 4096]
    assert all(r["correct"] is False for r in result.results), result
    assert result.done == {"check": "allreduce", "ok": False}


@pytest.mark.slow
def test_allreduce_ranks_from_slurm_variables(programs: Path) -> None:
    """Two processes started like srun starts them (SLURM_PROCID/NTASKS/LOCALID) through the
    rank contract, a big last size with a time budget that leaves 2 iterations, float64."""
    port = str(free_port())
    argv = [*shim(2, 2), sys.executable, str(programs / "allreduce.py"), "--min-bytes", "1024",
            "--max-bytes", "4194304", "--factor", "16", "--iters", "50", "--warmup", "2",
            "--max-seconds-per-size", "1e-9", "--dtype", "float64"]
    procs = [subprocess.Popen(argv, cwd=programs, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=job_env(SLURM_PROCID=str(rank), SLURM_NTASKS="2",
                                                     SLURM_LOCALID=str(rank), MASTER_PORT=port))
             for rank in range(2)]
    outputs = [proc.communicate(timeout=600) for proc in procs]
    result = Run(subprocess.CompletedProcess(argv, max(p.returncode for p in procs),
                                             "".join(o for o, _ in outputs),
                                             "".join(e for _, e in outputs)))
    check_allreduce(result, "torch.gloo", [1024, 16384, 262144, 4194304], iters=2)
    assert {r["rank_source"] for r in result.tagged("HPCPROV_RANK")} == {"slurm"}
    assert {r["dtype"] for r in result.results} == {"float64"}


def test_allreduce_single_process(programs: Path) -> None:
    """No launcher: one rank (busbw 0 by definition)."""
    result = run([sys.executable, str(programs / "allreduce.py"), "--max-bytes", "1024",
                  "--iters", "2", "--warmup", "0"], programs,
                 job_env(MASTER_PORT=str(free_port())))
    check_allreduce(result, "torch.gloo", [8, 32, 128, 512, 1024], iters=2, ranks=1)
    assert all(r["busbw_GBps"] == 0.0 for r in result.results)


# ------------------------------------------------------------------ train

TRAIN_SMALL = ("--steps", "6", "--warmup-steps", "2", "--batch", "16")


def check_train(result: Run, framework: str, api: str, synced: bool) -> dict:
    ranks_seen = result.tagged("HPCPROV_RANK")
    assert sorted(r["rank"] for r in ranks_seen) == [0, 1], result
    (r,) = result.results
    assert (r["check"], r["framework"], r["api"]) == ("train", framework, api)
    assert r["ranks"] == 2 and r["nodes"] == 1 and r["hosts"] == [socket.gethostname()]
    assert r["steps"] == 6 and r["batch"] == 16
    assert len(r["samples_per_s_per_rank"]) == 2
    assert all(v > 0 for v in r["samples_per_s_per_rank"])
    assert r["samples_per_s_total"] == pytest.approx(sum(r["samples_per_s_per_rank"]))
    # the slowest rank's step time: its throughput is batch / step time
    assert r["step_time_s"] == pytest.approx(16 / min(r["samples_per_s_per_rank"]))
    assert math.isfinite(r["loss_first"]) and math.isfinite(r["loss_last"])
    assert r["in_sync"] is synced, r
    assert r["in_sync"] == (r["max_param_spread"] <= 1e-6 * (1 + r["max_abs_param"]))
    assert result.done == {"check": "train", "ok": synced}
    assert parse_records(result.out) == [r]
    assert (result.rc == 0) is synced, result
    return r


@pytest.mark.slow
def test_train_torch_ddp_in_sync(programs: Path) -> None:
    r = check_train(torchrun(programs, "train.py", *TRAIN_SMALL), "torch", "ddp", True)
    assert r["max_param_spread"] == 0.0  # averaged gradients are bitwise the same


@pytest.mark.slow
def test_train_horovod_in_sync(programs: Path) -> None:
    result = horovodrun(programs, "train.py", "--api", "horovod", *TRAIN_SMALL)
    r = check_train(result, "torch", "horovod", True)
    assert r["max_param_spread"] == 0.0


@pytest.mark.slow
def test_train_without_sync_is_caught(programs: Path) -> None:
    """No averaging, no broadcast (the hidden --no-sync): different data per rank drives the
    weights apart, and the check says so."""
    r = check_train(torchrun(programs, "train.py", "--no-sync", *TRAIN_SMALL),
                    "torch", "ddp", False)
    assert r["no_sync"] is True
    assert r["max_param_spread"] > 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("api", ["tape", "keras"])
def test_train_tensorflow(programs: Path, api: str) -> None:
    needs_tensorflow()
    result = horovodrun(programs, "train.py", "--framework", "tensorflow", "--api", api,
                        *TRAIN_SMALL)
    assert len(result.results) == 1, result
    (r,) = result.results
    if api == "tape" or not r["keras3"]:
        check_train(result, "tensorflow", api, True)
    else:
        # Keras 3 + horovod.tensorflow.keras.DistributedOptimizer does not average: reported
        check_train(result, "tensorflow", api, False)


# ------------------------------------------------------------------ envcheck


def test_envcheck(programs: Path) -> None:
    env = job_env(LOADEDMODULES="gcc/12.2.0:openmpi/4.1.5", RANK="1", WORLD_SIZE="2",
                  LOCAL_RANK="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    result = run([sys.executable, str(programs / "envcheck.py"),
                  "--imports", "torch,json,hpcprov_no_such_module"], programs, env)
    assert result.rc == 0, result
    (r,) = result.results
    torch = importlib.import_module("torch") if importable("torch") else None
    assert r["check"] == "env" and r["host"] == socket.gethostname()
    assert (r["rank"], r["local_rank"], r["rank_source"]) == (1, 1, "torchrun")
    assert r["python"] == sys.version.split()[0] and r["executable"] == sys.executable
    assert r["modules"] == ["gcc/12.2.0", "openmpi/4.1.5"]
    assert r["import_ok"] == {"torch": torch is not None, "json": True,
                              "hpcprov_no_such_module": False}
    assert r["imports"]["hpcprov_no_such_module"] == (
        "error: ModuleNotFoundError: No module named 'hpcprov_no_such_module'")
    assert r["imports"]["json"] == getattr(json, "__version__", "unknown")
    if torch is not None:
        assert r["imports"]["torch"] == torch.__version__
        assert (r["gpus_visible"], r["gpu_source"]) == (torch.cuda.device_count(), "torch")
    assert (r["visible_devices"], r["visible_devices_var"]) == (None, "CUDA_VISIBLE_DEVICES")


def test_envcheck_require_in_process(programs: Path) -> None:
    env = job_env(CUDA_VISIBLE_DEVICES="")
    env.pop("LOADEDMODULES", None)
    result = run([sys.executable, str(programs / "envcheck.py"), "--in-process",
                  "--imports", "json", "--require", "hpcprov_no_such_module"], programs, env)
    assert result.rc == 1, result
    (r,) = result.results
    assert r["rank"] == 0 and r["rank_source"] == "single" and r["modules"] == []
    assert r["import_ok"] == {"json": True, "hpcprov_no_such_module": False}
    assert r["visible_devices"] == ""


PROBE = """
import os, sys
with open(os.environ["HPCPROV_PROBE_LOG"], "a") as f:
    f.write(__name__ + " " + str(os.getpid()) + "\\n")
"""


def probes(folder: Path, **bodies: str) -> Path:
    """Modules that log (name, pid) when imported, each followed by its body."""
    folder.mkdir()
    for name, body in bodies.items():
        (folder / f"{name}.py").write_text(PROBE + body)
    return folder / "imports.log"


def imported_by(log: Path) -> dict[str, int]:
    return {name: int(pid) for name, pid in (ln.split() for ln in log.read_text().splitlines())}


def test_envcheck_imports_every_module_in_one_child(programs: Path, tmp_path: Path) -> None:
    log = probes(tmp_path / "mods", probe_a="", probe_b="")
    env = job_env(PYTHONPATH=str(tmp_path / "mods"), HPCPROV_PROBE_LOG=str(log))
    result = run([sys.executable, str(programs / "envcheck.py"), "--imports",
                  "probe_a,json,probe_b"], programs, env)
    assert result.rc == 0, result
    pids = imported_by(log)
    assert pids["probe_a"] == pids["probe_b"]  # one child, not one per module
    assert result.results[0]["import_ok"] == {"probe_a": True, "json": True, "probe_b": True}
    assert "HPCPROV_CB" not in result.out  # -cb only when asked


def test_envcheck_a_crash_names_its_module_and_the_rest_go_on(programs: Path,
                                                              tmp_path: Path) -> None:
    log = probes(tmp_path / "mods", probe_a="", crashes="os.abort()\n", probe_b="")
    env = job_env(PYTHONPATH=str(tmp_path / "mods"), HPCPROV_PROBE_LOG=str(log))
    result = run([sys.executable, str(programs / "envcheck.py"), "--imports",
                  "probe_a,crashes,probe_b", "--require", "probe_b"], programs, env)
    assert result.rc == 0, result  # the required module imported
    (r,) = result.results
    assert r["import_ok"] == {"probe_a": True, "crashes": False, "probe_b": True}
    assert r["imports"]["crashes"].startswith(
        "error: the import crashed the interpreter (signal 6)")
    pids = imported_by(log)
    assert pids["probe_a"] == pids["crashes"] != pids["probe_b"]  # a new child after it


def test_envcheck_a_hung_import_times_out_and_the_rest_go_on(programs: Path,
                                                            tmp_path: Path) -> None:
    log = probes(tmp_path / "mods", hangs="import threading\nthreading.Event().wait()\n")
    env = job_env(PYTHONPATH=str(tmp_path / "mods"), HPCPROV_PROBE_LOG=str(log))
    result = run([sys.executable, str(programs / "envcheck.py"), "--imports", "hangs,json",
                  "--import-timeout", "2"], programs, env)
    (r,) = result.results
    assert r["import_ok"] == {"hangs": False, "json": True}
    assert r["imports"]["hangs"] == "error: import timed out after 2 s"


@pytest.mark.parametrize("where", ["child", "in-process"])
def test_envcheck_answers_horovodrun_cb_tagged(programs: Path, where: str) -> None:
    if not importable("horovod.torch"):
        pytest.skip("horovod.torch does not import in this interpreter")
    from hpcprov.jobs.checkbuild import parse_check_build
    from hpcprov.validate.judge import CB_LINE

    flags = ["--in-process"] if where == "in-process" else []
    result = run([sys.executable, str(programs / "envcheck.py"), *flags, "--imports",
                  "torch,horovod.torch", "--check-build"], programs, job_env())
    assert result.rc == 0, result
    text = "\n".join(m.group(1) for ln in result.out.splitlines()
                     for m in [CB_LINE.search(ln)] if m)
    found = parse_check_build(text)
    assert "PyTorch" in found["frameworks"] and "Gloo" in found["controllers"], result
    assert result.results[0]["import_ok"] == {"torch": True, "horovod.torch": True}


def test_the_time_budget_per_size_counts_the_whole_iteration() -> None:
    """--max-seconds-per-size caps refill + barrier + allreduce + check, not the timed call
    alone: with a barrier that takes 10 ms (a rank late to line up), a 0.1 s budget leaves
    at most 10 iterations however fast the allreduce itself is."""
    torch = pytest.importorskip("torch")
    import time

    allreduce = load("allreduce.py")

    class OneRankSlowBarrier:
        rank, size = 0, 1

        def barrier(self) -> None:
            time.sleep(0.01)

        def max_(self, tensor):
            return tensor

    t = allreduce.measure(
        torch, OneRankSlowBarrier(), lambda t: t, 1024, torch.float32, "cpu", 1000, 3, 0.1)
    assert 2 <= t.iters <= 10 and t.failures == 0
    assert t.mean_s < 0.01  # the timed call itself stays the allreduce alone


@pytest.mark.parametrize("seconds_per_call, calls, timed", [
    (1.0, 2 + 2 + 2, 2),     # slow: the 2 first warm-up calls, 2 timed, 2 checked
    (0.25, 2 + 4 + 2, 4),    # 8 calls in the 2 s budget
    (0.001, 5 + 20 + 5, 20),  # fast: all of them
])
def test_the_budget_of_a_size_holds_its_warm_up_timed_and_checked_calls(
        monkeypatch: pytest.MonkeyPatch, seconds_per_call: float, calls: int, timed: int
        ) -> None:
    """The default budget (2 s) counts every call of a size: a size of slow calls (256 MiB
    over Gloo on CPUs) makes 6 of them, not 5 warm-up + up to 20 timed + 5 checked."""
    torch = pytest.importorskip("torch")
    import time

    allreduce = load("allreduce.py")
    now = [0.0]
    made: list[int] = []
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])

    class OneRank:
        rank, size = 0, 1

        def barrier(self) -> None:
            pass

        def max_(self, tensor):
            return tensor

    def call(tensor) -> None:
        made.append(1)
        now[0] += seconds_per_call

    t = allreduce.measure(torch, OneRank(), call, 1024, torch.float32, "cpu", 20, 5,
                          allreduce.MAX_SECONDS_PER_SIZE)
    assert (len(made), t.iters, t.failures) == (calls, timed, 0)


# ------------------------------------------------------------------ the device step

FAKE_GPU = REPO / "tests" / "fake_gpu"  # torch.cuda of HPCPROV_TEST_GPUS GPUs (a CPU torch)


class Accel:
    """torch.<device> of a rank that sees ``count`` devices: records set_device."""

    def __init__(self, count: int) -> None:
        self.count, self.set = count, []

    def device_count(self) -> int:
        return self.count

    def set_device(self, index: int) -> None:
        if not 0 <= index < self.count:
            raise RuntimeError("invalid device ordinal")
        self.set.append(index)

    def current_device(self) -> int:
        return self.set[-1]


class Torch:
    """What use_device reads of torch: the device module and torch.device."""

    def __init__(self, count: int) -> None:
        self.cuda = Accel(count)

    @staticmethod
    def device(kind: str, index: int | None = None) -> tuple[str, int | None]:
        return kind, index


def test_the_device_step_is_an_unmodified_scripts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Device LOCAL_RANK (not LOCAL_RANK % device_count(), which passed where a user's
    torch.cuda.set_device(LOCAL_RANK) fails), device 0 under one GPU per rank; where that is
    no device of the rank's, one line naming the binding and what scripts must do."""
    runtime = load(RUNTIME)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    torch = Torch(4)
    assert runtime.use_device(torch, "cuda", 3, "t.py", "all", local_size=4) == ("cuda", 3)
    torch = Torch(1)  # bound: one GPU per rank, LOCAL_RANK 0..3
    for local in (0, 3):  # every rank of the node says so at once: none waits for another
        with pytest.raises(runtime.BindingError) as err:
            runtime.use_device(torch, "cuda", local, "t.py", "all", local_size=4)
        (line,) = str(err.value).splitlines()
        assert line.startswith(f"t.py: the GPU binding gives each rank 1 cuda device "
                               f"(CUDA_VISIBLE_DEVICES=3 on LOCAL_RANK {local}) while "
                               "LOCAL_RANK runs 0..3 on the node: LOCAL_RANK 1..3 are no "
                               "valid device indices")
        assert "scripts must use device 0" in line and "gpus.per_rank: one" in line
        assert (err.value.count, err.value.visible) == (1, "3")
    assert torch.cuda.set == []  # nothing was set
    assert runtime.use_device(torch, "cuda", 3, "t.py", "one", local_size=4) == ("cuda", 0)
    # one declared, but the rank sees all four: its node's ranks would share device 0
    with pytest.raises(runtime.BindingError, match=r"sees 4 cuda devices \("
                       r"CUDA_VISIBLE_DEVICES=3\) with 4 ranks on its node"):
        runtime.use_device(Torch(4), "cuda", 2, "t.py", "one", local_size=4)
    # a rank alone on its node may see more: device 0 is its own
    assert runtime.use_device(Torch(4), "cuda", 0, "t.py", "one", local_size=1) == ("cuda", 0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert "(CUDA_VISIBLE_DEVICES unset on LOCAL_RANK 1)" in runtime.binding_problem(
        "t.py", "cuda", 1, 1, 2, "all", "CUDA_VISIBLE_DEVICES", None)
    # no launcher: rank 0 of 1, which init_process_group() then reads from the environment
    env: dict[str, str] = {}
    runtime.default_rendezvous(env)
    assert env == {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "0",
                   "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    started = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}
    runtime.default_rendezvous(started)
    assert (started["RANK"], started["WORLD_SIZE"]) == ("3", "4")


@pytest.mark.parametrize(("per_rank", "visible", "binding", "gpus"), [
    ("all", "1", True, "fail"),    # bound to one GPU, declared all: LOCAL_RANK 1 is none
    ("one", "1", False, "pass"),   # declared: a rank sees its own GPU, and only it
    ("all", None, False, "pass"),  # unbound: both GPUs, device LOCAL_RANK is the rank's
])
def test_envcheck_says_whether_the_device_a_script_takes_is_the_ranks(
        programs: Path, per_rank: str, visible: str | None, binding: bool, gpus: str) -> None:
    from hpcprov.validate.judge import JobResult, judge

    env = job_env(PYTHONPATH=str(FAKE_GPU), HPCPROV_TEST_GPUS="2", RANK="1", WORLD_SIZE="2",
                  LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    result = run([sys.executable, str(programs / "envcheck.py"), "--imports", "json",
                  "--per-rank", per_rank], programs, env)
    assert result.rc == (1 if binding else 0), result
    (r,) = result.results
    assert (r["gpus_visible"], r["per_rank"]) == (1 if visible else 2, per_rank)
    assert (r["binding"] is not None) is binding
    if binding:
        assert result.err.strip() == r["binding"]
        assert "CUDA_VISIBLE_DEVICES=1 on LOCAL_RANK 1" in r["binding"]
    job = JobResult("env", "env", "env", 1, "COMPLETED", result.rc, "n1",
                    parse_records(result.out), [], 1.0)
    outcomes = {o.name: o for o in judge([job], {}, gpus_expected=2)}
    assert outcomes["env gpus"].status == gpus
    assert ("env device binding" in outcomes) is binding
    if binding:
        assert outcomes["env device binding"].status == "fail"
        assert outcomes["env device binding"].detail == r["binding"]
    assert not [o for o in outcomes.values() if o.status == "error"]
    # without --per-rank (a run on the CPU) nothing is checked
    plain = run([sys.executable, str(programs / "envcheck.py"), "--imports", "json"],
                programs, env)
    assert plain.rc == 0 and plain.results[0]["binding"] is None, plain


def test_the_judge_fails_a_check_whose_ranks_could_not_take_their_device() -> None:
    """Every rank of a bound node prints its record; one failed outcome, its detail the line
    of a rank whose LOCAL_RANK is itself no device (the one a script dies on)."""
    from hpcprov.validate.judge import JobResult, judge, shaped_records

    runtime = load(RUNTIME)
    lines = []
    for rank in (0, 1):
        error = runtime.BindingError(f"train.py: the binding of rank {rank}", 1, str(rank))
        lines.append(runtime.format_record(runtime.RESULT, runtime.binding_record(
            "train", rank, rank, error)))
    records, malformed = shaped_records("\n".join(lines))
    assert malformed == "" and len(records) == 2
    for check in ("train", "allreduce", "pernode"):
        job = JobResult(f"{check}-x", check, "torch-nccl", 1, "FAILED", 1, "n1", records,
                        ["train.py: the binding of rank 1"], 1.0)
        (outcome,) = judge([job], {})
        assert (outcome.name, outcome.status, outcome.detail) == (
            f"{check}-x device binding", "fail", "train.py: the binding of rank 1")

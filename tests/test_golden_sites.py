"""Golden tests per seed site: what hpcprov generates must say what the seed tutorials say.

Expected strings are quoted from the seeds (000/001 KISTI Neuron, 002 Technion, 003 ZIH Taurus,
004 UBC Sockeye + Alliance/CC) and from the sites' public user documentation; they are never
copied from hpcprov's own output. Shell lines are compared word by word (shlex), so a change of
quoting style alone does not break a test, but a change of meaning does.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
from pathlib import Path

import pytest
from hpcprov_tests import (
    BUNDLED,
    Stubs,
    assert_one_line_error,
    bash_syntax_ok,
    body_lines,
    cli,
    contains_run,
    directives,
    lines_starting,
    needs_shellcheck,
    one_line_starting,
    pbs_directives,
    shellcheck,
    unshimmed,
    words,
    write_profile,
)

from hpcprov.jobs.jobscript import build_jobscript
from hpcprov.provision.plan import activate_lines, build_plan, render_script
from hpcprov.request.job import JobRequest
from hpcprov.site.profiles import load_site

HAVE_SHELLCHECK = shutil.which("shellcheck") is not None


def run_ok(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    res = cli(capsys, *args)
    assert res.rc == 0, (args, res.err)
    assert "error" not in res.err, res.err
    return res.out


def last_command(script: str) -> str:
    """The script's last command, as a seed has a user type it (the rank contract's words
    left out: tests/test_rank_contract.py checks those)."""
    return unshimmed(body_lines(script)[-1].strip())


def norm_vars(word: str) -> str:
    """${NAME} -> $NAME, to compare with the seeds' spelling."""
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", r"$\1", word)


def module_load_lines(text: str) -> list[str]:
    return lines_starting(text, "module load ")


def function_body(script: str, name: str) -> list[str]:
    """The lines of a bash function ``name() { ... }`` in a rendered script."""
    lines = script.splitlines()
    start = lines.index(f"{name}() {{")
    end = lines.index("}", start)
    return [line.strip() for line in lines[start + 1 : end]]


def steps_of(script: str) -> list[str]:
    m = re.search(r"^HPCPROV_STEPS=\((.*)\)$", script, flags=re.M)
    assert m, "no HPCPROV_STEPS in the script"
    return m.group(1).split()


def ntasks(argv: list[str]) -> int:
    """Total tasks of an srun argv (-n N, --ntasks=N or --ntasks N)."""
    for i, word in enumerate(argv):
        if word in ("-n", "--ntasks"):
            return int(argv[i + 1])
        if word.startswith("--ntasks="):
            return int(word.split("=", 1)[1])
    raise AssertionError(f"no task count in {argv}")


# ======================================================================= Neuron
# seed 000 (README), "Building Horovod" step 1 and "Running Horovod interactively" step 2
NEURON_BUILD_MODULES = "module load gcc/10.2.0 cuda/11.4 cudampi/openmpi-4.1.1 cmake/3.16.9"
# seed 000, "Submitting & Monitoring a batch job": module purge, then this line
NEURON_JOB_MODULES = "module load gcc/10.2.0 cuda/11.4 cudampi/openmpi-4.1.1"
# seed 000, "Building Horovod" step 4
NEURON_HOROVOD_VARS = ["HOROVOD_GPU_OPERATIONS=NCCL", "HOROVOD_WITH_TENSORFLOW=1",
                       "HOROVOD_WITH_PYTORCH=1", "HOROVOD_WITH_MPI=1", "HOROVOD_WITH_GLOO=1"]
# seed 001, "Running Horovod using Singularity on Neuron"
NEURON_SIF = "/apps/applications/singularity_images/ngc/pytorch_22.03-hd-py3.sif"


def test_neuron_jobscript_is_the_seed_batch_script(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_ok(capsys, "jobscript", "--site", "neuron", "-N", "4", "-G", "8",
                 "-J", "pytorch_horovod", "-t", "24:00:00", "-o", "comment=pytorch",
                 "--", "python", "./train_hvd.py")
    d = directives(out)
    seed = {  # train_hvd.sh in seed 000
        "job-name": "pytorch_horovod", "time": "24:00:00", "comment": "pytorch",
        "partition": "amd_a100nv_8", "nodes": "4", "ntasks-per-node": "8",
        "cpus-per-task": "4", "output": "%x_%j.out", "error": "%x_%j.err", "gres": "gpu:8",
    }
    for key, value in seed.items():
        assert d.get(key) == value, (key, d)
    body = [line.strip() for line in body_lines(out)]
    purge = body.index("module purge")
    assert body[purge + 1] == NEURON_JOB_MODULES
    assert last_command(out) == "srun python ./train_hvd.py"


def test_neuron_comment_is_always_given(capsys: pytest.CaptureFixture[str]) -> None:
    """the site's public docs: --comment=<application> is mandatory on Neuron."""
    out = run_ok(capsys, "jobscript", "--site", "neuron", "--", "python", "t.py")
    assert directives(out).get("comment") in {"pytorch", "tensorflow", "python", "caffe", "R",
                                              "sklearn", "inhouse", "horovod", "etc"}
    out = run_ok(capsys, "jobscript", "--site", "neuron", "-o", "comment=tensorflow",
                 "--", "python", "t.py")
    assert directives(out)["comment"] == "tensorflow"
    assert len(lines_starting(out, "#SBATCH --comment")) == 1


def test_neuron_setup_is_the_seed_build(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_ok(capsys, "setup", "--site", "neuron", "--dry-run")
    stripped = [line.strip() for line in out.splitlines()]
    assert NEURON_BUILD_MODULES in stripped
    assert NEURON_BUILD_MODULES in function_body(out, "hpcprov_modules_build")

    # Horovod: the seed's variables on the pip line, after the build modules
    # (built as a wheel, with --no-cache-dir, so the wheelhouse can keep it; then installed)
    build = function_body(out, "step_build_horovod")
    assert build[0] == "hpcprov_modules_build"
    (pip_line,) = [line for line in build if "pip wheel" in line]
    pip_words = words(pip_line)
    assert "--no-cache-dir" in pip_words and "--no-build-isolation" in pip_words
    for var in NEURON_HOROVOD_VARS:
        assert var in pip_words, var
    assert pip_words.index(NEURON_HOROVOD_VARS[0]) < pip_words.index("wheel")
    assert any(words(line)[:3] == ["pip", "download", "--no-deps"] or
               "download" in words(line) and "horovod==0.28.1" in words(line) for line in build)

    # Miniconda under /scratch/$USER, installed silently (-b) into a prefix (-p)
    prefix = words(one_line_starting(out, "PREFIX="))[0]
    assert norm_vars(prefix).startswith("PREFIX=/scratch/$USER/")
    (install,) = [words(line) for line in function_body(out, "step_install_conda")
                  if line.startswith("bash ")]
    assert "-b" in install and install[install.index("-p") + 1] == "$CONDA_ROOT"
    conda_root = words(one_line_starting(out, "CONDA_ROOT="))[0]
    assert norm_vars(conda_root).startswith("CONDA_ROOT=$PREFIX/")
    # seed: conda config --set auto_activate_base false (here with conda's full path)
    configs = [words(line) for line in stripped if "auto_activate_base" in line]
    assert [(w[0].rsplit("/", 1)[-1], w[1:]) for w in configs] == [
        ("conda", ["config", "--set", "auto_activate_base", "false"])]

    # conda env + frameworks as in the seed
    (create,) = [words(line) for line in stripped if line.startswith("conda create")]
    assert contains_run(create, ["-n", "horovod"])
    (conda_install,) = [words(line) for line in stripped if line.startswith("conda install")]
    assert contains_run(conda_install, ["-c", "pytorch"])
    assert {"pytorch==1.12.0", "torchvision==0.13.0", "torchaudio==0.12.0",
            "cudatoolkit=11.3"} <= set(conda_install)
    # seed: pip install tensorflow-gpu==2.10.0 (here in one resolver run with the packages)
    pips = [words(line) for line in stripped if "pip install" in line and "tensorflow" in line]
    assert any(contains_run(w, ["pip", "install"]) and "tensorflow-gpu==2.10.0" in w
               for w in pips)

    # verify with horovodrun -cb, after the build: horovodrun's own -cb (its entry point's
    # function), run with the built frameworks imported first (check_build.py)
    check = function_body(out, "step_check_build")
    (run,) = [line for line in check if "check_build.py" in line and "python" in line]
    assert run.startswith('python "$STATE/programs/check_build.py" --output '
                          '"$STATE/check-build.txt" tensorflow torch --warm torch._dynamo')
    assert 'horovodrun(["-cb"])' in out and "run_commandline()" in out
    # ... which must show what the profile builds: TF, PyTorch, MPI, Gloo and NCCL
    expected = [words(line)[1:] for line in check if line.startswith("hpcprov_expect_cb")]
    assert ["Available Frameworks", "TensorFlow"] in expected
    assert ["Available Tensor Operations", "NCCL"] in expected
    steps = steps_of(out)
    assert steps.index("build-horovod") < steps.index("check-build")
    assert steps.index("install-conda") < steps.index("create-env") < steps.index("build-horovod")


@pytest.mark.parametrize(("argv", "seed_line"), [
    # seed 000, "to run on the two nodes with 4 GPUs each", options 2 and 3
    (["-N", "2", "-G", "4", "-l", "horovodrun", "-H", "gpu[32-33]"],
     "horovodrun -np 8 -H gpu32:4,gpu33:4 python train_hvd.py"),
    (["-N", "2", "-G", "4", "-l", "mpirun", "-H", "gpu[32-33]"],
     "mpirun -np 8 -H gpu32:4,gpu33:4 python train_hvd.py"),
    # "to run on two nodes with 2 GPUs each" (the seed writes localhost for gpu32)
    (["-N", "2", "-G", "2", "-l", "horovodrun", "-H", "gpu32,gpu33"],
     "horovodrun -np 4 -H gpu32:2,gpu33:2 python train_hvd.py"),
    (["-N", "2", "-G", "2", "-l", "mpirun", "-H", "gpu32", "-H", "gpu33"],
     "mpirun -np 4 -H gpu32:2,gpu33:2 python train_hvd.py"),
    # "to run on the gpu33 with 2 GPUs"
    (["-N", "1", "-G", "2", "-l", "horovodrun", "-H", "gpu33"],
     "horovodrun -np 2 -H gpu33:2 python train_hvd.py"),
], ids=["hvd-2x4", "mpi-2x4", "hvd-2x2", "mpi-2x2", "hvd-1x2"])
def test_neuron_launch_lines_are_the_seed_lines(capsys: pytest.CaptureFixture[str],
                                                argv: list[str], seed_line: str) -> None:
    out = run_ok(capsys, "launch", "--site", "neuron", *argv, "--", "python", "train_hvd.py")
    assert unshimmed(out.strip().splitlines()[-1]) == seed_line


def test_neuron_srun_launch_runs_one_task_per_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    # seed 000 option 1: srun -n 8 python train_hvd.py (2 nodes x 4 GPUs)
    out = run_ok(capsys, "launch", "--site", "neuron", "-N", "2", "-G", "4", "-l", "srun",
                 "--", "python", "train_hvd.py")
    w = words(out.strip().splitlines()[-1])
    assert w[0] == "srun" and ntasks(w) == 8
    assert w[-2:] == ["python", "train_hvd.py"]


def test_neuron_allocate_is_the_seed_salloc(capsys: pytest.CaptureFixture[str]) -> None:
    # seed 000: salloc --partition=amd_a100nv_8 -J debug --nodes=2 --time=8:00:00 --gres=gpu:4
    #           --comment=python
    out = run_ok(capsys, "launch", "--site", "neuron", "-N", "2", "-G", "4", "--allocate",
                 "-J", "debug", "-t", "8:00:00", "-o", "comment=python",
                 "-l", "horovodrun", "-H", "gpu[32-33]", "--", "python", "train_hvd.py")
    lines = out.strip().splitlines()
    salloc = words(lines[0])
    assert salloc[0] == "salloc"
    assert {"--partition=amd_a100nv_8", "--nodes=2", "--time=8:00:00", "--gres=gpu:4",
            "--comment=python"} <= set(salloc)
    assert "--job-name=debug" in salloc or contains_run(salloc, ["-J", "debug"])
    assert unshimmed(lines[-1]) == "horovodrun -np 8 -H gpu32:4,gpu33:4 python train_hvd.py"
    # without a comment the mandatory option is still on the salloc line
    out = run_ok(capsys, "launch", "--site", "neuron", "--allocate", "--", "python", "t.py")
    assert any(w.startswith("--comment=") for w in words(out.splitlines()[0]))


def test_neuron_container_launch_is_the_seed_singularity_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    # seed 001: srun -n 8 singularity run --nv <sif> python pytorch_imagenet_resnet50.py
    out = run_ok(capsys, "launch", "--site", "neuron", "-N", "2", "-G", "4", "-l", "container",
                 "--", "python", "pytorch_imagenet_resnet50.py")
    w = words(out.strip().splitlines()[-1])
    assert w[0] == "srun" and ntasks(w) == 8
    i = w.index("singularity")
    assert w[i + 1] == "run"
    assert w.index("--nv") > i and w.index(NEURON_SIF) > w.index("--nv")
    assert w[-2:] == ["python", "pytorch_imagenet_resnet50.py"]
    # in a batch script the singularity module is loaded (the site's public docs: singularity/3.9.7)
    script = run_ok(capsys, "jobscript", "--site", "neuron", "-l", "container",
                    "--", "python", "x.py")
    (load,) = module_load_lines(script)
    assert "singularity/3.9.7" in words(load)
    assert not any("conda activate" in line for line in body_lines(script))
    assert NEURON_SIF in words(last_command(script))


# ====================================================================== Sockeye
# seed 004: module line for Sockeye, the PBS select, and the mpirun + python sample
SOCKEYE_MODULES = "module load gcc/9.4.0 python/3.8.10 cuda/11.3.1 nccl/2.9.9-1-cuda11-3"
SOCKEYE_MPI_FLAGS = ["-bind-to", "none", "-map-by", ":OVERSUBSCRIBE", "-mca", "pml", "ob1",
                     "-mca", "btl", "^openib"]


def test_sockeye_jobscript_is_the_seed_pbs_script(capsys: pytest.CaptureFixture[str]) -> None:
    cmd = ["python", "main.py", "--batch_size=6144", "--ddp",
           "-m=sockeye_demo_multiple_node_mpi_ddp"]
    out = run_ok(capsys, "jobscript", "--site", "sockeye", "-N", "2",
                 "-o", "account=st-pi-1-gpu", "--", *cmd)
    pbs = pbs_directives(out)
    assert ["-l", "select=2:ncpus=8:ngpus=4"] in pbs  # the site's public docs: #PBS -l select=2:...
    assert ["-A", "st-pi-1-gpu"] in pbs
    assert not lines_starting(out, "#SBATCH")
    assert SOCKEYE_MODULES in [line.strip() for line in body_lines(out)]

    mpirun = words(one_line_starting(out, "mpirun"))
    assert [norm_vars(w) for w in mpirun[:6]] == [
        "mpirun", "-np", "8", "--hostfile", "$PBS_NODEFILE", "--oversubscribe"]
    assert contains_run(mpirun, ["-x", "CUDA_VISIBLE_DEVICES=0,1,2,3"])
    assert contains_run(mpirun, ["-x", "MASTER_PORT"])
    assert contains_run(mpirun, ["-x", "PATH"])
    addr = [w for w in mpirun if w.startswith("MASTER_ADDR=")]
    assert len(addr) == 1 and mpirun[mpirun.index(addr[0]) - 1] == "-x"
    assert contains_run(mpirun, SOCKEYE_MPI_FLAGS)
    assert mpirun[-len(cmd):] == cmd
    body = body_lines(out)
    port = [i for i, line in enumerate(body) if line.startswith("export MASTER_PORT=")]
    assert port and port[0] < body.index(one_line_starting(out, "mpirun", shim=True))


def test_sockeye_needs_an_account(capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "jobscript", "--site", "sockeye", "-N", "2", "--", "python", "main.py")
    line = assert_one_line_error(res, 2, "account")
    assert "st-<pi>-1-gpu" in line  # the example account format from the site's public docs
    assert res.out == ""


def test_sockeye_submits_with_qsub(capsys: pytest.CaptureFixture[str]) -> None:
    res = json.loads(run_ok(capsys, "jobscript", "--site", "sockeye", "-o", "account=a",
                            "--json", "--", "python", "main.py"))
    assert res["submit"][0] == "qsub"  # seed 004: qsub scripts/demo_sockeye.sh
    res = json.loads(run_ok(capsys, "launch", "--site", "sockeye", "-o", "account=a",
                            "--json", "--", "python", "main.py"))
    assert res["allocate"][:2] == ["qsub", "-I"]


# =========================================================================== CC
# seed 004: the srun + torchrun sample and the CC module line
CC_MODULES = {"gcc/11.3.0", "python/3.8.10", "StdEnv/2020", "cuda/11.7", "nccl/2.12.12"}


@pytest.mark.parametrize("launcher", [["-l", "torchrun"], []], ids=["torchrun", "default"])
def test_cc_torchrun_launch_is_the_seed_line(capsys: pytest.CaptureFixture[str],
                                             launcher: list[str]) -> None:
    script = ["main.py", "--batch_size=6144", "--ddp", "-m=cc_demo_multiple_node_srun_ddp"]
    out = run_ok(capsys, "launch", "--site", "cc", "-N", "2", "-G", "4", *launcher,
                 "-o", "account=def-pi", "--", "python", *script)
    w = words(out.strip().splitlines()[-1])
    # the seed's torchrun, as the environment's Python runs it (issue 24: a torchrun script on
    # PATH may be another Python's)
    t = w.index("torch.distributed.run") - 2
    assert w[t:t + 2] == ["python", "-m"]
    assert set(w[:t]) == {"srun", "--ntasks-per-node=1", "--ntasks=2"}
    torchrun = w[t + 3:]
    assert {"--nnodes=2", "--nproc_per_node=4", "--rdzv_backend=c10d",
            "--rdzv_id=$SLURM_JOB_ID"} <= set(torchrun)
    endpoint = [x for x in torchrun if x.startswith("--rdzv_endpoint=")]
    assert len(endpoint) == 1 and re.fullmatch(r"--rdzv_endpoint=.+:\d+", endpoint[0])
    assert torchrun[-len(script):] == script
    assert "python" not in torchrun  # torchrun runs the script itself


def test_cc_jobscript_one_task_per_node_and_account(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_ok(capsys, "jobscript", "--site", "cc", "-N", "2", "-o", "account=def-pi",
                 "--", "python", "main.py")
    d = directives(out)
    assert d["ntasks-per-node"] == "1" and d["nodes"] == "2"
    assert d["account"] == "def-pi"
    assert d["gres"] == "gpu:v100l:4"  # the site's public docs: --gres=gpu:v100l:4
    (load,) = module_load_lines(out)
    assert set(words(load)[2:]) == CC_MODULES
    assert "torch.distributed.run" in words(last_command(out))


def test_cc_mpirun_jobscript_one_task_per_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    # seed 004: "--ntasks=8 --ntasks-per-node=4 works for mpirun + python"
    out = run_ok(capsys, "jobscript", "--site", "cc", "-N", "2", "-l", "mpirun",
                 "-o", "account=def-pi", "--", "python", "main.py")
    d = directives(out)
    assert d["ntasks-per-node"] == "4" and d["nodes"] == "2"
    w = words(one_line_starting(out, "mpirun"))
    assert w[:3] == ["mpirun", "-np", "8"] and w[-2:] == ["python", "main.py"]


def test_cc_setup_uses_wheelhouse_virtualenv_not_conda(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    for where in ("login", "compute"):
        out = run_ok(capsys, "setup", "--site", "cc", "--on", where, "--dry-run")
        assert re.search(r"\bconda\b", out) is None
        create = [words(line) for line in body_lines(out) if line.strip().startswith("virtualenv")]
        assert len(create) == 1 and "--no-download" in create[0]
        pips = [words(line) for line in body_lines(out) if "pip install" in line]
        assert pips, "no pip install at all"
        for pip in pips:
            assert "--no-index" in pip, pip
        assert "python/3.8.10" in words(function_body(out, "hpcprov_modules_build")[0])


# ===================================================================== Technion
TECHNION_IMAGE = "docker://nvcr.io#nvidia/tensorflow:22.09-tf1-py3"  # seed 002


def _technion_script(capsys: pytest.CaptureFixture[str]) -> str:
    return run_ok(capsys, "jobscript", "--site", "technion", "-N", "2", "--", "python",
                  "/code/examples/tensorflow/tensorflow_synthetic_benchmark.py")


def test_technion_jobscript_is_the_seed_example(capsys: pytest.CaptureFixture[str]) -> None:
    out = _technion_script(capsys)
    d = directives(out)
    assert d["ntasks"] == "16"  # seed 002: --ntasks=16, 2 DGX nodes x 8
    gpu_type, _, count = d["gpus"].rpartition(":")
    assert gpu_type == "a100" and count == d["ntasks"]  # --ntasks equals --gpus=a100:N
    assert d.get("nodes") == "2"
    assert d["output"] == "slurm-%x-%j.out" and d["error"] == "slurm-%x-%j.err"
    srun = words(one_line_starting(out, "srun"))
    bash = srun.index("/bin/bash")
    opts = srun[1:bash]
    assert any(o.startswith("--container-image=") for o in opts)
    assert any(o.startswith("--container-mounts=") and o.endswith(":/code") for o in opts)
    assert "--no-container-entrypoint" in opts
    assert "--output=slurm-%x-%j-%t.out" in opts  # per-task output from the seed's note
    assert srun[bash:] == ["/bin/bash", "-c",
                           "python -u /code/examples/tensorflow/tensorflow_synthetic_benchmark.py"]
    assert not any("activate" in line for line in body_lines(out))


def test_technion_setup_imports_the_seed_image_that_jobs_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    setup = run_ok(capsys, "setup", "--site", "technion", "--dry-run")
    imports = [words(line) for line in body_lines(setup)
               if line.strip().startswith("enroot import")]
    assert len(imports) == 1
    imp = imports[0]
    assert TECHNION_IMAGE in imp
    target = imp[imp.index("-o") + 1]
    srun = words(one_line_starting(_technion_script(capsys), "srun"))
    (image,) = [w.split("=", 1)[1] for w in srun if w.startswith("--container-image=")]
    assert image == target


# ======================================================================= Taurus
TAURUS_ML_MODULES = ["OpenMPI/3.1.4-gcccuda-2018b", "Python/3.6.6-fosscuda-2018b",
                     "cuDNN/7.1.4.18-fosscuda-2018b"]  # seed 003 setup block


@pytest.mark.parametrize(("partition", "seed"), [
    # seed 003: --mem=250000 and --cpus-per-task=7 for ml; --mem=60000 --cpus-per-task=6 gpu2;
    # --ntasks-per-node = GPUs per node (6 V100 on ml, 4 K80 on gpu2, the site's public docs)
    ("ml", {"mem": "250000", "cpus-per-task": "7", "ntasks-per-node": "6", "gres": "gpu:6"}),
    ("gpu2", {"mem": "60000", "cpus-per-task": "6", "ntasks-per-node": "4", "gres": "gpu:4"}),
])
def test_taurus_jobscript_per_partition(capsys: pytest.CaptureFixture[str], partition: str,
                                        seed: dict[str, str]) -> None:
    out = run_ok(capsys, "jobscript", "--site", "taurus", "-p", partition, "-N", "2",
                 "--", "python", "train.py")
    d = directives(out)
    assert d["partition"] == partition
    for key, value in seed.items():
        assert d[key] == value, (key, d)


def test_taurus_ml_loads_modenv_ml_first(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_ok(capsys, "jobscript", "--site", "taurus", "--", "python", "train.py")
    (load,) = module_load_lines(out)
    mods = words(load)[2:]
    assert mods[0] == "modenv/ml"
    assert all(m in mods for m in TAURUS_ML_MODULES)
    # seed 003: srun -N 1 --ntasks-per-node=6 -p ml
    line = run_ok(capsys, "launch", "--site", "taurus", "--", "python", "train.py").strip()
    assert "--ntasks-per-node=6" in words(line)


def test_taurus_setup_is_the_seed_build(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_ok(capsys, "setup", "--site", "taurus", "--dry-run")
    build_mods = words(function_body(out, "hpcprov_modules_build")[0])
    assert build_mods[:3] == ["module", "load", "modenv/ml"]
    assert all(m in build_mods for m in [*TAURUS_ML_MODULES, "CMake/3.11.4-GCCcore-7.3.0"])
    (create,) = [words(line) for line in body_lines(out) if line.strip().startswith("virtualenv")]
    assert "--system-site-packages" in create
    (pip_line,) = [line for line in function_body(out, "step_build_horovod")
                   if "pip wheel" in line]
    assert "--no-cache-dir" in words(pip_line)
    # seed 003: HOROVOD_GPU_ALLREDUCE=MPI HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITH_PYTORCH=1
    #           HOROVOD_WITHOUT_MXNET=1 pip install --no-cache-dir horovod
    for var in ("HOROVOD_GPU_ALLREDUCE=MPI", "HOROVOD_WITHOUT_TENSORFLOW=1",
                "HOROVOD_WITH_PYTORCH=1", "HOROVOD_WITHOUT_MXNET=1"):
        assert var in words(pip_line), var


# ================================================= every generated script parses

site = functools.cache(load_site)


def _required(site_name: str) -> list[str]:
    out: list[str] = []
    for name, rule in site(site_name).policies.required_options.items():
        out += ["-o", f"{name}={rule.default or rule.example or 'x'}"]
    return out


def _request(site_name: str, **kw: object) -> JobRequest:
    s = site(site_name)
    options = {n: r.default or r.example or "x" for n, r in s.policies.required_options.items()}
    launcher = s.launchers[kw.get("launcher") or s.default_launcher]
    image = None
    if launcher.kind.value == "container" and not s.containers.default_image:
        image = "/images/site image.sif"
    return JobRequest(site=s, options=options, image=image,
                      command=("python", "train.py", "--data", "/data/x y"), **kw)


def _jobscript(capsys: pytest.CaptureFixture[str], site_name: str, *extra: str) -> str:
    return run_ok(capsys, "jobscript", "--site", site_name, *_required(site_name), *extra,
                  "--", "python", "train.py", "--data", "/data/x y")


def _check_script(text: str, tmp_path: Path, name: str) -> None:
    bash_syntax_ok(text, tmp_path, name)
    # sbatch/qsub stop reading directives at the first command
    lines = text.splitlines()
    first_cmd = next(i for i, line in enumerate(lines)
                     if line.strip() and not line.startswith("#"))
    assert not [line for line in lines[first_cmd:] if line.startswith(("#SBATCH", "#PBS"))]


@pytest.mark.parametrize("site_name", BUNDLED)
def test_jobscript_for_every_launcher_and_partition_parses(tmp_path: Path,
                                                           site_name: str) -> None:
    s = site(site_name)
    for launcher in s.launchers:
        text = build_jobscript(_request(site_name, launcher=launcher))
        _check_script(text, tmp_path, f"{launcher}.sh")
        argv = words(last_command(text))
        if argv[-3:-1] == ["/bin/bash", "-c"]:  # pyxis: the command runs as bash -c '...'
            argv = words(argv[-1])
        assert argv[-3:] == ["train.py", "--data", "/data/x y"], launcher
        if HAVE_SHELLCHECK:
            proc = shellcheck(text, tmp_path, f"{launcher}.sh", exclude=[])
            assert proc.returncode == 0, (launcher, proc.stdout)
    for partition in s.partitions:
        text = build_jobscript(_request(site_name, partition=partition))
        _check_script(text, tmp_path, f"{partition}.sh")
        if s.scheduler.value == "slurm":
            assert directives(text)["partition"] == partition


@pytest.mark.parametrize("site_name", BUNDLED)
def test_setup_script_and_activate_parse(tmp_path: Path, site_name: str) -> None:
    s = site(site_name)
    for where in ("login", "compute"):
        script = render_script(build_plan(s, runs_on=where))
        bash_syntax_ok(script, tmp_path, f"setup-{where}.sh")
    activate = "\n".join(activate_lines(s, s.prefix())) + "\n"
    bash_syntax_ok(activate, tmp_path, "activate")
    if HAVE_SHELLCHECK:
        proc = shellcheck(render_script(build_plan(s)), tmp_path, "setup.sh")
        assert proc.returncode == 0, proc.stdout
        proc = shellcheck(activate, tmp_path, "activate", exclude=[])
        assert proc.returncode == 0, proc.stdout


@needs_shellcheck
@pytest.mark.parametrize("site", ["neuron", "taurus"])
def test_jobscript_and_activate_pass_shellcheck_unfiltered(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path, site: str) -> None:
    s = load_site(site)
    activate = "\n".join(activate_lines(s, s.prefix())) + "\n"
    for name, text in (("job.sh", _jobscript(capsys, site)), ("activate", activate)):
        proc = shellcheck(text, tmp_path, name)
        assert proc.returncode == 0, proc.stdout


def test_srun_rendezvous_export_does_not_mask_failures(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    path = write_profile(tmp_path, "rdzv", (
        "extends: neuron\n"
        "paths: {scratch: /scratch/fixed}\n"
        "launchers:\n"
        "  srun: {kind: srun, rendezvous_env: true}\n"
    ))
    text = run_ok(capsys, "jobscript", "--site", str(path), "-l", "srun", "--no-activate",
                  "--", "python", "train.py")
    assert any(line.startswith("export MASTER_ADDR=") or line.startswith("MASTER_ADDR=")
               for line in body_lines(text))
    stubs = Stubs.create(tmp_path / "sandbox", failing=["scontrol"])
    proc = stubs.run(text, name="job.sh", extra_env={"SLURM_JOB_NODELIST": "gpu[01-02]"})
    assert proc.returncode != 0 and stubs.calls("srun") == []
    if HAVE_SHELLCHECK:
        check = shellcheck(text, tmp_path, "job.sh", exclude=[])
        assert check.returncode == 0, check.stdout


@needs_shellcheck
def test_shellcheck_is_really_checking(tmp_path: Path) -> None:
    """Guard: the helper must flag a real warning, or the tests above prove nothing."""
    proc = shellcheck('#!/bin/bash\nx=$1\nrm -rf "$x"/*\n', tmp_path)
    assert proc.returncode != 0 and "SC2115" in proc.stdout


# ======================================================================== guides

@pytest.mark.parametrize("site", BUNDLED)
def test_guide_shows_the_jobscript_modules_and_every_launch_form(
        capsys: pytest.CaptureFixture[str], site: str) -> None:
    s = load_site(site)
    pname, part = s.partition()
    nodes, gpus = min(2, part.nodes), part.gpus.count
    guide = run_ok(capsys, "guide", "--site", site)
    script = run_ok(capsys, "jobscript", "--site", site, *_required(site), "-N", str(nodes),
                    "--", "python", "train_hvd.py")
    for line in module_load_lines(script):
        assert line in guide
    for name in s.launchers:
        res = cli(capsys, "launch", "--site", site, *_required(site), "-N", str(nodes),
                  "-G", str(gpus), "-l", name, "--json", "--", "python", "train_hvd.py")
        if res.rc == 0:
            data = json.loads(res.out)
            assert data["line"] in guide, (name, data["line"])
            for line in data["setup"]:
                assert line in guide
        else:  # e.g. a container launcher without a default image: the guide says why
            assert f"# {name}:" in guide


def test_neuron_guide_follows_the_seed_walkthrough(capsys: pytest.CaptureFixture[str]) -> None:
    guide = run_ok(capsys, "guide", "--site", "neuron")
    assert NEURON_BUILD_MODULES in guide
    assert "horovodrun -cb" in guide
    for section in ("Available Frameworks:", "Available Controllers:",
                    "Available Tensor Operations:"):
        assert section in guide
    # the seed's expected `horovodrun -cb` marks: TF, PyTorch, MPI, Gloo, NCCL on; MXNet off
    for entry in ("[X] TensorFlow", "[X] PyTorch", "[ ] MXNet", "[X] MPI", "[X] Gloo",
                  "[X] NCCL"):
        assert entry in guide, entry
    assert "amd_a100nv_8" in guide and "--comment" in guide

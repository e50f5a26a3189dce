"""What a profile can say about real clusters beyond the seeds (issue "Real clusters beyond
the seeds"): high-speed network host names and NCCL/Gloo/libfabric settings, partitions that
are kinds of node routed by constraint and QOS, flag options, CPUs vs cores, srun's CPU
inheritance since Slurm 22.05, one meaning for env, and what cannot be said (launcher keys
a kind ignores, unverified keys that do not exist, unknown node counts).

Generated lines are run with bash against stub tools that record their argv and the
variables the ranks would see, so the tests check what a shell does with them, not their
spelling alone.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hpcprov_tests import (
    REPO,
    Stubs,
    assert_one_line_error,
    cli,
    directives,
    lines_starting,
    pbs_directives,
    shellcheck,
    stub_steps,
    unshimmed_argv,
    words,
    write_profile,
)

from hpcprov.jobs.lint import default_request_findings, lint, site_check_errors
from hpcprov.jobs.modules import env_lines, env_problems
from hpcprov.request.job import JobRequest
from hpcprov.site.launcher_kinds import KINDS, readers
from hpcprov.site.profiles import check_file, load_site

HAVE_SHELLCHECK = shutil.which("shellcheck") is not None
ROOT = Path(__file__).resolve().parent.parent

# A GPU cluster as its public documentation describes it: nodes picked by constraint and
# QOS (no partition of that name exists), 64 cores x 2 hardware threads, a Slingshot-style
# network whose node names end in -hsn0, Slurm 23.02 with --gpu-bind=none asked for.
CONSTRAINT_SITE = """\
name: hsn
scheduler: slurm
partitions:
  gpu:
    routing: options
    options: {constraint: gpu, qos: regular, gpu-bind: none}
    nodes: 1536
    cores_per_node: 64
    threads_per_core: 2
    cpus_per_task: 32
    gpus: {count: 4, model: A100-SXM4-40GB}
    network:
      host_name: "{host}-hsn0"
      nccl_socket_ifname: hsn
      gloo_socket_ifname: hsn0
      nccl_net: AWS Libfabric
      fi_provider: cxi
      env: {FI_CXI_DISABLE_HOST_REGISTER: "1"}
    default: true
  gpu-hbm80g:
    routing: options
    options: {constraint: "gpu&hbm80g", qos: regular, exclusive: null}
    cores_per_node: 64
    threads_per_core: 2
    cpus_per_task: 32
    gpus: {count: 4, model: A100-SXM4-80GB}
launchers:
  srun: {kind: srun, rendezvous_env: true}
  torchrun: {kind: torchrun}
  mpirun: {kind: mpirun, rendezvous_env: true}
  horovodrun: {kind: horovodrun}
default_launcher: srun
env: {HF_HOME: "$SCRATCH/hf cache"}
slurm: {gpu_request: gpus_per_node, version: "23.02"}
"""

STUB = """#!{python}
import json, os, sys
keys = ("SRUN_CPUS_PER_TASK", "MASTER_ADDR", "MASTER_PORT", "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME", "NCCL_NET", "FI_PROVIDER", "FI_CXI_DISABLE_HOST_REGISTER",
        "HF_HOME")
record = {{"argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]],
          "env": {{k: os.environ[k] for k in keys if k in os.environ}}}}
with open(os.environ["STUB_LOG"], "a") as fh:
    fh.write(json.dumps(record) + "\\n")
"""


@pytest.fixture
def site_path(tmp_path: Path) -> Path:
    return write_profile(tmp_path / "sites", "hsn", CONSTRAINT_SITE)


def run_ok(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    res = cli(capsys, *args)
    assert res.rc == 0, (args, res.err)
    return res.out


def run_with_stubs(text: str, tmp_path: Path, hosts: str = "nid001\nnid002\n",
                   env: dict[str, str] | None = None) -> list[dict[str, object]]:
    """Run shell text with bash; scontrol prints ``hosts``, module does nothing, and srun,
    mpirun, horovodrun and torchrun record their argv and the variables they were given."""
    bindir = tmp_path / "stubbin"
    bindir.mkdir(exist_ok=True)
    for tool in ("srun", "mpirun", "horovodrun", "torchrun"):
        (bindir / tool).write_text(STUB.format(python=sys.executable), encoding="utf-8")
        (bindir / tool).chmod(0o755)
    (bindir / "module").write_text("#!/bin/bash\nexit 0\n", encoding="utf-8")
    (bindir / "module").chmod(0o755)
    (bindir / "scontrol").write_text("#!/bin/bash\nprintf '%s\\n' "
                                     + " ".join(hosts.split()) + "\n", encoding="utf-8")
    (bindir / "scontrol").chmod(0o755)
    log = tmp_path / "calls.jsonl"
    log.unlink(missing_ok=True)
    script = tmp_path / "run.sh"
    script.write_text(text, encoding="utf-8")
    full = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path), "STUB_LOG": str(log),
            "SLURM_JOB_NODELIST": "nid[001-002]", "SLURM_JOB_ID": "42",
            "SCRATCH": "/scratch/u", **(env or {})}
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=full,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def no_activate(out: str) -> str:
    """A job script without its source-the-environment line and the check that the
    environment is there (nothing to source here)."""
    return "\n".join(line for line in out.splitlines()
                     if not line.startswith(("source ", "[ -e ")))


def check_shell(text: str, tmp_path: Path) -> None:
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    if HAVE_SHELLCHECK:
        res = shellcheck(text if text.startswith("#!") else "#!/bin/bash\n" + text, tmp_path,
                         exclude=[])
        assert res.returncode == 0, res.stdout


# ============================================ 1. rendezvous on the high-speed network

@pytest.mark.parametrize("launcher", ["srun", "torchrun", "mpirun", "horovodrun"])
def test_every_launcher_form_names_hosts_on_the_high_speed_network(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site_path: Path,
        launcher: str) -> None:
    for kind in ("jobscript", "launch"):
        out = run_ok(capsys, kind, "--site", str(site_path), "-N", "2", "-l", launcher,
                     "--", "python", "train.py")
        check_shell(out, tmp_path)
        (call,) = run_with_stubs(no_activate(out), tmp_path)
        argv, env = call["argv"], call["env"]
        assert isinstance(argv, list) and isinstance(env, dict)
        if launcher in ("mpirun", "horovodrun"):
            # the MPI that starts the ranks inside the allocation knows Slurm's names only
            hosts = argv.pop(argv.index("-H") + 1)
            assert hosts == "nid001:4,nid002:4", (kind, call)
        text = " ".join(argv)
        if launcher != "horovodrun":  # no rendezvous of its own: Horovod's is MPI's
            assert "nid001-hsn0" in text or env.get("MASTER_ADDR") == "nid001-hsn0", call
        assert not re.search(r"nid00[12](?!-hsn0)", text + str(env)), (kind, call)
        if launcher == "torchrun":
            assert "--rdzv_endpoint=nid001-hsn0:29500" in argv
        if launcher == "mpirun":
            assert "MASTER_ADDR=nid001-hsn0" in argv
        if launcher == "horovodrun":  # the partition's Gloo interface: no discovery by ssh
            assert argv[argv.index("--network-interfaces") + 1] == "hsn0"


@pytest.mark.parametrize("controller", ["gloo", "null"])
def test_horovodrun_over_gloo_starts_ranks_on_the_high_speed_names(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site_path: Path,
        controller: str) -> None:
    """horovodrun starts Gloo ranks over ssh itself, so its hosts are the fast names: when
    its controller is gloo, or when the site's Horovod has no MPI controller to run
    instead."""
    controllers = "[mpi, gloo]" if controller == "gloo" else "[gloo]"
    path = write_profile(tmp_path / "sites", "gloo", (
        f"extends: {site_path}\nname: gloo\nhorovod: {{controllers: {controllers}}}\n"
        f"launchers:\n  horovodrun: {{kind: horovodrun, controller: {controller}}}\n"))
    out = run_ok(capsys, "launch", "--site", str(path), "-N", "2", "-l", "horovodrun",
                 "--", "python", "x.py")
    (call,) = run_with_stubs(out, tmp_path)
    argv = call["argv"]
    assert isinstance(argv, list) and argv[argv.index("-H") + 1] == "nid001-hsn0:4,nid002-hsn0:4"


def test_hosts_given_on_the_command_line_are_renamed_too(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site_path: Path) -> None:
    path = write_profile(tmp_path / "sites", "given", (
        f"extends: {site_path}\nname: given\n"
        "launchers:\n  horovodrun: {kind: horovodrun, controller: gloo}\n"))
    out = run_ok(capsys, "launch", "--site", str(path), "-N", "2", "-l", "horovodrun",
                 "-H", "nid[007-008]", "--", "python", "train.py")
    assert words(out.splitlines()[-1])[:5] == [
        "horovodrun", "-np", "8", "-H", "nid007-hsn0:4,nid008-hsn0:4"]
    # one node: horovodrun's local hosts need the loopback, not the partition's interface
    one = run_ok(capsys, "launch", "--site", str(site_path), "-N", "1", "-l", "horovodrun",
                 "--", "python", "train.py")
    assert "--network-interfaces" not in one
    # a partition that names no Gloo interface leaves the discovery to horovodrun
    plain = run_ok(capsys, "launch", "--site", str(site_path), "-N", "2", "-l", "horovodrun",
                   "-p", "gpu-hbm80g", "--", "python", "train.py")
    assert "--network-interfaces" not in plain


def test_a_launcher_can_keep_the_schedulers_names(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path, site_path: Path) -> None:
    path = write_profile(tmp_path / "sites", "keep", (
        f"extends: {site_path}\nname: keep\n"
        "launchers:\n  mpirun: {kind: mpirun, host_name: '{host}'}\n"))
    out = run_ok(capsys, "launch", "--site", str(path), "-N", "2", "-l", "mpirun",
                 "--", "python", "x.py")
    (call,) = run_with_stubs(out, tmp_path)
    argv = call["argv"]
    assert isinstance(argv, list) and argv[argv.index("-H") + 1] == "nid001:4,nid002:4"


def test_a_hostname_rendezvous_uses_the_short_name_on_the_network(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site_path: Path) -> None:
    path = write_profile(tmp_path / "sites", "hostname", (
        f"extends: {site_path}\nname: hostname\n"
        "launchers:\n  torchrun: {kind: torchrun, rdzv_host: hostname}\n"))
    out = run_ok(capsys, "launch", "--site", str(path), "-N", "2", "-l", "torchrun",
                 "--", "python", "x.py")
    bindir = tmp_path / "hn"
    bindir.mkdir()
    (bindir / "hostname").write_text(
        '#!/bin/bash\n[ "$1" = -s ] && echo nid009 || echo nid009.cluster.example\n')
    (bindir / "hostname").chmod(0o755)
    path_var = f"{bindir}:{tmp_path}/stubbin:/usr/bin:/bin"
    (call,) = run_with_stubs(out, tmp_path, env={"PATH": path_var})
    assert "--rdzv_endpoint=nid009-hsn0:29500" in call["argv"]


def _pbs_mpirun_argv(capsys: pytest.CaptureFixture[str], tmp_path: Path, path: Path,
                     nodes: str = "se001\nse001\nse002\nse002\n") -> tuple[list[str], Path]:
    """(mpirun's argv, the PBS node file it was given) of the profile's 2-node job script,
    run against stub tools with a node file of se001 and se002, two slots each."""
    out = run_ok(capsys, "jobscript", "--site", str(path), "-N", "2", "-o", "account=a",
                 "--no-activate", "--", "python", "x.py")
    check_shell(out, tmp_path)
    nodefile = tmp_path / "nodefile"
    nodefile.write_text(nodes)
    (call,) = run_with_stubs(out.replace('cd "$PBS_O_WORKDIR"', ""), tmp_path,
                             env={"PBS_NODEFILE": str(nodefile)})
    argv = call["argv"]
    assert isinstance(argv, list)
    return argv, nodefile


def test_mpirun_keeps_the_pbs_host_file_and_rendezvous_on_the_fast_name(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_profile(tmp_path, "sock", (
        "extends: sockeye\nname: sock\n"
        "partitions:\n  gpu:\n    network: {host_name: '{host}-ib'}\n"))
    argv, nodefile = _pbs_mpirun_argv(capsys, tmp_path, path)
    assert argv[argv.index("--hostfile") + 1] == str(nodefile)  # the allocation's names
    assert "MASTER_ADDR=se001-ib" in argv


def test_a_launchers_own_host_name_renames_the_pbs_host_file(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_profile(tmp_path, "sock", (
        "extends: sockeye\nname: sock\n"
        "launchers:\n  mpirun: {kind: mpirun, hosts: hostfile, hostfile: $PBS_NODEFILE,\n"
        "           oversubscribe: true, rendezvous_env: true, host_name: '{host}-ib'}\n"))
    argv, nodefile = _pbs_mpirun_argv(capsys, tmp_path, path)
    renamed = Path(argv[argv.index("--hostfile") + 1]).read_text()
    assert renamed == "se001-ib\nse001-ib\nse002-ib\nse002-ib\n"
    assert "MASTER_ADDR=se001-ib" in argv


def test_a_host_name_template_applies_to_the_short_name_of_a_full_name(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    full = "se001.cl.example\nse001.cl.example\nse002.cl.example\nse002.cl.example\n"
    path = write_profile(tmp_path, "sockd", (
        "extends: sockeye\nname: sockd\n"
        "partitions:\n  gpu:\n    network: {host_name: '{host}.ib.example'}\n"))
    argv, _ = _pbs_mpirun_argv(capsys, tmp_path, path, full)
    assert "MASTER_ADDR=se001.ib.example" in argv  # not se001.cl.example.ib.example
    path = write_profile(tmp_path, "sockf", (
        "extends: sockeye\nname: sockf\n"
        "launchers:\n  mpirun: {kind: mpirun, hosts: hostfile, hostfile: $PBS_NODEFILE,\n"
        "           oversubscribe: true, rendezvous_env: true, host_name: '{host}-ib'}\n"))
    argv, _ = _pbs_mpirun_argv(capsys, tmp_path, path, full.replace("\n", " slots=1\n"))
    renamed = Path(argv[argv.index("--hostfile") + 1]).read_text()
    assert renamed == "se001-ib slots=1\nse001-ib slots=1\nse002-ib slots=1\nse002-ib slots=1\n"
    assert "MASTER_ADDR=se001-ib" in argv
    out = run_ok(capsys, "launch", "--site", str(path), "-N", "2", "-l", "mpirun",
                 "-H", "se007.cl.example,se008.cl.example", "-o", "account=a",
                 "--", "python", "x.py")
    assert "MASTER_ADDR=se007-ib" in out


def test_a_pbs_job_without_a_launcher_hostfile_gets_renamed_hosts(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_profile(tmp_path, "sock2", (
        "extends: sockeye\nname: sock2\n"
        "launchers:\n  mpirun: {kind: mpirun, hosts: list, hostfile: null,"
        " host_name: 'ib-{host}'}\n"))
    req = JobRequest(site=load_site(str(path)), nodes=2, command=("python", "x.py"),
                     options={"account": "a"})
    assert "pbs-slots" not in {f.code for f in lint(req)}  # -H host:slots, not the file
    out = run_ok(capsys, "launch", "--site", str(path), "-N", "2", "-o", "account=a",
                 "--", "python", "x.py")
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("se001\nse001\nse002\nse002\n")
    (call,) = run_with_stubs(out, tmp_path, env={"PBS_NODEFILE": str(nodefile)})
    argv = call["argv"]
    assert isinstance(argv, list) and argv[argv.index("-H") + 1] == "ib-se001:4,ib-se002:4"


def test_network_settings_reach_the_ranks_in_every_form(capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path,
                                                        site_path: Path) -> None:
    want = {"NCCL_SOCKET_IFNAME": "hsn", "GLOO_SOCKET_IFNAME": "hsn0",
            "NCCL_NET": "AWS Libfabric", "FI_PROVIDER": "cxi",
            "FI_CXI_DISABLE_HOST_REGISTER": "1"}
    for kind in ("jobscript", "launch"):
        out = run_ok(capsys, kind, "--site", str(site_path), "-N", "2", "-l", "mpirun",
                     "--", "python", "x.py")
        (call,) = run_with_stubs(no_activate(out), tmp_path)
        env, argv = call["env"], call["argv"]
        assert isinstance(env, dict) and isinstance(argv, list)
        assert {k: env.get(k) for k in want} == want
        for name in want:  # mpirun passes them on to ranks it starts through ssh
            assert any(argv[i:i + 2] == ["-x", name] for i in range(len(argv)))
    guide = run_ok(capsys, "guide", "--site", str(site_path))
    for line in lines_starting(run_ok(capsys, "launch", "--site", str(site_path), "--",
                                      "python", "x.py"), "export "):
        assert line in guide


def test_a_host_name_template_must_be_a_name_around_host(tmp_path: Path) -> None:
    for bad in ("{host} -ib", "$(reboot){host}", "ib", "{host}{host}", "{node}-ib"):
        path = write_profile(tmp_path, "bad", (
            "extends: local\npartitions:\n  local:\n    network:\n"
            f"      host_name: {json.dumps(bad)}\n"))
        (err,) = check_file(path)
        assert err.line == 5 and "host name template" in err.problem, bad


# ==================================== 2. partitions that are kinds of node; flag options

def test_a_kind_of_node_has_its_own_directives_and_no_partition(
        capsys: pytest.CaptureFixture[str], site_path: Path) -> None:
    out = run_ok(capsys, "jobscript", "--site", str(site_path), "-p", "gpu-hbm80g",
                 "--", "python", "x.py")
    d = directives(out)
    assert "partition" not in d
    assert d["constraint"] == "gpu&hbm80g" and d["qos"] == "regular"
    assert "exclusive" in d and d["exclusive"] is None  # a flag: #SBATCH --exclusive
    assert "#SBATCH --exclusive" in out.splitlines()
    alloc = run_ok(capsys, "launch", "--site", str(site_path), "-p", "gpu-hbm80g",
                   "--allocate", "--", "python", "x.py").splitlines()[0]
    assert "--partition" not in alloc and {"--constraint=gpu&hbm80g", "--qos=regular",
                                           "--exclusive"} <= set(words(alloc))


def test_an_lsf_kind_of_node_asks_for_no_queue(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    path = write_profile(tmp_path, "lsfk", (
        "extends: lsf-example\nname: lsfk\npartitions:\n"
        "  gpuv100: {routing: options, options: {resource: 'select[gpu_v100]'}}\n"))
    out = run_ok(capsys, "jobscript", "--site", str(path), "--", "python", "x.py")
    assert "#BSUB -q" not in out and '#BSUB -R "select[gpu_v100]"' in out


SINFO_NODES = """\
nid001 idle gpu,hbm80g
nid001 idle gpu,hbm80g
nid002 mix gpu
nid003 drain gpu,hbm80g
nid004 idle cpu
"""


@pytest.mark.parametrize(("picks", "nodes"), [
    ({"constraint": "gpu", "qos": "regular"}, ["nid001", "nid002"]),
    ({"constraint": "gpu&hbm80g"}, ["nid001"]),            # nid003 is drained
    ({"constraint": "hbm80g|cpu"}, ["nid001", "nid004"]),
    ({"partition": "batch"}, ["nid001", "nid002", "nid004"]),
    ({"qos": "regular"}, None),                             # Slurm's default partition
    ({"constraint": "[gpu*2&hbm80g]"}, None),               # not evaluated: unknown
])
def test_the_nodes_of_a_kind_of_node_are_found_by_their_features(
        tmp_path: Path, picks: dict[str, str], nodes: list[str] | None) -> None:
    """`validate --partition KIND` finds a routed kind's nodes (links, pernode): not with
    `sinfo -p KIND`, which names no partition, but by the features its constraint asks."""
    from hpcprov.schedulers.slurm import SlurmExecutor

    log = tmp_path / "sinfo.args"
    stub = tmp_path / "bin" / "sinfo"
    stub.parent.mkdir()
    stub.write_text(f'#!/bin/bash\necho "$*" >> {log}\ncat <<\'EOF\'\n{SINFO_NODES}EOF\n')
    stub.chmod(0o755)
    env = {"PATH": f"{stub.parent}:/usr/bin:/bin"}
    assert SlurmExecutor(env).usable_nodes("gpu", picks) == nodes
    if nodes is not None:
        want = ["-p", "batch"] if "partition" in picks else []
        assert log.read_text().split() == ["-h", "-N", *want, "-o", "%N", "%t", "%f"]


def test_a_flag_option_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_ok(capsys, "jobscript", "--site", "neuron", "-o", "exclusive", "--",
                 "python", "x.py")
    assert "#SBATCH --exclusive" in out.splitlines()


def test_a_routed_partition_needs_options_and_a_flag_no_value(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "r", "extends: local\npartitions:\n  local:\n"
                                        "    routing: options\n")
    (err,) = check_file(path)
    assert err.line == 3 and "routing: options needs the options" in err.problem
    path = write_profile(tmp_path, "f", "extends: neuron\npartitions:\n  skl:\n"
                                        "    options: {exclusive: true}\n")
    (err,) = check_file(path)
    assert err.line == 4 and "exclusive: null" in err.problem


def test_a_one_letter_option_gets_its_long_name(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    res = cli(capsys, "jobscript", "--site", "neuron", "-o", "C=gpu", "--", "python", "x.py")
    assert res.rc == 2 and res.out == ""
    assert "--C=gpu" in res.err and "use the long name: constraint=gpu" in res.err
    path = write_profile(tmp_path, "short", ("extends: neuron\npartitions:\n  skl:\n"
                                             "    options: {q: regular}\n"))
    (err,) = site_check_errors(path)
    assert err.line == 3 and "partitions.skl" in err.problem and "qos=regular" in err.problem
    res = cli(capsys, "site", "check", str(path))
    assert res.rc == 2 and f"{path}:3:" in res.err


# ======================================================== 3. CPUs (threads) vs cores

def _request(path: Path, **kw: object) -> JobRequest:
    return JobRequest(site=load_site(str(path)), command=("python", "x.py"), **kw)


def test_hardware_threads_are_cpus(site_path: Path, tmp_path: Path) -> None:
    # 64 cores x 2 threads: -c 32 x 4 tasks = 128 CPUs fits
    assert not [f for f in lint(_request(site_path, nodes=2)) if f.level == "error"]
    path = write_profile(tmp_path, "nosmt", (f"extends: {site_path}\nname: nosmt\n"
                                             "partitions:\n  gpu: {threads_per_core: 1}\n"))
    (f,) = [f for f in lint(_request(path, nodes=2)) if f.code == "cores-exceed"]
    assert "64 cores" in f.message and "threads_per_core: 2" in f.fix
    (f,) = [f for f in lint(_request(site_path, nodes=2, cpus_per_task=33))
            if f.code == "cores-exceed"]
    assert "128 CPUs (64 cores x 2 threads)" in f.message


def test_site_check_fails_a_profile_whose_default_job_cannot_run(
        capsys: pytest.CaptureFixture[str], site_path: Path, tmp_path: Path) -> None:
    path = write_profile(tmp_path, "nosmt", (f"extends: {site_path}\nname: nosmt\n"
                                             "partitions:\n  gpu-hbm80g:\n"
                                             "    threads_per_core: 1\n"))
    assert check_file(path) == []  # it validates ...
    res = cli(capsys, "site", "check", str(path))
    assert res.rc == 2  # ... but no job from its defaults could run on gpu-hbm80g
    # (its Horovod's inputs are warned of: the profile names no framework)
    (line,) = [ln for ln in res.err_lines if not ln.startswith("hpcprov: warning:")]
    assert line.startswith(f"{path}:4: partitions.gpu-hbm80g: its smallest job")
    assert "exceed the 64 cores" in line
    assert cli(capsys, "site", "check", str(site_path)).rc == 0


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "sites").glob("*.yaml")))
def test_every_bundled_default_request_can_run(name: str) -> None:
    assert default_request_findings(load_site(name)) == []


# ================================================ 4. srun and the job's CPUs and GPUs

@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_every_srun_step_gets_the_jobs_cpus_and_gpu_binding(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site_path: Path,
        launcher: str) -> None:
    cpus = "32" if launcher == "srun" else "128"  # torchrun: one task per node, all ranks
    script = run_ok(capsys, "jobscript", "--site", str(site_path), "-N", "2", "-l", launcher,
                    "--", "python", "x.py")
    assert directives(script)["cpus-per-task"] == cpus
    assert directives(script)["gpu-bind"] == "none"
    launch = run_ok(capsys, "launch", "--site", str(site_path), "-N", "2", "-l", launcher,
                    "--allocate", "--", "python", "x.py")
    salloc = words(launch.splitlines()[0])
    assert {f"--cpus-per-task={cpus}", "--gpu-bind=none", "--nodes=2"} <= set(salloc)
    assert salloc[0] == "salloc" and any(w.startswith("--ntasks-per-node=") for w in salloc)
    interactive = "\n".join(launch.splitlines()[1:])
    for text in (no_activate(script), interactive):
        (call,) = run_with_stubs(text, tmp_path)
        assert call["argv"][0] == "srun" and "--gpu-bind=none" in call["argv"]
        assert call["env"]["SRUN_CPUS_PER_TASK"] == cpus


def test_old_slurm_inherits_cpus_and_mpirun_is_left_alone(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site_path: Path) -> None:
    old = write_profile(tmp_path, "old", (f"extends: {site_path}\nname: old\n"
                                          "slurm: {version: '21.08.8'}\n"))
    out = run_ok(capsys, "jobscript", "--site", str(old), "--", "python", "x.py")
    assert "SRUN_CPUS_PER_TASK" not in out
    # mpirun starts its daemons with srun, one per node: none may be held to -c, even
    # after an srun line typed before it in the same allocation
    out = run_ok(capsys, "jobscript", "--site", str(site_path), "-l", "mpirun", "--",
                 "python", "x.py")
    assert "export SRUN_CPUS_PER_TASK" not in out
    typed = [run_ok(capsys, "launch", "--site", str(site_path), "-l", launcher, "--",
                    "python", "x.py") for launcher in ("srun", "mpirun", "horovodrun")]
    srun, mpirun, horovodrun = run_with_stubs("".join(typed), tmp_path)
    assert srun["env"]["SRUN_CPUS_PER_TASK"] == "32"
    assert "SRUN_CPUS_PER_TASK" not in mpirun["env"]
    assert "SRUN_CPUS_PER_TASK" not in horovodrun["env"]
    # an unknown version is taken as a recent one
    assert "export SRUN_CPUS_PER_TASK=4" in run_ok(capsys, "jobscript", "--site", "neuron",
                                                    "--", "python", "x.py").splitlines()


def test_the_slurm_version_is_checked(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "v", "extends: neuron\nslurm: {version: 'latest'}\n")
    (err,) = check_file(path)
    assert err.line == 2 and "slurm.version" in err.problem and "'23.02'" in err.problem
    path = write_profile(tmp_path, "f", "extends: neuron\nslurm: {version: 23.02}\n")
    (err,) = check_file(path)
    assert "quote it" in err.problem


# ================================================================= 5. one meaning for env

def test_env_means_the_same_in_the_job_the_launch_and_the_guide(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, site_path: Path) -> None:
    line = 'export HF_HOME="${SCRATCH}/hf cache"'
    assert env_lines({"HF_HOME": "$SCRATCH/hf cache"}) == [line]  # what provision calls
    script = run_ok(capsys, "jobscript", "--site", str(site_path), "--", "python", "x.py")
    launch = run_ok(capsys, "launch", "--site", str(site_path), "--", "python", "x.py")
    guide = run_ok(capsys, "guide", "--site", str(site_path))
    for text in (script, launch, guide):
        assert line in text.splitlines()
    for text in (no_activate(script), launch):
        (call,) = run_with_stubs(text, tmp_path)
        assert call["env"]["HF_HOME"] == "/scratch/u/hf cache"


def test_commands_in_env_are_text_and_site_check_refuses_them(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_profile(tmp_path, "cmd", (
        "extends: local\nenv:\n  IFACE: \"$(ls /sys/class/net | grep ib)\"\n"
        "  OLD: '`hostname`'\n  DEFAULTED: '${X:-y}'\n  FINE: '${HOME}/x $USER'\n"))
    assert set(env_problems(load_site(str(path)).env)) == {"IFACE", "OLD", "DEFAULTED"}
    res = cli(capsys, "site", "check", str(path))
    assert res.rc == 2 and len(res.err_lines) == 3
    assert res.err_lines[0].startswith(f"{path}:3: env.IFACE: '$(' would be written as text")
    out = run_ok(capsys, "launch", "--site", str(path), "--", "python", "x.py")
    marker = tmp_path / "ran"
    run_with_stubs(out.replace("ls /sys", f"touch {marker}; ls /sys"), tmp_path)
    assert not marker.exists()


# ============================================= 7. conda: channels, terms, policy, installer

CONDA = "extends: local\nname: c\npython:\n  backend: conda\n  conda:\n"


@pytest.mark.parametrize(("conda", "refused"), [
    ("    channels: [pytorch]\n", None),
    ("    channels: [conda-forge, defaults]\n", "defaults"),
    ("    channels: [https://repo.anaconda.com/pkgs/main]\n", "repo.anaconda.com/pkgs/main"),
    ("    python: '3.11'\n", "defaults"),  # none named: Miniconda's own, conda's defaults
    ("    installer_url: https://x/Miniforge3-24.9.2-0-Linux-x86_64.sh\n", None),
    ("    channels: [defaults]\n    accept_tos: true\n", None),
])
def test_channels_under_anacondas_terms_need_them_accepted(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, conda: str,
        refused: str | None) -> None:
    path = write_profile(tmp_path, "c", CONDA + conda)
    res = cli(capsys, "site", "check", str(path))
    if refused is None:
        assert res.rc == 0, res.err
        return
    assert res.rc == 2 and res.err.count("\n") == 1, res.err
    assert f"{path}:" in res.err and refused in res.err
    assert "accept_tos: true" in res.err and "conda-forge" in res.err


def test_conda_is_given_exactly_the_profiles_channels_and_accepts_what_it_says(
        tmp_path: Path) -> None:
    from hpcprov.provision.plan import build_plan

    path = write_profile(tmp_path, "c", CONDA + (
        "    channels: [conda-forge, defaults]\n    accept_tos: true\n"
        "  frameworks:\n    pytorch: {version: '2.1.0', installer: conda, channel: pytorch}\n"))
    steps = {s.id: s for s in build_plan(load_site(str(path)), "/p").steps}
    (create,) = [ln for ln in steps["create-env"].lines if ln.startswith("conda create")]
    assert words(create)[-5:] == ["--override-channels", "-c", "conda-forge", "-c", "defaults"]
    (install,) = [ln for ln in steps["install-frameworks"].lines
                  if ln.startswith("conda install")]
    assert words(install)[3:10] == ["--override-channels", "-c", "pytorch", "-c", "conda-forge",
                                    "-c", "defaults"]
    assert 'hpcprov_conda_accept_tos "$CONDA_ROOT/bin/conda" defaults' in \
        steps["install-conda"].lines
    # channels that need no terms: nothing accepted
    plain = write_profile(tmp_path, "p", CONDA + "    channels: [conda-forge]\n")
    steps = {s.id: s for s in build_plan(load_site(str(plain)), "/p").steps}
    assert not [ln for ln in steps["install-conda"].lines if "accept_tos" in ln]


def test_accepting_the_terms_runs_condas_tos_accept_for_each_channel(tmp_path: Path) -> None:
    """The shell library's function against a stand-in conda, with and without conda's
    Terms of Service plugin."""
    from hpcprov.provision import library

    conda = tmp_path / "conda"
    log = tmp_path / "log"
    for has_plugin in (True, False):
        conda.write_text("#!/bin/bash\n"
                         f'[ "$1 $2" = "tos --help" ] && exit {0 if has_plugin else 2}\n'
                         f'echo "$*" >> {log}\n')
        conda.chmod(0o755)
        proc = subprocess.run(
            ["bash", "-c", library.functions()["hpcprov_conda_accept_tos"]
             + f"\nhpcprov_conda_accept_tos {conda} defaults "
             "https://repo.anaconda.com/pkgs/msys2"],
            capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        if has_plugin:
            assert log.read_text().splitlines() == [
                f"tos accept --override-channels --channel https://repo.anaconda.com/pkgs/{c}"
                for c in ("main", "r", "msys2")]
            log.unlink()
        else:
            assert not log.exists() and "no 'tos' command" in proc.stdout


def test_conda_is_refused_where_the_site_forbids_it_and_in_a_venv(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_profile(tmp_path, "n", (
        "extends: neuron\nname: n\npolicies: {conda_allowed: false}\n"))
    res = cli(capsys, "site", "check", str(path))
    assert res.rc == 2 and "policies.conda_allowed is false" in res.err
    assert "python.backend: venv" in res.err
    path = write_profile(tmp_path, "v", (
        "extends: local\nname: v\npython:\n  frameworks:\n"
        "    pytorch: {version: '2.1.0', installer: conda}\n"))
    res = cli(capsys, "site", "check", str(path))
    assert res.rc == 2 and "installer conda needs backend: conda" in res.err


def test_the_bundled_conda_installer_is_pinned_with_its_checksum() -> None:
    for name in ("neuron",):
        conda = load_site(name).python.conda
        assert "latest" not in conda.installer_url
        assert conda.installer_sha256 and len(conda.installer_sha256) == 64


# ===================================== 7. frameworks from the site's modules (venv over)

MODULE_FW = """\
extends: local
name: m
modules:
  system: lmod
  build: {load: [python/3.11, pytorch/2.1.0]}
  runtime: {load: [python/3.11, pytorch/2.1.0]}
python:
  venv: {system_site_packages: true}
  frameworks:
    pytorch: {version: "2.1.0", installer: module, module: pytorch/2.1.0}
"""


@pytest.mark.parametrize(("change", "problem"), [
    (("system_site_packages: true", "system_site_packages: false"),
     "only with venv.system_site_packages: true"),
    (("runtime: {load: [python/3.11, pytorch/2.1.0]}", "runtime: {load: [python/3.11]}"),
     "add it to modules.runtime.load"),
    ((", module: pytorch/2.1.0}", "}"), "installer: module needs module:"),
    (("installer: module, ", ""), "module: is read only with installer: module"),
])
def test_a_framework_from_a_module_must_be_visible_and_loaded(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, change: tuple[str, str],
        problem: str) -> None:
    assert cli(capsys, "site", "check", str(write_profile(tmp_path, "m", MODULE_FW))).rc == 0
    path = write_profile(tmp_path, "bad", MODULE_FW.replace(*change).replace("name: m",
                                                                             "name: bad"))
    res = cli(capsys, "site", "check", str(path))
    assert res.rc == 2 and problem in res.err and res.err.count("\n") == 1, res.err


def test_setup_checks_the_modules_framework_instead_of_installing_it(tmp_path: Path) -> None:
    from hpcprov.provision.plan import build_plan

    site = load_site(str(write_profile(tmp_path, "m", MODULE_FW)))
    steps = {s.id: s for s in build_plan(site, "/p").steps}
    lines = steps["install-frameworks"].lines
    assert "hpcprov_module_framework torch 2.1.0 pytorch/2.1.0" in lines
    assert not [ln for ln in lines if "torch==" in ln]  # nothing installs torch
    assert any("--system-site-packages" in ln for ln in steps["create-env"].lines)
    # the wheelhouse key says where the framework came from: the module's torch is another
    # build than pip's of the same version (a profile installing everything adds nothing)
    from hpcprov.provision.horovod_steps import key_line

    line = key_line(site)
    state = tmp_path / "state"
    state.mkdir()
    proc = subprocess.run(["bash", "-c", line.split(" && ", 1)[1]], capture_output=True,
                          text=True, env={"STATE": str(state), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert (state / "horovod-key.txt").read_text() == "from=pytorch=module:pytorch/2.1.0\n"
    assert " && " not in key_line(load_site("local"))


@pytest.mark.parametrize(("where", "version", "ok", "needle"), [
    ("module", "2.1.0", True, "torch 2.1.0+cu121 from module pytorch/2.1.0"),
    ("module", "2.1", True, "torch 2.1.0+cu121 from module pytorch/2.1.0"),
    ("module", "2.2.0", False, "module pytorch/2.1.0 gives torch 2.1.0+cu121, but the "
     "profile says 2.2.0"),
    ("venv", "2.1.0", False, "is imported from the environment"),
    ("broken", "2.1.0", False, "torch does not import in the environment"),
])
def test_the_module_framework_check_runs_against_a_real_python(
        tmp_path: Path, where: str, version: str, ok: bool, needle: str) -> None:
    """hpcprov_module_framework with a real python: torch is a package in a folder on
    PYTHONPATH (what a module sets), inside $ENV_DIR (what pip would have done), or one
    that fails to import (a module whose libraries are missing)."""
    from hpcprov.provision import library

    env_dir = tmp_path / "venv"
    folder = {"module": tmp_path / "module-site", "venv": env_dir / "site",
              "broken": tmp_path / "broken"}[where]
    (folder / "torch").mkdir(parents=True)
    (folder / "torch" / "__init__.py").write_text(
        'raise ImportError("libcudart.so.12: cannot open shared object file")\n'
        if where == "broken" else '__version__ = "2.1.0+cu121"\n')
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python").symlink_to(sys.executable)
    functions = library.functions()
    script = "\n".join([functions["hpcprov_error"], functions["hpcprov_module_framework"],
                        f"hpcprov_module_framework torch {version} pytorch/2.1.0\n"])
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{bindir}:/usr/bin:/bin", "ENV_DIR": str(env_dir),
                               "PYTHONPATH": str(folder)})
    assert (proc.returncode == 0) is ok, proc.stderr
    assert needle in (proc.stdout if ok else proc.stderr)


CONDA_MODULE = """\
extends: neuron
name: cm
modules:
  build: {load: [gcc/10.2.0, cuda/11.4, cudampi/openmpi-4.1.1, cmake/3.16.9, anaconda3/2024.06]}
  runtime: {purge: true, load: [gcc/10.2.0, cuda/11.4, cudampi/openmpi-4.1.1, anaconda3/2024.06]}
python:
  conda: {module: anaconda3/2024.06}
"""


def test_conda_from_the_sites_module_downloads_nothing_and_jobs_use_its_environment(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, stubs: Stubs) -> None:
    path = write_profile(tmp_path / "sites", "cm", CONDA_MODULE)
    prefix = tmp_path / "prefix"
    setup = run_ok(capsys, "setup", "--site", str(path), "--prefix", str(prefix), "--dry-run")
    steps = stub_steps(setup)
    assert "download-installer" not in steps and "install-conda" not in steps
    assert "Miniconda3" not in setup and "CONDA_ROOT" not in setup
    proc = stubs.run(setup, *steps, name="setup.sh")
    assert proc.returncode == 0, proc.stderr
    (create,) = [c for c in stubs.calls("conda") if "create" in c]
    env_dir = str(prefix / "conda-envs" / "horovod")
    assert create[create.index("-p") + 1] == env_dir
    assert any(c[:2] == ["module", "load"] and "anaconda3/2024.06" in c
               for c in stubs.calls("module"))
    assert not stubs.calls("curl")
    job = run_ok(capsys, "jobscript", "--site", str(path), "--prefix", str(prefix),
                 "-o", "comment=pytorch", "--", "python", "train.py")
    assert f"conda activate {env_dir}" in job and 'eval "$(conda shell.bash hook)"' in job
    # the module must be loaded where the environment is used
    bad = write_profile(tmp_path / "sites", "bad", CONDA_MODULE.replace(
        ", anaconda3/2024.06]}\npython", "]}\npython").replace("name: cm", "name: bad"))
    res = cli(capsys, "site", "check", str(bad))
    assert res.rc == 2 and "python.conda.module is anaconda3/2024.06: add it to " \
        "modules.runtime.load" in res.err


# ============================================================== 8. containers, GPU binding

CONTAINERS = """\
extends: neuron
name: ct
containers:
  runtime: {runtime}
  module: {module}
  gpu_flag: null
  images:
    pytorch: docker:nvcr.io/nvidia/pytorch:24.01-py3
  default_image: pytorch
launchers:
  container: {{kind: container, runtime: {runtime}, args: []}}
python:
  backend: container
  container: {{image: pytorch, source: "docker:nvcr.io/nvidia/pytorch:24.01-py3"}}
horovod: {{source: container}}
"""


def test_a_container_job_loads_only_the_runtimes_module_and_no_host_python(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, stubs: Stubs) -> None:
    script = run_ok(capsys, "jobscript", "--site", "neuron", "-l", "container", "-N", "1",
                    "--", "python", "x.py")
    loads = [ln for ln in script.splitlines() if ln.startswith("module ")]
    assert loads == ["module purge", "module load singularity/3.9.7"]  # not gcc/cuda/mpi
    # the host's Python variables are gone before the ranks start in the container
    (stubs.bin / "srun").write_text(f'#!/bin/bash\necho "PP=${{PYTHONPATH-unset}} '
                                    f'VE=${{VIRTUAL_ENV-unset}}" > {stubs.work}/seen\n')
    proc = stubs.run(script, name="job.sh", extra_env={
        "PYTHONPATH": "/apps/python/site-packages", "VIRTUAL_ENV": "/home/u/venv",
        "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_ID": "1"})
    assert proc.returncode == 0, proc.stderr
    assert (stubs.work / "seen").read_text().split() == ["PP=unset", "VE=unset"]
    # a launcher may name its own module set
    path = write_profile(tmp_path, "own", (
        "extends: neuron\nname: own\nlaunchers:\n  container:\n    kind: container\n"
        "    runtime: singularity\n    args: [run]\n"
        "    modules: {purge: true, load: [cuda/11.4]}\n"))
    script = run_ok(capsys, "jobscript", "--site", str(path), "-l", "container", "--", "x")
    assert [ln for ln in script.splitlines() if ln.startswith("module ")] == [
        "module purge", "module load cuda/11.4 singularity/3.9.7"]


@pytest.mark.parametrize(("runtime", "launch", "pull", "check"), [
    ("shifter", ["shifter", "--image=docker:nvcr.io/nvidia/pytorch:24.01-py3", "python",
                 "x.py"],
     "shifterimg pull docker:nvcr.io/nvidia/pytorch:24.01-py3",
     "shifter --image=docker:nvcr.io/nvidia/pytorch:24.01-py3 horovodrun -cb"),
    # podman takes no Shifter name (docker:NAME) and runs no transport (docker://NAME) from
    # its store: the qualified name, in setup and in the job alike
    ("podman-hpc", ["podman-hpc", "run", "--rm", "--gpu",
                    "nvcr.io/nvidia/pytorch:24.01-py3", "python", "x.py"],
     "podman-hpc pull nvcr.io/nvidia/pytorch:24.01-py3",
     "podman-hpc run --rm nvcr.io/nvidia/pytorch:24.01-py3 horovodrun -cb"),
])
def test_hpe_cray_container_runtimes(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                     runtime: str, launch: list[str], pull: str,
                                     check: str) -> None:
    path = write_profile(tmp_path, "ct", CONTAINERS.format(runtime=runtime,
                                                           module=f"{runtime}/1.0"))
    assert cli(capsys, "site", "check", str(path)).rc == 0
    out = run_ok(capsys, "launch", "--site", str(path), "-N", "1", "-G", "2", "-l",
                 "container", "--", "python", "x.py")
    w = words(out.strip().splitlines()[-1])
    assert w[0] == "srun" and w[w.index(launch[0]):] == launch
    setup = run_ok(capsys, "setup", "--site", str(path), "--dry-run")
    assert pull in setup and check in setup
    assert f"module load {runtime}/1.0" in setup


@pytest.mark.parametrize(("args", "want"), [
    (["-G", "4"], "--gpus-per-task=1"),                       # 4 tasks, one GPU each
    (["-G", "4", "-l", "torchrun"], "--gpus-per-task=4"),     # one agent per node
    (["-G", "4", "--tasks-per-node", "2"], "--gpus-per-task=2"),
])
def test_gpus_per_task_is_a_gpu_request_form(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path, args: list[str],
                                             want: str) -> None:
    path = write_profile(tmp_path, "gt", ("extends: neuron\nname: gt\n"
                                          "slurm: {gpu_request: gpus_per_task}\n"))
    out = run_ok(capsys, "jobscript", "--site", str(path), "-N", "2", "-o", "comment=pytorch",
                 *args, "--", "python", "x.py")
    assert f"#SBATCH {want}" in out.splitlines()
    assert not [ln for ln in out.splitlines() if "--gres" in ln or "--gpus-per-node" in ln]
    res = cli(capsys, "jobscript", "--site", str(path), "-N", "2", "-o", "comment=pytorch", "-G",
              "4", "--tasks-per-node", "3", "--", "python", "x.py")
    assert res.rc == 2 and "gpus-per-task" in res.err and "do not divide" in res.err


# ================================================ 12. breadth without code changes

BREADTH = """\
name: br
extends: neuron
modules:
  use: [/apps/modules/all, "$HOME/modules"]
policies:
  proxy: {http: "http://proxy.example.org:3128", no_proxy: [localhost, .example.org]}
launchers:
  srun: {kind: srun, wrapper: [./select_gpu_device]}
  torchrun: {kind: torchrun, srun_args: [--exclusive]}
  container: {kind: container, srun_args: [--mpi=pmi2]}
"""


def test_module_folders_are_used_before_any_load(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    path = write_profile(tmp_path, "br", BREADTH)
    for out in (run_ok(capsys, "jobscript", "--site", str(path), "-o", "comment=pytorch",
                       "--", "python", "x.py"),
                run_ok(capsys, "setup", "--site", str(path), "--dry-run")):
        check_shell(out, tmp_path)
        lines = [ln.strip() for ln in out.splitlines()]
        uses = [i for i, ln in enumerate(lines) if ln.startswith("module use ")]
        loads = [i for i, ln in enumerate(lines) if ln.startswith("module load ")]
        assert [lines[i] for i in uses[:2]] == ["module use /apps/modules/all",
                                               'module use "${HOME}/modules"']
        assert uses and loads and uses[0] < loads[0]


def test_a_rank_wrapper_and_options_for_the_srun_in_front(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_profile(tmp_path, "br", BREADTH)
    srun = run_ok(capsys, "launch", "--site", str(path), "-N", "1", "-l", "srun", "--",
                  "python", "x.py").strip().splitlines()[-1]
    # the wrapper runs on each rank, through the rank contract (its $VARS: the rank's own)
    assert words(srun, shim=True)[-4:] == ["./select_gpu_device", "--", "python", "x.py"]
    torch = words(run_ok(capsys, "launch", "--site", str(path), "-N", "2", "-l", "torchrun",
                         "--", "python", "x.py").strip().splitlines()[-1])
    assert torch.index("--exclusive") < torch.index("torch.distributed.run")
    box = words(run_ok(capsys, "launch", "--site", str(path), "-N", "1", "-l", "container",
                       "--", "python", "x.py").strip().splitlines()[-1])
    assert box.index("--mpi=pmi2") < box.index("singularity")
    # a wrapper where the kind starts no rank itself is refused at its line
    bad = write_profile(tmp_path, "bad", BREADTH.replace("name: br", "name: bad").replace(
        "{kind: torchrun, srun_args: [--exclusive]}", "{kind: torchrun, wrapper: [./w]}"))
    (err,) = check_file(bad)
    assert "does not read wrapper" in err.problem


def test_setups_downloads_go_through_the_sites_proxy(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path, stubs: Stubs) -> None:
    path = write_profile(tmp_path, "br", BREADTH)
    setup = run_ok(capsys, "setup", "--site", str(path), "--dry-run")
    (stubs.bin / "curl").write_text(f'#!/bin/bash\necho "$https_proxy $HTTP_PROXY '
                                    f'$no_proxy" > {stubs.work}/seen\nexit 7\n')
    proc = stubs.run(setup, "download-installer", name="setup.sh")
    assert proc.returncode != 0  # the stub download fails; what it was given is the point
    assert (stubs.work / "seen").read_text().split() == [
        "http://proxy.example.org:3128", "http://proxy.example.org:3128",
        "localhost,.example.org"]


MPIEXEC = """\
name: mx
extends: neuron
launchers:
  mpiexec: {kind: mpiexec, rendezvous_env: true, args: [-bind-to, core]}
  pals: {kind: mpiexec, flavor: pals, args: [--cpu-bind, depth, --depth, "8"]}
"""


@pytest.mark.parametrize(("launcher", "want"), [
    ("mpiexec", ["mpiexec", "-n", "16", "-ppn", "8", "-bind-to", "core", "python", "x.py"]),
    ("pals", ["mpiexec", "-n", "16", "--ppn", "8", "--cpu-bind", "depth", "--depth", "8",
              "python", "x.py"]),
])
def test_mpiexec_of_mpich_intel_and_cray(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                         stubs: Stubs, launcher: str, want: list[str]) -> None:
    path = write_profile(tmp_path, "mx", MPIEXEC)
    script = run_ok(capsys, "jobscript", "--site", str(path), "-N", "2", "-l", launcher,
                    "-o", "comment=pytorch", "--no-activate", "--", "python", "x.py")
    check_shell(script, tmp_path)
    proc = stubs.run(script, name="job.sh", extra_env={"SLURM_JOB_NODELIST": "n[1-2]",
                                                       "SLURM_JOB_ID": "1"})
    assert proc.returncode == 0, proc.stderr
    (call,) = stubs.calls("mpiexec")
    assert unshimmed_argv(call) == want
    assert ("MASTER_ADDR=" in script) is (launcher == "mpiexec")


def test_jsrun_gives_each_rank_its_resource_set(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path, stubs: Stubs) -> None:
    path = write_profile(tmp_path, "js", (
        "name: js\nextends: lsf-example\nlaunchers:\n"
        "  jsrun: {kind: jsrun, rendezvous_env: true, args: [--bind=packed:7]}\n"))
    script = run_ok(capsys, "jobscript", "--site", str(path), "-N", "2", "-l", "jsrun",
                    "--no-activate", "--", "python", "x.py")
    check_shell(script, tmp_path)
    hosts = stubs.work / "hosts"
    hosts.write_text("batch1\nh1\nh1\nh2\nh2\n")
    proc = stubs.run(script, name="job.sh", extra_env={"LSB_DJOB_HOSTFILE": str(hosts),
                                                       "LSB_JOBID": "1"})
    assert proc.returncode == 0, proc.stderr
    call = unshimmed_argv(next(c for c in stubs.calls() if c[0] == "jsrun"))
    part = load_site(str(path)).partition(None)[1]
    per_node = part.gpus.count
    assert call[:6] == ["jsrun", f"--nrs={2 * per_node}", "--tasks_per_rs=1",
                        call[3], "--gpu_per_rs=1", f"--rs_per_host={per_node}"]
    assert call[3].startswith("--cpu_per_rs=") and call[-3:] == ["--bind=packed:7", "python",
                                                               "x.py"]


AMD = """\
name: amd
scheduler: slurm
partitions:
  gpu:
    nodes: 16
    cores_per_node: 64
    gpus: {count: 8, model: MI250X, vendor: amd}
    default: true
    network: {nccl_socket_ifname: hsn0}
python:
  frameworks:
    pytorch: {version: "2.4.1", packages: ["torch==2.4.1"]}
horovod: {gpu_operations: nccl}
launchers:
  mpirun: {kind: mpirun, set_cuda_visible_devices: true}
default_launcher: mpirun
"""


def test_amd_gpus_build_horovod_for_rocm_and_rccl(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    from hpcprov.provision.horovod import site_build_env
    from hpcprov.provision.horovod_steps import links_wheel_nccl
    from hpcprov.provision.plan import build_plan
    from hpcprov.provision.plan_lint import lint_plan

    path = write_profile(tmp_path, "amd", AMD)
    assert cli(capsys, "site", "check", str(path)).rc == 0
    site = load_site(str(path))
    env = site_build_env(site)
    assert env["HOROVOD_GPU"] == "ROCM" and env["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    assert "HOROVOD_BUILD_CUDA_CC_LIST" not in env and not links_wheel_nccl(site)
    assert not [f for f in lint_plan(build_plan(site), site) if f.code == "cuda-arch"]
    out = run_ok(capsys, "launch", "--site", str(path), "-N", "2", "--", "python", "x.py")
    last = words(out.strip().splitlines()[-1])
    assert "HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in last
    assert not [w for w in last if w.startswith("CUDA_VISIBLE_DEVICES")]
    # doctor counts AMD GPUs with rocm-smi (the vendor's count command)
    from hpcprov.provision import library

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "rocm-smi").write_text("#!/bin/bash\nprintf 'GPU[0]\\t: Device ID: 0x740c\\n"
                                     "GPU[0]\\t: Device Rev: 0x1\\nGPU[1]\\t: Device ID: "
                                     "0x740c\\n'\n")
    (bindir / "rocm-smi").chmod(0o755)
    from hpcprov.core.shell import join
    from hpcprov.site.gpu_vendors import VENDORS

    amd = VENDORS["amd"].counter  # what doctor passes for a site of AMD GPUs
    probe = subprocess.run(["bash", "-c", library.functions()["hpcprov_probe_host"]
                            + "\n" + join(["hpcprov_probe_host", amd.pattern, *amd.argv])],
                           capture_output=True, text=True,
                           env={"PATH": f"{bindir}:/usr/bin:/bin"}, timeout=30)
    assert "gpus=2" in probe.stdout.split(), probe.stdout + probe.stderr
    # one Horovod build cannot serve NVIDIA and AMD nodes
    both = write_profile(tmp_path, "both", AMD.replace("name: amd", "name: both").replace(
        "    default: true\n", "    default: true\n  v100:\n    nodes: 2\n"
        "    cores_per_node: 32\n    gpus: {count: 4, model: V100-SXM2}\n"))
    res = cli(capsys, "site", "check", str(both))
    assert res.rc == 2 and "GPUs of amd and nvidia" in res.err


SIZED = """\
name: sized
scheduler: pbs
partitions:
  small:
    nodes: 64
    cores_per_node: 48
    gpus: {count: 4}
    limits: {max_nodes_per_job: 4}
    default: true
  large:
    nodes: 64
    cores_per_node: 48
    gpus: {count: 4}
    limits: {min_nodes_per_job: 5, max_nodes_per_job: 32}
    by_job_size: true
  debug:
    nodes: 2
    cores_per_node: 48
    gpus: {count: 4}
launchers:
  mpirun: {kind: mpirun, oversubscribe: true}
default_launcher: mpirun
"""


@pytest.mark.parametrize(("args", "queue"), [
    (["-N", "2"], "small"), (["-N", "8"], "large"), (["-N", "2", "-p", "debug"], "debug"),
])
def test_a_queue_chosen_by_the_jobs_node_count(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path, args: list[str],
                                               queue: str) -> None:
    path = write_profile(tmp_path, "sized", SIZED)
    out = run_ok(capsys, "jobscript", "--site", str(path), *args, "--", "python", "x.py")
    # the default queue takes a job without -q (as PBS's default queue does); others named
    assert (f"#PBS -q {queue}" in out.splitlines()) is (queue != "small")
    assert f"partition {queue}:" in out


def test_a_job_too_small_for_a_queue_is_refused(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    path = write_profile(tmp_path, "sized", SIZED)
    res = cli(capsys, "jobscript", "--site", str(path), "-N", "2", "-p", "large", "--",
              "python", "x.py")
    assert res.rc == 2 and "large takes jobs of 5 nodes or more" in res.err
    res = cli(capsys, "jobscript", "--site", str(path), "-N", "40", "--", "python", "x.py")
    assert res.rc == 2 and "small allows 4 nodes per job" in res.err  # nothing fits: default


# ================================================================ 9. what cannot be said

@pytest.mark.parametrize(("launcher", "key"), [
    ("torchrun: {kind: torchrun, mpi: pmix}", "mpi"),
    ("container: {kind: container, runtime: singularity, rendezvous_env: true}",
     "rendezvous_env"),
    ("srun: {kind: srun, oversubscribe: true}", "oversubscribe"),
    ("horovodrun: {kind: horovodrun, port: 1234}", "port"),
])
def test_a_key_the_launchers_kind_ignores_is_refused_at_its_line(
        tmp_path: Path, launcher: str, key: str) -> None:
    """The refusal names every kind that reads the key, as the registry says (a new kind
    that reads it is named too, with no change here)."""
    kind = launcher.split("kind: ", 1)[1].split(",", 1)[0]
    assert kind in KINDS and kind not in readers(key)  # the case holds: the kind ignores it
    path = write_profile(tmp_path, "k", f"extends: local\nlaunchers:\n  {launcher}\n")
    (err,) = check_file(path)
    names = ", ".join(sorted(readers(key)))
    assert err.line == 3 and f"does not read {key} (only {names} launchers do)" in err.problem


def test_an_inherited_key_can_be_neutralised_when_the_kind_changes(tmp_path: Path) -> None:
    parent = write_profile(tmp_path, "parent", ("extends: local\nname: parent\nlaunchers:\n"
                                                "  run: {kind: mpirun, oversubscribe: true}\n"))
    child = write_profile(tmp_path, "child", (f"extends: {parent}\nname: child\nlaunchers:\n"
                                              "  run: {kind: srun}\n"))
    (err,) = check_file(child)
    assert "does not read oversubscribe" in err.problem
    child.write_text(f"extends: {parent}\nname: child\nlaunchers:\n"
                     "  run: {kind: srun, oversubscribe: false}\n")
    assert check_file(child) == []


def test_the_reference_lists_which_kind_reads_which_key() -> None:
    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    section = text.split("## Launcher kinds", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\w+) \| ([^|]+) \|", section, flags=re.M)
    assert {kind: set(re.findall(r"`(\w+)`", keys)) for kind, keys in rows
            if kind != "kind"} == {name: set(k.keys) for name, k in KINDS.items()}


def test_unverified_entries_must_name_keys(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "u", (
        "extends: neuron\nunverified:\n  - partitions.skl.nodes\n  - partitions.sk1.nodes\n"
        "  - slurm.gpu_request\n  - policies.compute_intenet\n"))
    errors = check_file(path)
    assert [(e.line, e.problem.split(":")[0]) for e in errors] == [
        (4, "unverified.1"), (6, "unverified.3")]
    assert "partitions has cas_v100nv_8" in errors[0].problem
    assert "compute_internet" in errors[1].problem


def test_an_unknown_node_count_lints_sensibly(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path, site_path: Path) -> None:
    # gpu-hbm80g publishes no count
    assert load_site(str(site_path)).partitions["gpu-hbm80g"].nodes is None
    one = lint(_request(site_path, partition="gpu-hbm80g"))
    assert [f for f in one if f.level == "error"] == [] and "nodes-unknown" not in {
        f.code for f in one}
    many = lint(_request(site_path, partition="gpu-hbm80g", nodes=64))
    assert {f.code: f.level for f in many}.get("nodes-unknown") == "warning"
    capped = write_profile(tmp_path, "capped", (
        f"extends: {site_path}\nname: capped\npartitions:\n"
        "  gpu-hbm80g: {limits: {max_nodes_per_job: 8}}\n"))
    assert "nodes-limit" in {f.code for f in lint(_request(capped, partition="gpu-hbm80g",
                                                           nodes=64))}
    guide = run_ok(capsys, "guide", "--site", str(site_path), "-p", "gpu-hbm80g")
    assert "| gpu-hbm80g | unknown | 64 (128 CPUs) |" in guide


# ======================================================= 10. guides that never lie

EXTRA_STUBS = ("bsub", "bjobs", "bkill", "blaunch", "jsrun", "shifter", "podman-hpc",
               "sinfo", "sacct", "scancel", "qdel", "pbsnodes", "flux", "qrsh", "qacct",
               "qconf", "qhost")


def _guide_commands(text: str) -> tuple[list[str], list[str]]:
    """(hpcprov commands, other shell blocks) a guide or site page prints."""
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    commands = [ln for b in blocks for ln in b.splitlines() if ln.startswith("hpcprov ")]
    commands += re.findall(r"`(hpcprov [^`]+)`", text)
    others = ["\n".join(ln for ln in b.splitlines() if not ln.startswith("hpcprov "))
              for b in blocks]
    return commands, others


@pytest.mark.parametrize("site", sorted(p.stem for p in (REPO / "sites").glob("*.yaml")))
def test_every_command_the_guide_and_the_site_page_print_runs(
        capsys: pytest.CaptureFixture[str], stubs: Stubs, site: str) -> None:
    """Run as printed: hpcprov's own commands in-process (setup as --dry-run: it would
    install), everything else in a shell against stub scheduler and launcher tools, for the
    guide of the site by name, by its profile's path, and the committed docs/sites page."""
    for name in EXTRA_STUBS:
        (stubs.bin / name).write_text("#!/bin/bash\nexit 0\n")
        (stubs.bin / name).chmod(0o755)
    (stubs.work / "train_hvd.sh").write_text("#!/bin/bash\n")
    pages = [cli(capsys, "guide", "--site", site).out,
             cli(capsys, "guide", "--site", str(REPO / "sites" / f"{site}.yaml")).out,
             (REPO / "docs" / "sites" / f"{site}.md").read_text()]
    for text in pages:
        commands, others = _guide_commands(text)
        assert any(" setup " in c for c in commands) and any(" jobscript " in c
                                                           for c in commands), text[:300]
        for command in commands:
            args = shlex.split(command)[1:]
            if args[0] == "setup":
                args.append("--dry-run")
            res = cli(capsys, *args)
            assert res.rc == 0, (command, res.err)
        for block in others:  # the activate file exists only after a real setup
            block = "\n".join(ln for ln in block.splitlines() if not ln.startswith("[ -e "))
            proc = stubs.run("source() { :; }\n" + block, name="block.sh", extra_env={
                "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_ID": "1", "PBS_NODEFILE": "/dev/null"})
            assert proc.returncode == 0, (block, proc.stderr)


def test_launch_inside_an_allocation_demands_no_allocation_option(
        capsys: pytest.CaptureFixture[str]) -> None:
    res = cli(capsys, "launch", "--site", "cc", "--", "python", "x.py")
    assert res.rc == 0 and "-m torch.distributed.run" in res.out, res.err
    res = cli(capsys, "launch", "--site", "cc", "--allocate", "--", "python", "x.py")
    assert res.rc == 2 and "--account is mandatory" in res.err


def test_with_json_an_error_is_a_json_object_on_stdout(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    res = cli(capsys, "jobscript", "--site", "cc", "--json", "--", "python", "x.py")
    assert res.rc == 2
    data = json.loads(res.out)
    assert data["ok"] is False and data["exit_code"] == 2 and "--account" in data["error"]
    res = cli(capsys, "site", "show", "no-such-site", "--json")
    assert res.rc != 0 and json.loads(res.out)["exit_code"] == res.rc
    # --json after -- belongs to the user's program
    res = cli(capsys, "jobscript", "--site", "cc", "--", "python", "x.py", "--json")
    assert res.rc == 2 and res.out == ""


# ============================================================ docs/onboarding.md examples

def _yaml_examples() -> list[str]:
    text = (ROOT / "docs" / "onboarding.md").read_text(encoding="utf-8")
    return [b for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
            if b.startswith("name:")]


def test_onboarding_examples_pass_site_check(tmp_path: Path) -> None:
    examples = _yaml_examples()
    assert examples, "docs/onboarding.md shows no complete profile"
    for i, text in enumerate(examples):
        path = write_profile(tmp_path, f"example{i}", text)
        assert [str(e) for e in site_check_errors(path)] == [], text


def test_onboarding_points_only_inside_the_repository() -> None:
    text = (ROOT / "docs" / "onboarding.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)", text):
        assert not re.match(r"[a-z]+://", target), target
        assert (ROOT / "docs" / target).resolve().is_relative_to(ROOT), target
        assert (ROOT / "docs" / target).exists(), target


def test_a_step_only_option_goes_to_the_steps_never_to_sbatch_or_salloc(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """sbatch and salloc refuse --cpu-bind ("unrecognized option"): a partition's cpu-bind
    (the route docs/onboarding.md documents) once failed every job of the partition."""
    path = write_profile(tmp_path, "bound", "extends: testbed\npartitions:\n  amd_a100nv_8:\n"
                         "    options: {cpu-bind: cores, gpu-bind: none}\n")
    script = cli(capsys, "jobscript", "--site", str(path), "-N", "2", "--",
                 "python", "train.py").out
    assert "cpu-bind" not in directives(script)
    assert directives(script)["gpu-bind"] == "none"  # sbatch takes this one
    (srun,) = [ln for ln in script.splitlines() if ln.startswith("srun ")]
    assert {"--cpu-bind=cores", "--gpu-bind=none"} <= set(words(srun))
    salloc = json.loads(cli(capsys, "launch", "--site", str(path), "-N", "2",
                            "--allocate", "--json", "--", "python", "train.py").out)
    assert not any("cpu-bind" in w for w in salloc["allocate"])
    assert "--cpu-bind=cores" in salloc["argv"]


def test_an_option_hpcprov_writes_itself_is_linted_against_forbidden_options(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A site that forbids --gres once got `#SBATCH --gres=gpu:1` under a guide saying it is
    forbidden; `gpu_request: none` is how such a site asks for no GPU option at all."""
    forbids = ("extends: testbed\npolicies:\n  forbidden_options:\n"
               "    gres: GPUs come with the node here\n")
    path = write_profile(tmp_path, "nogres", forbids)
    err = assert_one_line_error(cli(capsys, "jobscript", "--site", str(path), "-N", "1",
                                    "--", "python", "train.py"), 2, "--gres")
    assert "slurm.gpu_request" in err and "none" in err
    fixed = write_profile(tmp_path, "nogpuopt", forbids + "slurm:\n  gpu_request: none\n")
    script = cli(capsys, "jobscript", "--site", str(fixed), "-N", "1", "--",
                 "python", "train.py").out
    assert not {"gres", "gpus", "gpus-per-node", "gpus-per-task"} & set(directives(script))
    # the partition's own option and the user's are named as such
    by_partition = write_profile(tmp_path, "partopt", forbids.replace("gres:", "comment:")
                                 + "partitions:\n  amd_a100nv_8:\n    options: {comment: x}\n")
    err = assert_one_line_error(cli(capsys, "jobscript", "--site", str(by_partition), "--",
                                    "true"), 2, "--comment")
    assert "partitions.amd_a100nv_8.options" in err


def test_pbs_names_the_queue_chosen_with_p_or_always_where_the_site_says(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """PBS never named the profile's default queue, even with -p: a server whose default
    queue is not the one (or where -q is mandatory) rejected the job."""
    def queues(*args: str, site: str = "sockeye") -> list[list[str]]:
        script = cli(capsys, "jobscript", "--site", site, "-o", "account=st-x-1-gpu", *args,
                     "--", "true").out
        assert "#PBS" in script
        return [d for d in pbs_directives(script) if d[0] == "-q"]

    default = load_site("sockeye").partition()[0]
    assert queues() == []  # the server's default queue takes it
    assert queues("-p", default) == [["-q", default]]
    always = write_profile(tmp_path, "qalways", "extends: sockeye\npbs:\n  queue_always: true\n")
    assert queues(site=str(always)) == [["-q", default]]


def test_a_mandatory_option_hpcprov_writes_itself_is_written_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--time required with a default, and -t given: written twice before."""
    path = write_profile(tmp_path, "needtime", "extends: testbed\npolicies:\n"
                         "  required_options:\n    time: {default: '01:00:00'}\n"
                         "partitions:\n  amd_a100nv_8:\n    limits: {default_walltime: null}\n")
    script = cli(capsys, "jobscript", "--site", str(path), "-t", "02:00:00", "--", "true").out
    assert [ln for ln in script.splitlines() if ln.startswith("#SBATCH --time")] == [
        "#SBATCH --time=02:00:00"]
    script = cli(capsys, "jobscript", "--site", str(path), "--", "true").out
    assert [ln for ln in script.splitlines() if ln.startswith("#SBATCH --time")] == [
        "#SBATCH --time=01:00:00"]


def test_site_check_lints_each_partition_at_its_own_smallest_job(tmp_path: Path) -> None:
    """A queue with min_nodes_per_job > 1 (the docs' own example) was linted as a 1-node job
    and refused, with a command-line fix for a profile problem."""
    path = write_profile(tmp_path, "big", "extends: testbed\npartitions:\n  amd_a100nv_8:\n"
                         "    limits: {min_nodes_per_job: 2}\n")
    assert site_check_errors(path) == []
    tight = write_profile(tmp_path, "tight", "extends: testbed\npartitions:\n  amd_a100nv_8:\n"
                          "    nodes: 2\n    limits: {min_nodes_per_job: 3}\n")
    errors = [str(e) for e in site_check_errors(tight)]
    assert errors and all("smallest job (3 node(s)" in e for e in errors), errors


def test_a_proxy_is_how_compute_nodes_reach_the_internet(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A configured proxy did not count as internet: setup --on compute was refused."""
    base = "extends: testbed\npolicies:\n  compute_internet: false\n"
    offline = write_profile(tmp_path, "offline", base)
    assert cli(capsys, "setup", "--site", str(offline), "--on", "compute", "--dry-run").rc == 2
    proxied = write_profile(tmp_path, "proxied",
                            base + "  proxy: {http: 'http://proxy.example.org:3128'}\n")
    res = cli(capsys, "setup", "--site", str(proxied), "--on", "compute", "--dry-run")
    assert res.rc == 0, res.err
    assert "proxy.example.org:3128" in res.out


@pytest.mark.parametrize(("launchers", "want"), [
    ("mpiexec: {kind: mpiexec, flavor: pals}\ndefault_launcher: mpiexec\n",
     ["mpiexec", "-n", "2", "--ppn", "2"]),
    ("mpiexec: {kind: mpiexec}\ndefault_launcher: mpiexec\n",
     ["mpiexec", "-n", "2", "-ppn", "2"]),
    ("mpirun: {kind: mpirun}\ndefault_launcher: mpirun\n", ["mpirun", "-np", "2"]),
])
def test_the_proof_without_gloo_starts_with_the_sites_mpi_launcher(
        tmp_path: Path, launchers: str, want: list[str]) -> None:
    """prove-allreduce hard-coded `mpirun -np 2` where Horovod has no Gloo."""
    from hpcprov.provision.horovod_steps import prove_lines

    body = ("extends: testbed\nhorovod:\n  controllers: [mpi]\nlaunchers:\n  "
            + launchers.replace("\ndefault_launcher", "\ndefault_launcher", 1))
    body = body.replace("default_launcher:", "default_launcher:", 1)
    lines = "\n".join(body.splitlines()[:4]) + "\n" + "\n".join(
        ("  " + ln if not ln.startswith("default_launcher") else ln)
        for ln in body.splitlines()[4:]) + "\n"
    from hpcprov.site.profiles import validate_file

    site = validate_file(write_profile(tmp_path, "nogloo", lines))
    (proof,) = [ln for ln in prove_lines(site) if "python" in ln and "proof" in ln
                and not ln.startswith("hpcprov_file")]
    assert words(proof)[:len(want)] == want

"""The state directory on disk, made ready for a fresh ``up``: its folders, what the
last run left, the munge and ssh keys, the fake GPUs, and the generated files.

Everything written here is inside the state directory.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from . import config
from .config import ClusterShape
from .system import run

SUBDIRS = ("etc", "run", "log", "ctld", "ns", "munge", "ssh", "dev", "scratch")


def prepare(shape: ClusterShape) -> None:
    """Everything ``up`` needs on disk before the first daemon starts."""
    make_dirs(shape)
    clear_last_run(shape)
    ensure_munge_key(shape.state_dir)
    ensure_ssh_keys(shape.state_dir)
    make_fake_gpus(shape)
    files = config.render(shape, path=os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
                          lmod_base=_lmod_base())
    write_files(shape.state_dir, files)
    copy_modulefiles(shape)


def make_dirs(shape: ClusterShape) -> None:
    """The state dir's folders; scratch is world-writable (sticky), like /tmp."""
    sd = shape.state_dir
    for sub in SUBDIRS:
        (sd / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(sd, 0o755)
    os.chmod(sd / "scratch", 0o1777)


def clear_last_run(shape: ClusterShape) -> None:
    """Empty spools, pid files and controller state; logs of the last run -> ``*.log.prev``.

    A fresh controller numbers jobs from 1 again, so each node's spool starts empty: a step
    killed in an earlier run leaves its sockets there (stepd.slurm.pmix.1.0), and the next
    step 1.0 with --mpi=pmix would fail to bind it. A killed slurmd leaves its pid file,
    which would read as "died" before the new one writes its own.
    """
    sd = shape.state_dir
    for n in shape.nodes:
        spool = shape.node_dir(n.name) / "spool"
        shutil.rmtree(spool, ignore_errors=True)
        spool.mkdir(parents=True)
    for f in [*(sd / "run").iterdir(), *(sd / "nodes").glob("*/*.pid")]:
        f.unlink()
    for log in [*(sd / "log").glob("*.log"), *(sd / "nodes").glob("*/*.log")]:
        log.replace(log.with_name(log.name + ".prev"))
    shutil.rmtree(sd / "ctld")
    (sd / "ctld").mkdir()


def ensure_munge_key(state_dir: Path) -> None:
    """The testbed's own munge key (kept across runs)."""
    os.chmod(state_dir / "munge", 0o711)
    key = state_dir / "munge" / "munge.key"
    if not key.exists():
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))


def ensure_ssh_keys(state_dir: Path) -> None:
    """One host key for all nodes, one client key for root (kept across runs)."""
    ssh = state_dir / "ssh"
    os.chmod(ssh, 0o700)
    for keyfile in ("ssh_host_ed25519_key", "id_ed25519"):
        if not (ssh / keyfile).exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                 f"hpcprov-testbed-{keyfile}", "-f", str(ssh / keyfile)])
    (ssh / "authorized_keys").write_text((ssh / "id_ed25519.pub").read_text())
    os.chmod(ssh / "authorized_keys", 0o600)


def make_fake_gpus(shape: ClusterShape) -> None:
    """Fake GPUs for gres.conf: character devices, copies of /dev/null (needs root)."""
    for i in range(max(n.gpus for n in shape.nodes)):
        dev = shape.state_dir / "dev" / f"nvidia{i}"
        if not dev.exists():
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))


def write_files(state_dir: Path, files: dict[str, str]) -> None:
    """Write ``config.render``'s files under ``state_dir``; drop optional ones not rendered.

    A file is truncated and given its mode before the text goes in, so a private file
    (slurmdbd.conf) is never readable by others with its contents; files keep their
    inode (the nodes bind-mount some of them).
    """
    for rel in config.OPTIONAL_FILES:
        if rel not in files:
            (state_dir / rel).unlink(missing_ok=True)
    for rel, text in files.items():
        path = state_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = 0o600 if rel in config.PRIVATE_FILES else 0o644
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)


# the plain names of MPICH's commands, which Debian gives Open MPI (the mpich/4.0 module
# puts STATE/mpich/bin first on PATH)
MPICH_COMMANDS = {"mpiexec": "mpiexec.hydra", "mpirun": "mpiexec.hydra",
                  "mpicc": "mpicc.mpich", "mpicxx": "mpicxx.mpich",
                  # Hydra starts the proxy found beside its own command
                  "hydra_pmi_proxy": "hydra_pmi_proxy"}


def copy_modulefiles(shape: ClusterShape) -> None:
    """A fresh copy of the package's modulefiles where the nodes can read them, and the
    folder of MPICH's commands by their plain names that its module puts on PATH."""
    shutil.rmtree(shape.modulefiles_dir, ignore_errors=True)
    shutil.copytree(config.MODULEFILES_DIR, shape.modulefiles_dir)
    bin_dir = shape.state_dir / "mpich" / "bin"
    shutil.rmtree(bin_dir, ignore_errors=True)
    bin_dir.mkdir(parents=True)
    for name, target in MPICH_COMMANDS.items():
        (bin_dir / name).symlink_to(f"/usr/bin/{target}")


def _lmod_base() -> str:
    """The machine's /etc/lmod/modulespath ("" without one)."""
    try:
        return Path("/etc/lmod/modulespath").read_text()
    except FileNotFoundError:
        return ""

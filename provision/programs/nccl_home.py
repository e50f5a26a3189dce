"""Make an NCCL home for Horovod's build from the NCCL that the environment's PyTorch uses.

PyTorch's CUDA wheels take NCCL from the `nvidia-nccl-*` wheel (`nvidia/nccl/include/nccl.h`,
`nvidia/nccl/lib/libnccl.so.2`); Horovod's FindNCCL looks for `libnccl.so` under
HOROVOD_NCCL_HOME, which that wheel lacks. Building Horovod against exactly this NCCL keeps one
NCCL in every process (two can hang). Usage: `python nccl_home.py HOME`: HOME gets `include/`
and `lib/` of links to the wheel's files, and HOME is printed. Exit status 1, printing nothing,
when the environment has no such wheel (a CPU PyTorch, or one built with NCCL inside it).
Runs in the environment's Python, which may be old: no newer syntax than 3.6.
"""

import importlib.util
import os
import sys


def wheel_nccl():
    """The folder of the nvidia-nccl wheel importable here (nvidia/nccl), or None."""
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if os.path.isfile(os.path.join(folder, "include", "nccl.h")) and os.path.isfile(
                os.path.join(folder, "lib", "libnccl.so.2")):
            return folder
    return None


def link(target, name):
    """`name` becomes a symbolic link to `target` (replacing what was there, in one step)."""
    tmp = name + ".hpcprov-new"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, name)


def make_home(source, home):
    """HOME/include/* and HOME/lib/libnccl.so{,.2} as links into the wheel folder SOURCE."""
    for sub in ("include", "lib"):
        os.makedirs(os.path.join(home, sub), exist_ok=True)
    include = os.path.join(source, "include")
    for name in sorted(os.listdir(include)):
        link(os.path.join(include, name), os.path.join(home, "include", name))
    library = os.path.join(source, "lib", "libnccl.so.2")
    for name in ("libnccl.so", "libnccl.so.2"):
        link(library, os.path.join(home, "lib", name))


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: nccl_home.py HOME\n")
        return 2
    source = wheel_nccl()
    if source is None:
        return 1
    home = os.path.abspath(argv[1])
    make_home(source, home)
    print(home)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""pip's configuration as arguments of `uv pip install`, one per line.

uv reads none of pip's configuration (pip.conf, PIP_* variables), so a site's constraint
file, its index and its local wheel directories would be left out of an install made with
uv (and a torch pin could then resolve to another build from the public index). This asks
`pip config list` what pip would use and prints it as uv's options: --constraint,
--index-url, --extra-index-url, --find-links, --no-index. For each option the first scope
that sets it wins, as in pip: the environment (PIP_*), then the install command's section,
then the global one.

Usage: python pip_to_uv.py (the environment's Python, 3.7 or newer).
"""

import shlex
import subprocess
import sys

OPTIONS = {"constraint": "--constraint", "index-url": "--index-url",
           "extra-index-url": "--extra-index-url", "find-links": "--find-links",
           "no-index": "--no-index"}
SCOPES = (":env:", "install", "global")  # pip's order: the first that sets an option wins
TRUE = ("1", "true", "yes", "on")


def uv_args(config_list):
    """`pip config list` output -> uv's arguments."""
    found = {}
    for line in config_list.splitlines():
        key, sep, value = line.partition("=")
        scope, _, name = key.rpartition(".")
        if sep and name in OPTIONS and scope in SCOPES:
            words = shlex.split(value)
            found.setdefault(name, {})[scope] = words[0] if words else ""
    args = []
    for name, flag in OPTIONS.items():
        scopes = found.get(name)
        if not scopes:
            continue
        value = next(scopes[s] for s in SCOPES if s in scopes)
        if name == "no-index":
            if value.strip().lower() in TRUE:
                args.append(flag)
        else:
            for item in value.split():
                args += [flag, item]
    return args


def main():
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True)
    for arg in uv_args(proc.stdout if proc.returncode == 0 else ""):
        print(arg)


if __name__ == "__main__":
    main()

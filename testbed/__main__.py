"""``python -m hpcprov.testbed up [--nodes N] [--no-accounting] [--scheduler gridengine] |
down [--scheduler gridengine] | status [--json] | kill-node NODE | slow-link NODE [--rate R] |
clear-link NODE | env [--scheduler gridengine] | exec NODE CMD``"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Callable

from .cluster import MAX_NODES, Testbed, TestbedError
from .gridengine import GridEngine

SCHEDULERS = ("slurm", "gridengine")

# Commands that change the running testbed with one call, and the line that reports it (a
# format string over the command's arguments).
_ACTIONS: dict[str, tuple[Callable[[Testbed, argparse.Namespace], None], str]] = {
    "down": (lambda tb, a: tb.down(), "testbed down"),
    "kill-node": (lambda tb, a: tb.kill_node(a.node),
                  "{node} is off; Slurm notices within about 30 s"),
    "slow-link": (lambda tb, a: tb.slow_link(a.node, a.rate),
                  "{node}'s link is limited to {rate} both ways"),
    "clear-link": (lambda tb, a: tb.clear_link(a.node), "{node}'s link is back to full speed"),
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m hpcprov.testbed",
        description="A real multi-node Slurm cluster (KISTI Neuron in miniature) in network "
                    "namespaces on this machine. Needs root.")
    p.add_argument("--state-dir", help="state directory (default: $HPCPROV_TESTBED_DIR or "
                                       "/var/lib/hpcprov-testbed)")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="bring the cluster up (idempotent)")
    up.add_argument("--nodes", type=int, default=2, help=f"compute nodes, 1-{MAX_NODES} "
                                                         "(default 2)")
    up.add_argument("--no-accounting", action="store_true",
                    help="no slurmdbd/MariaDB (sacct will not work)")
    up.add_argument("--no-policy", action="store_true",
                    help="do not enforce Neuron's submit policy (--comment required, no --mem)")
    up.add_argument("--scheduler", choices=SCHEDULERS, default="slurm",
                    help="slurm (default), or gridengine: Grid Engine's qmaster and one execd "
                         "per node beside Slurm")
    down = sub.add_parser("down", help="stop everything and remove namespaces, links and "
                                       "mounts")
    down.add_argument("--scheduler", choices=("gridengine",),
                      help="stop only Grid Engine (the testbed stays up)")
    st = sub.add_parser("status", help="what is running")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    env = sub.add_parser("env", help="print `export` lines for the client environment "
                                     "(eval \"$(python -m hpcprov.testbed env)\")")
    env.add_argument("--scheduler", choices=SCHEDULERS, default="slurm",
                     help="whose clients (gridengine: SGE_ROOT, SGE_CELL, ports, PATH)")
    ex = sub.add_parser("exec", help="run a command inside a compute node's namespaces")
    ex.add_argument("node")
    ex.add_argument("argv", nargs=argparse.REMAINDER, help="command (default: bash -l)")
    kill = sub.add_parser("kill-node", help="power a node off (link down, every process "
                                          "killed); `down` + `up` brings it back")
    kill.add_argument("node")
    slow = sub.add_parser("slow-link", help="shape a node's link with tc (both ways)")
    slow.add_argument("node")
    slow.add_argument("--rate", default="50mbit", help="tc rate (default 50mbit)")
    clear = sub.add_parser("clear-link", help="undo slow-link")
    clear.add_argument("node")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "up":
            tb = Testbed(nodes=args.nodes, accounting=not args.no_accounting,
                         state_dir=args.state_dir, policy=not args.no_policy)
            t0 = time.monotonic()
            tb.up()
            print(f"testbed up in {time.monotonic() - t0:.1f}s: "
                  f"{', '.join(f'{n.name} ({n.addr}, {n.partition.name})' for n in tb.nodes)}"
                  f"; accounting {'on' if tb.accounting else 'off'}")
            print(f"use it with: export SLURM_CONF={tb.slurm_conf}")
            if args.scheduler == "gridengine":
                t0 = time.monotonic()
                ge = GridEngine(tb).up()
                print(f"Grid Engine up in {time.monotonic() - t0:.1f}s: queues "
                      f"{', '.join(ge.queues)}, parallel environments "
                      f"{', '.join(f'{k} ({v})' for k, v in ge.parallel_envs.items())}")
                print("use it with: eval \"$(python -m hpcprov.testbed env --scheduler "
                      "gridengine)\"")
            return 0
        tb = Testbed.from_state(args.state_dir)
        if args.cmd == "down" and args.scheduler == "gridengine":
            GridEngine(tb).down()
            print("Grid Engine down (the testbed stays up)")
            return 0
        if args.cmd in _ACTIONS:
            act, done = _ACTIONS[args.cmd]
            act(tb, args)
            print(done.format_map(vars(args)))
            return 0
        if args.cmd == "status":
            st = tb.status()
            if args.json:
                print(json.dumps({**st, "describe": tb.describe()}, indent=2))
            else:
                print(f"testbed {'UP' if st['up'] else 'DOWN'} (state dir {st['state_dir']})")
                for key in ("munged", "slurmctld", "slurmdbd", "mariadb"):
                    print(f"  {key:10s} {'pid ' + str(st[key]) if st[key] else '-'}")
                for n in st["nodes"]:
                    print(f"  {n['name']:6s} {n['addr']:12s} {n['partition']:13s} "
                          f"slurmd={'pid ' + str(n['slurmd']) if n['slurmd'] else '-'} "
                          f"sshd={'pid ' + str(n['sshd']) if n['sshd'] else '-'} "
                          f"state={n['state'] or '-'}")
                gst = GridEngine(tb).status()
                if gst["qmaster"]:
                    execds = ", ".join(f"{k} {'pid ' + str(v) if v else '-'}"
                                       for k, v in gst["execds"].items())
                    print(f"  Grid Engine {'UP' if gst['up'] else 'DOWN'}: sge_qmaster pid "
                          f"{gst['qmaster']}; sge_execd {execds}")
            return 0 if st["up"] else 3
        if args.cmd == "env":
            env = GridEngine(tb).env() if args.scheduler == "gridengine" else tb.env()
            for k, v in env.items():
                print(f"export {k}={shlex.quote(v)}")
            return 0
        if args.cmd == "exec":
            if os.geteuid() != 0:
                raise TestbedError("must run as root")
            argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            cmd = tb.node_command(args.node, argv or ["bash", "-l"])
            os.execvpe(cmd[0], cmd, tb.environ())
    except TestbedError as exc:
        print(f"hpcprov testbed: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `status | head -1`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("hpcprov testbed: interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())

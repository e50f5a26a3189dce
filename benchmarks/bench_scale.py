"""Scale: 1,000-node plans and job scripts, 10,000-node host lists, search rounds as N grows."""

from __future__ import annotations

import math
import random
from typing import Any

from benchmarks import Context, Result, time_call

NAME = "scale"
TITLE = "Scale"
TARGET = 0.1
NODES = 1000
HOSTS = 10_000
ENV_KEYS = 20_000
SEARCH_SIZES = (2, 3, 4, 8, 16, 64, 256, 1000)
METHOD = f"""\
In-process timings (`time.perf_counter` around one call, after one untimed warm-up call;
the garbage collector on, as in real use). The {NODES:,}-node partition is the `neuron`
profile's default partition (8 GPUs per node) copied to `big` with `nodes: {NODES}` and
no per-user GPU cap, validated through `hpcprov.site.model.validate` like any profile. A job script
is what `hpcprov jobscript` does after loading the profile: lint (`hpcprov.jobs.lint.check`)
and `build_jobscript`; with `mpirun -H gpu[0001-1000]` the host list is expanded, checked
and written into the launch line. Planning is `hpcprov.validate.plan.plan_jobs` for the
pernode check with the partition's {NODES:,} node names; the row after it also writes the
{NODES:,} job scripts of that plan (no target: it is reported to show what a pernode run
prepares). Host lists: python-hostlist's `expand_hostlist` of `gpu[00001-{HOSTS:05d}]`,
hpcprov's `expand_hosts` (the same, plus the check of every name that `--hosts` applies),
and `collect_hostlist` back, of the contiguous list and of a shuffled list with every third
node missing. Target: {TARGET} s each. The `extends` row reads and merges two valid profiles
(`hpcprov.site.loader.resolve`, the profile cache not involved): a parent extending `local` with
{ENV_KEYS:,} `env` keys and a child extending it that sets the same {ENV_KEYS:,} keys again
(about 0.5 MB each); most of its time is parsing the YAML, the merge is linear in the keys
(target 3 s; merging was quadratic, about 44 s a command, before).

The rounds rows are a model, not a measurement: the pernode plan's jobs are counted and its
rounds are what `hpcprov.validate.run` submits them in (all pernode jobs in one round). The
bad-link search is `hpcprov.validate.links.simulate(nodes, bad)`, the search itself run
against an oracle (a pair job is slow exactly when it holds the bad node), for one bad node
at each of several positions (first, second, middle, last but one, last); the runs column
counts positions, and the target, ceil(log2 N) + 1 rounds of pairs (plus the 2 jobs, one
at a time, that confirm a suspect before it is named: ceil(log2 N) + 3 in all), applies to
the worst of them;
"named alone" counts the positions where the search named exactly the bad node (with two
nodes no search can: they share the one link)."""


def big_site() -> Any:
    """The neuron profile plus `big`: its default partition with NODES nodes, validated."""
    from hpcprov.site.loader import available_sites, resolve
    from hpcprov.site.model import validate
    from hpcprov.site.profiles import validate_file

    # the merged profile data (what the profile wrote, not its defaults), plus `big`
    path = available_sites()["neuron"]
    site = validate_file(path)
    pname, part = site.partition()
    data = dict(resolve(path).data)
    big = {**data["partitions"][pname], "nodes": NODES,
           "default": False, "description": f"{NODES} nodes (benchmark)",
           "limits": {"max_walltime": part.limits.max_walltime}}
    data["partitions"] = {**data["partitions"], "big": big}
    return validate(data)


def node_names(n: int) -> list[str]:
    width = max(4, len(str(n)))
    return [f"gpu{i:0{width}d}" for i in range(1, n + 1)]


def _jobscripts(ctx: Context, site: Any) -> list[Result]:
    from hpcprov.jobs.jobscript import build_jobscript
    from hpcprov.jobs.lint import check
    from hpcprov.request.job import JobRequest

    def script(**kw: Any) -> str:
        req = JobRequest(site=site, nodes=NODES, partition="big",
                         command=("python", "train.py"), options={"comment": "pytorch"}, **kw)
        check(req)
        return build_jobscript(req)

    with_hosts = script(launcher="mpirun", hosts=(f"gpu[0001-{NODES:04d}]",))
    assert with_hosts.count(":8,") == NODES - 1, "every host in the -H list"
    return [
        Result(f"job script, {NODES:,} nodes, srun (lint + generate)", "s",
               time_call(script, ctx.repeat), target=TARGET),
        Result(f"job script, {NODES:,} nodes, `mpirun -H gpu[0001-{NODES}]` (lint + generate)",
               "s", time_call(lambda: script(launcher="mpirun",
                                             hosts=(f"gpu[0001-{NODES:04d}]",)), ctx.repeat),
               target=TARGET),
    ]


def _plans(ctx: Context, site: Any) -> list[Result]:
    from hpcprov.request.job import JobRequest
    from hpcprov.validate.plan import Options, job_script, plan_jobs

    names = tuple(node_names(NODES))
    o = Options(JobRequest(site, partition="big", nodes=2, prefix="/scratch/hpcprov"),
                checks=("pernode",), node_names=names)
    jobs = plan_jobs(o)
    assert len(jobs) == NODES

    def scripts() -> None:
        for job in plan_jobs(o):
            job_script(job, o, "/scratch/run", ("python", "allreduce.py"))

    return [
        Result(f"validation plan, pernode, {NODES:,} nodes (`plan_jobs`)", "s",
               time_call(lambda: plan_jobs(o), ctx.repeat), target=TARGET),
        Result(f"validation plan + its {NODES:,} pernode job scripts", "s",
               time_call(scripts, max(1, ctx.repeat // 2))),
    ]


def _hostlists(ctx: Context) -> list[Result]:
    import hostlist

    from hpcprov.jobs.launchers import expand_hosts

    expr = f"gpu[00001-{HOSTS:05d}]"
    names = hostlist.expand_hostlist(expr)
    assert len(names) == HOSTS and hostlist.collect_hostlist(names) == expr
    gappy = [n for i, n in enumerate(names) if i % 3]
    random.Random(6).shuffle(gappy)
    return [
        Result(f"expand `{expr}` (python-hostlist)", "s",
               time_call(lambda: hostlist.expand_hostlist(expr), ctx.repeat), target=TARGET),
        Result(f"expand `{expr}` + check each name (`hpcprov --hosts`)", "s",
               time_call(lambda: expand_hosts((expr,)), ctx.repeat), target=TARGET),
        Result(f"compress {HOSTS:,} contiguous names (`collect_hostlist`)", "s",
               time_call(lambda: hostlist.collect_hostlist(names), ctx.repeat),
               target=TARGET, note="python-hostlist's own code; hpcprov compresses host lists "
               "only to print them (the links check's report)"),
        Result(f"compress {len(gappy):,} shuffled names, every third missing", "s",
               time_call(lambda: hostlist.collect_hostlist(gappy), ctx.repeat),
               target=TARGET),
    ]


def _extends(ctx: Context) -> list[Result]:
    """One row: resolve a child and its parent of ENV_KEYS env keys each (read + merge)."""
    import tempfile
    from pathlib import Path

    from hpcprov.site.loader import resolve

    with tempfile.TemporaryDirectory() as tmp:
        parent, child = Path(tmp, "parent.yaml"), Path(tmp, "child.yaml")
        for path, head, value in ((parent, "extends: local\n", "a"),
                                  (child, "extends: ./parent.yaml\n", "b")):
            path.write_text(head + "env:\n" + "".join(
                f"  VAR_{i:05d}: {value}-{i}\n" for i in range(ENV_KEYS)), encoding="utf-8")
        assert len(resolve(child).data["env"]) == ENV_KEYS
        runs = time_call(lambda: resolve(child), max(1, ctx.repeat // 2))
    return [Result(f"`extends`: child and parent of {ENV_KEYS:,} env keys each, read and "
                   "merged (`resolve`)", "s", runs, target=3.0)]


def _rounds(ctx: Context, site: Any) -> list[Result]:
    from dataclasses import replace

    from hpcprov.request.job import JobRequest
    from hpcprov.validate.plan import Options, plan_jobs

    o = Options(JobRequest(site, partition="big", nodes=2), checks=("pernode",))
    out = []
    for n in SEARCH_SIZES:
        jobs = [j for j in plan_jobs(replace(o, node_names=tuple(node_names(n))))
                if j.check == "pernode"]
        out.append(Result(f"pernode, N={n}: jobs", "jobs", [float(len(jobs))]))
    out.append(Result("pernode: scheduling rounds, any N", "rounds", [1.0], target=1,
                      note="hpcprov.validate.run submits every pernode job in one round"))
    try:
        from hpcprov.validate.links import simulate
    except Exception as exc:
        out.append(Result("bad-link search", "rounds",
                          status=f"pending: hpcprov.validate.links not importable ({exc})"))
        return out
    for n in SEARCH_SIZES:
        nodes = node_names(n)
        positions = sorted({0, 1, n // 2, n - 2, n - 1} & set(range(n)))
        rounds, jobs, isolated, notes = [], [], 0, []
        try:
            for pos in positions:
                got = simulate(nodes, {nodes[pos]})
                rounds.append(float(got["rounds"]))
                jobs.append(float(got["jobs"]))
                named, doubt = list(got["named"]), list(got.get("unresolved") or [])
                isolated += named == [nodes[pos]]
                if named != [nodes[pos]]:
                    notes.append(f"bad {nodes[pos]}: named {', '.join(named) or 'none'}"
                                 + (f", unresolved {', '.join(doubt)}" if doubt else ""))
        except Exception as exc:
            out.append(Result(f"bad-link search, N={n}: rounds", "rounds",
                              status=f"pending: simulate failed ({exc})"))
            continue
        bound = math.ceil(math.log2(n)) + 3  # rounds of pairs + 2 confirmations alone
        out.append(Result(f"bad-link search, N={n}: rounds (with 2 confirmations)", "rounds",
                          rounds, target=float(bound), on="max"))
        out.append(Result(f"bad-link search, N={n}: jobs", "jobs", jobs))
        # N=2: one link between two nodes; no search can say whose it is (not judged)
        out.append(Result(f"bad-link search, N={n}: bad node named alone", "positions",
                          [float(isolated)], target=None if n == 2 else float(len(positions)),
                          op="==", note="; ".join(
                              (["2 nodes share one link: no search can say whose it is"]
                               if n == 2 else []) + notes)))
    return out


def run(ctx: Context) -> list[Result]:
    site = big_site()
    results = _jobscripts(ctx, site)
    results += _plans(ctx, site)
    results += _hostlists(ctx)
    results += _extends(ctx)
    results += _rounds(ctx, site)
    return results

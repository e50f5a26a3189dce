"""``python -m benchmarks [--only cli,scale] [--repeat N] [--quick] [--json FILE] [--out MD]``."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType

import benchmarks as bench


def modules() -> dict[str, ModuleType]:
    """Every benchmark module (benchmarks/bench_*.py) by its NAME."""
    found = {}
    for info in pkgutil.iter_modules(bench.__path__):
        if info.name.startswith("bench_"):
            mod = importlib.import_module(f"benchmarks.{info.name}")
            found[mod.NAME] = mod
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--only", help="comma-separated benchmark names (default: all)")
    parser.add_argument("--repeat", type=int, help="timed runs per measurement (default 7, "
                        "3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="3 runs per measurement")
    parser.add_argument("--json", type=Path, help="also write this run's results here")
    parser.add_argument("--out", type=Path, default=bench.ROOT / "docs" / "performance.md",
                        help="the Markdown report (default: docs/performance.md)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)

    available = modules()
    if args.list:
        for name, mod in available.items():
            print(f"{name:12} {mod.TITLE}")
        return 0
    wanted = [n.strip() for n in args.only.split(",") if n.strip()] if args.only \
        else list(available)
    unknown = [n for n in wanted if n not in available]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: "
                     f"{', '.join(available)}")
    repeat = args.repeat or (3 if args.quick else 7)
    if repeat < 1:
        parser.error("--repeat must be at least 1")

    machine, commit = bench.machine(), bench.git_commit()
    date = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    this_run, failed = [], []
    for name in wanted:
        mod = available[name]
        ctx = bench.Context(repeat=repeat, quick=args.quick)
        ctx.log(f"{name}: {mod.TITLE} ({repeat} runs per measurement)")
        try:
            results = mod.run(ctx)
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        section = {"name": name, "title": mod.TITLE, "method": mod.METHOD,
                   "notes": ctx.notes,
                   "run": {"date": date, "commit": commit, "machine": machine,
                           "repeat": repeat, "quick": args.quick},
                   "results": [r.to_json() for r in results]}
        bench.save(name, section)
        this_run.append(section)
        for r in results:
            value = r.status or bench.fmt(r.median, r.unit)
            met = {True: "met", False: "MISSED", None: ""}[r.passed]
            print(f"{name:10} {r.name[:70]:70} {value:>14} {met}")

    if args.json:
        args.json.write_text(json.dumps(this_run, indent=2) + "\n", encoding="utf-8")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(bench.render(bench.load_all()), encoding="utf-8")
    print(f"benchmarks: wrote {args.out}", file=sys.stderr)
    if failed:
        print(f"benchmarks: failed: {', '.join(failed)} (their earlier results kept)",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

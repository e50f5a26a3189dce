"""The benchmark framework's bookkeeping (no measurement here: benchmarks are not tests)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import benchmarks as bench  # noqa: E402


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

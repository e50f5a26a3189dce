"""Outputs of a validation run: terminal table, JSON, JUnit XML, Markdown report with a
busbw plot, the per-site history and the comparison with a baseline."""

from __future__ import annotations

import json
import os
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from hpcprov.core.text import for_terminal
from hpcprov.validate.judge import SHARED, Outcome

# Job output (a failed job's last lines in a detail) is hostile text: each output escapes
# it for its reader. The terminal and JUnit: every control character as \xNN (XML 1.0
# cannot carry most of them, and a terminal would obey them). Markdown: besides, the
# characters that would make a table cell, a link, an image or HTML of it.
_MD = str.maketrans({c: f"\\{c}" for c in "\\`*_[]()!|#"} | {"<": "&lt;", ">": "&gt;",
                                                              "&": "&amp;"})


# what XML 1.0 cannot hold even escaped, beyond the control characters for_terminal
# escapes: U+FFFE, U+FFFF and lone surrogates (a job may print any of them)
_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


def _t(text: object) -> str:
    """Text for the terminal and for JUnit's XML: control characters and the code points
    XML forbids escaped as ``\\xNN`` / ``\\uNNNN``, so the file parses whatever a job
    printed."""
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", for_terminal(text))


def _md(text: object) -> str:
    return for_terminal(text).translate(_MD)


def _fmt(v: float | None) -> str:
    if v is None:
        return ""
    return f"{v:.4g}"


def table(outcomes: list[Outcome]) -> str:
    rows = [("STATUS", "CHECK", "MEASURED", "EXPECTED", "NODES", "DETAIL")]
    for o in outcomes:
        rows.append((o.status.upper(), _t(o.name), _t(f"{_fmt(o.measured)} {o.unit}".strip()),
                     _t(o.expected), _t(o.nodes), _t(o.detail)))
    widths = [min(max(len(r[i]) for r in rows), 48) for i in range(5)]
    lines = []
    for r in rows:
        cells = [r[i][:48].ljust(widths[i]) for i in range(5)] + [r[5]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def junit(data: dict) -> str:
    outcomes = [o for o in data["outcomes"] if o["status"] != "info"]
    suite = ET.Element("testsuite", name=_t(f"hpcprov-validate-{data['site']}"),
                       tests=str(len(outcomes)),
                       failures=str(sum(o["status"] == "fail" for o in outcomes)),
                       errors=str(sum(o["status"] == "error" for o in outcomes)),
                       skipped=str(sum(o["status"] == "skipped" for o in outcomes)),
                       time=f"{data['seconds']:.3f}", timestamp=data["started"])
    for o in outcomes:
        case = ET.SubElement(suite, "testcase", classname=_t(f"{data['site']}.{o['check']}"),
                             name=_t(o["name"]))
        text = _t(f"measured {_fmt(o['measured'])} {o['unit']}, expected {o['expected']}, "
                  f"nodes {o['nodes']}: {o['detail']}")
        if o["status"] == "fail":
            ET.SubElement(case, "failure", message=text).text = text
        elif o["status"] == "error":
            ET.SubElement(case, "error", message=text).text = text
        elif o["status"] == "skipped":  # a part of a check that cannot run on the site
            ET.SubElement(case, "skipped", message=_t(o["detail"]))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def can_plot() -> bool:
    """True when matplotlib (the ``report`` extra) is installed."""
    from importlib.util import find_spec

    return find_spec("matplotlib") is not None


def plot_busbw(data: dict, path: Path) -> bool:
    """busbw against message size, one line per implementation (matplotlib, if present)."""
    series = {}
    for job in data["jobs"]:
        rows = [r for r in job["records"] if r.get("check") == "allreduce"]
        if rows and job["check"] == "allreduce":
            series[job["id"]] = sorted((r["size_bytes"], r["busbw_GBps"]) for r in rows)
    if not series:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, pts in series.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"allreduce busbw, {data['site']} {data['partition']}, {data['nodes']} node(s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def checks_ran(data: dict) -> str:
    """How many of the checks asked for ran, and how many parts were SKIPPED ("" for a run
    stored before the count was kept)."""
    checks = data.get("checks") or {}
    if not checks:
        return ""
    skipped = f" ({checks['skipped']} part(s) SKIPPED)" if checks.get("skipped") else ""
    return f"{len(checks.get('ran', []))} of {len(checks.get('asked', []))} checks ran{skipped}"


def markdown(data: dict, plot: str | None) -> str:
    ok = data["ok"]
    ran = checks_ran(data)
    out = [f"# hpcprov validate: {data['site']} / {data['partition']} / {data['nodes']} node(s)",
           "", f"**{'PASS' if ok else 'FAIL'}** - {ran + ', ' if ran else ''}started "
           f"{data['started']}, "
           f"{data['seconds']:.1f} s, harness overhead {data['overhead_s']:.2f} s", "",
           "| status | check | measured | expected | nodes | detail |",
           "|---|---|---|---|---|---|"]
    for o in data["outcomes"]:
        out.append(f"| {_md(o['status'])} | {_md(o['name'])} | {_fmt(o['measured'])} "
                   f"{_md(o['unit'])} | {_md(o['expected'])} | {_md(o['nodes'])} | "
                   f"{_md(o['detail'])} |")
    if plot:
        out += ["", f"![busbw against message size]({plot})"]
    out += ["", "## Jobs", "", "| job | state | exit | nodes | seconds |", "|---|---|---|---|---|"]
    for j in data["jobs"]:
        out.append(f"| {_md(j['id'])} | {_md(j['state'])} | {_md(j['exit_code'])} | "
                   f"{_md(j['node_list'])} | {j['seconds']:.1f} |")
    if data.get("links"):
        lk = data["links"]
        out += ["", "## Link search", "",
                f"{lk['jobs']} pair jobs in {lk['rounds']} round(s); bad links: "
                f"{', '.join(lk['bad']) or 'none'}"
                + (f"; undecided: {', '.join(lk['unresolved'])}" if lk["unresolved"] else ""),
                "", "| pair | round | busbw | verdict |", "|---|---|---|---|"]
        for p in lk["pairs"]:
            out.append(f"| {'+'.join(p['pair'])} | {p['round']} | {_fmt(p['busbw_GBps'])} GB/s "
                       f"| {'fast' if p['fast'] else 'slow'} |")
    if data.get("compare"):
        out += ["", "## Against the baseline", "", "| metric | before | after | change |",
                "|---|---|---|---|"]
        for c in data["compare"]:
            out.append(f"| {c['name']} | {_fmt(c['before'])} | {_fmt(c['after'])} | "
                       f"{c['change'] * 100:+.1f}% |")
    return "\n".join(out) + "\n"


def history_dir(site: str) -> Path:
    from hpcprov.core import fsutil

    base = os.environ.get("HPCPROV_HISTORY") or fsutil.data_dir() / "validate"
    return Path(base) / site


MAX_RUN_BYTES = 64 << 20  # a stored run: every job's records, far less


class BadRun(ValueError):
    """A file that is not a run hpcprov stored (the message says why)."""


def history_folder(site: str) -> Path:
    """The site's history folder, made (0700) where missing; refused (:class:`BadRun`)
    where another user could write or swap it: its runs are what later runs are held to."""
    from hpcprov.core import fsutil

    folder = history_dir(site)
    if not fsutil.trusted_dir(folder, create=True):
        why = fsutil.why_untrusted(folder) or "it cannot be created"
        raise BadRun(f"history folder {folder}: {why}; set HPCPROV_HISTORY to a folder only "
                     "you can write, or pass --no-history")
    return folder


def save_history(data: dict) -> Path:
    """Store the run, whole or not at all (written aside, then renamed: a run killed while
    saving leaves no truncated file for later runs to trip on)."""
    from hpcprov.core import fsutil

    folder = history_folder(data["site"])
    # to the nanosecond: two runs in one second never overwrite
    now = time.time_ns()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now // 1_000_000_000))
    path = folder / f"{stamp}-{now % 1_000_000_000:09d}-{os.getpid()}.json"
    fsutil.atomic_write(path, json.dumps(data, indent=2) + "\n")
    return path


def read_run(path: Path, owned_only: bool = False) -> dict:
    """A stored run, checked: a regular file of bounded size (``owned_only``: this user's,
    that nobody else may write), UTF-8 JSON, an object whose outcomes are objects with a
    name and a numeric or null measurement. :class:`BadRun` says what is wrong."""
    from hpcprov.core import fsutil

    try:
        if owned_only:
            blob = fsutil.read_owned(path)
            if blob is None:
                raise BadRun(f"{path}: not a regular file of yours that only you may write")
            if len(blob) > MAX_RUN_BYTES:
                raise BadRun(f"{path}: larger than {MAX_RUN_BYTES} bytes")
        else:
            blob = fsutil.read_regular(path, MAX_RUN_BYTES)
        data = json.loads(blob.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, BadRun):
            raise
        raise BadRun(f"{path}: not a run hpcprov stored ({exc})") from None
    outcomes = data.get("outcomes") if isinstance(data, dict) else None
    if not isinstance(outcomes, list) or not all(
            isinstance(o, dict) and isinstance(o.get("name"), str)
            and (o.get("measured") is None or isinstance(o.get("measured"), int | float))
            for o in outcomes):
        raise BadRun(f"{path}: not a run hpcprov stored (no list of outcomes)")
    return data


def load_baseline(site: str, ref: str, quick: bool = False) -> tuple[dict | None, list[str]]:
    """A stored run and notes on the stored files passed over: a file path (any problem
    raises :class:`BadRun`), or 'latest' (the newest in the site's history of the same
    kind, a --quick run against quick ones, a full run against full ones; a file that is
    not this user's own, truncated or not a run is passed over, noted)."""
    if ref != "latest":
        return read_run(Path(ref)), []
    notes: list[str] = []
    for path in sorted(history_folder(site).glob("*.json"), reverse=True):
        try:
            run = read_run(path, owned_only=True)
        except BadRun as exc:
            notes.append(f"passed over {exc}")
            continue
        if bool(run.get("quick")) == quick:
            return run, notes
    return None, notes


def compare(now: dict, before: dict, tolerance: float = 0.1) -> tuple[list[dict], list[Outcome]]:
    """Every measured metric in both runs, and a failure for each that got worse by more
    than the tolerance (higher is better for all of hpcprov's metrics)."""
    old = {o["name"]: o for o in before.get("outcomes", []) if o.get("measured") is not None}
    rows, worse = [], []
    for o in now["outcomes"]:
        prev = old.get(o["name"])
        if o.get("measured") is None or prev is None or not prev["measured"] or \
                o["name"].endswith("in sync") or SHARED in (o["expected"], prev["expected"]):
            continue  # a job run beside others measured nothing to hold a run to
        change = o["measured"] / prev["measured"] - 1
        rows.append({"name": o["name"], "before": prev["measured"], "after": o["measured"],
                     "change": change})
        if change < -tolerance:
            worse.append(Outcome(o["check"], f"{o['name']} vs baseline", "fail", o["measured"],
                                 f">= {prev['measured'] * (1 - tolerance):.4g} (baseline "
                                 f"{prev['measured']:.4g})", o["unit"], o["nodes"],
                                 f"{change * 100:+.1f}% against the baseline"))
    return rows, worse

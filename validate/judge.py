"""Judge a validation run: results against correctness, the references of the partition,
and each other (pernode). Pure: job outcomes and parsed results in, outcomes out."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpcprov.model import Reference

RESULT = re.compile(r"HPCPROV_RESULT (\{.*\})")
CB_LINE = re.compile(r"HPCPROV_CB (.*)$")


@dataclass
class Outcome:
    check: str
    name: str
    status: str                   # pass | fail | error | info
    measured: float | None = None
    expected: str = ""
    unit: str = ""
    nodes: str = ""
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class JobResult:
    """What a finished job left: its state and the records it printed."""

    id: str
    check: str
    impl: str
    nodes: int
    state: str
    exit_code: int | None
    node_list: str
    records: list[dict]  # type: ignore[type-arg]
    tail: list[str]
    seconds: float
    baseline: bool = False
    pinned: str | None = None
    reason: str = ""
    bad_nodes: str = ""  # nodes the scheduler found dead while the job ran
    run_s: float | None = None  # the job's own run time (its script's start to end)


def parse_records(output: str) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for line in output.splitlines():
        m = RESULT.search(line)
        if m:
            try:
                out.append(json.loads(m.group(1)))
            except ValueError:
                continue
    return out


def size_label(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


def within(ref: Reference, measured: float) -> bool:
    low = ref.value * (1 + ref.lower)
    high = None if ref.upper is None else ref.value * (1 + ref.upper)
    return measured >= low and (high is None or measured <= high)


def band(ref: Reference) -> str:
    low = ref.value * (1 + ref.lower)
    high = "" if ref.upper is None else f"..{ref.value * (1 + ref.upper):.3g}"
    return f">= {low:.3g}{high} {ref.unit} (ref {ref.value:g})"


def _job_error(j: JobResult) -> Outcome:
    where = j.bad_nodes or j.pinned or j.node_list or "?"
    why = j.reason or f"state {j.state}, exit {j.exit_code}"
    last = " | ".join(ln.strip() for ln in j.tail[-3:] if ln.strip())
    return Outcome(j.check, j.id, "error", nodes=where,
                   detail=f"job {why}" + (f"; last output: {last}" if last else ""))


def judge(jobs: list[JobResult], refs: dict[str, Reference],
          expected_cb: dict[str, list[str]] | None = None,
          gpus_expected: int = 0) -> list[Outcome]:
    out: list[Outcome] = []
    base = {j.impl: j for j in jobs if j.baseline}
    pernode = [j for j in jobs if j.check == "pernode"]
    for j in jobs:
        if j.check == "pernode":
            continue
        if j.exit_code != 0 and not j.records:
            out.append(_job_error(j))
            continue
        if j.check == "env":
            out += _env(j, expected_cb, gpus_expected)
        elif j.check == "allreduce":
            out += _allreduce(j, refs)
        elif j.check == "train" and not j.baseline:
            out += _train(j, refs, base.get(j.impl))
        if j.exit_code != 0 and not any(o.status in ("fail", "error") and o.name.startswith(j.id)
                                        for o in out):
            out.append(_job_error(j))
    if pernode:
        out += _pernode(pernode, refs)
    return out


def _env(j: JobResult, expected_cb: dict[str, list[str]] | None,
         gpus_expected: int) -> list[Outcome]:
    out = []
    for rec in j.records:
        host = rec.get("host", "?")
        oks = rec.get("import_ok") or {k: not str(v).startswith("error")
                                       for k, v in rec.get("imports", {}).items()}
        bad = {k: rec.get("imports", {}).get(k, "failed") for k, ok in oks.items() if not ok}
        if bad:
            out.append(Outcome("env", f"{j.id} imports", "fail", nodes=host,
                               detail="; ".join(f"{k}: {v}" for k, v in bad.items())))
        else:
            out.append(Outcome("env", f"{j.id} imports", "pass", nodes=host,
                               detail=", ".join(f"{k} {v}" for k, v in
                                                rec.get("imports", {}).items())))
        want = gpus_expected
        if want:
            seen = int(rec.get("gpus_visible", 0))
            out.append(Outcome("env", f"{j.id} gpus", "pass" if seen >= want else "fail",
                               seen, f">= {want}", "GPUs", host))
    hosts = {r.get("host") for r in j.records}
    if len(hosts) < j.nodes:
        out.append(Outcome("env", f"{j.id} nodes", "fail", len(hosts), f"{j.nodes}", "nodes",
                           j.node_list, "fewer nodes answered than were allocated"))
    if expected_cb:
        from hpcprov.checkbuild import parse_check_build

        text = "\n".join(m.group(1) for ln in j.tail for m in [CB_LINE.search(ln)] if m)
        found = parse_check_build(text)
        missing = [f"{k}:{n}" for k, names in expected_cb.items() for n in names
                   if n not in found.get(k, [])]  # type: ignore[operator]
        out.append(Outcome("env", f"{j.id} horovodrun -cb", "fail" if missing else "pass",
                           expected=" ".join(n for v in expected_cb.values() for n in v),
                           nodes=j.node_list,
                           detail=("missing " + ", ".join(missing)) if missing else "as built"))
    return out


def _allreduce(j: JobResult, refs: dict[str, Reference]) -> list[Outcome]:
    out = []
    rows = [r for r in j.records if r.get("check") == "allreduce"]
    wrong = [r for r in rows if not r.get("correct")]
    if wrong:
        out.append(Outcome("allreduce", f"{j.id} correctness", "fail", nodes=j.node_list,
                           detail="wrong sums at " + ", ".join(size_label(r["size_bytes"])
                                                               for r in wrong)))
    elif rows:
        out.append(Outcome("allreduce", f"{j.id} correctness", "pass", nodes=j.node_list,
                           detail=f"{len(rows)} sizes, {rows[0].get('ranks')} ranks"))
    by_label = {size_label(r["size_bytes"]): r for r in rows}
    judged = False
    for name, ref in refs.items():
        m = re.fullmatch(r"allreduce_busbw_(\w+)", name)
        if m and m.group(1) in by_label:
            got = by_label[m.group(1)]["busbw_GBps"]
            out.append(Outcome("allreduce", f"{j.id} busbw {m.group(1)}",
                               "pass" if within(ref, got) else "fail", got, band(ref),
                               ref.unit, j.node_list))
            judged = True
    if rows and not judged:
        top = max(rows, key=lambda r: r["size_bytes"])
        out.append(Outcome("allreduce", f"{j.id} busbw {size_label(top['size_bytes'])}",
                           "info", top["busbw_GBps"], "no reference", "GB/s", j.node_list))
    return out


def _train(j: JobResult, refs: dict[str, Reference], base: JobResult | None) -> list[Outcome]:
    out = []
    for rec in (r for r in j.records if r.get("check") == "train"):
        spread = rec.get("max_param_spread")
        if rec.get("in_sync"):
            out.append(Outcome("train", f"{j.id} in sync", "pass", spread, "0", "",
                               j.node_list, "parameters identical on every rank"))
        else:
            out.append(Outcome("train", f"{j.id} in sync", "fail", spread, "0", "",
                               j.node_list, f"parameters differ by {spread} across ranks "
                               "after the steps: gradients are not averaged"))
        total = rec.get("samples_per_s_total")
        ref = refs.get("train_samples_per_s")
        out.append(Outcome("train", f"{j.id} throughput",
                           "info" if ref is None else ("pass" if within(ref, total) else "fail"),
                           total, band(ref) if ref else "no reference", "samples/s",
                           j.node_list))
        btotal = next((r.get("samples_per_s_total") for r in (base.records if base else [])
                       if r.get("check") == "train"), None)
        if btotal:
            eff = total / (btotal * j.nodes)
            ref = refs.get("train_scaling_efficiency")
            out.append(Outcome("train", f"{j.id} scaling efficiency",
                               "info" if ref is None else ("pass" if within(ref, eff)
                                                           else "fail"),
                               eff, band(ref) if ref else "no reference", "",
                               j.node_list, f"{total:.1f} on {j.nodes} nodes vs {btotal:.1f} "
                               "on 1"))
    return out


def _pernode(jobs: list[JobResult], refs: dict[str, Reference]) -> list[Outcome]:
    """Every node alone; a node is bad when its job fails or its bandwidth is far below the
    others' median (or below the pernode reference)."""
    out, speed = [], {}
    for j in jobs:
        node = j.pinned or j.node_list
        rows = [r for r in j.records if r.get("check") == "allreduce"]
        if j.exit_code != 0 or not rows:
            out.append(_job_error(j))
            continue
        if not all(r.get("correct") for r in rows):
            out.append(Outcome("pernode", f"pernode {node} correctness", "fail", nodes=node,
                               detail="wrong allreduce sums on this node"))
            continue
        speed[node] = max(rows, key=lambda r: r["size_bytes"])["busbw_GBps"]
    if speed:
        median = statistics.median(speed.values())
        ref = next((r for n, r in refs.items() if n.startswith("pernode_busbw")), None)
        for node, got in sorted(speed.items()):
            slow = got < 0.5 * median or (ref is not None and not within(ref, got))
            expected = band(ref) if ref else f">= {0.5 * median:.3g} GB/s (half the median)"
            out.append(Outcome("pernode", f"pernode {node} busbw", "fail" if slow else "pass",
                               got, expected, "GB/s", node))
    return out

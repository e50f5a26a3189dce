"""Judge a validation run: results against correctness, the references of the partition,
and each other (pernode). Pure: job outcomes and parsed results in, outcomes out.

Every check has one judge (:data:`JUDGES`, which validate/plan.py's check registry names
beside the check's planner): it takes the results of all the check's jobs and returns
their outcomes. The records come from the programs' output, read with the programs' own
protocol module (validate/programs/runtime.py)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hpcprov.validate.programs.runtime import BINDING, CHECK_BUILD, RESULT, parse_output

if TYPE_CHECKING:
    from hpcprov.site.types import Reference

CB_LINE = re.compile(re.escape(CHECK_BUILD) + r" (.*)$")


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
    records: list[dict]
    tail: list[str]
    seconds: float
    baseline: bool = False
    pinned: str | None = None
    reason: str = ""
    bad_nodes: str = ""  # nodes the scheduler found dead while the job ran
    run_s: float | None = None  # the job's own run time (its script's start to end)
    shared: bool = False  # ran beside other jobs (a smoke run): its figures are not judged
    malformed: str = ""  # why a result record the job printed has not its check's shape


SHARED = "not judged: ran beside other jobs (--quick)"


def _refs(j: JobResult, refs: dict[str, Reference]) -> dict[str, Reference]:
    """The references a job's figures are judged against: none for a shared job."""
    return {} if j.shared else refs


def _unjudged(j: JobResult) -> str:
    """What an outcome with no reference says it was compared with."""
    return SHARED if j.shared else "no reference"


@dataclass(frozen=True)
class Context:
    """What judging needs besides the results: the partition's references, what
    ``horovodrun -cb`` must list (None: not checked), the GPUs every node must see (0: not
    checked)."""

    refs: dict[str, Reference]
    expected_cb: dict[str, list[str]] | None = None
    gpus_expected: int = 0


# a check's judge: the results of all its jobs in, their outcomes out
Judge = Callable[[list[JobResult], Context], list[Outcome]]


def parse_records(output: str) -> list[dict]:
    """The HPCPROV_RESULT records of a job's output, in order."""
    return [record for tag, record in parse_output(output) if tag == RESULT]


class _Record(BaseModel):
    """The fields of a result record that the judges read (the programs print more)."""

    model_config = ConfigDict(extra="allow", strict=True)


class _EnvRecord(_Record):
    check: Literal["env"]
    host: str = "?"
    imports: dict[str, str | None] = {}
    import_ok: dict[str, bool] | None = None
    gpus_visible: int = Field(0, ge=0)
    per_rank: Literal["all", "one"] | None = None
    binding: str | None = None


class _AllreduceRecord(_Record):
    check: Literal["allreduce"]
    size_bytes: int = Field(ge=1)
    busbw_GBps: float
    correct: bool
    ranks: int | None = None
    time_s: float | None = None
    time_median_s: float | None = None


class _TrainRecord(_Record):
    check: Literal["train"]
    in_sync: bool
    max_param_spread: float | None = None
    samples_per_s_total: float


class _BindingRecord(_Record):
    check: Literal["binding"]
    detail: str
    rank: int = Field(0, ge=0)
    local_rank: int = Field(0, ge=0)
    device_count: int | None = None
    host: str = "?"


RECORD_SHAPES: dict[str, type[_Record]] = {
    "env": _EnvRecord, "allreduce": _AllreduceRecord, "train": _TrainRecord,
    BINDING: _BindingRecord}


def shaped_records(output: str) -> tuple[list[dict], str]:
    """A job's result records that have their check's shape, and why the first one that
    has not fails (a job printing it is that job's error, never the judge's crash); "" when
    all have it. Records of no known check pass as they are."""
    good, why = [], ""
    for record in parse_records(output):
        shape = RECORD_SHAPES.get(str(record.get("check")))
        if shape is not None:
            try:
                shape.model_validate(record)
            except ValidationError as exc:
                if not why:
                    err = exc.errors()[0]
                    where = ".".join(str(x) for x in err["loc"]) or "record"
                    why = (f"a result record of the wrong shape ({record.get('check')}: "
                           f"{where}: {err['msg']})")
                continue
        good.append(record)
    return good, why


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
    if j.malformed:
        why = f"{why}; {j.malformed}" if j.reason else j.malformed
    last = " | ".join(ln.strip() for ln in j.tail[-3:] if ln.strip())
    return Outcome(j.check, j.id, "error", nodes=where,
                   detail=f"job {why}" + (f"; last output: {last}" if last else ""))


def judge(jobs: list[JobResult], refs: dict[str, Reference],
          expected_cb: dict[str, list[str]] | None = None,
          gpus_expected: int = 0) -> list[Outcome]:
    """Every job's outcomes, each check's jobs judged together by the check's judge, the
    checks in the order their first job comes."""
    ctx = Context(refs, expected_cb, gpus_expected)
    by_check: dict[str, list[JobResult]] = {}
    for j in jobs:
        by_check.setdefault(j.check, []).append(j)
    out: list[Outcome] = []
    for check, results in by_check.items():
        if check not in JUDGES:
            raise ValueError(f"no judge for check {check!r} (judges: {', '.join(JUDGES)})")
        out += JUDGES[check](results, ctx)
    return out


def _binding(j: JobResult) -> list[Outcome]:
    """The job's ranks whose device step failed (the programs' ``binding`` records: the
    device an unmodified env:// script takes is no device of theirs under the GPU binding),
    as one failed outcome whose detail is the program's line: a rank's whose LOCAL_RANK is
    itself no valid index where one is, else the lowest rank's."""
    bound = [r for r in j.records if r.get("check") == BINDING]
    if not bound:
        return []
    first = min(bound, key=lambda r: (not r.get("local_rank", 0) >= (r.get("device_count")
                                                                     or 0), r.get("rank", 0)))
    hosts = ",".join(sorted({str(r.get("host", "?")) for r in bound}))
    return [Outcome(j.check, f"{j.id} device binding", "fail", nodes=hosts or j.node_list,
                    detail=str(first["detail"]))]


def _each(results: list[JobResult], judge_one: Callable[[JobResult], list[Outcome]]
          ) -> list[Outcome]:
    """Judge job by job: a job that failed without a record is an error; one that failed
    with records is judged, and an error too unless its outcomes explain the failure (a
    rank's failed device step does: :func:`_binding`)."""
    out: list[Outcome] = []
    for j in results:
        if j.malformed or (j.exit_code != 0 and not j.records):
            out.append(_job_error(j))
            continue
        mine = _binding(j) + judge_one(j)
        out += mine
        if j.exit_code != 0 and not any(o.status in ("fail", "error") for o in mine):
            out.append(_job_error(j))
    return out


def judge_env(results: list[JobResult], ctx: Context) -> list[Outcome]:
    """env: every node's imports and GPUs, that every node answered, ``horovodrun -cb``."""
    return _each(results, lambda j: _env(j, ctx.expected_cb, ctx.gpus_expected))


def judge_allreduce(results: list[JobResult], ctx: Context) -> list[Outcome]:
    """allreduce: correct sums, busbw against the references."""
    return _each(results, lambda j: _allreduce(j, _refs(j, ctx.refs)))


def judge_train(results: list[JobResult], ctx: Context) -> list[Outcome]:
    """train: in sync, throughput, and scaling efficiency against the 1-node baseline of
    the same implementation (the baselines themselves are only checked for errors)."""
    base = {j.impl: j for j in results if j.baseline}
    return _each(results, lambda j: [] if j.baseline else _train(j, _refs(j, ctx.refs),
                                                                  base.get(j.impl)))


def judge_pernode(results: list[JobResult], ctx: Context) -> list[Outcome]:
    """pernode: every node alone, against the others' median and the references."""
    return _pernode(results, ctx.refs)


def _env(j: JobResult, expected_cb: dict[str, list[str]] | None,
         gpus_expected: int) -> list[Outcome]:
    out = [o for rec in j.records for o in _env_record(j, rec, gpus_expected)]
    hosts = {r.get("host") for r in j.records}
    if len(hosts) < j.nodes:
        out.append(Outcome("env", f"{j.id} nodes", "fail", len(hosts), f"{j.nodes}", "nodes",
                           j.node_list, "fewer nodes answered than were allocated"))
    if expected_cb:
        out.append(_check_build(j, expected_cb))
    return out


def _env_record(j: JobResult, rec: dict, gpus_expected: int) -> list[Outcome]:
    """One node's imports, and its GPUs when they are expected."""
    host = rec.get("host", "?")
    imports = rec.get("imports", {})
    oks = rec.get("import_ok") or {k: not str(v).startswith("error") for k, v in imports.items()}
    bad = {k: imports.get(k, "failed") for k, ok in oks.items() if not ok}
    if bad:
        out = [Outcome("env", f"{j.id} imports", "fail", nodes=host,
                       detail="; ".join(f"{k}: {v}" for k, v in bad.items()))]
    else:
        out = [Outcome("env", f"{j.id} imports", "pass", nodes=host,
                       detail=", ".join(f"{k} {v}" for k, v in imports.items()))]
    if gpus_expected:
        # one GPU per rank (the partition's gpus.per_rank): a rank sees its own GPU only
        want = 1 if rec.get("per_rank") == "one" else gpus_expected
        seen = int(rec.get("gpus_visible", 0))
        out.append(Outcome("env", f"{j.id} gpus", "pass" if seen >= want else "fail",
                           seen, f">= {want}", "GPUs", host,
                           "" if seen else "no GPU visible: the GPU checks were not run; "
                           "--device cpu checks the CPU paths"))
    if rec.get("binding"):  # the device an unmodified script takes is not this rank's
        out.append(Outcome("env", f"{j.id} device binding", "fail", nodes=host,
                           detail=str(rec["binding"])))
    return out


def _check_build(j: JobResult, expected_cb: dict[str, list[str]]) -> Outcome:
    """``horovodrun -cb`` (its lines tagged HPCPROV_CB in the output) against the build."""
    from hpcprov.jobs.checkbuild import parse_check_build

    text = "\n".join(m.group(1) for ln in j.tail for m in [CB_LINE.search(ln)] if m)
    found = parse_check_build(text)
    marked = {k: v for k, v in found.items() if isinstance(v, list)}  # the sections' entries
    missing = [f"{k}:{n}" for k, names in expected_cb.items() for n in names
               if n not in marked.get(k, [])]
    return Outcome("env", f"{j.id} horovodrun -cb", "fail" if missing else "pass",
                   expected=" ".join(n for v in expected_cb.values() for n in v),
                   nodes=j.node_list,
                   detail=("missing " + ", ".join(missing)) if missing else "as built")


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
                           "info", top["busbw_GBps"], _unjudged(j), "GB/s", j.node_list))
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
        # every train record has it: shaped_records kept only those of _TrainRecord's shape
        total: float = rec["samples_per_s_total"]
        ref = refs.get("train_samples_per_s")
        out.append(Outcome("train", f"{j.id} throughput",
                           "info" if ref is None else ("pass" if within(ref, total) else "fail"),
                           total, band(ref) if ref else _unjudged(j), "samples/s",
                           j.node_list))
        btotal = next((r.get("samples_per_s_total") for r in (base.records if base else [])
                       if r.get("check") == "train"), None)
        if btotal:
            eff = total / (btotal * j.nodes)
            ref = refs.get("train_scaling_efficiency")
            out.append(Outcome("train", f"{j.id} scaling efficiency",
                               "info" if ref is None else ("pass" if within(ref, eff)
                                                           else "fail"),
                               eff, band(ref) if ref else _unjudged(j), "",
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
        bound = [] if j.malformed else _binding(j)
        if bound:
            out += bound
            continue
        if j.exit_code != 0 or not rows or j.malformed:
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


JUDGES: dict[str, Judge] = {
    "env": judge_env,
    "allreduce": judge_allreduce,
    "train": judge_train,
    "pernode": judge_pernode,
}

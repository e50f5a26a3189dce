"""Find the node with a bad link: 2-node allreduce jobs on pairs of nodes, round by round.

Pure: the search proposes pairs, the caller runs them and says which were slow. A pair is
slow when one of its two nodes has a bad link, so:

- round 1 pairs every node with a neighbour (N/2 jobs, all at once); fast pairs clear both
  nodes;
- later rounds pair each node still in doubt with a node already known good that it has
  not been paired with yet; without a known-good node, doubtful nodes are paired with each
  other in combinations not tried yet;
- a node slow with two different known-good partners is a suspect, not yet a verdict: on a
  busy machine a healthy pair can read slow, even in two rounds running (the pair jobs of a
  round share the nodes' CPUs where the nodes share a machine, and other work shares them
  too). So, when the rounds have nothing left to try, each suspect's slow pairs with two
  different known-good partners are measured again, one job at a time with no other pair job
  running (a confirmation). A pair that reads fast then is fast: noise only ever slows a
  pair, so a fast reading is never wrong, and it clears both nodes;
- a node is named bad only when it was slow with two different known-good partners and
  both readings were confirmed alone. Naming a good node bad sends staff to drain and debug
  it for nothing.

With one bad node the rounds of pairs take 2 rounds for an even N >= 4 (its round-1 partner
is cleared in round 2, which makes the second good partner) and 3 for an odd N when the
spare node is the bad one, within ceil(log2 N) + 1 for every N >= 3; then 2 confirmation
jobs. With 2 nodes the link between them can be found slow, but not whose link it is: both
are reported.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import hostlist

from hpcprov.validate.judge import JobResult, Outcome, within

if TYPE_CHECKING:
    from hpcprov.site.types import Reference

Pair = tuple[str, str]


@dataclass
class LinkSearch:
    """The state of one search: what was tried, and what is known about each node."""

    nodes: list[str]
    tried: dict[Pair, bool] = field(default_factory=dict)  # pair -> fast? (in a round of pairs)
    alone: dict[Pair, bool] = field(default_factory=dict)  # pair -> fast? (measured again alone)
    round_of: dict[Pair, int] = field(default_factory=dict)
    alone_round: dict[Pair, int] = field(default_factory=dict)
    rounds: int = 0  # rounds of pairs and confirmations (a confirmation is a round of one job)

    def fast(self, pair: Pair) -> bool:
        """Whether the pair read fast, in its round or measured again alone."""
        return self.tried.get(pair, False) or self.alone.get(pair, False)

    def good(self) -> set[str]:
        return {n for p in self.tried if self.fast(p) for n in p}

    def slow_with_good(self, confirmed: bool = False) -> dict[str, set[str]]:
        """Node (not known good) -> the known-good partners it was slow with (``confirmed``:
        only pairs that read slow again alone)."""
        good = self.good()
        out: dict[str, set[str]] = {}
        for (a, b) in self.tried:
            if self.fast((a, b)) or (confirmed and (a, b) not in self.alone):
                continue
            for x, partner in ((a, b), (b, a)):
                if partner in good and x not in good:
                    out.setdefault(x, set()).add(partner)
        return out

    def bad(self) -> set[str]:
        """Nodes slow with two different known-good partners, both confirmed alone."""
        return {x for x, ps in self.slow_with_good(confirmed=True).items() if len(ps) >= 2}

    def suspects(self) -> list[str]:
        """Nodes slow with two different known-good partners, not yet confirmed."""
        bad, partners = self.bad(), self.slow_with_good()
        return [n for n in self.nodes if len(partners.get(n, ())) >= 2 and n not in bad]

    def doubtful(self) -> list[str]:
        """Nodes neither cleared nor suspected nor convicted (untested ones included)."""
        known = self.good() | self.bad() | set(self.suspects())
        return [n for n in self.nodes if n not in known]

    def next_round(self) -> list[Pair]:
        """The pairs of the next round of pairs (disjoint, run at the same time); empty when
        the rounds have nothing left to try."""
        if len(self.nodes) < 2:
            return []
        if not self.tried:
            n = self.nodes
            return [_key(n[i], n[i + 1]) for i in range(0, len(n) - 1, 2)]
        doubtful, good = self.doubtful(), sorted(self.good(), key=self.nodes.index)
        busy: set[str] = set()
        pairs: list[Pair] = []
        for x in doubtful:
            if x in busy:
                continue
            partner = next((g for g in good if g not in busy
                            and _key(x, g) not in self.tried), None)
            if partner is None:  # no known-good node left for it: try a doubtful one
                partner = next((y for y in doubtful if y != x and y not in busy
                                and _key(x, y) not in self.tried), None)
            if partner is None:
                continue
            busy |= {x, partner}
            pairs.append(_key(x, partner))
        return pairs

    def to_confirm(self) -> Pair | None:
        """The next pair to measure again alone: a slow pair of the first suspect with a
        known-good partner it has no confirmed slow reading with yet (in round order)."""
        good, confirmed = self.good(), self.slow_with_good(confirmed=True)
        for x in self.suspects():
            for p in sorted(self.tried, key=self.round_of.__getitem__):
                partner = p[1] if p[0] == x else p[0] if p[1] == x else None
                if (partner in good and not self.fast(p) and p not in self.alone
                        and partner not in confirmed.get(x, ())):
                    return p
        return None

    def next_step(self) -> tuple[list[Pair], bool]:
        """What to run next, and whether alone: a round of pairs (run at the same time);
        when the rounds have nothing left to try, one pair to confirm, alone; ([], False)
        when the search is over."""
        pairs = self.next_round()
        if pairs:
            return pairs, False
        again = self.to_confirm()
        return ([again], True) if again else ([], False)

    def record(self, results: dict[Pair, bool], alone: bool = False) -> None:
        """The outcome of a round: pair -> fast (True) or slow/failed (False); ``alone``:
        pairs measured again with no other pair job running."""
        self.rounds += 1
        fast, when = (self.alone, self.alone_round) if alone else (self.tried, self.round_of)
        for pair, ok in results.items():
            fast[_key(*pair)] = ok
            when[_key(*pair)] = self.rounds

    def verdict(self) -> dict[str, list[str]]:
        """bad: nodes whose link is bad; unresolved: nodes in doubt when the search ended
        (slow, but not with two known-good partners both confirmed: e.g. 2 nodes, every node
        slow, or out of time before the confirmation); good: the rest."""
        bad, good = self.bad(), self.good()
        unresolved = [n for n in self.nodes if n not in bad | good
                      and any(not self.fast(p) and n in p for p in self.tried)]
        return {"bad": sorted(bad, key=self.nodes.index), "unresolved": unresolved,
                "good": sorted(good, key=self.nodes.index)}


def _key(a: str, b: str) -> Pair:
    return (a, b) if a <= b else (b, a)


def simulate(nodes: list[str], bad: set[str], misread: Iterable[Pair] = (),
             misread_alone: Iterable[Pair] = ()) -> dict[str, object]:
    """Run the search against an oracle: a pair is slow when it holds a bad node; a
    ``misread`` pair (both links good) reads slow whenever it runs in a round of pairs and
    fast alone; a ``misread_alone`` pair reads slow alone too. The rounds (confirmations
    included), the confirmations, the jobs, and what it names. For benchmarks and tests."""
    search, jobs = LinkSearch(list(nodes)), 0
    noisy, noisy_alone = {_key(*p) for p in misread}, {_key(*p) for p in misread_alone}
    while True:
        pairs, alone = search.next_step()
        if not pairs:
            break
        jobs += len(pairs)
        search.record({p: not (set(p) & bad or p in noisy_alone or (p in noisy and not alone))
                       for p in pairs}, alone=alone)
    v = search.verdict()
    return {"rounds": search.rounds, "confirmations": len(search.alone), "jobs": jobs,
            "named": v["bad"], "unresolved": v["unresolved"]}


# -- judging pair jobs (pure: job results in, fast/slow and outcomes out) -------------------

def pair_busbw(result: JobResult) -> float | None:
    """The busbw a pair job measured, or None when it failed or summed wrong: from the
    median call, not the mean, so a few calls that waited for a CPU (a busy node, or pair
    jobs sharing one machine) do not make a healthy link read slow."""
    rows = [r for r in result.records if r.get("check") == "allreduce"]
    if (result.exit_code != 0 or result.malformed or not rows
            or not all(r.get("correct") for r in rows)):
        return None
    row = max(rows, key=lambda r: r["size_bytes"])
    if row.get("time_median_s"):
        return float(row["busbw_GBps"]) * float(row["time_s"]) / float(row["time_median_s"])
    return float(row["busbw_GBps"])


def _floor(*readings: dict[Pair, float | None]) -> float:
    """Half the best pair of all the readings."""
    best = max((v for got in readings for v in got.values() if v is not None), default=0.0)
    return 0.5 * best


def judge_pairs(measured: dict[Pair, float | None], refs: dict[str, Reference],
                pairs: list[Pair], also: dict[Pair, float | None] | None = None
                ) -> dict[Pair, bool]:
    """pair -> fast: it ran, summed right, reached half the best pair so far (of
    ``measured`` and ``also``, the readings not judged here) and, where the partition has
    a ``links_busbw`` reference, the reference's band."""
    floor, ref = _floor(measured, also or {}), refs.get("links_busbw")
    out = {}
    for p in pairs:
        v = measured.get(p)
        out[p] = v is not None and v >= floor and (ref is None or within(ref, v))
    return out


def _reasons(results: list[JobResult]) -> dict[Pair, list[str]]:
    """Pair -> why each of its jobs has no busbw ('' where it has one), in run order."""
    out: dict[Pair, list[str]] = {}
    for r in results:
        if r.pinned:
            failed = pair_busbw(r) is None
            out.setdefault(_key(*r.pinned.split(",")), []).append(
                (r.reason or f"state {r.state}, exit {r.exit_code}") if failed else "")
    return out


class _Shown:
    """How the outcomes show a pair: its busbw in its round and, if measured again, alone."""

    def __init__(self, measured: dict[Pair, float | None], alone: dict[Pair, float | None],
                 results: list[JobResult]) -> None:
        self.measured, self.alone, self.why = measured, alone, _reasons(results)

    def _value(self, got: float | None, pair: Pair, job: int) -> str:
        if got is not None:
            return f"{got:.3g} GB/s"
        why = self.why.get(pair, [])
        return f"failed ({why[job] if len(why) > job and why[job] else 'no result'})"

    def __call__(self, p: Pair) -> str:
        text = f"{p[0]}+{p[1]} {self._value(self.measured.get(p), p, 0)}"
        if p in self.alone:
            text += f", alone {self._value(self.alone[p], p, 1)}"
        return text

    def values(self, pairs: Iterable[Pair]) -> list[float]:
        """Every busbw these pairs read, in their rounds and alone."""
        return [v for p in pairs for v in (self.measured.get(p), self.alone.get(p))
                if v is not None]


def _fast_values(search: LinkSearch, measured: dict[Pair, float | None],
                 alone: dict[Pair, float | None]) -> list[float]:
    """The busbw of every fast reading, sorted."""
    got = [measured.get(p) for p, ok in search.tried.items() if ok]
    got += [alone.get(p) for p, ok in search.alone.items() if ok]
    return sorted(v for v in got if v is not None)


def _noise(search: LinkSearch, good: set[str], show: _Shown) -> str:
    """The slow readings the search did not convict on, between nodes it cleared: not
    confirmed (fast alone, or never measured again), or slow again alone."""
    slow = [p for p, ok in search.tried.items() if not ok and set(p) <= good]
    again = [p for p in slow if search.alone.get(p) is False]
    once = [p for p in slow if p not in again]
    out = ""
    if once:
        out += "; slow once, not confirmed: " + ", ".join(show(p) for p in once)
    if again:
        out += ("; slow again alone, between nodes other pairs cleared (look at the path "
                "between them): " + ", ".join(show(p) for p in again))
    return out


def link_outcomes(search: LinkSearch, measured: dict[Pair, float | None],
                  results: list[JobResult], alone: dict[Pair, float | None] | None = None
                  ) -> list[Outcome]:
    """One failure per node with a bad link (with the pairs that convicted it), one for
    nodes the search could not tell apart, one pass for the nodes cleared (with the slow
    readings it did not convict on). ``measured``: each pair's busbw in its round;
    ``alone``: measured again alone."""
    alone = alone or {}
    v, show = search.verdict(), _Shown(measured, alone, results)
    fast = _fast_values(search, measured, alone)
    others = f"; fast pairs {fast[0]:.3g}-{fast[-1]:.3g} GB/s" if fast else ""
    expected = f">= {_floor(measured, alone):.3g} GB/s (half the best pair)"
    out = []
    for node in v["bad"]:
        slow = [p for p in search.tried if not search.fast(p) and node in p]
        vals = show.values(slow)
        out.append(Outcome("links", f"links {node}", "fail", min(vals) if vals else None,
                           expected, "GB/s", node, "slow with every partner, and again "
                           "alone: " + ", ".join(show(p) for p in slow) + others))
    if v["unresolved"]:
        slow = [p for p in search.tried if not search.fast(p)
                and set(p) & set(v["unresolved"])]
        out.append(Outcome("links", "links unresolved", "fail", None, expected, "GB/s",
                           ",".join(v["unresolved"]),
                           "slow, but not with two nodes known to be good, both confirmed "
                           "alone, so whose link it is stays open: "
                           + ", ".join(show(p) for p in slow)))
    if v["good"]:
        jobs = len(search.tried) + len(search.alone)
        confirm = f", {len(search.alone)} of them alone to confirm" if search.alone else ""
        out.append(Outcome("links", "links", "pass", statistics.median(fast) if fast else None,
                           expected, "GB/s", hostlist.collect_hostlist(v["good"]),
                           f"{jobs} pair jobs in {search.rounds} round(s){confirm}"
                           + _noise(search, set(v["good"]), show)))
    return out

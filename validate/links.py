"""Find the node with a bad link: 2-node allreduce jobs on pairs of nodes, round by round.

Pure: the search proposes pairs, the caller runs them (all pairs of a round at once, each
pair on its own two nodes) and says which were slow. A pair is slow when one of its two
nodes has a bad link, so:

- round 1 pairs every node with a neighbour (N/2 jobs); fast pairs clear both nodes;
- later rounds pair each node still in doubt with a node already known good that it has
  not been paired with yet; without a known-good node, doubtful nodes are paired with each
  other in combinations not tried yet;
- a node is named bad only when it was slow with two different known-good partners. One
  slow reading is not enough: on a busy machine a healthy pair can read slow once (noise
  only ever slows a pair, so a fast reading is never wrong), and naming a good node bad
  sends staff to drain and debug it for nothing.

With one bad node this takes 2 rounds for an even N >= 4 (its round-1 partner is cleared in
round 2, which makes the second good partner) and 3 for an odd N when the spare node is the
bad one, within ceil(log2 N) + 1 for every N >= 3. With 2 nodes the link between them can be
found slow, but not whose link it is: both are reported.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import hostlist
from hpcprov.validate.judge import JobResult, Outcome, within

if TYPE_CHECKING:
    from hpcprov.model import Reference

Pair = tuple[str, str]


@dataclass
class LinkSearch:
    """The state of one search: what was tried, and what is known about each node."""

    nodes: list[str]
    tried: dict[Pair, bool] = field(default_factory=dict)  # pair -> fast?
    round_of: dict[Pair, int] = field(default_factory=dict)
    rounds: int = 0

    def good(self) -> set[str]:
        return {n for p, fast in self.tried.items() if fast for n in p}

    def slow_with_good(self) -> dict[str, set[str]]:
        """Node (not known good) -> the known-good partners it was slow with."""
        good = self.good()
        out: dict[str, set[str]] = {}
        for (a, b), fast in self.tried.items():
            if not fast:
                for x, partner in ((a, b), (b, a)):
                    if partner in good and x not in good:
                        out.setdefault(x, set()).add(partner)
        return out

    def bad(self) -> set[str]:
        """Nodes slow with two different known-good partners."""
        return {x for x, partners in self.slow_with_good().items() if len(partners) >= 2}

    def doubtful(self) -> list[str]:
        """Nodes neither cleared nor convicted yet (untested ones included)."""
        known = self.good() | self.bad()
        return [n for n in self.nodes if n not in known]

    def next_round(self) -> list[Pair]:
        """The pairs to run next (disjoint); empty when the search is over."""
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

    def record(self, results: dict[Pair, bool]) -> None:
        """The outcome of a round: pair -> fast (True) or slow/failed (False)."""
        self.rounds += 1
        for pair, fast in results.items():
            self.tried[_key(*pair)] = fast
            self.round_of[_key(*pair)] = self.rounds

    def verdict(self) -> dict[str, list[str]]:
        """bad: nodes whose link is bad; unresolved: nodes in doubt when the search ended
        (slow, but not with two known-good partners: e.g. 2 nodes, or every node slow);
        good: the rest."""
        bad = sorted(self.bad(), key=self.nodes.index)
        unresolved = [n for n in self.doubtful()
                      if any(not fast and n in p for p, fast in self.tried.items())]
        return {"bad": bad, "unresolved": unresolved,
                "good": sorted(self.good(), key=self.nodes.index)}


def _key(a: str, b: str) -> Pair:
    return (a, b) if a <= b else (b, a)


def simulate(nodes: list[str], bad: set[str], misread: frozenset[Pair] = frozenset()
             ) -> dict[str, object]:
    """Run the search against an oracle (a pair is slow iff it holds a bad node, or is
    one of the ``misread`` pairs, which read slow once though both links are good): the
    rounds and jobs it needs and what it names. For benchmarks and tests."""
    search, jobs = LinkSearch(list(nodes)), 0
    misread = {_key(*p) for p in misread}
    while pairs := search.next_round():
        jobs += len(pairs)
        search.record({p: not (set(p) & bad or p in misread) for p in pairs})
    v = search.verdict()
    return {"rounds": search.rounds, "jobs": jobs, "named": v["bad"],
            "unresolved": v["unresolved"]}


# -- judging pair jobs (pure: job results in, fast/slow and outcomes out) -------------------

def pair_busbw(result: JobResult) -> float | None:
    """The busbw a pair job measured, or None when it failed or summed wrong: from the
    median call, not the mean, so a few calls that waited for a CPU (a busy node, or pair
    jobs sharing one machine) do not make a healthy link read slow."""
    rows = [r for r in result.records if r.get("check") == "allreduce"]
    if result.exit_code != 0 or not rows or not all(r.get("correct") for r in rows):
        return None
    row = max(rows, key=lambda r: r["size_bytes"])
    if row.get("time_median_s"):
        return float(row["busbw_GBps"]) * float(row["time_s"]) / float(row["time_median_s"])
    return float(row["busbw_GBps"])


def _floor(measured: dict[Pair, float | None]) -> float:
    best = max((v for v in measured.values() if v is not None), default=0.0)
    return 0.5 * best


def judge_pairs(measured: dict[Pair, float | None], refs: dict[str, Reference],
                pairs: list[Pair]) -> dict[Pair, bool]:
    """pair -> fast: it ran, summed right, reached half the best pair so far and, where the
    partition has a ``links_busbw`` reference, the reference's band."""
    floor, ref = _floor(measured), refs.get("links_busbw")
    out = {}
    for p in pairs:
        v = measured.get(p)
        out[p] = v is not None and v >= floor and (ref is None or within(ref, v))
    return out


def link_outcomes(search: LinkSearch, measured: dict[Pair, float | None],
                  results: list[JobResult]) -> list[Outcome]:
    """One failure per node with a bad link (with the pairs that convicted it), one for
    nodes the search could not tell apart, one pass for the nodes cleared."""
    v = search.verdict()
    why = {tuple(r.pinned.split(",")): r.reason or f"state {r.state}, exit {r.exit_code}"
           for r in results if r.pinned and pair_busbw(r) is None}

    def show(p: Pair) -> str:
        got = measured.get(p)
        return f"{p[0]}+{p[1]} " + (f"{got:.3g} GB/s" if got is not None
                                    else f"failed ({why.get(p, 'no result')})")

    fast = sorted(x for p, ok in search.tried.items() if ok
                  for x in [measured.get(p)] if x is not None)
    others = f"; fast pairs {fast[0]:.3g}-{fast[-1]:.3g} GB/s" if fast else ""
    expected = f">= {_floor(measured):.3g} GB/s (half the best pair)"
    out = []
    for node in v["bad"]:
        slow = [p for p, ok in search.tried.items() if not ok and node in p]
        vals = [x for p in slow for x in [measured.get(p)] if x is not None]
        out.append(Outcome("links", f"links {node}", "fail", min(vals) if vals else None,
                           expected, "GB/s", node, "slow with every partner: "
                           + ", ".join(show(p) for p in slow) + others))
    if v["unresolved"]:
        slow = [p for p, ok in search.tried.items() if not ok
                and set(p) & set(v["unresolved"])]
        out.append(Outcome("links", "links unresolved", "fail", None, expected, "GB/s",
                           ",".join(v["unresolved"]),
                           "slow, but not with two nodes known to be good, so whose link "
                           "it is stays open: " + ", ".join(show(p) for p in slow)))
    if v["good"]:
        good = set(v["good"])
        noise = [p for p, ok in search.tried.items() if not ok and set(p) <= good]
        out.append(Outcome("links", "links", "pass", statistics.median(fast) if fast else None,
                           expected, "GB/s", hostlist.collect_hostlist(v["good"]),
                           f"{len(search.tried)} pair jobs in {search.rounds} round(s)"
                           + ("; slow once between nodes that other pairs cleared: "
                              + ", ".join(show(p) for p in noise) if noise else "")))
    return out

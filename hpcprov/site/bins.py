"""Settings by job size: the entry of a partition's node-count bins that covers a job.

``limits.max_walltime_by_nodes`` and ``env_by_nodes`` are lists of bins, smallest first
(the model checks the order); the first bin whose ``max_nodes`` covers the job applies, a
bin without ``max_nodes`` takes every larger job. Plain functions of the typed site: no
pydantic, so planning from the profile cache stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpcprov.site.types import Limits, Partition


def walltime_cap(limits: Limits, nodes: int) -> str | None:
    """The wall-clock cap of a job of ``nodes`` nodes: its max_walltime_by_nodes entry,
    else max_walltime (``limits``: a partition's limits)."""
    for b in limits.max_walltime_by_nodes:
        if b.max_nodes is None or nodes <= b.max_nodes:
            return str(b.max_walltime)
    return limits.max_walltime


def env_for_nodes(part: Partition, nodes: int) -> dict[str, str]:
    """The env_by_nodes variables of a job of ``nodes`` nodes (``part``: a partition)."""
    for b in part.env_by_nodes:
        if b.max_nodes is None or nodes <= b.max_nodes:
            return dict(b.env)
    return {}

"""The planner-demo rows a run keeps learning from, and where each came from.

`RunState.demos` holds the rows (a BC batch); `RunState.demo_segments` says, in row order, which
source each run of rows came from: "start" (round 0's demos of the seed pool and its demo
layouts, clean + DART), "routed" (demos on the targeted variants of modes routed to BC: below
the success band), "novel" (the round's fresh scenes, `loop.novel_demos`), "round" (the BC
strategies' demos on the round's scenes). Rows accumulate across rounds up to the cap; over it,
the oldest rows of earlier rounds that are not round 0's go first, then the oldest of round 0's
(they anchor the policy), never the rows just added unless they alone exceed the cap. AWR
batches draw demo rows uniformly with weight 1, so a source's share of the demo rows is its
share of the demo part of the gradient.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from coda.loop import collect

DEMO_SOURCES = ("start", "routed", "novel", "round")


def segments_of(state: Any) -> list[list]:
    """The state's segments [[source, rows], ...]; a state without them (an older run) holds
    round 0's demos only."""
    segs = [list(s) for s in (getattr(state, "demo_segments", None) or [])]
    if not segs and state.demos is not None:
        segs = [["start", int(state.demos.actions.shape[0])]]
    return segs


def add(
    demos: Any, segments: Sequence[Sequence], new: Any, source: str, cap: int
) -> tuple[Any, list[list]]:
    """`new` rows appended as `source`; over `cap`, rows dropped as the module docstring says.
    Returns (rows, segments)."""
    if source not in DEMO_SOURCES:
        raise ValueError(f"unknown demo source {source!r}; valid: {list(DEMO_SOURCES)}")
    if new is None or int(new.actions.shape[0]) == 0:
        return demos, [list(s) for s in segments]
    rows = collect.concat_batches([demos, new])
    segs = [list(s) for s in segments] + [[source, int(new.actions.shape[0])]]
    keep = _keep_mask(segs, cap)
    if not keep.all():
        idx = np.nonzero(keep)[0]
        rows = jax.tree.map(lambda x: x[idx], rows)
        segs = _recount(segs, keep)
    return rows, _merge(segs)


def composition(segments: Sequence[Sequence]) -> dict[str, int]:
    """Rows per source."""
    out: dict[str, int] = {}
    for src, n in segments:
        out[src] = out.get(src, 0) + int(n)
    return out


def split_demo_share(share: float, segments: Sequence[Sequence]) -> dict[str, float]:
    """The demo rows' weight share split over their sources by row count ("demos/<source>")."""
    comp = composition(segments)
    total = sum(comp.values())
    if total == 0:
        return {}
    return {f"demos/{k}": share * n / total for k, n in comp.items()}


def new_rows(segments: Sequence[Sequence]) -> np.ndarray:
    """Per row (in row order): whether it was added after round 0 (not a "start" row)."""
    if not segments:
        return np.zeros(0, bool)
    return np.concatenate([np.full(int(n), src != "start") for src, n in segments])


def mixed_shares(segments: Sequence[Sequence], new_share: float) -> dict[str, float]:
    """The BC batches' shares when `new_share` of every batch comes from the rows added after
    round 0 (split over their sources by row count) and the rest from round 0's; without such
    a split (`new_share` 0, no rows of one kind) every row alike."""
    comp = composition(segments)
    later = {k: n for k, n in comp.items() if k != "start"}
    total = sum(later.values())
    if new_share <= 0.0 or not total or not comp.get("start"):
        return split_demo_share(1.0, segments)
    out = {"demos/start": 1.0 - new_share}
    out.update({f"demos/{k}": new_share * n / total for k, n in later.items()})
    return out


def _keep_mask(segs: Sequence[Sequence], cap: int) -> np.ndarray:
    """Rows kept: all if within `cap`, else drop the oldest rows of earlier rounds that are not
    the start's, then the oldest start rows, then (only if it alone exceeds `cap`) the oldest of
    the rows just added, until `cap` remain."""
    if not segs:
        return np.zeros(0, bool)
    last = len(segs) - 1
    rank = [2 if i == last else (1 if s == "start" else 0) for i, (s, _) in enumerate(segs)]
    order = np.concatenate([np.full(int(n), r) for r, (_, n) in zip(rank, segs, strict=True)])
    keep = np.ones(order.size, bool)
    excess = order.size - int(cap)
    for r in (0, 1, 2):
        if excess <= 0:
            break
        idx = np.nonzero(order == r)[0][:excess]
        keep[idx] = False
        excess -= idx.size
    return keep


def _recount(segs: Sequence[Sequence], keep: np.ndarray) -> list[list]:
    out, i = [], 0
    for s, n in segs:
        k = int(keep[i : i + int(n)].sum())
        i += int(n)
        if k:
            out.append([s, k])
    return out


def _merge(segs: Sequence[Sequence]) -> list[list]:
    out: list[list] = []
    for s, n in segs:
        if out and out[-1][0] == s:
            out[-1][1] += int(n)
        elif int(n) > 0:
            out.append([s, int(n)])
    return out


def shares_row(shares: Mapping[str, float], segments: Sequence[Sequence]) -> dict[str, float]:
    """The metrics row's "shares": own-rollout sources as measured, the demo share by source."""
    out = {k: float(v) for k, v in shares.items() if k != "demos"}
    out.update(split_demo_share(float(shares.get("demos", 0.0)), segments))
    return out

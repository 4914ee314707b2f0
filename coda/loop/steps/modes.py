"""Step 7 (memory side): p̂_j and learning progress of the modes rolled out this round, the
success band, and the metrics row's mode table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from coda.engine import validate as V
from coda.engine.allocate import band_actions, mode_stats
from coda.loop.state import RunState


def _mode_row(m: Any) -> dict[str, Any]:
    return {
        "id": m.id,
        "factor": m.factor,
        "phase": m.phase,
        "cause": m.label,
        "status": m.status,
        "hardness": m.hardness,
        "lp": m.importance,
        "diagnoses": m.n_diagnoses,
        "trials": m.n_trials,
    }


def score_modes(
    svc: Any, state: RunState, r: int, per_mode: Mapping[int, list[int]]
) -> dict[str, Any]:
    """Record each mode's outcome (and its learning progress) in memory; return the row's
    entries: mode counts by status, modes in the band, band actions, refutation rates, table."""
    lo, hi = tuple(svc.config.loop.band)
    for mid, (k, n) in per_mode.items():
        try:
            before = svc.memory.get_mode(mid).hardness
        except KeyError:  # forgotten (no-memory ablation)
            continue
        m = svc.memory.record_mode_outcome(mid, round=r, n_success=k, n_trials=n)
        if before is not None:
            svc.memory.record_learning_progress(mid, round=r, before=before, after=m.hardness)
    modes = svc.memory.modes()
    stats = [
        mode_stats(
            m,
            times_allocated=state.times_allocated.get(m.id, 0),
            has_program=m.id in state.mode_potentials,
        )
        for m in modes
    ]
    in_band = [
        m.id
        for m in modes
        if m.status == "validated" and m.hardness is not None and lo <= m.hardness <= hi
    ]
    refut = V.refutation_rates_from_store(svc.memory)
    return {
        "modes": dict(Counter(m.status for m in modes)),
        "modes_in_band": len(in_band),
        "band_actions": dict(Counter(a for _, a in band_actions(stats, (lo, hi)))),
        "refutation_rate": {k: v.rate for k, v in refut.items()},
        "mode_table": [_mode_row(m) for m in modes],
    }

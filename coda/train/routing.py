"""Routing learning tools per subgoal / mode by measured success, and refinement of potentials.

Routing (§3.5): a subgoal (or mode) whose success rate is ≈ 0 cannot produce useful AWR data, so
with a planner demo it goes to behaviour cloning; inside the success band it gets shaped AWR;
above the band it only needs periodic re-evaluation. If nothing is inside the band, the engine
is told (`lower_importance`) so it can lower the mode's importance rather than spend updates
where they cannot help.

Refinement: a potential earns its place only if it speeds up the critic. `refinement_report`
compares value-prediction error curves of critics trained with and without Φ on the same data
and flags programs that do not converge faster, for the diagnosis / compiler to revise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

TOOLS = ("bc", "awr", "reeval", "none")


@dataclasses.dataclass(frozen=True)
class RoutingConfig:
    band: tuple[float, float] = (0.1, 0.9)  # success rates that give informative AWR data
    zero_tol: float = 0.02  # "≈ 0": at or below this success rate
    reeval_every: int = 5  # rounds between re-evaluations of mastered subgoals

    def __post_init__(self):
        lo, hi = self.band
        if not 0.0 <= self.zero_tol <= lo < hi <= 1.0:
            raise ValueError(f"need 0 <= zero_tol <= band[0] < band[1] <= 1, got {self}")


@dataclasses.dataclass(frozen=True)
class Routing:
    tools: dict[str, str]  # subgoal / mode -> one of TOOLS
    lower_importance: bool  # no subgoal inside the band: tell the engine
    reasons: dict[str, str]

    def keys_for(self, tool: str) -> list[str]:
        if tool not in TOOLS:
            raise ValueError(f"unknown tool {tool!r}; valid: {list(TOOLS)}")
        return [k for k, v in self.tools.items() if v == tool]


def route(
    success: Mapping[str, float],
    has_demo: Mapping[str, bool] | None = None,
    cfg: RoutingConfig = RoutingConfig(),
    round_index: int = 0,
) -> Routing:
    """Pick a learning tool per key from its measured success rate (in [0, 1])."""
    has_demo = has_demo or {}
    lo, hi = cfg.band
    tools, reasons = {}, {}
    for k, p in success.items():
        p = float(p)
        if not 0.0 <= p <= 1.0 or not np.isfinite(p):
            raise ValueError(f"success rate of {k!r} must be in [0, 1], got {p}")
        if p <= cfg.zero_tol:
            if has_demo.get(k, False):
                tools[k], reasons[k] = "bc", f"success {p:.2f} ≈ 0 with a planner demo"
            else:
                tools[k], reasons[k] = "none", f"success {p:.2f} ≈ 0 and no demo"
        elif p < lo:
            tools[k], reasons[k] = "none", f"success {p:.2f} below the band {cfg.band}"
        elif p <= hi:
            tools[k], reasons[k] = "awr", f"success {p:.2f} inside the band {cfg.band}"
        else:
            due = round_index % max(cfg.reeval_every, 1) == 0
            tools[k] = "reeval" if due else "none"
            reasons[k] = f"success {p:.2f} above the band; re-evaluate every {cfg.reeval_every}"
    in_band = any(v == "awr" for v in tools.values())
    return Routing(tools, lower_importance=bool(success) and not in_band, reasons=reasons)


@dataclasses.dataclass(frozen=True)
class RefinementReport:
    steps_with: int | None  # critic steps to reach the error threshold with Φ (None: never)
    steps_without: int | None
    auc_with: float  # mean error over the curve (lower = faster convergence)
    auc_without: float
    speedup: float  # auc_without / auc_with
    useful: bool  # False: flag the program for revision
    reason: str


def steps_to_threshold(steps: Sequence[int], errors: Sequence[float], thr: float) -> int | None:
    for s, e in zip(steps, errors, strict=True):
        if e <= thr:
            return int(s)
    return None


def refinement_report(
    steps: Sequence[int],
    err_with: Sequence[float],
    err_without: Sequence[float],
    threshold: float | None = None,
    min_speedup: float = 1.05,
) -> RefinementReport:
    """Compare value-error curves (same steps) of critics trained with vs. without Φ.

    The threshold defaults to 1.5x the better of the two final errors. Useful if the shaped
    critic's mean error over the curve is at least `min_speedup` times lower.
    """
    ew, eo = np.asarray(err_with, float), np.asarray(err_without, float)
    if ew.shape != eo.shape or ew.shape != (len(steps),) or ew.size == 0:
        raise ValueError("error curves must be non-empty and share the step grid")
    thr = float(threshold) if threshold is not None else 1.5 * float(min(ew[-1], eo[-1]))
    auc_w, auc_o = float(ew.mean()), float(eo.mean())
    speedup = auc_o / max(auc_w, 1e-12)
    sw, so = steps_to_threshold(steps, ew, thr), steps_to_threshold(steps, eo, thr)
    useful = speedup >= min_speedup
    reason = (
        f"shaped critic error AUC {auc_w:.4g} vs sparse {auc_o:.4g} (x{speedup:.2f}); "
        f"steps to error {thr:.3g}: {sw} vs {so}"
    )
    return RefinementReport(sw, so, auc_w, auc_o, speedup, useful, reason)

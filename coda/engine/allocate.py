"""Budget allocation over difficulty modes (§3.3): UCB, ε novel seeds, replay, success band.

Pure functions of memory's numbers (no store access, no clock, no global RNG): the same inputs
give the same ``Allocation``. Per round the engine spends ``budget`` scenes as

* novel: ``round(ε · B)`` fresh seeds, to discover modes memory does not know yet;
* replay: ``round(ρ · B)`` scenes split equally over validated modes whose success p̂_j is at or
  above the band's lower edge (in or above the band), to catch regressions;
* UCB: the rest, over validated modes that are not mastered (p̂_j <= hi, or never evaluated),
  split in proportion to

      score_j = w_h · (1 - p̂_j) + w_lp · |LP_j| + c · sqrt(ln(T + 1) / (n_j + 1)),

  where 1 - p̂_j is the hardness (1 for a mode never evaluated: optimistic), LP_j memory's
  running learning progress w_j, n_j how often the mode was allocated and T = Σ n_j over the UCB
  pool. Modes below the band (p̂_j < lo) stay in the pool but are flagged ``too_hard``; modes above
  it (p̂_j > hi) are ``mastered`` and only replayed. Candidate, refuted and retired modes get
  nothing.

An empty replay pool gives its share to the UCB pool; an empty UCB pool gives its share to novel
seeds (every known mode mastered: look for new ones). All integer splits use largest-remainder
rounding, so the parts sum exactly to the budget; ties go to the earlier entry (novel, replay,
UCB at the top level; ascending mode id within a pool).

``band_actions`` turns the same numbers into Ω decisions; see its docstring for the rule.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from coda.memory.store import MODE_STATUSES, Mode

__all__ = [
    "DEFAULT_BAND",
    "Allocation",
    "BandAction",
    "ModeStats",
    "allocate",
    "band_actions",
    "largest_remainder",
    "mode_stats",
    "ucb_scores",
]

DEFAULT_BAND = (0.1, 0.9)  # the same informative band as coda.train.routing.RoutingConfig
BandAction = Literal["add", "retire", "keep"]
_SEED_SPACE = 2**31 - 1  # novel seeds fit an int32 PRNG seed


@dataclass(frozen=True)
class ModeStats:
    """What allocation reads of a mode K_j: memory's numbers plus the engine's own counters.

    ``success_rate`` is memory's p̂_j (``Mode.hardness``: success rate in the latest evaluated
    round; ``None`` if never evaluated); ``learning_progress`` its running LP score w_j;
    ``times_allocated`` n_j the engine's count of UCB allocations; ``has_program`` whether the
    mode has a live Ω program.
    """

    mode_id: int
    status: str
    success_rate: float | None = None
    learning_progress: float = 0.0
    times_allocated: int = 0
    has_program: bool = False

    def __post_init__(self) -> None:
        where = f"ModeStats(mode_id={self.mode_id})"
        if self.status not in MODE_STATUSES:
            raise ValueError(f"{where}.status {self.status!r} unknown; valid: {MODE_STATUSES}")
        p = self.success_rate
        if p is not None and not (math.isfinite(p) and 0.0 <= p <= 1.0):
            raise ValueError(f"{where}.success_rate must be in [0, 1] or None, got {p}")
        if not math.isfinite(self.learning_progress):
            raise ValueError(
                f"{where}.learning_progress must be finite, got {self.learning_progress}"
            )
        if int(self.times_allocated) != self.times_allocated or self.times_allocated < 0:
            raise ValueError(
                f"{where}.times_allocated must be a count >= 0, got {self.times_allocated}"
            )

    @property
    def hardness(self) -> float:
        """1 - p̂_j; 1.0 for a mode never evaluated (optimism in the face of uncertainty)."""
        return 1.0 if self.success_rate is None else 1.0 - self.success_rate


def mode_stats(mode: Mode, *, times_allocated: int = 0, has_program: bool = False) -> ModeStats:
    """Adapter from memory's ``Mode``: p̂_j = ``hardness``, LP = ``importance`` (0 before any)."""
    return ModeStats(
        mode_id=int(mode.id),
        status=mode.status,
        success_rate=None if mode.hardness is None else float(mode.hardness),
        learning_progress=float(mode.importance) if mode.n_progress > 0 else 0.0,
        times_allocated=int(times_allocated),
        has_program=bool(has_program),
    )


@dataclass(frozen=True)
class Allocation:
    """One round's budget: novel seeds, replay and UCB scenes per mode (sums exactly to budget)."""

    round: int
    budget: int
    novel_seeds: tuple[int, ...]
    ucb: Mapping[int, int]  # mode id -> scenes from the UCB share (every UCB-pool mode listed)
    replay: Mapping[int, int]  # mode id -> replay scenes (every replay-pool mode listed)
    scores: Mapping[int, float]  # mode id -> UCB score of every UCB-pool mode
    too_hard: tuple[int, ...]  # validated, p̂_j < lo: kept in UCB, flagged
    mastered: tuple[int, ...]  # validated, p̂_j > hi: replay only

    def __post_init__(self) -> None:
        total = self.n_novel + self.n_ucb + self.n_replay
        if total != self.budget:
            raise ValueError(f"Allocation parts sum to {total}, budget is {self.budget}")

    @property
    def n_novel(self) -> int:
        return len(self.novel_seeds)

    @property
    def n_ucb(self) -> int:
        return sum(self.ucb.values())

    @property
    def n_replay(self) -> int:
        return sum(self.replay.values())

    def per_mode(self) -> dict[int, int]:
        """Total scenes per mode (UCB + replay), modes with zero left out."""
        out: dict[int, int] = {}
        for part in (self.ucb, self.replay):
            for k, v in part.items():
                if v:
                    out[k] = out.get(k, 0) + v
        return dict(sorted(out.items()))


def largest_remainder(weights: Sequence[float], total: int) -> list[int]:
    """Integers proportional to ``weights`` summing exactly to ``total`` (Hamilton's method).

    Each entry gets floor(total · w_i / Σw); the leftover units go to the largest fractional
    parts, ties to the earlier entry. All-zero weights split equally.
    """
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    if any(not math.isfinite(w) or w < 0 for w in weights):
        raise ValueError(f"weights must be finite and >= 0, got {list(weights)}")
    if not weights:
        if total:
            raise ValueError(f"cannot split {total} over no weights")
        return []
    s = math.fsum(weights)
    ws = list(weights) if s > 0 else [1.0] * len(weights)
    s = s if s > 0 else float(len(ws))
    quotas = []
    for w in ws:
        q = total * w / s
        r = round(q)
        quotas.append(float(r) if abs(q - r) < 1e-9 else q)  # 0.29·100 is 29, not 28.99…
    base = [math.floor(q) for q in quotas]
    left = total - sum(base)
    order = sorted(range(len(ws)), key=lambda i: (-(quotas[i] - base[i]), i))
    for i in order[:left]:
        base[i] += 1
    return base


def ucb_scores(
    modes: Sequence[ModeStats], *, c_explore: float, w_hardness: float, w_progress: float
) -> dict[int, float]:
    """score_j = w_h (1 - p̂_j) + w_lp |LP_j| + c sqrt(ln(T + 1) / (n_j + 1)), T = Σ n_j."""
    t = sum(m.times_allocated for m in modes)
    return {
        m.mode_id: w_hardness * m.hardness
        + w_progress * abs(m.learning_progress)
        + c_explore * math.sqrt(math.log(t + 1) / (m.times_allocated + 1))
        for m in modes
    }


def _check_band(band: tuple[float, float]) -> tuple[float, float]:
    try:
        lo, hi = (float(b) for b in band)
    except (TypeError, ValueError):
        raise ValueError(f"band must be a pair (lo, hi), got {band!r}") from None
    if not 0.0 <= lo < hi <= 1.0:
        raise ValueError(f"band must satisfy 0 <= lo < hi <= 1, got {band!r}")
    return lo, hi


def _novel_seeds(n: int, rng_seed: int, round: int) -> tuple[int, ...]:
    # str seeding hashes with SHA-512: the same (seed, round) gives the same seeds in any process.
    rng = random.Random(f"coda-engine-novel:{int(rng_seed)}:{int(round)}")
    return tuple(rng.sample(range(_SEED_SPACE), n))


def allocate(
    modes: Sequence[ModeStats],
    budget: int,
    round: int,
    *,
    c_explore: float = 1.0,
    epsilon: float = 0.1,
    replay_fraction: float = 0.1,
    band: tuple[float, float] = DEFAULT_BAND,
    w_hardness: float = 1.0,
    w_progress: float = 1.0,
    rng_seed: int = 0,
) -> Allocation:
    """Split ``budget`` scenes into novel seeds, replay and UCB over validated modes.

    See the module docstring for the formulas and the rules; ``rng_seed`` and ``round`` only
    choose the novel seeds.
    """
    if isinstance(budget, bool) or int(budget) != budget or budget < 0:
        raise ValueError(f"budget must be an integer >= 0, got {budget!r}")
    budget = int(budget)
    for name, v in (("epsilon", epsilon), ("replay_fraction", replay_fraction)):
        if not (math.isfinite(v) and 0.0 <= v <= 1.0):
            raise ValueError(f"{name} must be in [0, 1], got {v}")
    if epsilon + replay_fraction > 1.0 + 1e-12:
        raise ValueError(
            f"epsilon + replay_fraction must be <= 1, got {epsilon} + {replay_fraction}"
        )
    for name, v in (
        ("c_explore", c_explore),
        ("w_hardness", w_hardness),
        ("w_progress", w_progress),
    ):
        if not (math.isfinite(v) and v >= 0.0):
            raise ValueError(f"{name} must be finite and >= 0, got {v}")
    lo, hi = _check_band(band)
    ids = [m.mode_id for m in modes]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"duplicate mode ids in allocate(): {dup}")

    validated = sorted((m for m in modes if m.status == "validated"), key=lambda m: m.mode_id)
    ucb_pool = [m for m in validated if m.success_rate is None or m.success_rate <= hi]
    replay_pool = [m for m in validated if m.success_rate is not None and m.success_rate >= lo]
    too_hard = tuple(
        m.mode_id for m in validated if m.success_rate is not None and m.success_rate < lo
    )
    mastered = tuple(
        m.mode_id for m in validated if m.success_rate is not None and m.success_rate > hi
    )

    share_novel, share_replay = float(epsilon), float(replay_fraction)
    share_ucb = max(0.0, 1.0 - share_novel - share_replay)
    if not replay_pool:
        share_ucb, share_replay = share_ucb + share_replay, 0.0
    if not ucb_pool:
        share_novel, share_ucb = share_novel + share_ucb, 0.0
    n_novel, n_replay, n_ucb = largest_remainder([share_novel, share_replay, share_ucb], budget)

    scores = ucb_scores(ucb_pool, c_explore=c_explore, w_hardness=w_hardness, w_progress=w_progress)
    ucb_counts = largest_remainder([scores[m.mode_id] for m in ucb_pool], n_ucb)
    replay_counts = largest_remainder([1.0] * len(replay_pool), n_replay)
    return Allocation(
        round=int(round),
        budget=budget,
        novel_seeds=_novel_seeds(n_novel, rng_seed, round),
        ucb={m.mode_id: k for m, k in zip(ucb_pool, ucb_counts, strict=True)},
        replay={m.mode_id: k for m, k in zip(replay_pool, replay_counts, strict=True)},
        scores=scores,
        too_hard=too_hard,
        mastered=mastered,
    )


def band_actions(
    modes: Sequence[ModeStats], band: tuple[float, float] = DEFAULT_BAND
) -> list[tuple[int, BandAction]]:
    """What to do with each mode's Ω program, from its success p̂_j and the band [lo, hi].

    The rule (stateless: it reads ``has_program``, so applying it twice changes nothing):

    * ``add``: a validated mode with lo <= p̂_j <= hi and no live Ω. Its variants now give
      informative data (neither all-fail nor all-succeed), so the mode earns a generation
      program. This fires when success enters the band from below, and again if a retired,
      mastered mode regresses into the band.
    * ``retire``: a mode with a live Ω that is mastered (validated, p̂_j > hi; replay still
      watches it) or no longer validated (only validated modes belong in procedural memory).
    * ``keep``: everything else. Below the band (too hard) an existing Ω is kept and none is
      added; a mode never evaluated waits for its first p̂_j.
    """
    lo, hi = _check_band(band)
    out: list[tuple[int, BandAction]] = []
    for m in modes:
        p = m.success_rate
        action: BandAction = "keep"
        if m.status != "validated":
            if m.has_program:
                action = "retire"
        elif p is not None and p > hi:
            if m.has_program:
                action = "retire"
        elif p is not None and p >= lo and not m.has_program:
            action = "add"
        out.append((m.mode_id, action))
    return out

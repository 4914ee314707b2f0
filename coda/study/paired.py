"""Paired comparisons of a study's arms: the method minus each baseline, seed by seed.

Every arm of one seed shares that seed's round 0 (the BC start, the pool, the fixed evaluation
suites and their keys), so a seed's cells differ only by what the rounds did: the comparison
is the per-seed difference of the headline metric, and its uncertainty is the seed-level s.e.
of those differences (episodes of one cell are not independent draws of the arm's effect; an
episode is counted once, at the cell's last evaluated round).

Headline metric per cell: the OOD average, i.e. the mean of the held-out suites' success rates
(the paper's "OOD" column), not the pooled count (suites of different sizes would weigh
differently). For each baseline: the mean difference over the seeds both arms finished, its
s.e. (ddof 1), a two-sided paired t-test, and a 95 % confidence interval widened for the
number of baselines compared (Bonferroni: t at 1 - α / (2m)); the p-values are also Holm-
adjusted. The method beats a baseline when the adjusted interval excludes 0 from above.
Where every seed gives the same difference the t statistic is undefined: a non-zero one is
reported with p NaN (`degenerate`) and never rejects; a zero one has p = 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from scipy import stats

SPREAD_TOL = 1e-12  # a seed-level s.e. (or mean) this small is float noise on equal values


def ood_average(suites: Mapping[str, Mapping[str, Any]]) -> float:
    """Mean success rate over a cell's held-out ("ood…") suites; NaN without one."""
    rates = [r["successes"] / r["n"] for n, r in suites.items() if n.startswith("ood") and r["n"]]
    return sum(rates) / len(rates) if rates else math.nan


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted)."""
    idx = [i for i, x in enumerate(p) if not math.isnan(x)]
    m = len(idx)
    out = [math.nan] * len(p)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: p[i])):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def paired_differences(
    values: Mapping[str, Mapping[int, float]],
    method: str,
    baselines: Sequence[str],
    alpha: float = 0.05,
) -> dict[str, dict[str, Any]]:
    """`values[arm][seed]` -> per baseline: seeds, per-seed differences (method - baseline),
    mean, s.e., t-test p, Holm p, the Bonferroni-widened (1 - α) CI and whether it excludes 0."""
    mine = values.get(method, {})
    m = max(len(baselines), 1)
    out: dict[str, dict[str, Any]] = {}
    for b in baselines:
        theirs = values.get(b, {})
        seeds = sorted(s for s in mine if s in theirs and finite(mine[s]) and finite(theirs[s]))
        d = [mine[s] - theirs[s] for s in seeds]
        out[b] = _summary(seeds, d, alpha, m)
    adj = holm([out[b]["p"] for b in baselines])
    for b, p in zip(baselines, adj, strict=True):
        out[b]["p_holm"] = p
    return out


def paired_family(
    values: Mapping[str, Mapping[str, Mapping[int, float]]],
    pairs: Sequence[tuple[str, str]],
    alpha: float = 0.05,
) -> dict[str, dict[str, Any]]:
    """One registered family of comparisons: `values[metric][arm][seed]`; for every metric
    and (arm, other) pair, arm − other paired by seed, the CI widened for the family's size
    (Bonferroni over metrics × pairs) and p Holm-adjusted over the whole family. Keyed
    "<metric>: <arm> − <other>"."""
    m = max(len(values) * len(pairs), 1)
    out: dict[str, dict[str, Any]] = {}
    for metric, by_arm in values.items():
        for a, b in pairs:
            mine, theirs = by_arm.get(a, {}), by_arm.get(b, {})
            seeds = sorted(s for s in mine if s in theirs and finite(mine[s]) and finite(theirs[s]))
            row = _summary(seeds, [mine[s] - theirs[s] for s in seeds], alpha, m)
            out[f"{metric}: {a} − {b}"] = {"metric": metric, "arm": a, "other": b, **row}
    keys = list(out)
    for k, p in zip(keys, holm([out[k]["p"] for k in keys]), strict=True):
        out[k]["p_holm"] = p
    return out


def finite(x: Any) -> bool:
    """A number that is neither None nor NaN."""
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _summary(seeds: list[int], d: list[float], alpha: float, m: int) -> dict[str, Any]:
    n = len(d)
    row: dict[str, Any] = {"seeds": seeds, "differences": d, "n": n}
    mean = sum(d) / n if n else math.nan
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n) if n >= 2 else math.nan
    row.update(mean=mean, se=se, p=math.nan, ci=[math.nan, math.nan], excludes_zero=False)
    if n >= 2:
        q = float(stats.t.ppf(1.0 - alpha / (2 * m), n - 1))
        lo, hi = mean - q * se, mean + q * se
        if se > SPREAD_TOL * max(1.0, abs(mean)):
            p = 2.0 * float(stats.t.sf(abs(mean / se), n - 1))
            row.update(p=p, ci=[lo, hi], excludes_zero=bool(lo > 0 or hi < 0))
        elif mean == 0 or abs(mean) <= SPREAD_TOL:  # every seed the same, no difference
            row.update(p=1.0, ci=[mean, mean])
        else:  # every seed the same non-zero difference: the t statistic is undefined (no
            # spread to scale it by), so no test: p stays NaN and nothing is rejected. (It
            # was p = 0 here: one episode fewer in each of 3 seeds, 5 vs 6 of 100 with s.e.
            # 4e-18 from float noise, read as p = 2e-31.)
            row.update(ci=[mean, mean], degenerate=True)
    return row


def markdown(
    paired: Mapping[str, Mapping[str, Any]],
    method: str,
    alpha: float = 0.05,
    metric: str = "OOD average (mean of the held-out suites' rates)",
) -> list[str]:
    """The table1.md section (or another metric's): one line per baseline."""
    if not paired:
        return []
    m = len(paired)
    out = [
        f"## {method} minus each baseline, paired by seed: {metric.split(' (')[0]}",
        "",
        f"{metric} at the last evaluated round; per-seed "
        f"differences; {100 * (1 - alpha):.0f} % CI with t at 1 - α/(2·{m}) (Bonferroni over "
        f"{m} baselines); p two-sided paired t, Holm-adjusted.",
        "",
        "| baseline | seeds | difference (pts) | s.e. | adjusted CI (pts) | p | p (Holm) | "
        f"{method} ahead? |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b, r in paired.items():
        lo, hi = r["ci"]
        ahead = (
            "yes" if r["excludes_zero"] and lo > 0 else ("behind" if r["excludes_zero"] else "no")
        )
        out.append(
            f"| {b} | {r['n']} | {_pts(r['mean'])} | {_pts(r['se'], '')} "
            f"| [{_pts(lo)}, {_pts(hi)}] "
            f"| {_p(r['p'])} | {_p(r.get('p_holm', math.nan))} | {ahead} |"
        )
    return out + [""]


def _pts(x: float, sign: str = "+") -> str:
    return "–" if x is None or math.isnan(x) else f"{100 * x:{sign}.1f}"


def _p(x: float) -> str:
    return "–" if x is None or math.isnan(x) else f"{x:.3g}"

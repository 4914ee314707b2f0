"""Fixed ID / OOD evaluation suites of a run, and the loop's own metrics.

Suites are built once, at the start of a run, from the training pool (the seeded, verified
scene programs and their layout seeds) and saved to ``suites.json`` in the run folder; a resumed
run reloads them, so every round is measured on the same episodes:

* ``id``: the training programs at their training layout seeds (what the policy trains near);
* ``ood_layouts``: the training programs at layout seeds never used for training;
* ``ood_instances``: one task object swapped for a held-out instance of its category;
* ``ood_categories``: one task object swapped for an instance of a held-out category;
* ``ood_tasks``: task programs proposed for the run's families but held out from seeding.

What is held out from which arm: ``ood_layouts`` are new layouts of *seen* tasks for every
arm (round 0's demos already cover `loop.demo_seeds` more layouts of each pool program, and the
resampling arms draw fresh layouts of the same programs every round): near in-distribution,
never the exact scenes. ``ood_instances`` / ``ood_categories`` are held out from every arm: the
scenes a round trains on get their objects from `sim.split` ("train": novel seeds and the
pool), and resamples and the engine's edits keep the parent's objects (`EditBuilder` refuses
add_object), while those suites' objects are of the held-out split. ``ood_tasks`` are held out from
every arm: step 2 drops any generated scene whose task (`sources.task_key`: family, relation,
role-bound objects) is one of them, counted as ``heldout_tasks_dropped`` in each row. A source
that can tell when a generated scene recreates an evaluation scene (LIBERO's: same task, every
movable object within 1 cm of a held-out or LIBERO-PRO initial state, `coda.libero.heldout`)
has step 2 drop it too, counted as ``evaluation_duplicates_dropped``.

Every result carries its binomial standard error (`coda.eval.SuiteResult`).

Loop metrics (per round): coverage entropy of the generated scenes over (family, factor, phase)
(normalised Shannon entropy, 0 = one cell, 1 = uniform over the cells seen), targeting precision
(share of targeted variants on which the policy failed in the targeted mode's phase), the
verification pass rate of generated variants and the critics' refutation rates.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from coda.eval import Suite, SuiteResult, evaluate, make_suites
from coda.eval.suites import concat
from coda.registries import SUITE_NAMES

_FROM_EVAL = {  # coda.eval's suite -> the loop's name
    "train_layouts": "id",
    "heldout_layouts": "ood_layouts",
    "heldout_instances": "ood_instances",
    "heldout_categories": "ood_categories",
}


def build_suites(
    train: Sequence[tuple[str, int]],
    heldout_tasks: Sequence[str],
    episodes: int,
    seed: int,
    batch_size: int,
    names: Sequence[str] = SUITE_NAMES,
) -> dict[str, Suite]:
    """The run's suites from (program, layout seed) training pairs and held-out task programs."""
    unknown = [n for n in names if n not in SUITE_NAMES]
    if unknown:
        raise ValueError(f"unknown suites {unknown}; valid: {list(SUITE_NAMES)}")
    inv = {v: k for k, v in _FROM_EVAL.items()}
    eval_names = [inv[n] for n in names if n in inv]
    progs, seeds = [p for p, _ in train], [int(s) for _, s in train]
    made = make_suites(progs, seeds, episodes, seed, eval_names, batch_size=batch_size)
    out: dict[str, Suite] = {}
    for n in names:
        if n == "ood_tasks":
            pool = list(heldout_tasks)
            ps = [pool[i % len(pool)] for i in range(episodes)] if pool else []
            rng_seeds = [1_500_000_000 + 7919 * i + seed for i in range(len(ps))]
            out[n] = Suite(n, ps, rng_seeds, split="train", batch_size=batch_size)
        else:
            s = made[inv[n]]
            out[n] = Suite(n, s.programs, s.seeds, s.split, batch_size)
    return out


def save_suites(suites: dict[str, Suite], path: str) -> None:
    data = {
        n: {
            "programs": s.programs,
            "seeds": s.seeds,
            "split": s.split,
            "batch_size": s.batch_size,
            "success": s.success,
        }
        for n, s in suites.items()
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def load_suites(path: str) -> dict[str, Suite]:
    with open(path) as f:
        data = json.load(f)
    return {
        n: Suite(
            n,
            d["programs"],
            [int(x) for x in d["seeds"]],
            d["split"],
            d["batch_size"],
            d.get("success", "final"),  # suites.json before the rule was saved: ours
        )
        for n, d in data.items()
    }


def evaluate_suites(
    agent_for: Any,
    suites: dict[str, Suite],
    backend: Any,
    key: jax.Array,
    num_chunks: int,
    horizon: int,
    split: Any = None,
) -> tuple[dict[str, SuiteResult], int]:
    """Every suite with its own key; returns (results, env steps spent: episodes x chunks x H).
    `split`: the suites' buckets spread over the hosts of a run (`coda.eval.evaluate`)."""
    out, steps = {}, 0
    for i, (name, suite) in enumerate(suites.items()):
        if suite.n == 0:
            out[name] = SuiteResult.from_successes(name, [])
            continue
        k = jax.random.fold_in(key, i)
        out[name] = evaluate(agent_for, suite, backend, k, num_chunks, split=split)
        steps += out[name].n * num_chunks * horizon
    return out, steps


def coverage_entropy(cells: Sequence[tuple[str, str, str]]) -> float:
    """Normalised Shannon entropy of (family, factor, phase) cells; nan when fewer than 2 cells."""
    counts = Counter(cells)
    n = sum(counts.values())
    if len(counts) < 2 or n == 0:
        return 0.0 if n else math.nan
    h = -sum(c / n * math.log(c / n) for c in counts.values())
    return h / math.log(len(counts))


def targeting_precision(hits: int, targeted: int) -> float:
    """Targeted variants failed in the targeted phase / targeted variants (nan when none)."""
    return hits / targeted if targeted else math.nan


def summarize(results: dict[str, SuiteResult]) -> dict[str, dict[str, float]]:
    return {n: r.as_dict() for n, r in results.items()}


def pooled_ood(results: dict[str, SuiteResult]) -> SuiteResult:
    """All OOD episodes pooled into one rate with its s.e. (outcomes in suite order)."""
    return concat("ood", [r for n, r in results.items() if n.startswith("ood")])


def learning(history: Sequence[dict], late: Sequence[int] | None = None) -> dict[str, Any]:
    """Did the rounds change success? Round 0 (the start) against later rounds pooled, per suite.

    Every round measures the same fixed episodes, so the comparison is paired by episode: for
    episode i, d_i = (its success rate over the `late` rounds) - (its round-0 success), and the
    change is mean(d) with s.e. std(d) / sqrt(n) - both the scene draw and the rollout noise are
    in it, and nothing is counted twice (pooling the late rounds' episodes as if independent
    would understate the s.e.: they are the same scenes). Rows without per-episode outcomes
    (runs from before they were kept) fall back to the unpaired binomial difference.

    `late`: the rounds pooled; default the later half of the evaluated rounds after round 0
    (rounds 5-8 of 8), where a one-round reading (±3 points at n = 256) would be noise.
    Returns {"start": r0, "late": [rounds], "suites": {name: {start, late, delta, se, z,
    paired, n, reading}}} with reading "up" / "down" when |delta| > 2 s.e., else "flat";
    {} when fewer than two rounds were evaluated.
    """
    rows = [h for h in history if "suites" in h]
    if len(rows) < 2:
        return {}
    start, rest = rows[0], rows[1:]
    if late is None:
        chosen = rest[len(rest) // 2 :]
    else:
        chosen = [h for h in rest if h["round"] in set(late)]
        if not chosen:
            raise ValueError(f"no evaluated round among {list(late)}: {[h['round'] for h in rest]}")
    out: dict[str, Any] = {
        "start": start["round"],
        "late": [h["round"] for h in chosen],
        "suites": {},
    }
    names = list(start["suites"]) + (["ood"] if "ood" in start else [])

    def get(row: dict, name: str) -> dict | None:
        return row.get("ood") if name == "ood" else row["suites"].get(name)

    for name in names:
        s0, ls = get(start, name), [get(h, name) for h in chosen]
        if s0 is None or any(x is None for x in ls) or not s0["n"]:
            continue
        n = int(s0["n"])
        paired = all(len(x.get("outcomes", "")) == n for x in [s0, *ls])
        if paired:
            o0 = np.array([c == "1" for c in s0["outcomes"]], float)  # [n]
            ol = np.array([[c == "1" for c in x["outcomes"]] for x in ls], float).mean(0)  # [n]
            d = ol - o0
            p0, pl, delta = float(o0.mean()), float(ol.mean()), float(d.mean())
            se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
        else:
            k, m = sum(int(x["successes"]) for x in ls), sum(int(x["n"]) for x in ls)
            p0, pl = float(s0["rate"]), k / m
            delta = pl - p0
            se = math.sqrt(p0 * (1 - p0) / n + pl * (1 - pl) / m)
        z = delta / se if se > 0 else (0.0 if delta == 0 else math.copysign(math.inf, delta))
        reading = "up" if z > 2 else "down" if z < -2 else "flat"
        out["suites"][name] = {
            "start": p0,
            "late": pl,
            "delta": delta,
            "se": se,
            "z": z,
            "paired": paired,
            "n": n,
            "reading": reading,
        }
    return out

"""Fixed ID / OOD evaluation suites of a run, and the loop's own metrics.

Suites are built once, at the start of a run, from the training pool (the seeded, verified
scene programs and their layout seeds) and saved to ``suites.json`` in the run folder; a resumed
run reloads them, so every round is measured on the same episodes:

* ``id``: the training programs at their training layout seeds (what the policy trains near);
* ``ood_layouts``: the training programs at layout seeds never used for training;
* ``ood_instances``: one task object swapped for a held-out instance of its category;
* ``ood_categories``: one task object swapped for an instance of a held-out category;
* ``ood_tasks``: task programs proposed for the run's families but held out from seeding.

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

from coda.eval import Suite, SuiteResult, evaluate, make_suites
from coda.loop.evaluation_names import SUITE_NAMES

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
    """All OOD episodes pooled into one rate with its s.e."""
    k = sum(r.successes for n, r in results.items() if n.startswith("ood"))
    n = sum(r.n for name, r in results.items() if name.startswith("ood"))
    return SuiteResult.from_successes("ood", [True] * k + [False] * (n - k))

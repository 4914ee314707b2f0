"""Evaluation on the run's fixed suites (round 0 and every `eval.every` rounds)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax

from coda.loop import distributed
from coda.loop.evaluation import evaluate_suites, pooled_ood
from coda.loop.state import Spend


@dataclasses.dataclass(frozen=True)
class Evaluated:
    """Suite results (`coda.eval.SuiteResult` per suite name) and what the rollouts spent."""

    results: Mapping[str, Any]
    spend: Spend

    def row(self) -> dict[str, Any]:
        """The metrics row's "suites" and pooled "ood" entries."""
        return {
            "suites": {n: x.as_dict() for n, x in self.results.items()},
            "ood": pooled_ood(dict(self.results)).as_dict(),
        }


def evaluate(svc: Any, key: jax.Array, names: Sequence[str] | None = None) -> Evaluated:
    """The current weights (the rollouts' compiled agents, j = 1) on the suites `names` (all
    when None), each host rolling out its share of the buckets."""
    suites = svc.suites if names is None else {n: svc.suites[n] for n in names}
    t0 = time.perf_counter()
    res, steps = evaluate_suites(
        svc.agents,
        suites,
        svc.backend,
        key,
        int(svc.config.sim.num_chunks),
        int(svc.config.sim.horizon),
        split=distributed.host_split(),
    )
    return Evaluated(res, Spend(steps, time.perf_counter() - t0))

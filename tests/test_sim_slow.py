"""Longer simulation checks (run with `make test-slow` / `pytest -m slow`)."""

import jax
import numpy as np
import pytest

from coda.sim import tasks
from coda.sim.compile import compile_scene
from coda.sim.planner import planner_for
from coda.sim.rollout import MjxBackend, make_buckets
from coda.sim.sdk import exec_program

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("family", sorted(tasks.FAMILIES))
def test_planner_success_on_many_default_variants(family, native_backend):
    rng = np.random.default_rng(2024)
    fam = tasks.get_family(family)
    compiled = [
        compile_scene(exec_program(fam.propose(rng), seed=k, isolation="inprocess"))
        for k in range(32)
    ]
    ok = []
    for b in make_buckets(compiled):
        r = native_backend.rollout(b, planner_for(b), None, jax.random.PRNGKey(0), 14)
        ok += [bool(x) for x in np.asarray(r.success)[: len(b.variants)]]
    rate = float(np.mean(ok))
    print(f"{family}: planner success {rate:.3f} over {len(ok)} variants")
    assert rate >= 0.9


def test_backends_agree_on_every_family(native_backend):
    """One program per family (one bucket of 4 seeds each) on MJX and native."""
    mjx = MjxBackend()
    agree, total = 0, 0
    for family in sorted(tasks.FAMILIES):
        src = tasks.get_family(family).propose(np.random.default_rng(5))
        compiled = [
            compile_scene(exec_program(src, seed=k, isolation="inprocess")) for k in range(4)
        ]
        (bucket,) = make_buckets(compiled)
        planner = planner_for(bucket)
        a = mjx.rollout(bucket, planner, None, jax.random.PRNGKey(0), 14)
        b = native_backend.rollout(bucket, planner, None, jax.random.PRNGKey(0), 14)
        agree += int((np.asarray(a.success) == np.asarray(b.success)).sum())
        total += 4
        print(family, np.asarray(a.success), np.asarray(b.success))
    assert agree / total >= 0.95

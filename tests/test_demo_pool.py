"""The demo rows a run keeps (`coda.loop.demo_pool`): sources in row order, the cap, shares."""

import jax.numpy as jnp
import numpy as np
import pytest

from coda.loop import demo_pool
from coda.policy.base import Batch, Observation


def _rows(n: int, tag: float) -> Batch:
    """n demo rows whose actions are all `tag` (to see which rows survive)."""
    obs = Observation(
        jnp.zeros((n, 2), jnp.int32), jnp.ones((n, 2), bool), jnp.zeros((n, 3)), jnp.ones((n, 3))
    )
    return Batch(obs, jnp.full((n, 1, 1), tag, jnp.float32), jnp.ones((n,), jnp.float32))


def _tags(b: Batch) -> list[float]:
    return [float(x) for x in np.asarray(b.actions)[:, 0, 0]]


def test_rows_accumulate_and_the_cap_drops_old_non_start_rows_first():
    demos, segs = demo_pool.add(None, [], _rows(4, 0.0), "start", cap=8)
    demos, segs = demo_pool.add(demos, segs, _rows(2, 1.0), "routed", cap=8)
    demos, segs = demo_pool.add(demos, segs, _rows(2, 2.0), "routed", cap=8)
    assert segs == [["start", 4], ["routed", 4]] and demo_pool.composition(segs)["routed"] == 4
    # 3 more: the oldest routed rows go, round 0's stay, the new ones are kept
    demos, segs = demo_pool.add(demos, segs, _rows(3, 3.0), "novel", cap=8)
    assert _tags(demos) == [0.0] * 4 + [2.0] + [3.0] * 3
    assert segs == [["start", 4], ["routed", 1], ["novel", 3]]
    # new rows alone fill the cap beyond the other sources: start rows go too, oldest first
    demos, segs = demo_pool.add(demos, segs, _rows(6, 4.0), "routed", cap=8)
    assert _tags(demos) == [0.0, 0.0] + [4.0] * 6 and segs == [["start", 2], ["routed", 6]]
    assert demo_pool.add(demos, segs, None, "routed", 8)[1] == segs  # nothing added
    with pytest.raises(ValueError, match="valid: \\['start', 'routed', 'novel', 'round'\\]"):
        demo_pool.add(demos, segs, _rows(1, 5.0), "fresh", 8)


def test_demo_share_is_split_by_row_count():
    row = demo_pool.shares_row(
        {"targeted": 0.5, "pool": 0.25, "demos": 0.25}, [["start", 30], ["routed", 10]]
    )
    assert row["targeted"] == pytest.approx(0.5, abs=1e-9)
    assert row["demos/start"] == pytest.approx(0.1875, abs=1e-9)
    assert row["demos/routed"] == pytest.approx(0.0625, abs=1e-9)
    assert sum(row.values()) == pytest.approx(1.0, abs=1e-9)


def test_an_older_state_without_segments_holds_round_0_demos():
    class S:
        demos = _rows(5, 0.0)
        demo_segments: list = []

    assert demo_pool.segments_of(S()) == [["start", 5]]


def test_a_mixed_bc_batch_gives_the_new_rows_their_share_by_source():
    segs = [["start", 900], ["round", 60], ["routed", 40]]
    np.testing.assert_array_equal(demo_pool.new_rows(segs), np.arange(1000) >= 900)
    got = demo_pool.mixed_shares(segs, 0.5)
    assert got == pytest.approx(
        {"demos/start": 0.5, "demos/round": 0.3, "demos/routed": 0.2}, abs=1e-12
    )
    # without rows of round 0 (or none after it) every row alike
    assert demo_pool.mixed_shares([["round", 10]], 0.5) == pytest.approx(
        {"demos/round": 1.0}, abs=1e-12
    )

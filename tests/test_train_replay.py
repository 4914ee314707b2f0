"""Device replay buffer: ring insertion (wrap-around, oversize batches) and sampling, jitted."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda.train.replay import Replay, insert


def _rows(start: int, n: int) -> dict:
    """Rows whose every leaf encodes its global insertion index i: x [n, 2], flag [n]."""
    i = jnp.arange(start, start + n)
    return {"x": jnp.stack([i, -i], 1).astype(jnp.float32), "flag": i % 2 == 0}


def _ids(buf: Replay) -> np.ndarray:
    return np.asarray(buf.data["x"][:, 0]).astype(int)


def test_insert_wraps_around_on_device():
    buf = Replay.create(_rows(0, 1), capacity=5)
    assert buf.data["x"].shape == (5, 2) and buf.data["flag"].dtype == jnp.bool_
    step = jax.jit(Replay.insert)
    buf = step(buf, _rows(0, 3))
    assert int(buf.size) == 3 and int(buf.ptr) == 3
    np.testing.assert_array_equal(_ids(buf)[:3], [0, 1, 2])
    buf = step(buf, _rows(3, 4))  # 2 rows fit, 2 wrap to the front
    assert int(buf.size) == 5 and int(buf.ptr) == 2
    np.testing.assert_array_equal(_ids(buf), [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(np.asarray(buf.data["flag"]), _ids(buf) % 2 == 0)
    assert isinstance(buf.data["x"], jax.Array)  # stays a device array


def test_insert_batch_larger_than_capacity_keeps_the_newest():
    buf = insert(Replay.create(_rows(0, 1), 4), _rows(0, 1))  # ptr 1
    buf = insert(buf, _rows(1, 10))  # rows 1..10; the last 4 (7..10) survive
    assert int(buf.size) == 4 and int(buf.ptr) == (1 + 10) % 4
    ids = _ids(buf)
    assert sorted(ids) == [7, 8, 9, 10]
    # ring order is preserved: the slot before the pointer holds the newest row
    assert ids[(int(buf.ptr) - 1) % 4] == 10 and ids[int(buf.ptr)] == 7


def test_sample_covers_only_the_filled_part_and_matches_indexing():
    buf = insert(Replay.create(_rows(0, 1), 64), _rows(100, 6))
    sample = jax.jit(Replay.sample, static_argnums=2)
    mb = sample(buf, jax.random.key(0), 512)
    ids = np.asarray(mb["x"][:, 0]).astype(int)
    assert set(ids) == set(range(100, 106))  # every filled row, never an empty slot
    # before wrap-around, slot i is the i-th inserted row: the same draw as indexing the data
    idx = jax.random.randint(jax.random.key(0), (512,), 0, 6)
    np.testing.assert_array_equal(ids, 100 + np.asarray(idx))


def test_from_rows_and_errors():
    full = Replay.from_rows(_rows(0, 3))
    assert full.capacity == 3 and int(full.size) == 3
    with pytest.raises(ValueError, match="capacity"):
        Replay.create(_rows(0, 1), 0)
    with pytest.raises(ValueError, match="same leading size"):
        Replay.create(_rows(0, 1), 2).insert({"x": jnp.zeros((2, 2)), "flag": jnp.zeros((3,))})


def test_inserts_of_any_size_share_one_compiled_program():
    """Rows are padded to a power of two on the host and the padding dropped on device."""
    from coda.train import replay

    buf = Replay.create(_rows(0, 1), 128)
    before = replay._insert._cache_size()
    for start, n in ((0, 3), (3, 7), (10, 50)):
        buf = insert(buf, _rows(start, n))
    assert replay._insert._cache_size() - before <= 1  # all three padded to 64 rows
    assert int(buf.size) == 60 and int(buf.ptr) == 60
    np.testing.assert_array_equal(_ids(buf)[:60], np.arange(60))
    np.testing.assert_array_equal(_ids(buf)[60:], 0)  # padding never written

"""A replay buffer that lives in device arrays: a fixed-capacity ring buffer as a pytree.

Why on device: the learner samples its critic and policy minibatches *inside* a jitted
`lax.scan` of K updates (`coda.train.multistep`), so the data must be arrays the compiled
program can index — no host round trip per minibatch, one dispatch per K updates. The buffer is
a `flax.struct` pytree (jit argument, orbax checkpoint leaf set); `capacity` is static, so every
insert / sample compiles against fixed shapes.

Semantics: items are rows of any pytree whose leaves share a leading axis. `insert` writes rows
at the write pointer and wraps around (oldest rows are overwritten); a batch larger than the
capacity keeps only its last `capacity` rows. `sample` draws uniformly (with replacement) over
the filled slots. Until the first wrap-around, slot i holds the i-th row ever inserted, so
sampling matches indexing the concatenation of everything inserted.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct


@struct.dataclass
class Replay:
    """Ring buffer of rows: `data` leaves are [capacity, ...]."""

    data: Any  # pytree, every leaf [capacity, ...]
    ptr: jax.Array  # [] int32: next slot to write
    size: jax.Array  # [] int32: filled slots (<= capacity)
    capacity: int = struct.field(pytree_node=False)

    @classmethod
    def create(cls, example: Any, capacity: int) -> Replay:
        """An empty buffer for rows shaped like `example` (a pytree of [N, ...] arrays or
        `jax.ShapeDtypeStruct`s; N is ignored)."""
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        data = jax.tree.map(lambda x: jnp.zeros((capacity,) + tuple(x.shape[1:]), x.dtype), example)
        return cls(data, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), int(capacity))

    @classmethod
    def from_rows(cls, rows: Any) -> Replay:
        """A full buffer holding exactly `rows` (capacity = number of rows; no copy)."""
        n = _num_rows(rows)
        if n < 1:
            raise ValueError("cannot build a buffer from zero rows")
        return cls(rows, jnp.zeros((), jnp.int32), jnp.full((), n, jnp.int32), n)

    def insert(self, rows: Any, count: jax.Array | int | None = None) -> Replay:
        """Write the first `count` rows of [N, ...] (default all N) at the pointer, wrapping
        around; jittable (N static, `count` may be traced). Of more rows than the capacity only
        the last `capacity` are kept. Rows past `count` (padding) are dropped, not written."""
        n = _num_rows(rows)
        if n == 0:
            return self
        cap = self.capacity
        count = jnp.asarray(n if count is None else count, jnp.int32)
        i = jnp.arange(n, dtype=jnp.int32)  # [N]
        keep = (i < count) & (i >= count - cap)  # written rows: the last <= cap valid ones
        dest = jnp.where(keep, (self.ptr + i) % cap, cap)  # distinct slots; cap = dropped
        data = jax.tree.map(
            lambda buf, x: buf.at[dest].set(jnp.asarray(x, buf.dtype), mode="drop"),
            self.data,
            rows,
        )
        ptr = ((self.ptr + count) % cap).astype(jnp.int32)
        size = jnp.minimum(self.size + count, cap).astype(jnp.int32)
        return self.replace(data=data, ptr=ptr, size=size)

    def sample_indices(self, key: jax.Array, batch: int) -> jax.Array:
        """Uniform slots over the filled part: [batch] int32 (an empty buffer gives slot 0)."""
        return jax.random.randint(key, (batch,), 0, jnp.maximum(self.size, 1))

    def sample(self, key: jax.Array, batch: int) -> Any:
        """A minibatch of `batch` rows drawn uniformly with replacement: pytree [batch, ...]."""
        return self.take(self.sample_indices(key, batch))

    def sample_indices_where(
        self, key: jax.Array, batch: int, mask: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """`batch` slots drawn uniformly with replacement among the filled slots where `mask`
        [capacity] holds, and whether any does (none: uniform over the filled slots; an empty
        buffer gives slot 0)."""
        filled = jnp.arange(self.capacity) < self.size
        ok = filled & mask
        any_ok = jnp.any(ok)
        p = jnp.where(any_ok, ok, filled).astype(jnp.float32)
        p = jnp.where(jnp.sum(p) > 0, p, jnp.arange(self.capacity) == 0)
        p = p / jnp.sum(p)
        return jax.random.choice(key, self.capacity, (batch,), replace=True, p=p), any_ok

    def take(self, idx: jax.Array) -> Any:
        """The rows at slots `idx`: pytree [len(idx), ...]."""
        return jax.tree.map(lambda x: x[idx], self.data)


def _num_rows(rows: Any) -> int:
    leaves = jax.tree.leaves(rows)
    if not leaves:
        raise ValueError("rows must contain at least one array")
    n = int(leaves[0].shape[0])
    if any(int(x.shape[0]) != n for x in leaves):
        raise ValueError(f"all leaves need the same leading size; got {[x.shape for x in leaves]}")
    return n


_insert = jax.jit(Replay.insert, donate_argnums=0)


def insert(buffer: Replay, rows: Any, min_rows: int = 64) -> Replay:
    """Jitted, buffer-donating insert (the buffer's arrays are updated in place). Rows are
    padded to the next power of two (at least `min_rows`) and the padding dropped on device, so
    rollouts of any size share a handful of compiled inserts."""
    n = _num_rows(rows)
    if n == 0:
        return buffer
    padded = max(int(min_rows), 1 << (n - 1).bit_length())
    # padded on the host: an eager jnp.pad compiles one XLA program per row count, and a long run
    # sees thousands of counts (each program's code stays mapped in the process: coda.lifetime)
    rows = jax.tree.map(lambda x: _pad_rows(x, padded - n), rows)
    return _insert(buffer, rows, jnp.int32(n))


def _pad_rows(x: Any, extra: int) -> Any:
    if isinstance(x, jax.Array) and not x.is_fully_addressable:  # a multi-host global array
        return jnp.pad(x, [(0, extra)] + [(0, 0)] * (x.ndim - 1))
    x = np.asarray(x)
    return np.pad(x, [(0, extra)] + [(0, 0)] * (x.ndim - 1))

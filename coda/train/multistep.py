"""K updates per jitted call, minibatches drawn on device, optional data parallelism.

The critic's K-step program wraps `coda.train.critic.make_critic_train_step` (unchanged): a
`lax.scan` over K keys, each update drawing its minibatch from a device `Replay` inside the
scan. The policy's counterpart is `coda.policy.train.make_scan_train_step`.

Data parallel (`data_mesh`): one mesh axis ``"data"`` over `jax.devices()`. Parameters,
optimiser state and buffers are replicated; every minibatch is constrained to be split along
its rows over the devices (`shard_rows`), so XLA partitions the forward/backward pass by rows
and all-reduces the gradients. The arithmetic is the same as on one device up to reduction
order (tests/test_train_multistep.py checks 4 forced host devices against 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from coda.train.critic import ChunkCritic, CriticState, Transitions, make_critic_train_step
from coda.train.replay import Replay

DATA_AXIS = "data"


def data_mesh(devices: list | None = None) -> Mesh:
    """A 1-D mesh (axis ``"data"``) over `devices` (default: all of `jax.devices()`)."""
    import numpy as np

    devs = list(jax.devices() if devices is None else devices)
    return Mesh(np.array(devs), (DATA_AXIS,))


def shard_rows(tree: Any, mesh: Mesh | None) -> Any:
    """Inside jit: split every leaf's leading (row) axis over the mesh's data axis."""
    if mesh is None:
        return tree
    spec = NamedSharding(mesh, PartitionSpec(DATA_AXIS))
    return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, spec), tree)


def replicate(tree: Any, mesh: Mesh | None) -> Any:
    """Outside jit: place a full copy of every leaf on each device of the mesh."""
    if mesh is None:
        return tree
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))


def check_divisible(batch: int, mesh: Mesh | None, what: str) -> None:
    n = 1 if mesh is None else mesh.size
    if batch % n:
        raise ValueError(f"{what} {batch} must be divisible by the {n} data-parallel devices")


def trim_tokens(tr: Transitions, token_len: int) -> Transitions:
    """Drop prompt columns past `token_len` (all masked out in the data): [N, L] -> [N, len]."""
    return tr.replace(tokens=tr.tokens[:, :token_len], token_mask=tr.token_mask[:, :token_len])


def make_critic_scan(
    critic: ChunkCritic,
    lr: float,
    tau: float,
    batch_size: int,
    *,
    token_len: int | None = None,
    mesh: Mesh | None = None,
) -> Callable[[CriticState, Replay, jax.Array], tuple[CriticState, dict]]:
    """(state, replay of `Transitions`, keys [K]) -> (state, metrics of the last update).

    Update i trains on ``replay.sample(keys[i], batch_size)`` — the same draw as
    `critic.sample_batch(rows, keys[i], batch_size)` over the filled rows, so before the buffer
    wraps around this equals `critic.make_critic_fit` on the concatenated transitions.
    """
    check_divisible(batch_size, mesh, "critic batch")
    step = make_critic_train_step(critic, lr, tau, jit=False)

    def run(state: CriticState, replay: Replay, keys: jax.Array):
        def body(s, k):
            mb = replay.sample(k, batch_size)
            if token_len is not None:
                mb = trim_tokens(mb, token_len)
            return step(s, shard_rows(mb, mesh))

        state, ms = jax.lax.scan(body, state, keys)
        return state, jax.tree.map(lambda x: x[-1], ms)

    return jax.jit(run, donate_argnums=0)

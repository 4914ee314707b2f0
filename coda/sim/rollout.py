"""Vectorized chunked rollouts on two interchangeable physics backends.

A policy emits an action chunk of H control steps from the chunk-start state; the chunk runs
open-loop; the policy sees the chunk-endpoint state next. Success is ν at the final endpoint.

- `mjx`: one jitted episode per bucket: `lax.scan` over chunks, over control steps, over
  physics substeps, with `mjx.step` vmapped over the per-variant model fields and states. The
  batch axis is sharded over all devices (`jax.sharding`); batch shapes are fixed by padding.
- `native`: per chunk, the jitted policy produces controls and `mujoco.rollout` steps every
  variant's own `MjModel` in C across all CPU threads. Much faster than MJX on a CPU
  (benchmarks/results/rollout_throughput.json).

Both decode the same sensordata layout into `SimState`, so ν and potentials are shared.
Variants whose state becomes non-finite or explodes are frozen at their last good state and
marked failed; they never crash the batch. Buckets (`Bucket`, `make_buckets`) are built in
`coda.sim.bucket` and re-exported here.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from absl import logging
from flax import struct

from coda import lifetime, registries
from coda.registry import UnknownName
from coda.sim import robot

# the buckets live in coda.sim.bucket; re-exported here, where callers import them from
from coda.sim.bucket import (  # noqa: F401
    Bucket,
    batch_mjx_models,
    check_same_task,
    make_buckets,
    varied_fields,
)
from coda.sim.observe import render_qpos
from coda.sim.state import SimState, StateLayout, decode

MAX_QVEL = 1e3  # |qvel| beyond this marks a variant as exploded


class ChunkPolicy(Protocol):
    """What rollouts call. `act` must be a pure jittable function of its arguments.

    Optional: a policy with a non-None `image_spec` (`coda.sim.observe.ImageSpec`) observes
    rendered cameras: `NativeBackend` renders them at every chunk start and calls
    `act(..., images=[B, n_cam, S, S, 3] uint8)`; `MjxBackend` refuses it (no renderer).
    """

    horizon: int

    def init(self, batch: int, rng: jax.Array) -> Any: ...

    def act(
        self, params: Any, state: SimState, carry: Any, rng: jax.Array
    ) -> tuple[jnp.ndarray, Any, dict[str, jnp.ndarray]]:
        """-> (actions [B, H, 7] in [-1, 1], new carry, info {name: [B] array} for traces)."""
        ...


@struct.dataclass
class RolloutResult:
    success: jnp.ndarray  # [B] bool: ν at the final chunk endpoint, and not failed
    success_any: jnp.ndarray  # [B] bool: ν at any chunk endpoint
    failed: jnp.ndarray  # [B] bool: non-finite / exploded (frozen) variants
    states: SimState  # leaves [B, C+1, ...]: t=0 and every chunk endpoint
    qpos: jnp.ndarray  # [B, C+1, nq] at the same instants (for replay / rendering)
    actions: jnp.ndarray  # [B, C, H, 7]
    info: dict  # {name: [B, C]} per-chunk policy traces (e.g. planner phase)
    valid: jnp.ndarray  # [B] bool: False for padding variants
    env_steps: int = struct.field(pytree_node=False, default=0)  # physics steps, valid only
    # [B, C, n_cam, S, S, 3] uint8: the frames an image policy saw at each chunk start (None
    # for state-only policies; `coda.sim.observe.with_images` re-renders them from qpos)
    images: Any = None


# ----------------------------------------------------------------------------- shared pieces


def _finalize(
    bucket: Bucket,
    states: SimState,
    qpos,
    actions,
    info,
    failed,
    num_chunks: int,
    horizon: int,
    images: Any = None,
) -> RolloutResult:
    nu = jnp.asarray(bucket.success_over_time(states), bool)
    failed = jnp.asarray(failed, bool)
    valid = jnp.asarray(bucket.valid)
    n_valid = int(bucket.valid.sum())
    return RolloutResult(
        success=nu[:, -1] & ~failed,
        success_any=jnp.any(nu, axis=1) & ~failed,
        failed=failed,
        states=states,
        qpos=jnp.asarray(qpos),
        actions=actions,
        info=info,
        valid=valid,
        env_steps=n_valid * num_chunks * horizon * robot.SUBSTEPS,
        images=images,
    )


def episode_keys(rng: jax.Array, num_chunks: int) -> tuple[jax.Array, jax.Array]:
    """(key for `policy.init`, per-chunk keys [C]): the one derivation both backends use, so a
    stochastic policy draws the same actions from the same key on either backend."""
    rng, k0 = jax.random.split(rng)
    return k0, jax.random.split(rng, num_chunks)


# Programs per scene structure (StateLayout) and policy. A long run meets many structures (the
# critic's probes, fresh tasks), so each kind is a bounded LRU (coda.lifetime.RunCache): an
# evicted program's executables are unmapped, instead of every structure's staying for good.
_DECODERS = lifetime.RunCache("sim.decoders", maxsize=128)
_CHUNK_PROGRAMS = lifetime.RunCache("sim.policy_chunks", maxsize=64)


def decode_trace(sensordata, layout: StateLayout, consts, cmd) -> SimState:
    """decode of a whole trace [B, T] (sensordata [B, T, S], cmd [B, T, 6]), jitted once per
    layout (eager, its many slices would compile one by one)."""
    fn = _DECODERS.get(layout, lambda: jax.jit(lambda s, c, u: decode(s, layout, c, u)))
    return fn(sensordata, consts, cmd)


def image_spec_of(policy: Any) -> Any:
    """The policy's `coda.sim.observe.ImageSpec`, or None when it observes no images."""
    return getattr(policy, "image_spec", None)


def _policy_chunk(policy, layout, params, sensordata, consts, target, carry, rng, images=None):
    """The native backend's jitted step between two physics chunks: decode, act, controls.
    Compiled once per (policy, layout) and kept in `_CHUNK_PROGRAMS`."""
    fn = _CHUNK_PROGRAMS.get(
        (policy, layout), lambda: jax.jit(functools.partial(_chunk_step, policy, layout))
    )
    return fn(params, sensordata, consts, target, carry, rng, images)


def _chunk_step(policy, layout, params, sensordata, consts, target, carry, rng, images):
    state = decode(sensordata, layout, consts, target)
    if images is None:
        actions, carry, info = policy.act(params, state, carry, rng)
    else:  # [B, n_cam, S, S, 3] uint8 rendered at this chunk start
        actions, carry, info = policy.act(params, state, carry, rng, images=images)
    ctrl, target = robot.apply_actions(target, actions)
    ctrl = jnp.repeat(ctrl, robot.SUBSTEPS, axis=1)  # [B, H*SUBSTEPS, NU]
    return actions, ctrl, target, carry, info


# ----------------------------------------------------------------------------- native


class NativeBackend:
    """`mujoco.rollout` across CPU threads; the policy runs jitted between chunks."""

    name = "native"

    def __init__(self, nthread: int | None = None):
        self.nthread = max(1, nthread or os.cpu_count() or 1)
        # (model, its per-thread scratch data): the model is held so that its id cannot be
        # reused by a later model of another structure while the entry exists
        self._datas: tuple[Any, list[mujoco.MjData]] = (None, [])

    def _thread_data(self, model: mujoco.MjModel, n: int) -> list[mujoco.MjData]:
        held, datas = self._datas
        if held is not model or len(datas) < min(self.nthread, n):
            self._datas = (model, [mujoco.MjData(model) for _ in range(min(self.nthread, n))])
        return self._datas[1]

    def rollout(
        self, bucket: Bucket, policy: ChunkPolicy, params: Any, rng: jax.Array, num_chunks: int
    ) -> RolloutResult:
        from mujoco import rollout as mjrollout

        models = bucket.models
        b = bucket.batch_size
        state, sens = bucket.initial_state()  # [B, nstate], [B, S]
        thread_data = self._thread_data(models[0], b)
        consts = {k: jnp.asarray(v) for k, v in bucket.consts.items()}
        target = jnp.asarray(bucket.init_ctrl[:, :6])
        k0, keys = episode_keys(rng, num_chunks)  # [2], [C, 2]: the same as MjxBackend's
        carry = policy.init(b, k0)
        failed = np.zeros(b, bool)
        nq = models[0].nq
        ends, acts, infos, qs = [sens], [], [], [state[:, 1 : 1 + nq].copy()]
        cmds = [np.asarray(target)]
        spec = image_spec_of(policy)
        frames = []  # per chunk [B, n_cam, S, S, 3] uint8 (image policies only)
        for c in range(num_chunks):
            images = None
            if spec is not None:  # the policy acts on what the cameras show at this endpoint
                frames.append(render_qpos(bucket.render_models, qs[-1], spec, bucket.valid))
                images = jnp.asarray(frames[-1])
            actions, ctrl, target, carry, info = _policy_chunk(
                policy,
                bucket.layout,
                params,
                jnp.asarray(sens, jnp.float32),
                consts,
                target,
                carry,
                keys[c],
                images,
            )
            ctrl_np = np.asarray(ctrl, np.float64)
            st, sd = mjrollout.rollout(models, thread_data, state, ctrl_np, persistent_pool=True)
            new_state, new_sens = st[:, -1], sd[:, -1]
            nv_off = 1 + models[0].nq
            qvel = new_state[:, nv_off : nv_off + models[0].nv]
            bad = (
                ~np.isfinite(new_state).all(-1)
                | ~np.isfinite(new_sens).all(-1)
                | (np.abs(np.nan_to_num(qvel, nan=np.inf)).max(-1) > MAX_QVEL)
            )
            failed |= bad
            # a frozen (failed) variant keeps its last setpoint, like its state
            target = jnp.where(jnp.asarray(failed)[:, None], cmds[-1], target)
            state = np.where(failed[:, None], state, new_state)
            sens = np.where(failed[:, None], sens, new_sens)
            ends.append(sens)
            cmds.append(np.asarray(target))
            qs.append(state[:, 1 : 1 + nq].copy())
            acts.append(np.asarray(actions))
            infos.append(jax.tree_util.tree_map(np.asarray, info))
        sensordata = jnp.asarray(np.stack(ends, 1), jnp.float32)  # [B, C+1, S]
        states = decode_trace(sensordata, bucket.layout, consts, jnp.asarray(np.stack(cmds, 1)))
        info = {k: jnp.stack([i[k] for i in infos], 1) for k in (infos[0] if infos else {})}
        actions = jnp.asarray(np.stack(acts, 1))
        qpos = np.stack(qs, 1)
        images = jnp.asarray(np.stack(frames, 1)) if frames else None  # [B, C, n_cam, S, S, 3]
        return _finalize(
            bucket, states, qpos, actions, info, failed, num_chunks, policy.horizon, images
        )


# ----------------------------------------------------------------------------- mjx


class MjxBackend:
    """One jitted, sharded episode per bucket (compiled once per bucket structure and shape)."""

    name = "mjx"

    def __init__(self, devices: Sequence[jax.Device] | None = None, shard: bool = True):
        self.devices = list(devices or jax.devices())
        self.shard = shard and len(self.devices) > 1
        self.n_devices = len(self.devices) if self.shard else 1  # buckets pad to a multiple
        self._announced: set[tuple[Any, int]] = set()  # (episode, batch size) compiled once
        if not any(d.platform in _ACCELERATORS for d in self.devices):
            logging.warning(
                "sim.backend=mjx without an accelerator: the native backend is typically 20-60x "
                "faster on CPU (--config.sim.backend=native, or auto)"
            )

    def _run_episode(self, episode, args: tuple, bucket: Bucket, num_chunks: int):
        """Runs the jitted episode; the first run per (episode, batch size) compiles for minutes
        on a CPU, so it is announced and timed instead of leaving the user in silence. jit keeps
        the executables: nothing is cached here but what has been announced."""
        first = (episode, bucket.batch_size) not in self._announced
        if first:
            self._announced.add((episode, bucket.batch_size))
            logging.info(
                "MJX: compiling the episode for a %d-variant bucket (%s), %d chunks; the first "
                "compile of a structure takes ~1 min on an accelerator, minutes on a CPU...",
                bucket.batch_size,
                bucket.scene_task.get("family", "?"),
                num_chunks,
            )
        t0 = time.perf_counter()
        out = episode(*args)
        if first:
            jax.block_until_ready(out)
            logging.info("MJX: episode compiled and run in %.1f s", time.perf_counter() - t0)
        return out

    def _put(self, x, batched: bool):
        if not self.shard:
            return x
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        mesh = Mesh(np.asarray(self.devices), ("batch",))
        spec = PartitionSpec("batch") if batched else PartitionSpec()
        return jax.device_put(x, NamedSharding(mesh, spec))

    def rollout(
        self, bucket: Bucket, policy: ChunkPolicy, params: Any, rng: jax.Array, num_chunks: int
    ) -> RolloutResult:
        from mujoco import mjx

        if image_spec_of(policy) is not None:
            raise ValueError(
                "this policy observes rendered images (obs_mode='images'), and the MJX episode is "
                "one jitted program without a renderer: roll it out with the native backend "
                "(--config.sim.backend=native), which renders between chunks"
            )
        if self.shard and bucket.batch_size % len(self.devices):
            raise ValueError(
                f"batch size {bucket.batch_size} must be a multiple of the "
                f"{len(self.devices)} devices (pad the bucket)"
            )
        model_b, axes = bucket.mjx_model()
        datas = bucket.initial_data()
        dx = [mjx.put_data(v.model, d) for v, d in zip(bucket.padded, datas, strict=True)]
        data_b = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *dx)
        shard_model = (
            jax.tree_util.tree_map(
                lambda x, a: self._put(x, a == 0), model_b, axes, is_leaf=lambda x: x is None
            )
            if self.shard
            else model_b
        )
        data_b = jax.tree_util.tree_map(lambda x: self._put(x, True), data_b)
        consts = {k: self._put(jnp.asarray(v), True) for k, v in bucket.consts.items()}
        target = self._put(jnp.asarray(bucket.init_ctrl[:, :6]), True)
        k0, keys = episode_keys(rng, num_chunks)  # [2], [C, 2]: the same as NativeBackend's
        carry = jax.tree_util.tree_map(
            lambda x: self._put(x, True), policy.init(bucket.batch_size, k0)
        )
        failed = self._put(jnp.zeros(bucket.batch_size, bool), True)
        episode = _mjx_episode(axes, bucket.layout, policy, num_chunks)
        args = (shard_model, data_b, consts, target, carry, failed, params, keys)
        sens, cmd, qpos, acts, info, failed = self._run_episode(episode, args, bucket, num_chunks)
        states = decode(sens, bucket.layout, consts, cmd)
        return _finalize(bucket, states, qpos, acts, info, failed, num_chunks, policy.horizon)


# the jitted MJX episode per bucket structure (minutes to compile on a CPU); bounded, released
_EPISODES = lifetime.RunCache("sim.mjx_episodes", maxsize=32)


def _mjx_episode(axes, layout: StateLayout, policy: ChunkPolicy, num_chunks: int):
    """The jitted episode for one bucket structure (built once, cached)."""
    key = (
        jax.tree_util.tree_structure(axes, is_leaf=lambda x: x is None),
        tuple(jax.tree_util.tree_leaves(axes, is_leaf=lambda x: x is None)),
        layout,
        policy,
        num_chunks,
    )
    return _EPISODES.get(key, lambda: _make_mjx_episode(axes, layout, policy, num_chunks))


def _make_mjx_episode(axes, layout: StateLayout, policy: ChunkPolicy, num_chunks: int):
    from mujoco import mjx

    step = jax.vmap(mjx.step, in_axes=(axes, 0))

    def episode(model, data, consts, target, carry, failed, params, keys):
        def chunk(c, key):
            d, target, carry, failed = c
            state = decode(d.sensordata, layout, consts, target)
            actions, carry, info = policy.act(params, state, carry, key)
            ctrl, new_target = robot.apply_actions(target, actions)  # [B, H, NU]

            def control_step(d, u):
                d = d.replace(ctrl=u)

                def physics(d, _):
                    return step(model, d), None

                d, _ = jax.lax.scan(physics, d, None, length=robot.SUBSTEPS)
                return d, None

            d_new, _ = jax.lax.scan(control_step, d, jnp.moveaxis(ctrl, 1, 0))
            ok = (
                jnp.isfinite(d_new.qpos).all(-1)
                & jnp.isfinite(d_new.qvel).all(-1)
                & jnp.isfinite(d_new.sensordata).all(-1)
                & (jnp.abs(jnp.nan_to_num(d_new.qvel, nan=jnp.inf)).max(-1) < MAX_QVEL)
            )
            failed = failed | ~ok

            def keep(new, old):
                if not hasattr(new, "ndim") or new.ndim == 0:
                    return new
                f = failed.reshape(failed.shape + (1,) * (new.ndim - 1))
                return jnp.where(f, old, new)

            d = jax.tree_util.tree_map(keep, d_new, d)
            target = keep(new_target, target)
            return (d, target, carry, failed), (d.sensordata, target, d.qpos, actions, info)

        s0 = data.sensordata
        t0 = target
        (d, target, carry, failed), (sens, cmd, qpos, acts, info) = jax.lax.scan(
            chunk, (data, target, carry, failed), keys
        )
        sens = jnp.concatenate([s0[None], sens], 0)  # [C+1, B, S]
        cmd = jnp.concatenate([t0[None], cmd], 0)  # [C+1, B, 6]
        qpos = jnp.concatenate([data.qpos[None], qpos], 0)  # [C+1, B, nq]
        info = jax.tree_util.tree_map(lambda x: jnp.moveaxis(x, 0, 1), info)
        t = lambda x: jnp.moveaxis(x, 0, 1)  # noqa: E731
        return t(sens), t(cmd), t(qpos), t(acts), info, failed

    return jax.jit(episode)


BACKENDS = registries.PHYSICS_BACKENDS  # name -> backend class (coda.registries)


_ACCELERATORS = ("gpu", "tpu", "cuda", "rocm")


def has_accelerator() -> bool:
    return any(d.platform in _ACCELERATORS for d in jax.devices())


def make_backend(name: str = "auto", nthread: int | None = None) -> NativeBackend | MjxBackend:
    """`auto` picks `mjx` when an accelerator is present and `native` otherwise.

    `nthread` (native only; None = all cores). MJX always shards over all local devices.
    """
    if name == "auto":
        name = "mjx" if has_accelerator() else "native"
    if name not in BACKENDS:
        raise UnknownName(f"unknown physics backend {name!r}; valid: auto, {', '.join(BACKENDS)}")
    # each backend takes what it names; local devices: in a multi-host run every host runs the
    # rollouts on its own devices
    return BACKENDS.build(name, nthread=nthread, devices=jax.local_devices())

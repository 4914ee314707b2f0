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
marked failed; they never crash the batch.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Sequence
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
from coda.sim.compile import PER_VARIANT_FIELDS, CompiledScene, role_binding
from coda.sim.observe import render_qpos
from coda.sim.state import SimState, StateLayout, SymbolTable, decode

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


# ν per task structure; bounded, and emptied when a run ends (coda.lifetime.release)
_SUCCESS_JIT = lifetime.RunCache("sim.success", maxsize=128)


def _success_over_time(v: CompiledScene) -> Callable:
    """ν over states [B, T] -> [B, T] bool, one jitted function per (task, symbol table).

    ν is a closure made per compiled scene, so it cannot key a jit cache itself; the task's
    family, params and roles plus the symbol table determine it (`check_same_task`).
    """
    task = v.scene.task
    key = (
        task["family"],
        json.dumps(task.get("params", {}), sort_keys=True, default=str),
        json.dumps(task.get("roles", {}), sort_keys=True, default=str),
        v.sym,
    )
    success, sym = v.success, v.sym
    return _SUCCESS_JIT.get(
        key, lambda: jax.jit(jax.vmap(lambda s: success(s, sym), in_axes=1, out_axes=1))
    )


class Bucket:
    """Same-structure variants, padded to a fixed batch size."""

    def __init__(self, variants: Sequence[CompiledScene], batch_size: int | None = None):
        if not variants:
            raise ValueError("empty bucket")
        check_same_task(variants)  # ν, the planner and the symbol table come from variant 0
        keys = {v.structure_key for v in variants}
        if len(keys) != 1:
            raise ValueError(f"variants of different structure in one bucket: {sorted(keys)}")
        self.variants = list(variants)
        n = len(variants)
        self.batch_size = max(batch_size or n, n)
        pad = [variants[0]] * (self.batch_size - n)
        self.padded = self.variants + pad
        self.valid = np.arange(self.batch_size) < n
        self.layout: StateLayout = variants[0].layout
        self.sym: SymbolTable = variants[0].sym
        self.success = variants[0].success
        self.scene_task = variants[0].scene.task
        self.consts = {k: np.stack([v.consts[k] for v in self.padded]) for k in variants[0].consts}
        self.init_qpos = np.stack([v.init_qpos for v in self.padded])
        self.init_ctrl = np.stack([v.init_ctrl for v in self.padded])
        self._mjx = None
        self._initial = None
        # ν over [B, C+1] states, jitted once per task structure (not per bucket: the engine
        # and critic build many small buckets of one structure, and retracing ν is slow)
        self.success_over_time = _success_over_time(variants[0])

    @property
    def models(self) -> list[mujoco.MjModel]:
        return [v.model for v in self.padded]

    @property
    def render_models(self) -> list[mujoco.MjModel]:
        """What image observations render: a variant's `render_model` (e.g. LIBERO's meshes and
        textures, one model per task) or its physics model."""
        return [v.model if v.render_model is None else v.render_model() for v in self.padded]

    def initial_data(self) -> list[mujoco.MjData]:
        out = []
        for v, q, u in zip(self.padded, self.init_qpos, self.init_ctrl, strict=True):
            d = mujoco.MjData(v.model)
            d.qpos[:] = q
            d.ctrl[:] = u
            mujoco.mj_forward(v.model, d)
            out.append(d)
        return out

    def initial_state(self) -> tuple[np.ndarray, np.ndarray]:
        """(full physics state [B, nstate], sensordata [B, S]) at t=0, computed once."""
        if self._initial is None:
            spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
            datas = self.initial_data()
            nstate = mujoco.mj_stateSize(self.padded[0].model, spec)
            state = np.empty((self.batch_size, nstate))
            for i, (v, d) in enumerate(zip(self.padded, datas, strict=True)):
                mujoco.mj_getState(v.model, d, state[i], spec)
            sens = np.stack([d.sensordata.copy() for d in datas])
            self._initial = (state, sens)
        return self._initial[0].copy(), self._initial[1].copy()

    def mjx_model(self):
        """(batched mjx.Model, in_axes) with per-variant leaves stacked on axis 0."""
        if self._mjx is None:
            self._mjx = batch_mjx_models([v.model for v in self.padded])
        return self._mjx


def _predicate_id(fn: Any) -> Any:
    """Comparable identity of a ν (families return `functools.partial`s, equal only by id)."""
    if isinstance(fn, functools.partial):
        return (_predicate_id(fn.func), fn.args, tuple(sorted(fn.keywords.items())))
    return fn


def check_same_task(variants: Sequence[CompiledScene]) -> None:
    """Raises unless every variant has variant 0's family, task params, role binding and ν.

    A bucket is scored with one ν over one symbol table and planned for one task, so a variant
    whose roles differ (e.g. `resample(scene, "task")` swapping which cube goes on top) would
    silently be scored and planned as variant 0's task."""
    v0 = variants[0]
    t0 = v0.scene.task
    b0 = role_binding(v0)
    for i, v in enumerate(variants[1:], 1):
        t = v.scene.task
        what = f"bucket variant {i} ({t.get('instruction', '?')!r}) vs variant 0 "
        what += f"({t0.get('instruction', '?')!r})"
        if (t["family"], t.get("params", {})) != (t0["family"], t0.get("params", {})):
            raise ValueError(
                f"{what}: task differs (family {t['family']!r} vs {t0['family']!r}, params "
                f"{t.get('params', {})} vs {t0.get('params', {})}); use separate buckets"
            )
        b = role_binding(v)
        diff = sorted(k for k in set(b) | set(b0) if b.get(k) != b0.get(k))
        if diff:
            roles = sorted({k.removeprefix("joint:").partition(".")[0] for k in diff})
            who = "; ".join(
                f"{r!r}: object {t['roles'].get(r)!r} vs {t0['roles'].get(r)!r}" for r in roles
            )
            raise ValueError(
                f"{what}: roles {roles} are bound to different bodies ({who}; symbol-table "
                f"entries {[(k, b.get(k), b0.get(k)) for k in diff]}); ν and the planner would "
                "read variant 0's roles: use separate buckets (make_buckets does)"
            )
        if _predicate_id(v.success) != _predicate_id(v0.success):
            raise ValueError(f"{what}: success predicates ν differ; use separate buckets")


def batch_mjx_models(models: Sequence[mujoco.MjModel]):
    """Stacks the leaves that differ across variants; checks they are per-variant fields."""
    from mujoco import mjx

    put = [mjx.put_model(m) for m in models]
    if models[0].nhfield == 0 and hasattr(put[0]._impl, "geom_rbound_hfield"):
        # A static (numpy) copy of geom_rbound used only by height-field collisions; with no
        # height fields it is dead, so size changes must not split the bucket over it.
        same = put[0]._impl.geom_rbound_hfield
        put = [p.replace(_impl=p._impl.replace(geom_rbound_hfield=same)) for p in put]
    flat0, treedef = jax.tree_util.tree_flatten_with_path(put[0])
    others = []
    for p in put[1:]:
        leaves, td = jax.tree_util.tree_flatten(p)
        if td != treedef:
            raise ValueError("variants differ in static MJX model structure; use separate buckets")
        others.append(leaves)
    new_leaves, axes = [], []
    bad = []
    for i, (path, leaf0) in enumerate(flat0):
        vals = [leaf0] + [o[i] for o in others]
        a0 = np.asarray(leaf0)
        same = all(np.array_equal(a0, np.asarray(v), equal_nan=True) for v in vals[1:])
        if same:
            new_leaves.append(leaf0)
            axes.append(None)
            continue
        name = _field_name(path)
        if name not in PER_VARIANT_FIELDS:
            bad.append(name)
        new_leaves.append(jnp.stack([jnp.asarray(v) for v in vals]))
        axes.append(0)
    if bad:
        raise ValueError(
            f"fields {sorted(set(bad))} differ across variants but are structural "
            f"(not in PER_VARIANT_FIELDS); put these variants in separate buckets"
        )
    return treedef.unflatten(new_leaves), treedef.unflatten(axes)


def varied_fields(bucket: Bucket) -> list[str]:
    """Names of the MJX model fields that vary inside this bucket (for docs and tests)."""
    _, axes = bucket.mjx_model()
    flat, _ = jax.tree_util.tree_flatten_with_path(axes, is_leaf=lambda x: x is None)
    return sorted({_field_name(p) for p, a in flat if a == 0})


def _field_name(path) -> str:
    """Model field of a pytree path ('._impl.geom_rbound' -> 'geom_rbound', '.stat.x' -> 'stat')."""
    parts = [p for p in jax.tree_util.keystr(path).split(".") if p and p != "_impl"]
    return parts[0] if parts else ""


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


def _decode_jit(sensordata, layout: StateLayout, consts, cmd) -> SimState:
    """decode of a whole trace [B, C+1], jitted once per layout (eager, its many slices would
    compile one by one)."""
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
        states = _decode_jit(sensordata, bucket.layout, consts, jnp.asarray(np.stack(cmds, 1)))
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


def make_buckets(
    compiled: Sequence[CompiledScene],
    batch_size: int | None = None,
    multiple_of: int = 1,
    *,
    pow2: bool = False,
) -> list[Bucket]:
    """Groups variants by structure; pads each bucket to `batch_size` (or a multiple).

    `pow2` (with `batch_size` None): pad each bucket to the next power of two instead, so the
    many small buckets an engine or critic makes share a few compiled batch shapes.
    """
    from coda.sim.compile import group_buckets

    out = []
    for group in group_buckets(compiled):
        for i in range(0, len(group), batch_size or len(group)):
            part = group[i : i + (batch_size or len(group))]
            bs = batch_size or len(part)
            if pow2 and batch_size is None:
                bs = 1 << (bs - 1).bit_length()
            bs = -(-bs // multiple_of) * multiple_of
            out.append(Bucket(part, bs))
    return out

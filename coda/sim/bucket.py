"""Buckets: same-structure compiled variants padded to a fixed batch size, the unit both physics
backends (`coda.sim.rollout`) roll out, and the grouping of variants into them (`make_buckets`).

A bucket is scored with one ν over one symbol table and planned for one task
(`check_same_task`); its MJX model stacks only the per-variant fields (`batch_mjx_models`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from coda import lifetime
from coda.sim.compile import PER_VARIANT_FIELDS, CompiledScene, group_buckets, role_binding
from coda.sim.state import StateLayout, SymbolTable

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

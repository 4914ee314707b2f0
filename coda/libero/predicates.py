"""LIBERO's goal predicates as pure-JAX ν over `SimState`, AND-ed per goal.

Semantics are LIBERO's (libero/envs/predicates + object_states), with the tolerances kept in
`coda.sim.predicates` (the ours-vs-LIBERO table at its top):
  On(a, b)       objects: b's origin not above a's (z_b <= z_a), a and b in contact (any body
                 of either object), origins within ON_XY_TOL in xy.
  On(a, region)  d = R_site @ (p_a - p_site) (LIBERO multiplies by R, not R^T; kept):
                 size_z - 0.005 < d_z < size_z + 0.10 and |d_xy| < size_xy; and, for a region
                 of an object / fixture, a touches that object. Workspace regions: no contact.
  In(a, region)  p_a strictly inside the world box p_site +- |R_site @ size|, its lower z bound
                 lowered by 0.01 (no contact check: a site's check_contact is always True).
  Open / Close / TurnOn / TurnOff: raw joint q against LIBERO_JOINT_THRESHOLDS of the object
                 kind; Open / TurnOn hold if ANY of the joints does, Close / TurnOff need ALL.
                 A region's joints are those of the body LIBERO attaches the site to; an
                 object's are all its joints.
Each goal compiles to a `functools.partial` of `evaluate` over hashable static atoms, so two
compiles of one task give equal ν (a `Bucket` requires it).
"""

from __future__ import annotations

import functools
from typing import Any

import jax.numpy as jnp
import mujoco
import numpy as np

from coda.libero import assets
from coda.sim import geometry as G
from coda.sim import predicates as SP
from coda.sim.state import N_FIXED_ENTITIES, SimState, SymbolTable

JOINT_KIND = {  # LIBERO articulated categories -> LIBERO_JOINT_THRESHOLDS kind
    "wooden_cabinet": "cabinet_drawer",
    "white_cabinet": "cabinet_drawer",
    "yellow_cabinet": "cabinet_drawer",
    "microwave": "microwave",
    "flat_stove": "stove_knob",
    "yellow_stove": "stove_knob",
}
_ACTION = {"open": "open", "close": "close", "turnon": "turn_on", "turnoff": "turn_off"}
_ANY = {"open": True, "turnon": True, "close": False, "turnoff": False}

# Static atoms (hashable tuples):
#   ("on_obj", a_body, a_bodies, b_body, b_bodies)
#   ("on_region", a_body, site_body, site_pos(3), site_quat(4), size(3), parent_bodies|None)
#   ("in_region", a_body, site_body, site_pos(3), site_quat(4), size(3))
#   ("joint", op, bound, joint_indices, any)
# site_body -1: the world (workspace regions; site_pos is then a world position).


def _quat_mat(q: jnp.ndarray) -> jnp.ndarray:
    """[..., 4] (w, x, y, z) -> [..., 3, 3]."""
    q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    r = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return jnp.stack([jnp.stack(row, -1) for row in r], -2)


def _site_frame(state: SimState, body: int, pos: tuple, quat: tuple):
    """World position [..., 3] and rotation [..., 3, 3] of a site fixed to a tracked body
    (`coda.sim.geometry.site_frame`, which Φ's `site_*` helpers read too)."""
    return G.site_frame(state, (body, pos, quat))


def _touch(state: SimState, a: tuple[int, ...], b: tuple[int, ...]) -> jnp.ndarray:
    """Any contact between two sets of tracked bodies (LIBERO's object-level check_contact)."""
    ea = np.asarray(a) + N_FIXED_ENTITIES
    eb = np.asarray(b) + N_FIXED_ENTITIES
    c = state.contact[..., ea, :][..., :, eb]
    return jnp.sum(c, axis=(-1, -2)) > 0


def on_object(state: SimState, a: int, a_all: tuple, b: int, b_all: tuple) -> jnp.ndarray:
    pa, pb = G.pos(state, a), G.pos(state, b)
    return (
        (pb[..., 2] <= pa[..., 2])
        & _touch(state, a_all, b_all)
        & (G.xy_distance(pa, pb) < SP.ON_XY_TOL)
    )


def on_region(
    state: SimState, a: int, body: int, pos: tuple, quat: tuple, size: tuple, parent: Any
) -> jnp.ndarray:
    ps, rs = _site_frame(state, body, pos, quat)
    d = jnp.einsum("...ij,...j->...i", rs, G.pos(state, a) - ps)
    lo, hi = SP.LIBERO_REGION_ON_Z
    sz = jnp.asarray(size, d.dtype)
    ok = (d[..., 2] > sz[2] + lo) & (d[..., 2] < sz[2] + hi)
    ok = ok & jnp.all(jnp.abs(d[..., :2]) < sz[:2], axis=-1)
    if parent is not None:
        ok = ok & _touch(state, (a,), parent)
    return ok


def in_region(state: SimState, a: int, body: int, pos: tuple, quat: tuple, size: tuple):
    ps, rs = _site_frame(state, body, pos, quat)
    total = jnp.abs(jnp.einsum("...ij,j->...i", rs, jnp.asarray(size, ps.dtype)))
    ub = ps + total
    lb = (ps - total).at[..., 2].add(SP.LIBERO_IN_Z_LOW)
    p = G.pos(state, a)
    return jnp.all(p > lb, axis=-1) & jnp.all(p < ub, axis=-1)


def joint_state(state: SimState, op: str, bound: float, joints: tuple, any_: bool):
    q = state.joint_pos[..., np.asarray(joints)]  # [..., J]
    hit = {"<": q < bound, ">": q > bound, ">=": q >= bound}[op]
    return jnp.any(hit, -1) if any_ else jnp.all(hit, -1)


def over_target(state: SimState, atom: tuple) -> jnp.ndarray:
    """A placement atom's object is over its target at any height: its centre inside the
    target object's footprint (On an object) or the region's box in x, y (On / In a region);
    the carry phase before the atom can hold (`coda.libero.phases`)."""
    kind, a = atom[0], atom[1]
    if kind == "on_obj":
        return G.within_footprint(state, G.pos(state, a), atom[3])
    ps, rs = _site_frame(state, *atom[2:5])
    d = jnp.einsum("...ij,...j->...i", rs, G.pos(state, a) - ps)
    sz = jnp.asarray(atom[5], d.dtype)
    return jnp.all(jnp.abs(d[..., :2]) < sz[:2], axis=-1)


def atom_holds(state: SimState, atom: tuple) -> jnp.ndarray:
    kind, args = atom[0], atom[1:]
    if kind == "on_obj":
        return on_object(state, *args)
    if kind == "on_region":
        return on_region(state, *args)
    if kind == "in_region":
        return in_region(state, *args)
    if kind == "joint":
        return joint_state(state, *args)
    raise ValueError(f"unknown static atom kind {kind!r}")


def evaluate(state: SimState, sym: SymbolTable, atoms: tuple = ()) -> jnp.ndarray:
    """ν: every atom holds (LIBERO's And). `sym` is unused: atoms carry resolved indices."""
    out = jnp.ones(state.ee_pos.shape[:-1], bool)
    for atom in atoms:
        out = out & atom_holds(state, atom)
    return out


def per_atom(state: SimState, atoms: tuple) -> jnp.ndarray:
    """[..., A] truth of each atom (for reports and the planner's progress)."""
    return jnp.stack([atom_holds(state, a) for a in atoms], -1)


# ----------------------------------------------------------------------------- goal order

ENABLE = ("open", "turnon")  # articulation atoms a placement may need first
FINISH = ("close", "turnoff")  # articulation atoms that would block a placement: last


def atom_action(atom: tuple) -> str:
    """open | close | turnon | turnoff for a static joint atom (from its threshold), else its
    kind (on_obj | on_region | in_region)."""
    if atom[0] != "joint":
        return atom[0]
    op, bound = atom[1], atom[2]
    if op == "<":
        return "open" if bound < -1e-3 else "turnoff"
    return "close" if op == ">" else "turnon"


def order_atoms(atoms: tuple) -> tuple:
    """The order in which a compound goal's atoms are executed: opening / turning on first (a
    drawer must be open before something goes in), then placements in the goal's order, then
    closing / turning off (a drawer is closed after something went in). Stable within groups."""

    def rank(a):
        act = atom_action(a)
        return 0 if act in ENABLE else 2 if act in FINISH else 1

    out = list(sorted(atoms, key=rank))
    # a placement onto / into an object another placement moves waits for that one ("stack the
    # left bowl on the right bowl and put them in the tray": the right bowl goes first)
    place = [i for i, a in enumerate(out) if rank(a) == 1]
    group = [out[i] for i in place]
    ordered: list = []
    while group:
        moved_later = {a[1] for a in group}
        ready = [a for a in group if _support(a) not in moved_later - {a[1]}] or group[:1]
        ordered.append(ready[0])
        group.remove(ready[0])
    for i, a in zip(place, ordered, strict=True):
        out[i] = a
    return tuple(out)


def _support(atom: tuple) -> int:
    """Tracked body a placement atom puts its object on / in (-1: the table's workspace)."""
    return atom[3] if atom[0] == "on_obj" else atom[2]


# ----------------------------------------------------------------------------- resolution


def _t(x) -> tuple[float, ...]:
    return tuple(float(v) for v in np.asarray(x).reshape(-1))


def checkable_init_atoms(task) -> tuple[tuple[str, ...], ...]:
    """LIBERO's :init conditions on movable objects and joints (fixtures' own placement atoms
    are how the importer places them, so they would check nothing)."""
    movable = {n for n, _ in task.problem.objects}
    out = []
    for atom in task.problem.init:
        if atom[0] in ("on", "in") and len(atom) == 3 and atom[1] in movable:
            out.append(atom)
        elif atom[0] in _ACTION and len(atom) == 2:
            out.append(atom)
    return tuple(out)


class _Names:
    """A task's BDDL names resolved against its compiled model: tracked bodies, region sites,
    joints."""

    def __init__(self, task, model: mujoco.MjModel, built):
        self.task, self.model, self.built = task, model, built
        self.tracked = {b: i for i, b in enumerate(built.tracked)}
        self.owner = dict(zip(built.tracked, built.owner, strict=True))
        self.objects = {n for n, _ in task.problem.objects} | {n for n, _ in task.fixtures}

    def bodies_of(self, obj: str) -> tuple[int, ...]:
        return tuple(i for b, i in self.tracked.items() if self.owner[b] == obj)

    def site(self, region: str):
        model, name = self.model, self.task.name
        sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, region)
        if sid < 0:
            raise ValueError(f"{name}: region {region!r} has no site in the model")
        bname = model.body(model.site_bodyid[sid]).name
        body = self.tracked.get(bname, -1)
        if body < 0 and model.site_bodyid[sid] != 0:
            raise ValueError(f"{name}: region {region!r} sits on untracked body {bname}")
        return body, _t(model.site_pos[sid]), _t(model.site_quat[sid]), _t(model.site_size[sid])

    def region_owner(self, region: str) -> str | None:
        r = self.task.problem.regions.get(region)
        return r.target if r is not None and r.target in self.objects else None

    def joints_of(self, target: str) -> tuple[str, tuple[int, ...]]:
        task, built = self.task, self.built
        if target in self.objects:
            cat = task.problem.category(target)
            js = tuple(i for i, j in enumerate(built.joints) if j.startswith(target + "_"))
        else:
            obj = self.region_owner(target)
            if obj is None:
                raise ValueError(f"{task.name}: {target!r} is no object or object region")
            cat = task.problem.category(obj)
            site_name = target[len(obj) + 1 :]
            parts = assets.site_parts(cat)
            if site_name not in parts:
                raise ValueError(f"{task.name}: {cat} has no site {site_name!r}")
            js = tuple(
                built.joints.index(f"{obj}_{j}")
                for j in parts[site_name][1]
                if f"{obj}_{j}" in built.joints
            )
        if not js:
            raise ValueError(f"{task.name}: {target!r} has no joints for an Open/Close/Turn goal")
        if cat not in JOINT_KIND:
            raise ValueError(f"{task.name}: no LIBERO joint thresholds for {cat!r}")
        return cat, js

    def static_atom(self, atom) -> tuple:
        pred, args = atom[0], atom[1:]
        if pred in _ACTION:
            cat, js = self.joints_of(args[0])
            op, bound = SP.LIBERO_JOINT_THRESHOLDS[JOINT_KIND[cat]][_ACTION[pred]]
            return ("joint", op, float(bound), js, _ANY[pred])
        a, b = args
        if a not in self.objects:
            raise ValueError(f"{self.task.name}: {pred} needs an object first, got {a!r}")
        tracked = self.tracked
        if pred == "on" and b in self.objects:
            return ("on_obj", tracked[a], self.bodies_of(a), tracked[b], self.bodies_of(b))
        body, pos, quat, size = self.site(b)
        if pred == "on":
            parent = self.region_owner(b)
            parents = self.bodies_of(parent) if parent else None
            return ("on_region", tracked[a], body, pos, quat, size, parents)
        return ("in_region", tracked[a], body, pos, quat, size)


def resolve(task, model: mujoco.MjModel, built, atoms=None) -> tuple:
    """BDDL atoms (default: the task's :goal) -> static atoms with tracked-body / joint indices
    and site frames read from the compiled model (sites relative to their tracked body)."""
    atoms = task.problem.goal if atoms is None else atoms
    names = _Names(task, model, built)
    return tuple(names.static_atom(atom) for atom in atoms)


def goal_predicate(task, model: mujoco.MjModel, built):
    """ν of a LIBERO task: `evaluate` bound to its resolved goal atoms."""
    return functools.partial(evaluate, atoms=resolve(task, model, built))

"""Cross-check of ν (`predicates`, JAX over decoded sensors) against LIBERO's semantics
(`reference.Reference`, LIBERO's rules transcribed onto MjData) on states where the answer
varies: a task's settled initial states (goals false, LIBERO's :init conditions mostly true) and,
for every goal atom, a state built to satisfy it (the object dropped onto its target / into its
region and settled; the joint set past its threshold), plus the opposite joint setting.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from coda.libero import predicates as P
from coda.libero import scene as S
from coda.libero.reference import Reference
from coda.sim import robot
from coda.sim.predicates import LIBERO_JOINT_THRESHOLDS
from coda.sim.state import decode

DROP_CLEARANCE = 0.01  # m above the target when an object is dropped onto / into it
SETTLE_S = 0.6  # s of physics after building a state


@dataclasses.dataclass
class Agreement:
    task: str
    atoms: int  # atom evaluations compared
    agree: int
    positives: int  # evaluations LIBERO's semantics call true
    disagreements: list[tuple[str, tuple, bool, bool]]  # (state, atom, ours, LIBERO's)
    by_predicate: list[tuple[str, int, int]]  # (predicate, evaluations, LIBERO-true)
    goal_holds: bool  # LIBERO's semantics accept the built whole-goal state


def _joint_target(pred: str, cat: str) -> float:
    kind = P.JOINT_KIND[cat]
    action = {"open": "open", "close": "close", "turnon": "turn_on", "turnoff": "turn_off"}[pred]
    op, bound = LIBERO_JOINT_THRESHOLDS[kind][action]
    return bound - 0.05 if op == "<" else bound + 0.05


def _open_container(m: mujoco.MjModel, d: mujoco.MjData, ref: Reference, region: str) -> None:
    """Opens the drawer / door a region belongs to (a closed drawer cannot be filled)."""
    r = ref.task.problem.regions.get(region)
    if r is None or r.target not in ref.objects or ref.objects[r.target] not in P.JOINT_KIND:
        return
    cat, js = ref._joints(region if region in ref.task.problem.regions else r.target)
    if P.JOINT_KIND[cat] == "stove_knob":
        return
    for j in js or ref._joints(r.target)[1]:
        lo, hi = m.jnt_range[j]
        d.qpos[m.jnt_qposadr[j]] = np.clip(_joint_target("open", cat), lo, hi)


def built_states(c, task, ref: Reference) -> list[tuple[str, np.ndarray]]:
    """(label, qpos) states: the initial one, then one per goal atom made true (and, for joint
    atoms, the opposite setting)."""
    m = c.model
    out = [("initial", c.init_qpos.copy())]
    for atom in task.problem.goal:
        pred, args = atom[0], atom[1:]
        d = mujoco.MjData(m)
        d.qpos[:] = c.init_qpos
        d.ctrl[:] = c.init_ctrl
        mujoco.mj_forward(m, d)
        if pred in ("open", "close", "turnon", "turnoff"):
            cat, js = ref._joints(args[0])
            for label, q in ((pred, _joint_target(pred, cat)), ("opposite", None)):
                dq = d.qpos.copy()
                for j in js:
                    lo, hi = m.jnt_range[j]
                    v = q if q is not None else (hi if q is None and pred in ("open",) else lo)
                    if q is None:  # the other end of the range from the target
                        t = _joint_target(pred, cat)
                        v = lo if abs(t - hi) < abs(t - lo) else hi
                    dq[m.jnt_qposadr[j]] = np.clip(v, lo, hi)
                out.append((f"{label}:{atom}", dq))
            continue
        a, b = args
        _open_container(m, d, ref, b)
        mujoco.mj_forward(m, d)
        adr = m.jnt_qposadr[m.joint(f"{a}/free").id]
        half_a = float(c.consts["body_half"][c.object_bodies[a]][2])
        if b in c.object_bodies:
            tb = c.object_bodies[b]
            target = d.xpos[m.body(b).id].copy()
            target[2] += 2 * float(c.consts["body_half"][tb][2])
        else:
            target = d.site_xpos[m.site(b).id].copy()
            if pred == "on":
                target[2] += m.site_size[m.site(b).id][2]
        d.qpos[adr : adr + 3] = target + np.array([0.0, 0.0, half_a + DROP_CLEARANCE])
        d.qvel[:] = 0.0
        for _ in range(round(SETTLE_S / m.opt.timestep)):
            mujoco.mj_step(m, d)
        out.append((f"built:{atom}", d.qpos.copy()))
    out.append(("goal", goal_state(c, task, ref)))
    return out


def goal_state(c, task, ref: Reference) -> np.ndarray:
    """qpos with every goal atom made true in turn (joints first, then placements), settled."""
    m = c.model
    d = mujoco.MjData(m)
    d.qpos[:] = c.init_qpos
    d.ctrl[:] = c.init_ctrl
    atoms = sorted(task.problem.goal, key=lambda a: a[0] in ("on", "in"))
    for atom in atoms:
        mujoco.mj_forward(m, d)
        pred, args = atom[0], atom[1:]
        if pred not in ("on", "in"):
            cat, js = ref._joints(args[0])
            for j in js:
                lo, hi = m.jnt_range[j]
                d.qpos[m.jnt_qposadr[j]] = np.clip(_joint_target(pred, cat), lo, hi)
            continue
        a, b = args
        if not any(x[0] == "close" for x in task.problem.goal):
            _open_container(m, d, ref, b)
            mujoco.mj_forward(m, d)
        adr = m.jnt_qposadr[m.joint(f"{a}/free").id]
        half_a = float(c.consts["body_half"][c.object_bodies[a]][2])
        if b in c.object_bodies:
            target = d.xpos[m.body(b).id].copy()
            target[2] += 2 * float(c.consts["body_half"][c.object_bodies[b]][2])
        else:
            sid = m.site(b).id
            target = d.site_xpos[sid].copy()
            target[2] += m.site_size[sid][2] if pred == "on" else 0.0
        d.qpos[adr : adr + 3] = target + np.array([0.0, 0.0, half_a + DROP_CLEARANCE])
        d.qvel[:] = 0.0
        for _ in range(round(SETTLE_S / m.opt.timestep)):
            mujoco.mj_step(m, d)
    return d.qpos.copy()


def compare(suite: str, name: str, index: int = 0) -> Agreement:
    """ν vs LIBERO's semantics on `built_states` of one task, atom by atom (goal + :init)."""
    c = S.compile_task(suite, name, index)
    task, built, _, _ = S._compiled_model(suite, name, False)
    ref = Reference(task, c.model)
    atoms_b = tuple(task.problem.goal) + P.checkable_init_atoms(task)
    atoms = P.resolve(task, c.model, built, atoms_b)
    states = built_states(c, task, ref)
    sens, truth = [], []
    for _, q in states:
        d = mujoco.MjData(c.model)
        d.qpos[:] = q
        mujoco.mj_forward(c.model, d)
        sens.append(d.sensordata.copy())
        truth.append([ref.holds(d, a) for a in atoms_b])
    s = decode(
        jnp.asarray(np.stack(sens), jnp.float32), c.layout, c.consts, jnp.asarray(robot.HOME)
    )
    ours = np.asarray(jax.jit(P.per_atom, static_argnums=1)(s, atoms))  # [N, A]
    truth = np.asarray(truth, bool)
    dis = [
        (states[i][0], atoms_b[k], bool(ours[i, k]), bool(truth[i, k]))
        for i, k in zip(*np.nonzero(ours != truth), strict=True)
    ]
    preds = np.array([a[0] for a in atoms_b])
    by = [
        (p, int(truth[:, preds == p].size), int(truth[:, preds == p].sum()))
        for p in sorted(set(preds.tolist()))
    ]
    goal = bool(truth[-1, : len(task.problem.goal)].all())  # the last state is the whole goal
    return Agreement(
        name, int(truth.size), int((ours == truth).sum()), int(truth.sum()), dis, by, goal
    )

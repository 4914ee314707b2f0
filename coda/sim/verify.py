"""Batched scene verification (§3.1): would a person accept this scene as a task to attempt?

Every failure is a structured `Reason(check, object, magnitude, detail)` so that the engine can
send it back to the scene-program writer for repair and count reasons per check:
  scale        an attribute outside its category's metric range (magnitude: the value)
  penetration  two objects (fixed or not), an object and the table, or the gripper and an object
               interpenetrate at t = 0 (magnitude: depth in m)
  unsupported  a movable object falls during the passive settle, or a fixed object floats above
               whatever is under it (magnitude: drop / gap in m)
  off_table    an object's footprint reaches beyond the table's edge (magnitude: overhang in m)
  unreachable  a waypoint the scripted planner needs (hover above the object, grasp, carry and
               place heights over the goal, a handle along its joint's range) lies outside the
               gripper's reachable box (magnitude: m outside)
  out_of_view  a task object's centre projects outside a camera's square image (magnitude:
               distance beyond the image edge, in half-image widths; inf behind the camera)
  unstable     an object slides, rolls or tips, or a joint drifts, in the passive settle
               (magnitude: m or rad)
  fragile      an object that survives the passive settle falls, tips or is carried off by a
               small push and counter-push (a ball balanced on a ball; magnitude: m or rad)
The settles are one batched `mujoco.rollout` per same-structure bucket with the gripper held at
home: the passive one and `PUSH_DIRECTIONS` disturbed copies of every variant. It is cheap on CPU
(hundreds of variants per second) and needs no accelerator.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter
from collections.abc import Sequence

import mujoco
import numpy as np

from coda.sim import assets, render, robot
from coda.sim.compile import TABLE_GEOM, CompiledScene, group_buckets
from coda.sim.tasks import get_family

PENETRATION_TOL = 0.003  # m
SUPPORT_TOL = 0.004  # m: a fixed object's gap to its support (objects are placed 0.5 mm clear)
SUPPORT_SEARCH = 1.0  # m: how far below a fixed object a support is looked for
EDGE_TOL = 0.002  # m a footprint may reach past the table edge
REACH_TOL = 0.001  # m a needed wrist pose may lie outside the reachable box
VIEW_ASPECT = 1.0  # policy images and the report's frames are square
SETTLE_SECONDS = 0.6
DROP_TOL = 0.01  # m of vertical drop
SLIDE_TOL = 0.015  # m of horizontal motion
TIP_TOL = 0.25  # rad of tilt change
JOINT_TOL = 0.05  # fraction of the joint range
# Disturbance: every free body is pushed horizontally at PUSH_ACCEL for PUSH_SECONDS, then pushed
# back as long (zero net impulse: a stable object ends ~a t^2 = 2.5 mm from where it was; a ball
# on the table rolls and stops). 1 m/s^2 is below what slides a cube (mu g >= 3 m/s^2) or tips
# the slimmest upright bottle (g * foot half width / centre height >= 2 m/s^2).
PUSH_ACCEL = 1.0  # m/s^2
PUSH_SECONDS = 0.05
PUSH_DIRECTIONS = 4  # disturbed copies per variant; object j of copy k is pushed toward
GOLDEN_ANGLE = math.pi * (3 - math.sqrt(5))  # 2 pi k / K + j * golden angle (neighbours differ)
DISTURB_SLIDE_TOL = 0.03  # m: "comes back to rest near where it was"
CHECKS = (
    "scale",
    "penetration",
    "unsupported",
    "off_table",
    "unreachable",
    "out_of_view",
    "unstable",
    "fragile",
)


@dataclasses.dataclass
class Reason:
    check: str
    object: str
    magnitude: float
    detail: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Verdict:
    ok: bool
    reasons: list[Reason]

    def to_dict(self) -> dict:
        return {"ok": self.ok, "reasons": [r.to_dict() for r in self.reasons]}


def _owner(model: mujoco.MjModel, geom: int, objects: set[str]) -> str:
    """Scene object (or 'table' / 'floor' / 'gripper') that a geom belongs to."""
    name = model.geom(geom).name
    if name == "floor":
        return "floor"
    root = name.split("/")[0]
    if root == "table":
        return "table"
    return root if root in objects else "gripper"


def _forward(c: CompiledScene) -> mujoco.MjData:
    d = mujoco.MjData(c.model)
    d.qpos[:] = c.init_qpos
    d.ctrl[:] = c.init_ctrl
    mujoco.mj_forward(c.model, d)
    return d


def check_scale(c: CompiledScene) -> list[Reason]:
    out = []
    for o in c.scene.objects:
        for field, value in assets.get_category(o.category).scale_problems(
            c.scene.attributes[o.name]
        ):
            rng = assets.get_category(o.category)
            lo_hi = (
                rng.dims.get(field.split(".")[-1])
                if field.startswith("dims.")
                else getattr(rng, field)
            )
            out.append(Reason("scale", o.name, value, f"{field}={value:.4g} outside {lo_hi}"))
    return out


def _static_geoms(m: mujoco.MjModel, objects: set[str]) -> dict[int, str]:
    """Geoms welded to the world (fixtures and the table) -> owner. MuJoCo never collides two
    of them, so their overlaps are measured with mj_geomDistance instead of read from contacts."""
    out = {}
    for g in range(m.ngeom):
        if m.body_weldid[m.geom_bodyid[g]] != 0:
            continue
        owner = _owner(m, g, objects)
        if owner not in ("floor", "gripper"):
            out[g] = owner
    return out


def check_penetration(c: CompiledScene, d: mujoco.MjData | None = None) -> list[Reason]:
    """Every pair of objects (fixed or movable), the table and the gripper, at t = 0."""
    m = c.model
    d = d if d is not None else _forward(c)
    objects = {o.name for o in c.scene.objects}
    worst: dict[tuple[str, str], float] = {}

    def note(a: str, b: str, depth: float) -> None:
        if a != b and depth > PENETRATION_TOL:
            key = tuple(sorted((a, b)))
            worst[key] = max(worst.get(key, 0.0), depth)

    for i in range(d.ncon):  # pairs with a moving body: MuJoCo's own contacts
        con = d.contact[i]
        note(_owner(m, con.geom1, objects), _owner(m, con.geom2, objects), -float(con.dist))
    static = sorted(_static_geoms(m, objects).items())
    fromto = np.zeros(6)
    for k, (g1, a) in enumerate(static):
        for g2, b in static[k + 1 :]:
            if a != b:
                dist = mujoco.mj_geomDistance(m, d, g1, g2, PENETRATION_TOL * 2, fromto)
                note(a, b, -float(dist))
    out = []
    for (a, b), depth in sorted(worst.items()):
        obj = a if a in objects else b
        other = b if obj == a else a
        out.append(Reason("penetration", obj, depth, f"{obj} and {other} overlap by {depth:.4f} m"))
    return out


def check_fixed_support(c: CompiledScene, d: mujoco.MjData | None = None) -> list[Reason]:
    """A fixed object must rest on the table or on another fixed object: the smallest gap from
    its geoms down to a static geom below them (the settle cannot see a welded body float)."""
    m = c.model
    d = d if d is not None else _forward(c)
    objects = {o.name for o in c.scene.objects}
    static = _static_geoms(m, objects)
    fromto = np.zeros(6)
    out = []
    for o in c.scene.objects:
        if assets.get_category(o.category).kind != assets.FIXTURE:
            continue
        mine = [g for g, owner in static.items() if owner == o.name]
        gap = math.inf
        for g1 in mine:
            for g2, owner in static.items():
                if owner == o.name:
                    continue
                fromto[:] = 0.0
                dist = mujoco.mj_geomDistance(m, d, g1, g2, SUPPORT_SEARCH, fromto)
                # beyond SUPPORT_SEARCH fromto is not filled in; otherwise g2's nearest point
                # must lie below g1's for g2 to hold it up
                if dist < SUPPORT_SEARCH and fromto[5] <= fromto[2] + 1e-3:
                    gap = min(gap, float(dist))
        if gap > SUPPORT_TOL:
            out.append(
                Reason(
                    "unsupported",
                    o.name,
                    gap,
                    f"fixed {o.name} floats {gap:.3f} m above the table / what is under it"
                    if math.isfinite(gap)
                    else f"fixed {o.name} has nothing under it within {SUPPORT_SEARCH} m",
                )
            )
    return out


def check_on_table(c: CompiledScene, d: mujoco.MjData | None = None) -> list[Reason]:
    """Every object's bounding-box footprint lies on the table top."""
    m = c.model
    d = d if d is not None else _forward(c)
    tid = m.geom(TABLE_GEOM).id
    centre, half = d.geom_xpos[tid][:2], m.geom_size[tid][:2]
    out = []
    for o in c.scene.objects:
        b = m.body(o.name).id
        h = c.consts["body_half"][c.object_bodies[o.name]].astype(float)  # [3]
        rot = d.xmat[b].reshape(3, 3)
        corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
        xy = (d.xpos[b] + (corners * h) @ rot.T)[:, :2]  # [8, 2]
        over = float(np.max(np.abs(xy - centre) - half))
        if over > EDGE_TOL:
            out.append(
                Reason("off_table", o.name, over, f"{o.name} reaches {over:.3f} m past the table")
            )
    return out


# ----------------------------------------------------------------------------- workspace


def reach_box() -> tuple[np.ndarray, np.ndarray]:
    """Reachable wrist positions (lo [3], hi [3]): the clip applied to the servo setpoint by
    `robot.apply_actions` and the planner (the tcp hangs `TCP_OFFSET` below the wrist)."""
    return robot.TARGET_LOW[:3].astype(float), robot.TARGET_HIGH[:3].astype(float)


def _outside(p: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    return float(np.linalg.norm(np.maximum(lo - p, 0) + np.maximum(p - hi, 0)))


def planner_waypoints(c: CompiledScene, d: mujoco.MjData) -> list[tuple[str, str, np.ndarray]]:
    """(phase, object, tcp position [3]) the scripted planner needs, from the state at t = 0.

    The task's family gives them (`TaskFamily.reach_targets`: a numpy mirror of its planner
    waypoints, e.g. every grasp offset the planner allows, or a door's handle over the joint's
    whole range); tests/test_sim_verify.py checks it against the planner's own waypoints.
    """
    return get_family(c.scene.task["family"]).reach_targets(c, d)


def check_reach(c: CompiledScene, d: mujoco.MjData | None = None) -> list[Reason]:
    """Every wrist pose the scripted planner needs lies inside `reach_box()`; one outside is
    clipped there, so the planner (and a policy imitating it) can never finish the task."""
    d = d if d is not None else _forward(c)
    lo, hi = reach_box()
    reasons: dict[str, Reason] = {}
    for phase, obj, tcp in planner_waypoints(c, d):
        wrist = tcp + np.array([0.0, 0.0, robot.TCP_OFFSET])
        out_by = _outside(wrist, lo, hi)
        if out_by > REACH_TOL and out_by > getattr(reasons.get(obj), "magnitude", 0.0):
            reasons[obj] = Reason(
                "unreachable",
                obj,
                out_by,
                f"the planner's {phase} waypoint for {obj} needs the wrist at "
                f"({wrist[0]:.2f}, {wrist[1]:.2f}, {wrist[2]:.2f}), {out_by:.3f} m outside the "
                f"reach {lo.round(2).tolist()}..{hi.round(2).tolist()}",
            )
    return list(reasons.values())


def cameras(c: CompiledScene, d: mujoco.MjData) -> list[tuple[str, np.ndarray, np.ndarray, float]]:
    """(name, position [3], rotation [3, 3] with columns right / up / backward, fovy rad) of the
    model's fixed cameras and of the renderer's default free camera (what reports show). Cameras
    on moving bodies (the wrist camera on the gripper) are left out: what they see changes with
    the motion, so a scene's objects need not start inside them."""
    m = c.model
    out = []
    for k in range(m.ncam):
        if _moves(m, k):
            continue
        rot = d.cam_xmat[k].reshape(3, 3).copy()
        out.append((m.camera(k).name, d.cam_xpos[k].copy(), rot, math.radians(m.cam_fovy[k])))
    az, el = math.radians(render.DEFAULT_AZIMUTH), math.radians(render.DEFAULT_ELEVATION)
    fwd = np.array([math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el)])
    up = np.array([-math.sin(el) * math.cos(az), -math.sin(el) * math.sin(az), math.cos(el)])
    pos = np.asarray(render.DEFAULT_LOOKAT) - render.DEFAULT_DISTANCE * fwd
    rot = np.stack([np.cross(fwd, up), up, -fwd], axis=1)
    out.append(("render default", pos, rot, math.radians(float(m.vis.global_.fovy))))
    return out


def _moves(m: mujoco.MjModel, cam: int) -> bool:
    """Whether a camera's body hangs on a joint somewhere up its kinematic chain."""
    b = int(m.cam_bodyid[cam])
    while b > 0:
        if m.body_jntnum[b] > 0:
            return True
        b = int(m.body_parentid[b])
    return False


def project(p: np.ndarray, pos: np.ndarray, rot: np.ndarray, fovy: float) -> np.ndarray:
    """World point -> normalised image coordinates (u, v) in [-1, 1] when visible (a square
    image); inf when behind the camera."""
    q = rot.T @ (p - pos)  # camera frame: x right, y up, looking along -z
    depth = -q[2]
    if depth <= 1e-6:
        return np.array([np.inf, np.inf])
    t = math.tan(fovy / 2)
    return np.array([q[0] / (depth * t * VIEW_ASPECT), q[1] / (depth * t)])


def check_view(c: CompiledScene, d: mujoco.MjData | None = None) -> list[Reason]:
    """Every task object's centre inside every camera's image."""
    m = c.model
    d = d if d is not None else _forward(c)
    out = []
    for obj in dict.fromkeys(c.scene.task["roles"].values()):
        p = d.xpos[m.body(obj).id]
        worst, where = 0.0, ""
        for name, pos, rot, fovy in cameras(c, d):
            beyond = float(np.max(np.abs(project(p, pos, rot, fovy)))) - 1.0
            if beyond > worst:
                worst, where = beyond, name
        if worst > 0:
            out.append(
                Reason(
                    "out_of_view",
                    obj,
                    worst,
                    f"{obj} is outside the {where} camera's image ({worst:.2f} half-widths out)",
                )
            )
    return out


# ----------------------------------------------------------------------------- settles


def _free_bodies(c: CompiledScene) -> list[tuple[str, int, int, float, bool]]:
    """(object, qpos address, dof address, mass, round) of every movable object; a round one
    (one sphere centred on the body: a ball, an apple) has no orientation that could tip."""
    m = c.model
    out = []
    for o in c.scene.objects:
        if assets.get_category(o.category).kind != assets.MOVABLE:
            continue
        j = m.joint(f"{o.name}/free").id
        b = m.body(o.name).id
        geoms = [g for g in range(m.ngeom) if m.geom_bodyid[g] == b]
        rnd = all(
            m.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE and not np.any(m.geom_pos[g])
            for g in geoms
        )
        out.append((o.name, m.jnt_qposadr[j], m.jnt_dofadr[j], float(m.body_subtreemass[b]), rnd))
    return out


def _motion(q0: np.ndarray, q1: np.ndarray, adr: int, rnd: bool) -> tuple[float, float, float]:
    """(drop, slide, tilt) of a free body between two qpos vectors (tilt 0 for round ones)."""
    p0, p1 = q0[adr : adr + 3], q1[adr : adr + 3]
    drop = float(p0[2] - p1[2])
    slide = float(np.linalg.norm(p1[:2] - p0[:2]))
    tilt = 0.0 if rnd else _tilt_change(q0[adr + 3 : adr + 7], q1[adr + 3 : adr + 7])
    return drop, slide, tilt


def check_stability(
    group: Sequence[CompiledScene], nthread: int | None = None
) -> list[list[Reason]]:
    """Passive settle and `PUSH_DIRECTIONS` disturbed settles of one same-structure group, all
    in one batched mujoco.rollout (rows: variant-major, the passive copy first)."""
    from mujoco import rollout as mjrollout

    m0 = group[0].model
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    nstate = mujoco.mj_stateSize(m0, spec)
    copies = 1 + PUSH_DIRECTIONS
    state0 = np.empty((len(group), nstate))
    for i, c in enumerate(group):
        mujoco.mj_getState(c.model, _forward(c), state0[i], spec)
    nstep = int(SETTLE_SECONDS / robot.TIMESTEP)
    npush = max(1, int(round(PUSH_SECONDS / robot.TIMESTEP)))
    nu, nv = m0.nu, m0.nv
    ctrl = np.zeros((len(group) * copies, nstep, nu + nv))  # [N, T, ctrl + qfrc_applied]
    for i, c in enumerate(group):
        rows = slice(i * copies, (i + 1) * copies)
        ctrl[rows, :, :nu] = c.init_ctrl
        for k in range(1, copies):
            for j, (_, _, dof, mass, _) in enumerate(_free_bodies(c)):
                th = 2 * math.pi * (k - 1) / PUSH_DIRECTIONS + j * GOLDEN_ANGLE
                f = mass * PUSH_ACCEL * np.array([math.cos(th), math.sin(th)])
                ctrl[i * copies + k, :npush, nu + dof : nu + dof + 2] = f
                ctrl[i * copies + k, npush : 2 * npush, nu + dof : nu + dof + 2] = -f
    models = [c.model for c in group for _ in range(copies)]
    nthread = nthread or max(1, min(len(models), os.cpu_count() or 1))
    datas = [mujoco.MjData(m0) for _ in range(nthread)]
    states, _ = mjrollout.rollout(
        models,
        datas,
        np.repeat(state0, copies, 0),
        ctrl,
        control_spec=mujoco.mjtState.mjSTATE_CTRL | mujoco.mjtState.mjSTATE_QFRC_APPLIED,
        persistent_pool=True,
    )
    final = states[:, -1].reshape(len(group), copies, -1)  # [B, copies, nstate]
    out = []
    for i, c in enumerate(group):
        m = c.model
        reasons = []
        q0 = state0[i, 1 : 1 + m.nq]
        q1 = final[i, 0, 1 : 1 + m.nq]
        if not np.isfinite(q1).all():
            reasons.append(Reason("unstable", "scene", float("inf"), "simulation diverged"))
            out.append(reasons)
            continue
        passive_bad = set()
        for name, adr, _, _, rnd in _free_bodies(c):
            drop, slide, tilt = _motion(q0, q1, adr, rnd)
            if drop > DROP_TOL:
                passive_bad.add(name)
                reasons.append(
                    Reason("unsupported", name, drop, f"{name} fell {drop:.3f} m when released")
                )
            elif slide > SLIDE_TOL or tilt > TIP_TOL:
                passive_bad.add(name)
                mag = slide if slide > SLIDE_TOL else tilt
                reasons.append(
                    Reason(
                        "unstable", name, mag, f"{name} moved {slide:.3f} m / tilted {tilt:.2f} rad"
                    )
                )
        for jname, (lo, hi) in zip(c.layout.joint_names, c.consts["joint_range"], strict=True):
            adr = m.jnt_qposadr[m.joint(jname).id]
            drift = abs(q1[adr] - q0[adr]) / max(hi - lo, 1e-9)
            if drift > JOINT_TOL:
                reasons.append(
                    Reason(
                        "unstable",
                        jname.split("/")[0],
                        float(drift),
                        f"joint {jname} drifted {drift:.2f} of its range",
                    )
                )
        reasons += _fragile(c, q0, final[i, 1:, 1 : 1 + m.nq], passive_bad)
        out.append(reasons)
    return out


def _fragile(
    c: CompiledScene, q0: np.ndarray, q_pushed: np.ndarray, skip: set[str]
) -> list[Reason]:
    """Objects that passed the passive settle but not a push (q_pushed: [K, nq] final qpos)."""
    if not np.isfinite(q_pushed).all():
        return [Reason("fragile", "scene", float("inf"), "simulation diverged after a push")]
    out = []
    for j, (name, adr, _, _, rnd) in enumerate(_free_bodies(c)):
        if name in skip:
            continue
        worst = None
        for k, q1 in enumerate(q_pushed):
            drop, slide, tilt = _motion(q0, q1, adr, rnd)
            if drop > DROP_TOL:
                mag, what = drop, f"fell {drop:.3f} m"
            elif tilt > TIP_TOL:
                mag, what = tilt, f"tipped {tilt:.2f} rad"
            elif slide > DISTURB_SLIDE_TOL:
                mag, what = slide, f"ended {slide:.3f} m away"
            else:
                continue
            if worst is None or mag > worst[0]:
                th = math.degrees(2 * math.pi * k / PUSH_DIRECTIONS + j * GOLDEN_ANGLE) % 360
                worst = (mag, f"{name} {what} after a small push toward {th:.0f} deg")
        if worst is not None:
            out.append(Reason("fragile", name, float(worst[0]), worst[1]))
    return out


def _tilt_change(qa: np.ndarray, qb: np.ndarray) -> float:
    """Angle between the body z axes of two orientations (yaw changes do not count)."""
    za, zb = np.zeros(9), np.zeros(9)
    mujoco.mju_quat2Mat(za, qa)
    mujoco.mju_quat2Mat(zb, qb)
    dot = float(np.clip(za.reshape(3, 3)[:, 2] @ zb.reshape(3, 3)[:, 2], -1, 1))
    return float(np.arccos(dot))


def verify(compiled: Sequence[CompiledScene]) -> list[Verdict]:
    """Verifies a batch of compiled scenes; returns one Verdict per scene, in order."""
    reasons: dict[int, list[Reason]] = {}
    for c in compiled:
        d = _forward(c)
        reasons[id(c)] = (
            check_scale(c)
            + check_penetration(c, d)
            + check_fixed_support(c, d)
            + check_on_table(c, d)
            + check_reach(c, d)
            + check_view(c, d)
        )
    for group in group_buckets(compiled):
        for c, rs in zip(group, check_stability(group), strict=True):
            reasons[id(c)] += rs
    return [Verdict(not reasons[id(c)], reasons[id(c)]) for c in compiled]


def summarize(verdicts: Sequence[Verdict]) -> dict:
    """pass_rate and counts of failing scenes per check (for summary.json)."""
    counts = Counter()
    for v in verdicts:
        for check in {r.check for r in v.reasons}:
            counts[check] += 1
    n = max(len(verdicts), 1)
    return {
        "n": len(verdicts),
        "pass_rate": sum(v.ok for v in verdicts) / n,
        "reasons": {k: counts.get(k, 0) for k in CHECKS},
    }

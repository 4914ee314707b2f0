"""Scripted articulation for LIBERO's Open / Close / TurnOn / TurnOff atoms (drawers, knobs, doors).

The joint's type, axis, anchor and range come from the compiled model (host side, once per
task); the part's pose comes from `SimState` each chunk (pure JAX), so the waypoints follow the
part as it moves. Five modes, chosen by joint type and the direction the goal needs:
  pull  a slide joint opened: our parallel gripper has no hook, so it presses its closed finger
        tips down on the handle bar and drags it along the joint axis (friction 1.5 × ~35 N >>
        the drawer's 50 N·s/m damping). The hand is pitched 0.6 rad so the palm (12 × 3 cm,
        5 cm above the tips) leans outward: held upright it lands on the handle of the drawer
        above (7 cm higher) and drags that one instead. The tips come in at handle height
        from the front, then over the bar.
  push  a slide joint closed: the closed fingers (same pitch) come down in front of the handle
        and push it along the axis 1 cm past the goal (the joint limit stops it).
  turn  a hinge about a vertical axis (a stove knob): the jaws close across the knob's ridge at
        the reachable point nearest the axis, then the tcp is carried round the axis while the
        yaw turns by the same angle, to 0.5 rad past LIBERO's threshold.
  swing a door (a vertical hinge whose part is wider than a knob) closed: the closed fingers come
        down behind its face at 0.6 of its width from the hinge and follow the arc about the
        hinge (as `coda.sim.tasks.articulated` does) past the closed position.
  open  a door opened: its handle pulled round the hinge. The jaws close on the door's
        vertical handle bar from above, across it along the door's radius (the pads beside the
        bar, the palm over its top, the bar's stand-offs to the door between the pads), then
        the tcp follows the arc about the hinge in ARC_STEP steps, the yaw turning with the
        door, to 0.5 rad past LIBERO's threshold. A door without such a bar is refused.
Each mode is a stage of `planner.LiberoPlanner`: `phases` and `_waypoints(s, cmd)` as a
`ScriptedPlanner` has them.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import mujoco
import numpy as np

from coda.libero import predicates as P
from coda.libero.geoms import collision_geoms, geom_half_extents
from coda.sim import robot
from coda.sim.planner import CLOSE, OPEN, Waypoint
from coda.sim.state import SimState
from coda.sim.tasks.waypoints import wrap

PRESS = 0.012  # m: setpoint below the handle's top while dragging it (servo force ~36 N)
TILT = 0.6  # rad: hand pitch for slides; the palm leans 3 cm outward of the finger tips
TIP_BELOW_TCP = 0.013  # m: the tilted pads' lowest corner below the tcp
FRONT = 0.06  # m: where the tilted tip comes down in front of the handle
HOVER = 0.10  # m: tcp above the handle before coming down
PUSH_GAP = 0.03  # m: the pushing fingers' centre in front of the handle before the push
PUSH_OVER = 0.01  # m: push past the goal (the joint limit stops the part)
SLIDE_MARGIN = 0.02  # m: slide goal past LIBERO's threshold (clipped to the joint range)
HINGE_MARGIN = 0.5  # rad: knob goal past LIBERO's threshold
HINGE_OVER = 0.1  # rad: how far a knob goal may lie beyond the joint range
KNOB_BELOW_TOP = 0.025  # m: tcp below the knob ridge's top at the grasp
KNOB_RADIUS = 0.08  # m: a vertical hinge's part within this of its axis is a knob (else a door)
REACH_X = float(robot.TARGET_LOW[0]) + 0.004  # m: nearest x the tcp can hold with some slack

PULL_PHASES = (
    Waypoint("approach", CLOSE, tol=0.01),
    Waypoint("lower", CLOSE, tol=0.008),
    Waypoint("in", CLOSE, speed=0.5, tol=0.006),
    Waypoint("press", CLOSE, speed=0.5, tol=0.004, settle=4),
    Waypoint("drag", CLOSE, speed=0.35, tol=0.008, settle=4),
    Waypoint("lift", CLOSE, tol=0.02),
)
PUSH_PHASES = (
    Waypoint("approach", CLOSE, tol=0.01),
    Waypoint("lower", CLOSE, speed=0.5, tol=0.006, settle=2),
    Waypoint("push", CLOSE, speed=0.35, tol=0.008, settle=4),
    Waypoint("back", CLOSE, tol=0.01),
    Waypoint("lift", CLOSE, tol=0.02),
)
TURN_PHASES = (
    Waypoint("approach", OPEN, tol=0.01),
    Waypoint("descend", OPEN, speed=0.5, tol=0.004, settle=2),
    Waypoint("grasp", CLOSE, tol=0.01, settle=8),
    Waypoint("turn", CLOSE, speed=0.4, tol=0.008, settle=6),
    Waypoint("release", OPEN, tol=0.01, settle=5),
    Waypoint("retreat", OPEN, tol=0.02),
)
SWING_PHASES = (
    Waypoint("approach", CLOSE, tol=0.01),
    Waypoint("lower", CLOSE, speed=0.5, tol=0.006, settle=2),
    Waypoint("swing", CLOSE, speed=0.5, tol=0.01, settle=4),
    Waypoint("back", CLOSE, tol=0.01),
    Waypoint("lift", CLOSE, tol=0.02),
)
OPEN_PHASES = (
    Waypoint("approach", OPEN, tol=0.01),
    Waypoint("descend", OPEN, speed=0.5, tol=0.004, settle=2),
    Waypoint("grasp", CLOSE, tol=0.01, settle=8),
    Waypoint("arc", CLOSE, speed=0.5, tol=0.01, settle=4),
    Waypoint("release", OPEN, tol=0.01, settle=5),
    Waypoint("retreat", OPEN, tol=0.02),
)
MODES = {
    "pull": PULL_PHASES,
    "push": PUSH_PHASES,
    "turn": TURN_PHASES,
    "swing": SWING_PHASES,
    "open": OPEN_PHASES,
}
ARC_STEP = 0.045  # rad per control step along a door's arc (as coda.sim.tasks.articulated)
DOOR_AT = 0.6  # the pushing fingers' distance from a door's hinge, fraction of its width
DOOR_GAP = 0.02  # m: fingers behind the door's face before the swing
DOOR_OVER = 0.2  # rad: the pusher's arc goes this far past the door's goal
DOOR_REACH_MARGIN = 0.05  # m: the pusher's point on the door inside the reach by this much
DOOR_MIN_R = 0.08  # m: nearest the hinge a door is pushed
PALM_BOTTOM = 0.05  # m: the palm's underside above the tcp (pads from 1 cm below the tcp to it)
BAR_CLEAR = 0.005  # m: the palm's underside above a door handle bar's top at the grasp


@dataclasses.dataclass(frozen=True)
class Articulation:
    """One joint atom's stage (hashable: all geometry as float tuples in the part's frame)."""

    mode: str  # pull | push | turn
    atom: tuple  # the static ("joint", ...) atom this stage makes true
    body: int  # tracked index of the moving part
    joint: int  # index into SimState.joint_pos
    axis: tuple  # joint axis, part frame (3)
    anchor: tuple  # joint anchor, part frame (3)
    handle: tuple  # handle / grasp point, part frame (3)
    handle_top: float  # handle top above the handle point (m)
    handle_depth: float  # handle half extent along the motion (m)
    ridge: tuple  # knob ridge direction, part frame (3); zeros for slides
    q_goal: float  # joint position aimed at

    @property
    def phases(self) -> tuple[Waypoint, ...]:
        return MODES[self.mode]

    def _frame(self, s: SimState):
        rb = P._quat_mat(s.body_quat[..., self.body, :])  # [B, 3, 3]
        pb = s.body_pos[..., self.body, :]  # [B, 3]

        def world(v, point=True):
            w = jnp.einsum("...ij,j->...i", rb, jnp.asarray(v, pb.dtype))
            return pb + w if point else w

        return world

    def _waypoints(self, s: SimState, target: jnp.ndarray):
        """xyz [B, P, 3], yaw [B, P], path to go [B, P] of this stage's phases."""
        world = self._frame(s)
        q = s.joint_pos[..., self.joint]  # [B]
        dq = self.q_goal - q  # [B]
        h = world(self.handle)  # [B, 3]
        axis = world(self.axis, point=False)  # [B, 3]
        zero = jnp.zeros_like(q)

        def at(p, z):
            return jnp.concatenate([p[..., :2], z[..., None]], -1)

        if self.mode == "turn":
            return self._turn(s, target, world, h, axis, dq)
        if self.mode == "swing":
            return self._swing(target, world, axis, dq)
        if self.mode == "open":
            return self._open(target, world, h, axis, dq)
        # slides: handle motion dq · axis; jaws along the bar (perpendicular to the motion)
        move = axis * dq[..., None]  # [B, 3]
        u = move / jnp.maximum(jnp.linalg.norm(move[..., :2], axis=-1, keepdims=True), 1e-6)
        u = u.at[..., 2].set(0.0)
        # jaws are symmetric: of the two yaws, the one nearer the setpoint's (the yaw servo
        # cannot wrap past ±π)
        raw = jnp.arctan2(axis[..., 1], axis[..., 0])
        yaw = target[..., 3] + wrap(raw - target[..., 3], jnp.pi)
        top = h[..., 2] + self.handle_top
        goal = h + move
        # tilt the hand so the palm leans outward, clear of a handle above this one
        out = u if self.mode == "pull" else -u
        pitch = TILT * jnp.sign(jnp.cos(yaw) * out[..., 0] + jnp.sin(yaw) * out[..., 1])
        if self.mode == "pull":
            press = top + TIP_BELOW_TCP - PRESS
            over = top + TIP_BELOW_TCP + 0.01
            front = h + out * FRONT
            xyz = jnp.stack(
                [at(front, top + HOVER), at(front, over), at(h, over), at(h, press),
                 at(goal, press), at(goal + out * FRONT, top + HOVER)],
                1,
            )  # fmt: skip
        else:
            off = self.handle_depth + robot.FINGER_HALF[0] + PUSH_GAP
            pre = h - u * off
            end = goal - u * (self.handle_depth + robot.FINGER_HALF[0] - PUSH_OVER)
            z = h[..., 2]
            xyz = jnp.stack(
                [at(pre, top + HOVER), at(pre, z), at(end, z), at(end - u * 0.05, z),
                 at(end - u * 0.05, top + HOVER)],
                1,
            )  # fmt: skip
        n = xyz.shape[1]
        rep = (yaw, zero, pitch)
        return (xyz,) + tuple(jnp.repeat(v[:, None], n, 1) for v in rep)

    def _swing(self, target, world, axis, dq):
        """Close a door: the closed fingers behind its face follow the arc about the hinge."""
        a = world(self.anchor)  # [B, 3]
        v = world(self.ridge, point=False)  # door direction from the hinge [B, 3]
        th = jnp.arctan2(v[..., 1], v[..., 0])  # [B]
        ang = dq * jnp.sign(axis[..., 2])  # door rotation still to go, about +z [B]
        sg = jnp.sign(ang)
        r, off = self.handle[0], self.handle_depth
        # nearer the hinge where the door's far part lies out of the gripper's reach (a door
        # opened towards the workspace's edge)
        dv = jnp.stack([jnp.cos(th), jnp.sin(th)], -1)  # [B, 2]
        lo = jnp.asarray(robot.TARGET_LOW[:2]) + DOOR_REACH_MARGIN
        hi = jnp.asarray(robot.TARGET_HIGH[:2]) - DOOR_REACH_MARGIN
        safe = jnp.where(jnp.abs(dv) > 1e-6, dv, 1e-6)
        lim = jnp.where(dv < 0, (lo - a[..., :2]) / safe, (hi - a[..., :2]) / safe)
        r = jnp.clip(jnp.min(lim, -1), DOOR_MIN_R, r)  # [B]
        rp = jnp.hypot(r, off)
        delta = -sg * jnp.arctan2(off + DOOR_GAP, r)  # the pusher trails the door

        def polar(phi, radius, z):
            rad = jnp.asarray(radius)[..., None]  # [B, 1]
            xy = a[..., :2] + rad * jnp.stack([jnp.cos(phi), jnp.sin(phi)], -1)
            return jnp.concatenate([xy, z[..., None]], -1)

        z = a[..., 2]
        pre = polar(th + delta, rp, z)
        # past the goal by DOOR_OVER: the part's direction `v` (to its farthest box) is not its
        # plate's, so a pusher aimed exactly stops a few degrees short of closed; the joint's
        # limit stops the door
        goal = th + ang + delta + sg * DOOR_OVER
        rel = target[..., :2] - a[..., :2]
        phi_t = jnp.arctan2(rel[..., 1], rel[..., 0])
        phi_n = phi_t + jnp.clip(wrap(goal - phi_t), -ARC_STEP, ARC_STEP)
        togo = rp * jnp.abs(wrap(goal - phi_n))
        end = polar(goal - sg * 0.15, rp + 0.02, z)
        top = z + self.handle_top
        raw = th + jnp.pi / 2  # jaws along the door: the closed fingers' wide face on it
        yaw = target[..., 3] + wrap(raw - target[..., 3], jnp.pi)
        turned = yaw + wrap(phi_n - (th + delta))
        xyz = jnp.stack(
            [pre.at[..., 2].set(top + 0.05), pre, polar(phi_n, rp, z), end,
             end.at[..., 2].set(top + 0.05)],
            1,
        )  # fmt: skip
        yaws = jnp.stack([yaw, yaw, turned, turned, turned], 1)
        zero = jnp.zeros_like(th)
        togos = jnp.stack([zero, zero, togo, zero, zero], 1)
        return xyz, yaws, togos

    def _open(self, target, world, g, axis, dq):
        """Open a door: the jaws close on its vertical handle bar from above (along the
        door's radius, the palm over the bar's top), then the tcp follows the arc about the
        hinge, the yaw turning with the door, to the goal; let go, up."""
        a = world(self.anchor)  # [B, 3]
        rel = g[..., :2] - a[..., :2]
        th = jnp.arctan2(rel[..., 1], rel[..., 0])  # the grasp point's angle now [B]
        rp = jnp.linalg.norm(rel, axis=-1)  # [B]
        ang = dq * jnp.sign(axis[..., 2])  # door rotation still to go, about +z [B]
        goal = th + ang
        # jaws along the radius (yaw ≡ th - π/2 mod π); of the two, the one whose yaw at the
        # end of the arc stays inside the yaw range
        f1 = wrap(th - jnp.pi / 2 + ang)
        f2 = f1 - jnp.pi * jnp.sign(f1 + 1e-9)
        yaw = jnp.where(jnp.abs(f1 - ang) <= jnp.pi, f1, f2) - ang  # [B]
        phi_t = jnp.arctan2(target[..., 1] - a[..., 1], target[..., 0] - a[..., 0])
        phi_n = phi_t + jnp.clip(wrap(goal - phi_t), -ARC_STEP, ARC_STEP)
        togo = rp * jnp.abs(wrap(goal - phi_n))
        z = g[..., 2]
        arc = jnp.concatenate(
            [a[..., :2] + rp[..., None] * jnp.stack([jnp.cos(phi_n), jnp.sin(phi_n)], -1),
             z[..., None]],
            -1,
        )  # fmt: skip
        up = g.at[..., 2].add(HOVER)
        xyz = jnp.stack([up, g, g, arc, g, up], 1)
        turned = yaw + wrap(phi_n - th)
        yaws = jnp.stack([yaw, yaw, yaw, turned, yaw, yaw], 1)
        zero = jnp.zeros_like(th)
        togos = jnp.stack([zero, zero, zero, togo, zero, zero], 1)
        return xyz, yaws, togos

    def _turn(self, s, target, world, g, axis, dq):
        anchor = world(self.anchor)  # [B, 3]
        ridge = world(self.ridge, point=False)
        ang = dq * jnp.sign(axis[..., 2])  # world rotation about +z [B]
        c, si = jnp.cos(ang), jnp.sin(ang)
        rel = g[..., :2] - anchor[..., :2]
        rot = jnp.stack(
            [c * rel[..., 0] - si * rel[..., 1], si * rel[..., 0] + c * rel[..., 1]], -1
        )
        end = jnp.concatenate([anchor[..., :2] + rot, g[..., 2:3]], -1)
        # jaws across the ridge: the tcp's local y perpendicular to it, folded near the setpoint
        raw = jnp.arctan2(ridge[..., 1], ridge[..., 0])
        yaw = target[..., 3] + wrap(raw - target[..., 3], jnp.pi)
        above = g.at[..., 2].add(HOVER)
        xyz = jnp.stack([above, g, g, end, end, end.at[..., 2].add(HOVER)], 1)
        turned = yaw + ang
        yaws = jnp.stack([yaw, yaw, yaw, turned, turned, turned], 1)
        return xyz, yaws, jnp.zeros(yaws.shape)


# ----------------------------------------------------------------------------- host side


def _geom_frames(m: mujoco.MjModel, d: mujoco.MjData, body: int):
    """(rotation [3, 3], half sizes [3]) of a body's collision geoms, as `_geom_boxes`."""
    geoms = collision_geoms(m, body)
    return [(d.geom_xmat[g].reshape(3, 3).copy(), m.geom_size[g].copy()) for g in geoms]


def _geom_boxes(m: mujoco.MjModel, d: mujoco.MjData, body: int):
    """(centre [3], world half extents [3]) of a body's collision geoms."""
    return [
        (d.geom_xpos[g].copy(), geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3)))
        for g in collision_geoms(m, body)
    ]


def _door_bar(
    m: mujoco.MjModel,
    d: mujoco.MjData,
    body: int,
    anchor: np.ndarray,
    below: float = PALM_BOTTOM + BAR_CLEAR,
):
    """World grasp point [3] on a door's vertical handle bar (a capsule / cylinder standing
    upright, the part's geom farthest from the hinge), the tcp `below` the bar's top: low
    enough that the pads hold the bar's top and the palm clears it; None without such a bar."""
    best, far = None, -1.0
    for g in collision_geoms(m, body):
        kind = int(m.geom_type[g])
        if kind not in (int(mujoco.mjtGeom.mjGEOM_CAPSULE), int(mujoco.mjtGeom.mjGEOM_CYLINDER)):
            continue
        rot = d.geom_xmat[g].reshape(3, 3)
        if abs(rot[2, 2]) < 0.9:  # its axis (local z) not upright: a stand-off
            continue
        r = float(np.linalg.norm(d.geom_xpos[g][:2] - anchor[:2]))
        if r > far:
            radius, half = float(m.geom_size[g][0]), float(m.geom_size[g][1])
            extra = radius if kind == int(mujoco.mjtGeom.mjGEOM_CAPSULE) else 0.0
            top = float(d.geom_xpos[g][2]) + half + extra
            best, far = np.array([*d.geom_xpos[g][:2], top - below]), r
    return best


def goal_q(op: str, bound: float, lo: float, hi: float, hinge: bool) -> float:
    """The joint position aimed at for LIBERO's threshold (op, bound) within range [lo, hi]."""
    up = op in (">", ">=")
    if hinge:
        q = bound + (HINGE_MARGIN if up else -HINGE_MARGIN)
        return float(np.clip(q, lo - HINGE_OVER, hi + HINGE_OVER))
    q = bound + (SLIDE_MARGIN if up else -SLIDE_MARGIN)
    return float(np.clip(q, lo, hi))


@dataclasses.dataclass(frozen=True)
class _Joint:
    """A joint atom's joint and moving part at the task's initial state (host side)."""

    atom: tuple
    name: str  # the joint's name
    j: int  # index into SimState.joint_pos
    body: int  # tracked index of the moving part
    m: mujoco.MjModel
    d: mujoco.MjData
    bid: int  # the part's body id
    rb: np.ndarray  # the part's rotation [3, 3]
    pb: np.ndarray  # the part's position [3]
    lo: float  # joint range
    hi: float
    q0: float  # initial joint position
    qg: float  # joint position aimed at
    axis_w: np.ndarray  # joint axis, world
    anchor_w: np.ndarray  # joint anchor, world
    boxes: list  # (centre [3], world half extents [3]) of the part's collision geoms

    def local(self, p, point=True) -> tuple:
        """A world point (or direction) in the part's frame, as floats."""
        return tuple(float(v) for v in self.rb.T @ (np.asarray(p) - (self.pb if point else 0.0)))

    def stage(self, mode: str, handle, handle_top, handle_depth, ridge, anchor=None):
        anchor = self.anchor_w if anchor is None else anchor
        return Articulation(mode, self.atom, self.body, self.j, self.local(self.axis_w, False),
                            self.local(anchor), handle, handle_top, handle_depth, ridge,
                            self.qg)  # fmt: skip


def _slide_stage(jt: _Joint) -> Articulation:
    """A drawer: pulled open or pushed shut by its outermost geom (the handle)."""
    outward = -jt.axis_w if abs(jt.lo) > abs(jt.hi) else jt.axis_w
    c, ext = max(jt.boxes, key=lambda b: float(b[0] @ outward))
    depth = float(np.abs(jt.axis_w) @ ext)
    mode = "pull" if (jt.qg - jt.q0) * float(jt.axis_w @ outward) > 0 else "push"
    return jt.stage(mode, jt.local(c), float(ext[2]), depth, (0.0, 0.0, 0.0))


def _door_stage(jt: _Joint, anchor: np.ndarray, reach: float) -> Articulation:
    """A door on a vertical hinge: opened by its handle bar, or swung shut from behind."""
    axis_w, boxes = jt.axis_w, jt.boxes
    opening = (jt.qg - jt.q0) * float(np.sign(axis_w[2])) * (1 if abs(jt.lo) > abs(jt.hi) else -1)
    if opening < 0:
        bar = _door_bar(jt.m, jt.d, jt.bid, anchor)
        if bar is None:
            raise ValueError(
                f"joint {jt.name}: opening a door ({reach:.2f} m) needs its handle "
                "pulled round the hinge; it has no vertical handle bar to hold"
            )
        return jt.stage("open", jt.local(bar), 0.0, 0.0, (0.0, 0.0, 0.0), anchor)
    far = max(boxes, key=lambda b: float(np.linalg.norm(b[0][:2] - anchor[:2])))
    v = far[0] - anchor
    v[2] = 0.0
    v /= max(float(np.linalg.norm(v)), 1e-9)
    thick = min(float(b[1][:2].min()) for b in boxes)
    thick = float(min(b[1][:2].min() for b in boxes if b[1][:2].max() > 0.05) or thick)
    top = max(float(b[0][2] + b[1][2]) for b in boxes) - float(anchor[2])
    off = thick + float(robot.FINGER_HALF[0])
    return jt.stage("swing", (DOOR_AT * reach, 0.0, 0.0), top, off, jt.local(v, False), anchor)


def _knob_stage(jt: _Joint, anchor: np.ndarray) -> Articulation:
    """A knob: the ridge (the part's geom that rises highest) grasped at the reachable point
    nearest the axis along its long horizontal direction."""
    boxes = jt.boxes
    gi = max(range(len(boxes)), key=lambda i: float(boxes[i][0][2] + boxes[i][1][2]))
    c, ext = boxes[gi]
    # its long horizontal axis from the geom's own frame (a knob left turned is diagonal)
    rot, size = _geom_frames(jt.m, jt.d, jt.bid)[gi]
    flat = [k for k in range(3) if abs(rot[2, k]) < 0.5]
    k = max(flat, key=lambda k: size[k]) if flat else 0
    long = rot[:, k] * np.array([1.0, 1.0, 0.0])
    long = long / max(float(np.linalg.norm(long)), 1e-9)
    half = float(size[k])
    ts = np.linspace(-half, half, 41)
    cand = c[None] + ts[:, None] * long[None]
    ok = (cand[:, 0] >= REACH_X) & (np.abs(cand[:, 1]) <= robot.TARGET_HIGH[1] - 0.01)
    if not ok.any():
        raise ValueError(f"joint {jt.name}: knob ridge out of the gripper's reach")
    dist = np.linalg.norm(cand[:, :2] - anchor[None, :2], axis=1)
    g = cand[np.argmin(np.where(ok, dist, np.inf))].copy()
    g[2] = c[2] + ext[2] - KNOB_BELOW_TOP
    return jt.stage(
        "turn", jt.local(g), float(ext[2]), float(ext[:2].min()), jt.local(long, False), anchor
    )


def _joint(compiled, atom: tuple) -> _Joint:
    """The joint of a ("joint", op, bound, joints, any) atom at the task's initial state."""
    _, op, bound, joints, _ = atom
    m = compiled.model
    names = compiled.layout.joint_names
    tracked = compiled.layout.body_names
    j = int(joints[0])
    jid = m.joint(names[j]).id
    bname = m.body(int(m.jnt_bodyid[jid])).name
    if bname not in tracked:
        raise ValueError(f"joint {names[j]} moves untracked body {bname}")
    bid = m.body(bname).id
    d = mujoco.MjData(m)
    d.qpos[:] = compiled.init_qpos
    mujoco.mj_kinematics(m, d)
    lo, hi = (float(v) for v in m.jnt_range[jid])
    hinge = m.jnt_type[jid] == mujoco.mjtJoint.mjJNT_HINGE
    q0 = float(d.qpos[m.jnt_qposadr[jid]])
    boxes = _geom_boxes(m, d, bid)
    if not boxes:
        raise ValueError(f"joint {names[j]}: its part has no collision geometry")
    return _Joint(
        atom, names[j], j, tracked.index(bname), m, d, bid, d.xmat[bid].reshape(3, 3),
        d.xpos[bid].copy(), lo, hi, q0, goal_q(op, bound, lo, hi, bool(hinge)),
        d.xaxis[jid].copy(), d.xanchor[jid].copy(), boxes,
    )  # fmt: skip


def articulation_for(compiled, atom: tuple) -> Articulation:
    """The stage of a ("joint", op, bound, joints, any) atom, its geometry read from the model
    at the task's initial state; a clear error for joints it cannot operate."""
    jt = _joint(compiled, atom)
    jid = jt.m.joint(jt.name).id
    if jt.m.jnt_type[jid] == mujoco.mjtJoint.mjJNT_SLIDE:
        return _slide_stage(jt)
    if jt.m.jnt_type[jid] == mujoco.mjtJoint.mjJNT_HINGE and abs(jt.axis_w[2]) > 0.9:
        anchor = jt.d.xanchor[jid].copy()
        reach = max(float(np.linalg.norm(b[0][:2] - anchor[:2]) + b[1][:2].max()) for b in jt.boxes)
        if reach > KNOB_RADIUS:
            return _door_stage(jt, anchor, reach)
        return _knob_stage(jt, anchor)
    raise ValueError(
        f"joint {jt.name}: only slides (drawers) and vertical hinges (knobs) are scripted; "
        "a door hinge (the microwave) is not"
    )

"""Verification of imported LIBERO scenes on their (settled) initial states.

`coda.sim.verify` checks scenes of our own asset pool against its metric ranges and the
families' planner waypoints; a LIBERO scene has neither, so its checks are these, with the
same `Reason` / `Verdict` records:
  penetration  no two bodies (fixtures included, gripper excluded) overlap by more than PEN_TOL
  off_table    every movable object's origin lies over the table and not below its top
  unreachable  every movable object lies inside our gripper's reach box
  unstable     a further STABLE_S of passive physics moves no movable object more than
               STABLE_MOVE or tilts it more than STABLE_TILT (the layout is at rest)
  init_atoms   LIBERO's `:init` joint conditions (Open / Close / TurnOn / TurnOff) hold. Its
               On / In conditions are reported (`Report.init_atoms`), not failed: they steer
               LIBERO's placement sampler and LIBERO's own stored states miss them (objects
               1-2 cm outside 2 cm regions before any physics)
  solved       ν must not hold at t = 0 (LIBERO tasks start unsolved)
"""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np

from coda.libero import predicates as P
from coda.libero.reference import Reference
from coda.libero.scene import load_task
from coda.sim import robot
from coda.sim.verify import Reason, Verdict, reach_box

PEN_TOL = 0.005  # m: deepest allowed overlap (LIBERO's soft contacts rest at ~1-3 mm)
STABLE_S = 1.0  # s of passive physics after the settle
STABLE_MOVE = 0.01  # m
STABLE_TILT = 0.2  # rad
CHECKS = ("penetration", "off_table", "unreachable", "unstable", "init_atoms", "solved")


def _owner(m: mujoco.MjModel, body: int) -> str:
    while m.body_parentid[body] != 0:
        body = m.body_parentid[body]
    return m.body(body).name


def check_penetration(c, d: mujoco.MjData) -> list[Reason]:
    m = c.model
    worst: dict[str, tuple[float, str]] = {}
    for i in range(d.ncon):
        con = d.contact[i]
        a = _owner(m, m.geom_bodyid[con.geom1])
        b = _owner(m, m.geom_bodyid[con.geom2])
        if "gripper" in (a, b) or a == b:
            continue
        if -con.dist > PEN_TOL and -con.dist > worst.get(a, (0.0, ""))[0]:
            worst[a] = (-float(con.dist), b)
    return [
        Reason("penetration", a, depth, f"{a} and {b} overlap by {depth:.4f} m")
        for a, (depth, b) in worst.items()
    ]


def _movable(c) -> list[tuple[str, int]]:
    """(object, qpos address) of every movable object."""
    m = c.model
    out = []
    for o in c.scene.objects:
        if not c.scene.attributes[o.name]["fixture"]:
            out.append((o.name, int(m.jnt_qposadr[m.joint(f"{o.name}/free").id])))
    return out


def check_placement(c, d: mujoco.MjData) -> list[Reason]:
    t = c.scene.table
    lo, hi = reach_box()
    out = []
    for name, adr in _movable(c):
        p = d.qpos[adr : adr + 3]
        over = max(abs(p[0] - t["x"]) - t["half_x"], abs(p[1] - t["y"]) - t["half_y"], -p[2] - 0.03)
        if over > 0:
            out.append(
                Reason("off_table", name, float(over), f"{name} is {over:.3f} m off the table")
            )
        wrist = p + np.array([0.0, 0.0, robot.TCP_OFFSET])
        out_by = float(np.linalg.norm(np.maximum(lo - wrist, 0) + np.maximum(wrist - hi, 0)))
        if out_by > 0.0:
            out.append(
                Reason("unreachable", name, out_by, f"{name} is {out_by:.3f} m outside reach")
            )
    return out


def _tilt(qa: np.ndarray, qb: np.ndarray) -> float:
    za, zb = np.zeros(9), np.zeros(9)
    mujoco.mju_quat2Mat(za, qa)
    mujoco.mju_quat2Mat(zb, qb)
    return float(np.arccos(np.clip(za.reshape(3, 3)[:, 2] @ zb.reshape(3, 3)[:, 2], -1, 1)))


def check_stability(c) -> list[Reason]:
    m = c.model
    d = mujoco.MjData(m)
    d.qpos[:] = c.init_qpos
    d.ctrl[:] = c.init_ctrl
    q0 = d.qpos.copy()
    for _ in range(round(STABLE_S / m.opt.timestep)):
        mujoco.mj_step(m, d)
    out = []
    for name, adr in _movable(c):
        move = float(np.linalg.norm(d.qpos[adr : adr + 3] - q0[adr : adr + 3]))
        tilt = _tilt(q0[adr + 3 : adr + 7], d.qpos[adr + 3 : adr + 7])
        if not math.isfinite(move) or move > STABLE_MOVE or tilt > STABLE_TILT:
            out.append(
                Reason("unstable", name, move, f"{name} moves {move:.3f} m, tilts {tilt:.2f} rad")
            )
    return out


@dataclasses.dataclass
class Report:
    verdict: Verdict
    init_atoms: list[tuple[tuple[str, ...], bool]]  # LIBERO :init condition -> holds now


def verify_task_state(c) -> Report:
    """All checks on one compiled LIBERO scene (one task, one initial state). Host code: the
    predicates here are `reference.Reference` (LIBERO's rules on MjData)."""
    p = c.scene.task["params"]
    task = load_task(p["suite"], p["task"])
    d = mujoco.MjData(c.model)
    d.qpos[:] = c.init_qpos
    d.ctrl[:] = c.init_ctrl
    mujoco.mj_forward(c.model, d)
    reasons = check_penetration(c, d) + check_placement(c, d) + check_stability(c)
    ref = Reference(task, c.model)
    init = [(a, ref.holds(d, a)) for a in P.checkable_init_atoms(task)]
    for a, ok in init:
        if not ok and a[0] in ("open", "close", "turnon", "turnoff"):
            reasons.append(Reason("init_atoms", a[1], 1.0, f"LIBERO's :init {a} does not hold"))
    if all(ref.holds(d, a) for a in task.problem.goal):
        reasons.append(Reason("solved", "goal", 1.0, "the goal holds at t = 0"))
    return Report(Verdict(not reasons, reasons), init)

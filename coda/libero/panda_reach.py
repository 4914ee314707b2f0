"""The Panda's elbow past its peak reach, and the way out of it (LIBERO's scripted planner).

The Panda's shoulder-to-wrist distance peaks at elbow (joint 4) -0.45 rad and falls again
towards the joint's limit, -0.07 (0.7196 m -> 0.7053, read off the model). An arm pulled past
the peak cannot bring its wrist back in: that needs the elbow past its limit, and OSC, moving
by the local Jacobian, presses it there (kitchen 2's front bowl, taken low at the table's far
edge, stood still on its carry back until the move timed out). `unfold` moves the hand
straight out from the shoulder first, until the elbow is back at the peak; OSC's nullspace
pull bends it on from there. `panda_planner.PandaPickPlace` asks for it at every step.
"""

from __future__ import annotations

import mujoco
import numpy as np

from coda.libero import panda as PD

ELBOW_PEAK = -0.45  # rad
ELBOW_TRAPPED = -0.30  # rad: an elbow above this is past the peak
ELBOW_UNFOLDED = -0.42  # rad: back to the peak (OSC's nullspace pull bends it on from there)
UNFOLD_STEPS = 40  # steps the hand may move out for it
INWARD = 0.01  # m: a grasp this much nearer the shoulder than the hand needs the wrist in
SHOULDER = "robot0_link2"  # the body whose origin is the shoulder (joints 1 and 2)
ELBOW = PD.ARM_JOINTS.index("robot0_joint4")  # the elbow's place among the arm's joints


def unfold(env, d: mujoco.MjData, plan) -> np.ndarray | None:
    """The action's position part [3] moving the hand straight out from the shoulder, at its
    height, while the elbow is past its peak: with the object lifted (phases 5, 6, 8), or on
    the way down to the grasp (phase 2) while the grasp (`plan.aim`) still lies nearer the
    shoulder than the hand (down beside an overhang, then in at the grasp's height: kitchen
    10's pudding, taken low and far); None otherwise. Once per plan for each
    (`plan.unfold`, `plan.reach_unfold`: steps spent, -1 never), for at most `UNFOLD_STEPS`."""
    site = d.site_xpos[env.idx.site]
    away = site[:2] - d.body(SHOULDER).xpos[:2]
    away = away / np.linalg.norm(away)
    if plan.phase == 2:
        key = "reach_unfold"
        inward = plan.aim is not None and float((plan.aim[:2] - site[:2]) @ away) < -INWARD
    elif plan.phase in (5, 6, 8):
        key, inward = "unfold", True
    else:
        return None
    n, elbow = getattr(plan, key), d.qpos[env.idx.qpos[ELBOW]]
    if n < 0:
        if elbow <= ELBOW_TRAPPED or not inward:
            return None
        n = 0
    if n >= UNFOLD_STEPS or elbow < ELBOW_UNFOLDED:
        setattr(plan, key, UNFOLD_STEPS)  # done: once per plan
        return None
    setattr(plan, key, n + 1)
    return np.r_[away, 0.0]

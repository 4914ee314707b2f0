"""A floating parallel-jaw gripper with 6-DoF end-effector position control.

Action convention (LIBERO / pi0.5 style), 7-D, every component in [-1, 1]:
  a[0:3]  Δxyz of the end-effector target, scaled by `MAX_DPOS` metres per control step;
  a[3:6]  Δ(roll, pitch, yaw) of the target, scaled by `MAX_DROT` radians per control step;
  a[6]    gripper command: -1 fully open, +1 fully closed (absolute, not a delta).
The target is clipped to `TARGET_LOW/HIGH` (the workspace) and tracked by position servos at the
physics rate; one control step holds the target for `SUBSTEPS` physics steps of `TIMESTEP` s.

Actuated joints, in ctrl order: x, y, z (slides, world frame, metres), yaw, pitch, roll (hinges,
radians, applied in that order), left finger, right finger (slides, opening half-width, metres).
The tool centre point (site "tcp") lies between the fingertips, `TCP_OFFSET` below the wrist.
The gripper is gravity-compensated, so the servos track without steady-state sag.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

TIMESTEP = 0.005  # s, physics step
SUBSTEPS = 8  # physics steps per control step -> 25 Hz control
CONTROL_DT = TIMESTEP * SUBSTEPS
ACTION_DIM = 7
MAX_DPOS = 0.02  # m per control step (0.5 m/s)
MAX_DROT = 0.1  # rad per control step
FINGER_OPEN = 0.045  # m, opening half-width at -1 (max object width 9 cm)
FINGER_CLOSED = 0.0
TCP_OFFSET = 0.074  # m below the wrist origin (pads reach 1 cm below the tcp)
FINGER_HALF = np.array([0.008, 0.007, 0.03])  # finger pad box half extents
PALM_HALF = np.array([0.015, 0.06, 0.012])  # palm box half extents (its length along y)
NU = 8

#                       x     y     z    yaw   pitch  roll
TARGET_LOW = np.array([0.10, -0.45, 0.02, -3.14, -1.2, -1.2], np.float32)
TARGET_HIGH = np.array([0.90, 0.45, 0.60, 3.14, 1.2, 1.2], np.float32)
HOME = np.array([0.30, 0.0, 0.30, 0.0, 0.0, 0.0], np.float32)

_KP_POS, _KV_POS = 3000.0, 85.0  # ~critically damped for the 0.6 kg wrist
_KP_ROT, _KV_ROT = 60.0, 6.0
_KP_FINGER = 600.0


def add_gripper(spec: mujoco.MjSpec) -> None:
    """Adds the gripper body, its joints, actuators and the tcp site to `spec`."""
    wrist = spec.worldbody.add_body(name="gripper", pos=[0, 0, 0], gravcomp=1)
    for name, jtype, axis, rng in [
        ("x", mujoco.mjtJoint.mjJNT_SLIDE, [1, 0, 0], (TARGET_LOW[0], TARGET_HIGH[0])),
        ("y", mujoco.mjtJoint.mjJNT_SLIDE, [0, 1, 0], (TARGET_LOW[1], TARGET_HIGH[1])),
        ("z", mujoco.mjtJoint.mjJNT_SLIDE, [0, 0, 1], (TARGET_LOW[2] - 0.05, TARGET_HIGH[2])),
        ("yaw", mujoco.mjtJoint.mjJNT_HINGE, [0, 0, 1], (-3.3, 3.3)),
        ("pitch", mujoco.mjtJoint.mjJNT_HINGE, [0, 1, 0], (-1.3, 1.3)),
        ("roll", mujoco.mjtJoint.mjJNT_HINGE, [1, 0, 0], (-1.3, 1.3)),
    ]:
        j = wrist.add_joint(name=f"gripper/{name}", type=jtype, axis=axis, range=list(rng))
        j.limited = True
        j.armature = 0.01
    palm = wrist.add_geom(name="gripper/palm", type=mujoco.mjtGeom.mjGEOM_BOX, size=list(PALM_HALF))
    palm.pos = [0, 0, -PALM_HALF[2]]
    palm.mass = 0.4
    palm.rgba = [0.3, 0.3, 0.35, 1]
    fz = -0.024 - FINGER_HALF[2]  # finger centre below the palm
    for side, sign in (("left", 1.0), ("right", -1.0)):
        f = wrist.add_body(name=f"gripper/{side}", pos=[0, 0, 0], gravcomp=1)
        j = f.add_joint(
            name=f"gripper/{side}_finger",
            type=mujoco.mjtJoint.mjJNT_SLIDE,
            axis=[0, sign, 0],
            range=[FINGER_CLOSED, FINGER_OPEN],
        )
        j.limited = True
        j.armature = 0.005
        j.damping = [1.0, 0.0, 0.0]
        g = f.add_geom(
            name=f"gripper/{side}_pad", type=mujoco.mjtGeom.mjGEOM_BOX, size=list(FINGER_HALF)
        )
        g.pos = [0, sign * FINGER_HALF[1], fz]
        g.mass = 0.05
        g.friction = [1.5, 0.01, 0.0002]
        g.solref = [0.01, 1.0]  # stiffer than the default so a firm grip does not sink in
        g.solimp = [0.95, 0.99, 0.001, 0.5, 2.0]
        g.rgba = [0.2, 0.2, 0.2, 1]
    site = wrist.add_site(name="tcp", pos=[0, 0, -TCP_OFFSET])
    site.size = [0.005, 0.005, 0.005]

    for k, name in enumerate(["x", "y", "z", "yaw", "pitch", "roll"]):
        a = spec.add_actuator(
            name=f"act/{name}", target=f"gripper/{name}", trntype=mujoco.mjtTrn.mjTRN_JOINT
        )
        kp, kv = (_KP_POS, _KV_POS) if k < 3 else (_KP_ROT, _KV_ROT)
        a.set_to_position(kp=kp, kv=kv)
        a.ctrlrange = [float(TARGET_LOW[k]), float(TARGET_HIGH[k])]
        a.ctrllimited = True
        a.forcerange = [-300, 300] if k < 3 else [-30, 30]
        a.forcelimited = True
    for side in ("left", "right"):
        a = spec.add_actuator(
            name=f"act/{side}", target=f"gripper/{side}_finger", trntype=mujoco.mjtTrn.mjTRN_JOINT
        )
        a.set_to_position(kp=_KP_FINGER, kv=10.0)
        a.ctrlrange = [FINGER_CLOSED, FINGER_OPEN]
        a.ctrllimited = True
        a.forcerange = [-15, 15]
        a.forcelimited = True


def home_ctrl() -> np.ndarray:
    """ctrl vector [NU] at the home pose with the gripper open."""
    return np.concatenate([HOME, [FINGER_OPEN, FINGER_OPEN]]).astype(np.float32)


def apply_actions(target: jnp.ndarray, actions: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Integrates a chunk of normalised actions into servo targets.

    target: [..., 6] current pose target; actions: [..., H, 7] in [-1, 1].
    Returns (ctrl [..., H, NU], final target [..., 6]). Clipping is sequential, as a real
    controller would do it, so an action pushing against a limit does not accumulate.
    """
    a = jnp.clip(jnp.nan_to_num(actions), -1.0, 1.0)
    scale = jnp.array([MAX_DPOS] * 3 + [MAX_DROT] * 3, jnp.float32)
    lo, hi = jnp.asarray(TARGET_LOW), jnp.asarray(TARGET_HIGH)
    # rpy action order -> joint order (yaw, pitch, roll)
    delta = a[..., :6] * scale
    delta = jnp.concatenate(
        [delta[..., :3], delta[..., 5:6], delta[..., 4:5], delta[..., 3:4]], axis=-1
    )

    def step(t, d):
        t = jnp.clip(t + d, lo, hi)
        return t, t

    d_t = jnp.moveaxis(delta, -2, 0)  # [H, ..., 6]
    final, targets = jax.lax.scan(step, target, d_t)
    targets = jnp.moveaxis(targets, 0, -2)  # [..., H, 6]
    finger = FINGER_OPEN + (FINGER_CLOSED - FINGER_OPEN) * (a[..., 6:7] + 1.0) / 2.0
    ctrl = jnp.concatenate([targets, finger, finger], axis=-1)
    return ctrl, final

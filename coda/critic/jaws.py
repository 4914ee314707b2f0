"""What the jaws can hold and what the policy asked of them, read from an episode.

The offline critic's cause rules (`evidence.py`) use these to tell a grip that could not hold
the object (capacity, width) from a policy that let go (its gripper commands) or lost it.
"""

from __future__ import annotations

import numpy as np

from coda.critic.episode import Episode
from coda.sim import robot

OPENED = 0.005  # m the measured gap grew as the grasp ended: let go (traces without actions)
GRAVITY = 9.81


def grip_capacity(ep: Episode) -> tuple[float, float, float]:
    """(capacity kg, friction μ, finger force N) of a two-pad friction grip on the object."""
    m = ep.compiled.model
    pad = float(m.geom("gripper/left_pad").friction[0])
    force = float(m.actuator("act/left").forcerange[1])
    mu = max(pad, float(ep.scene.attributes.get(ep.roles.obj_name, {}).get("friction", 0.0)))
    return 2.0 * mu * force / GRAVITY, mu, force


def object_mass(ep: Episode) -> float:
    """The manipulated object's mass (kg): its scene attribute where the scene sets one (our
    families), else the compiled model's mass of its body and what hangs on it (a LIBERO
    object, whose attributes name its category, not its mass)."""
    a = ep.scene.attributes.get(ep.roles.obj_name, {})
    if "mass" in a:
        return float(a["mass"])
    m = ep.compiled.model
    return float(m.body_subtreemass[m.body(ep.compiled.layout.body_names[ep.roles.obj]).id])


def object_width(ep: Episode) -> float:
    """Narrowest horizontal extent (m) of the object's bounding box: what parallel jaws span."""
    half = np.asarray(ep.states.body_half)[0, ep.roles.obj]  # [3]
    return float(2.0 * min(half[0], half[1]))


def max_opening(ep: Episode, until: int) -> float:
    """Widest finger gap (m) the policy asked for in the chunks up to endpoint `until`: from
    the gripper commands in its actions (a[6] = -1 fully open); without actions, the widest
    measured gap at endpoints 1..until (t=0 is the home pose, open before any command; a
    measured gap cannot tell a wide object forcing the pads apart from an open gripper)."""
    if ep.actions is not None and until >= 1:
        g = np.clip(np.asarray(ep.actions)[:until, :, 6], -1.0, 1.0)  # [C', H]
        setpoint = robot.FINGER_OPEN + (robot.FINGER_CLOSED - robot.FINGER_OPEN) * (g + 1) / 2
        return float(2.0 * setpoint.max())
    opening = ep.features["opening"]
    return float(opening[1 : until + 1].max()) if until >= 1 else float(opening[0])


def commanded_gap(ep: Episode, chunk: int) -> float | None:
    """Widest pad gap (m) the policy's gripper commands asked for during chunk `chunk` (the one
    ending at endpoint chunk + 1), or None without actions."""
    if ep.actions is None or not 0 <= chunk < len(ep.actions):
        return None
    g = np.clip(np.asarray(ep.actions)[chunk, :, 6], -1.0, 1.0)  # [H]
    setpoint = robot.FINGER_OPEN + (robot.FINGER_CLOSED - robot.FINGER_OPEN) * (g + 1) / 2
    return float(2.0 * setpoint.max())


def let_go(ep: Episode, lost: int, num: dict[str, float] | None = None) -> bool:
    """Whether the grasp that ended at endpoint `lost` (no pad on the object there) ended by
    a deliberate release: the policy commanded the jaws open wider than the object in the chunk
    that ended there; without actions, the measured gap grew by more than OPENED from the
    endpoint before (the jaws opened; a lost object leaves them closing instead). Otherwise
    the object left jaws still closed on it (lost: a slip or a drop). Adds the gap that
    decided it to `num`."""
    width = object_width(ep)
    cmd = commanded_gap(ep, lost - 1)
    if num is not None:
        num["object_width_m"] = width
    if cmd is not None:
        if num is not None:
            num["commanded_gap_at_loss_m"] = cmd
        return cmd >= width
    opening = ep.features["opening"]
    grew = float(opening[lost] - opening[max(lost - 1, 0)])
    if num is not None:
        num["gap_growth_at_loss_m"] = grew
    return grew > OPENED

"""The scripted planner's vocabulary, shared by the families' waypoint functions.

A family describes its planner as ordered `Waypoint`s (gripper command, speed, tolerance, settle
time) plus a pure-JAX function giving each phase's tcp pose from the chunk-start state; the
generic `coda.sim.planner.ScriptedPlanner` steps through them.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from coda.sim import geometry as G

OPEN, CLOSE = -1.0, 1.0


@dataclasses.dataclass(frozen=True)
class Waypoint:
    """One phase: tcp position, yaw, gripper command, speed, tolerance, settle time."""

    name: str
    grip: float
    speed: float = 1.0  # fraction of the max per-step motion
    tol: float = 0.006  # m
    settle: int = 0  # control steps to hold once the target reached the waypoint (servo lag)


def wrap(a: jnp.ndarray, period: float = 2 * jnp.pi) -> jnp.ndarray:
    """Angle(s) wrapped to [-period/2, period/2)."""
    return (a + period / 2) % period - period / 2


def grasp_yaw(q: jnp.ndarray) -> jnp.ndarray:
    """Object heading folded to [-π/2, π/2): parallel jaws are symmetric under a half turn.
    q [..., 4] -> [...]."""
    return wrap(G.yaw_of(q), jnp.pi)


def top_np(xpos: np.ndarray, xmat: np.ndarray, half: np.ndarray) -> float:
    """Highest point of a body's bounding box from MuJoCo's xpos [3] / xmat [9] (as
    `geometry.top`), for the numpy mirrors of the waypoints."""
    return float(xpos[2] + np.abs(np.asarray(xmat).reshape(3, 3)[2]) @ half)

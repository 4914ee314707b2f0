"""The collision geometry of a compiled LIBERO model (host side, numpy): which geoms of a body
collide, their half extents in a frame, a body's collision box. LIBERO's assets collide through
boxes; their meshes are visual only. Read by `scene` (the tracked bodies' `body_half`) and the
planner's host-side geometry (`planner_geometry`, `planner_articulated`, `planner_insert`)."""

from __future__ import annotations

import mujoco
import numpy as np


def geom_half_extents(m: mujoco.MjModel, g: int, rot: np.ndarray) -> np.ndarray:
    """Half extents [3] of geom `g` along the axes of a frame in which its rotation is `rot`
    [3, 3]: exact for boxes, the bounding sphere for every other shape."""
    if m.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX:
        return np.abs(rot) @ m.geom_size[g]
    return np.full(3, m.geom_rbound[g])


def collision_geoms(m: mujoco.MjModel, body: int) -> np.ndarray:
    """Geom ids of `body` that collide (visual-only geoms left out)."""
    g = np.nonzero(m.geom_bodyid == body)[0]
    return g[(m.geom_contype[g] != 0) | (m.geom_conaffinity[g] != 0)]


def body_box(m: mujoco.MjModel, d: mujoco.MjData, body: int) -> tuple | None:
    """(lo [3], hi [3]) of a body's collision geoms in its own frame; None without any."""
    rot_b = d.xmat[body].reshape(3, 3)
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for g in collision_geoms(m, body):
        c = rot_b.T @ (d.geom_xpos[g] - d.xpos[body])
        ext = geom_half_extents(m, g, rot_b.T @ d.geom_xmat[g].reshape(3, 3))
        lo, hi = np.minimum(lo, c - ext), np.maximum(hi, c + ext)
    return (lo, hi) if np.isfinite(lo).all() else None


def body_half(m: mujoco.MjModel, d: mujoco.MjData, body: int) -> np.ndarray:
    """Half extents [3] of a body's collision geoms' box around its origin (body frame)."""
    box = body_box(m, d, body)
    if box is None:
        return np.full(3, 1e-3)
    return np.maximum(np.maximum(-box[0], box[1]), 1e-3)

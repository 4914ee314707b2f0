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


def floor_ceiling(m: mujoco.MjModel, d: mujoco.MjData, body: int, c: np.ndarray) -> tuple:
    """Over point `c` [3], of `body`'s collision geoms: (the highest top below c or -inf, the
    lowest underside above it or inf, that geom's (centre [3], half extents [3]) or None)."""
    floor, ceiling, roof = -np.inf, np.inf, None
    for g in collision_geoms(m, body):
        gc, ext = d.geom_xpos[g], geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3))
        if (np.abs(gc[:2] - c[:2]) >= ext[:2]).any():  # not over the point
            continue
        if gc[2] + ext[2] <= c[2]:
            floor = max(floor, float(gc[2] + ext[2]))
        elif gc[2] - ext[2] >= c[2] and gc[2] - ext[2] < ceiling:
            ceiling, roof = float(gc[2] - ext[2]), (gc.copy(), ext)
    return floor, ceiling, roof


def region_axes(d: mujoco.MjData, site: int, half: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(axes [2, 2], reach [2]) of a region on the table: its site's two most horizontal axes
    as unit xy columns, and the region's half extents along them. LIBERO turns some region
    sites on end (the shelf's and the caddy's front: half sizes (0.035, 0.086, 0.156) in the
    site's frame, (0.156, 0.086, 0.035) in the world), so the site's first two axes are not
    always the horizontal ones."""
    rot = d.site_xmat[site].reshape(3, 3)
    cols = sorted(range(3), key=lambda i: abs(rot[2, i]))[:2]
    axes = np.stack([rot[:2, i] / max(float(np.linalg.norm(rot[:2, i])), 1e-9) for i in cols], 1)
    return axes, np.array([float(half[i]) for i in cols])


WALL_REACH = 0.03  # m: a container's walls are looked for this far outside its region


def between_walls(m: mujoco.MjModel, d: mujoco.MjData, site: int, half: np.ndarray) -> np.ndarray:
    """The xy [2] midway between the inner faces of the walls round an In region (site
    `site`, half extents `half` in its frame): its owner's collision geoms that cross the
    region's mid-height, nearest the site's centre on either side along each of the site's two
    most horizontal axes (within the region's extent plus `WALL_REACH`). Along an axis without
    a wall on both sides, the site's own coordinate. A caddy's compartment is not centred on
    its region's site: an object nearly as long as the compartment is wide, put at the site,
    came down on the top of one wall."""
    c = d.site_xpos[site]
    frame, reach = region_axes(d, site, half)
    axes = [frame[:, 0], frame[:, 1]]
    faces = [[-np.inf, np.inf], [-np.inf, np.inf]]  # per axis: (the - side's, the + side's)
    for g in collision_geoms(m, int(m.site_bodyid[site])):
        ext = geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3))  # world-aligned
        rel = d.geom_xpos[g] - c
        if abs(rel[2]) >= ext[2]:  # not across the region's mid-height: a floor, a lid
            continue
        along = [float(rel[:2] @ u) for u in axes]
        size = [float(np.abs(ext[:2]) @ np.abs(u)) for u in axes]
        for k in (0, 1):
            o = 1 - k
            if (
                abs(along[o]) >= size[o] + reach[o]
                or abs(along[k]) > reach[k] + WALL_REACH + size[k]
            ):
                continue  # beside the region along the other axis, or too far along this one
            if along[k] - size[k] >= 0:
                faces[k][1] = min(faces[k][1], along[k] - size[k])
            elif along[k] + size[k] <= 0:
                faces[k][0] = max(faces[k][0], along[k] + size[k])
    mid = [(lo + hi) / 2 if np.isfinite(lo + hi) else 0.0 for lo, hi in faces]
    return c[:2] + mid[0] * axes[0] + mid[1] * axes[1]

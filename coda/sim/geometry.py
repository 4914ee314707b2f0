"""Geometry and contact helpers over `SimState`, shared by ν and Text2potential potentials.

All helpers are pure jnp, work on any leading batch dims, and take body/joint indices that are
static Python ints (resolve roles with a `SymbolTable` first). Boolean helpers return bool
arrays; `*_progress` helpers return smooth values in [0, 1] for potentials.
"""

from __future__ import annotations

import jax.numpy as jnp

from coda.sim.state import FLOOR, LEFT, N_FIXED_ENTITIES, RIGHT, SimState

TABLE_Z = 0.0


# ----------------------------------------------------------------------------- frames


def quat_to_mat(q: jnp.ndarray) -> jnp.ndarray:
    """[..., 4] (w, x, y, z) -> [..., 3, 3]."""
    q = q / (jnp.linalg.norm(q, axis=-1, keepdims=True) + 1e-9)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return jnp.stack(
        [
            jnp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            jnp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def yaw_of(q: jnp.ndarray) -> jnp.ndarray:
    """Heading angle (rad) of the body x axis projected on the table plane. [..., 4] -> [...]."""
    m = quat_to_mat(q)
    return jnp.arctan2(m[..., 1, 0], m[..., 0, 0])


def to_local(state: SimState, i: int, p: jnp.ndarray) -> jnp.ndarray:
    """World point(s) p [..., 3] expressed in body i's frame."""
    m = quat_to_mat(state.body_quat[..., i, :])
    return jnp.einsum("...ji,...j->...i", m, p - state.body_pos[..., i, :])


def site_frame(state: SimState, site: tuple) -> tuple[jnp.ndarray, jnp.ndarray]:
    """World centre [..., 3] and rotation [..., 3, 3] of a site (body, pos, quat, ...) fixed to
    tracked body `body` (`SymbolTable.site`; body -1: the world)."""
    body = site[0]
    p, q = jnp.asarray(site[1], state.ee_pos.dtype), jnp.asarray(site[2], state.ee_pos.dtype)
    if body < 0:
        lead = state.ee_pos.shape[:-1]
        return jnp.broadcast_to(p, lead + (3,)), jnp.broadcast_to(quat_to_mat(q), lead + (3, 3))
    rb = quat_to_mat(state.body_quat[..., body, :])
    return state.body_pos[..., body, :] + jnp.einsum("...ij,j->...i", rb, p), rb @ quat_to_mat(q)


def site_pos(state: SimState, site: tuple) -> jnp.ndarray:
    """World centre [..., 3] of a site (`site_frame`)."""
    return site_frame(state, site)[0]


def site_local(state: SimState, p: jnp.ndarray, site: tuple) -> jnp.ndarray:
    """World point(s) p [..., 3] in a site's frame (its centre at 0, axes along its box)."""
    ps, rs = site_frame(state, site)
    return jnp.einsum("...ji,...j->...i", rs, p - ps)


def site_extent(state: SimState, site: tuple) -> jnp.ndarray:
    """World-axis half extents [..., 3] of a site's box (|R| @ half size: its world bounding
    box, as LIBERO's In test reads a region)."""
    h = jnp.asarray(site[3], state.ee_pos.dtype)
    return jnp.abs(jnp.einsum("...ij,j->...i", site_frame(state, site)[1], h))


def site_half(state: SimState, site: tuple) -> jnp.ndarray:
    """A site's half size [..., 3] along its own axes."""
    return jnp.broadcast_to(jnp.asarray(site[3], state.ee_pos.dtype), state.ee_pos.shape)


def pos(state: SimState, i: int) -> jnp.ndarray:
    return state.body_pos[..., i, :]


def half(state: SimState, i: int) -> jnp.ndarray:
    return state.body_half[..., i, :]


# ----------------------------------------------------------------------------- metrics


def distance(a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    return jnp.linalg.norm(a - b, axis=-1)


def xy_distance(a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    return jnp.linalg.norm(a[..., :2] - b[..., :2], axis=-1)


def body_distance(state: SimState, a: int, b: int) -> jnp.ndarray:
    return distance(pos(state, a), pos(state, b))


def ee_distance(state: SimState, i: int) -> jnp.ndarray:
    """Distance from the tool centre point to body i's centre."""
    return distance(state.ee_pos, pos(state, i))


def bottom(state: SimState, i: int) -> jnp.ndarray:
    """Lowest point of body i's bounding box (accounts for tilt)."""
    m = quat_to_mat(state.body_quat[..., i, :])
    return pos(state, i)[..., 2] - jnp.sum(jnp.abs(m[..., 2, :]) * half(state, i), -1)


def top(state: SimState, i: int) -> jnp.ndarray:
    m = quat_to_mat(state.body_quat[..., i, :])
    return pos(state, i)[..., 2] + jnp.sum(jnp.abs(m[..., 2, :]) * half(state, i), -1)


def height(state: SimState, i: int) -> jnp.ndarray:
    """Height of body i's bottom above the table."""
    return bottom(state, i) - TABLE_Z


def lifted(state: SimState, i: int, min_height: float = 0.03) -> jnp.ndarray:
    return height(state, i) > min_height


def upright(state: SimState, i: int, tol: float = 0.35) -> jnp.ndarray:
    """Body z axis within `tol` rad of world z."""
    m = quat_to_mat(state.body_quat[..., i, :])
    return m[..., 2, 2] > jnp.cos(tol)


def face_down(state: SimState, i: int, tol: float) -> jnp.ndarray:
    """Some body axis (±x, ±y or ±z) within `tol` rad of world z: a box lies flat on one of its
    six faces. Every face is a stable resting pose of a box (a cube on any face is as stacked as
    one with +z up); a box leaning on an edge or corner is not."""
    m = quat_to_mat(state.body_quat[..., i, :])  # [..., 3, 3]; row 2 = body axes' world z
    return jnp.max(jnp.abs(m[..., 2, :]), axis=-1) > jnp.cos(tol)


def aligned(
    qa: jnp.ndarray, qb: jnp.ndarray, tol: float = 0.2, symmetry: float = jnp.pi / 2
) -> jnp.ndarray:
    """Headings of two frames agree up to a rotational symmetry (π/2 for square sections)."""
    d = yaw_of(qa) - yaw_of(qb)
    d = jnp.abs((d + symmetry / 2) % symmetry - symmetry / 2)
    return d < tol


def within_footprint(
    state: SimState, p: jnp.ndarray, i: int, margin: float = 0.0, use_inner: bool = False
) -> jnp.ndarray:
    """Point p [..., 3] lies inside body i's xy footprint (or its interior), shrunk by margin."""
    local = to_local(state, i, p)
    h = state.inner[..., i, :2] if use_inner else half(state, i)[..., :2]
    return jnp.all(jnp.abs(local[..., :2]) <= h - margin, axis=-1)


# ----------------------------------------------------------------------------- relations


def above(state: SimState, a: int, b: int, margin: float = 0.0) -> jnp.ndarray:
    """a's centre is over b's footprint and a's bottom is not below b's top (minus 1 cm)."""
    return within_footprint(state, pos(state, a), b, margin) & (
        bottom(state, a) > top(state, b) - 0.01
    )


def on_top(state: SimState, a: int, b: int, tol: float = 0.015) -> jnp.ndarray:
    """a rests on b: over b's footprint and a's bottom within `tol` of b's top surface."""
    return within_footprint(state, pos(state, a), b) & (
        jnp.abs(bottom(state, a) - top(state, b)) < tol
    )


def inside(
    state: SimState, a: int, container: int, margin: float = 0.0, floor_tol: float = 0.005
) -> jnp.ndarray:
    """a's centre lies in the container's interior, above its floor (less `floor_tol`), and a's
    bottom is below the rim. The centre (not the bounding box) decides height, so a tipped-over
    object that lies in the container still counts. Geometry only: see `predicates` for ν."""
    inner_floor = pos(state, container)[..., 2] + state.inner[..., container, 3]
    rim = top(state, container)
    ok_xy = within_footprint(state, pos(state, a), container, margin, use_inner=True)
    return ok_xy & (bottom(state, a) < rim) & (pos(state, a)[..., 2] > inner_floor - floor_tol)


def in_contact(state: SimState, ea: int, eb: int) -> jnp.ndarray:
    """Contact between entities (0 floor, 1/2 fingers, 3+i body i)."""
    return state.contact[..., ea, eb] > 0


def touching(state: SimState, a: int, b: int) -> jnp.ndarray:
    return in_contact(state, N_FIXED_ENTITIES + a, N_FIXED_ENTITIES + b)


def on_table(state: SimState, a: int) -> jnp.ndarray:
    return in_contact(state, N_FIXED_ENTITIES + a, FLOOR)


def grasped(state: SimState, a: int) -> jnp.ndarray:
    """Both finger pads touch body a."""
    e = N_FIXED_ENTITIES + a
    return in_contact(state, LEFT, e) & in_contact(state, RIGHT, e)


def fingers_off(state: SimState, a: int) -> jnp.ndarray:
    """No finger pad touches body a (stricter than `~grasped`: one pad pressing still holds)."""
    e = N_FIXED_ENTITIES + a
    return ~in_contact(state, LEFT, e) & ~in_contact(state, RIGHT, e)


def supported_on(state: SimState, a: int, b: int) -> jnp.ndarray:
    """a rests on b: a touches b, a's centre lies over b's footprint and above b's top surface.

    Contact, not a height tolerance, separates resting from hovering (an object 1.5 cm above a
    plate is not on it); the centre-over-footprint test rejects a touch from beside b."""
    return (
        touching(state, a, b)
        & within_footprint(state, pos(state, a), b)
        & (pos(state, a)[..., 2] > top(state, b))
    )


def _velocity(state: SimState, field: str, i: int, who: str) -> jnp.ndarray:
    """`state.<field>[..., i, :]`; velocities are optional in hand-built states, so say so."""
    v = getattr(state, field)
    if v is None:
        raise ValueError(f"{who} needs SimState.{field} (states from decode have it)")
    return v[..., i, :]  # [..., 3]


def linear_speed(state: SimState, i: int) -> jnp.ndarray:
    """Speed (m/s) of body i's origin."""
    return jnp.linalg.norm(_velocity(state, "body_linvel", i, "linear_speed"), axis=-1)


def angular_speed(state: SimState, i: int) -> jnp.ndarray:
    """Angular speed (rad/s) of body i."""
    return jnp.linalg.norm(_velocity(state, "body_angvel", i, "angular_speed"), axis=-1)


def tumble_speed(state: SimState, i: int) -> jnp.ndarray:
    """Angular speed (rad/s) of body i about horizontal axes (rolling, tipping, rocking)."""
    w = _velocity(state, "body_angvel", i, "tumble_speed")
    return jnp.linalg.norm(w[..., :2], axis=-1)


def at_rest(state: SimState, i: int, max_speed: float, max_tumble: float) -> jnp.ndarray:
    """Body i moves slower than `max_speed` m/s and rolls / tips slower than `max_tumble` rad/s.

    Spin about the vertical is ignored: it cannot move a resting object, and MuJoCo's default
    contacts (condim 3) have no torsional friction, so a ball released with a twist spins in
    place indefinitely while its position does not change."""
    return (linear_speed(state, i) < max_speed) & (tumble_speed(state, i) < max_tumble)


def gripper_opening(state: SimState) -> jnp.ndarray:
    """Total finger gap (m)."""
    return state.finger[..., 0] + state.finger[..., 1]


def gripper_open(state: SimState, min_gap: float = 0.06) -> jnp.ndarray:
    return gripper_opening(state) > min_gap


def joint_fraction(state: SimState, j: int) -> jnp.ndarray:
    """Articulated joint j's position as a fraction of its range, in [0, 1]."""
    lo, hi = state.joint_range[..., j, 0], state.joint_range[..., j, 1]
    return jnp.clip((state.joint_pos[..., j] - lo) / (hi - lo + 1e-9), 0.0, 1.0)


# ----------------------------------------------------------------------------- progress


def distance_progress(d: jnp.ndarray, scale: float = 0.1) -> jnp.ndarray:
    """Smooth progress in (0, 1]: 1 at d=0, decaying with distance (for potentials)."""
    return jnp.exp(-jnp.maximum(d, 0.0) / scale)


def ramp(x: jnp.ndarray, lo: float, hi: float) -> jnp.ndarray:
    """Linear ramp from 0 at lo to 1 at hi, clipped."""
    return jnp.clip((x - lo) / (hi - lo), 0.0, 1.0)


HELPERS = {
    f.__name__: f
    for f in (
        quat_to_mat,
        yaw_of,
        to_local,
        site_pos,
        site_local,
        site_extent,
        site_half,
        pos,
        half,
        distance,
        xy_distance,
        body_distance,
        ee_distance,
        bottom,
        top,
        height,
        lifted,
        upright,
        face_down,
        aligned,
        within_footprint,
        above,
        on_top,
        inside,
        in_contact,
        touching,
        on_table,
        grasped,
        fingers_off,
        supported_on,
        linear_speed,
        angular_speed,
        tumble_speed,
        at_rest,
        gripper_opening,
        gripper_open,
        joint_fraction,
        distance_progress,
        ramp,
    )
}

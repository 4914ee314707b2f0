"""A standing flat object (a book) put into a shelf's layer from the side by LIBERO's Panda.

A book stands 12.2-13.4 cm tall and a two-layer shelf's layer is 13.5 cm high under its top
board: from above, neither the hand nor the book fits (`panda_door.no_room_above`). Turned
about the fingers' closing axis by 90°, the book lies on its fore-edge as tall as it is wide
(9.8-11 cm) and goes into the layer lengthwise. `PandaShelve` takes the book by the middle of
its top edge (the hand pointing down, the fingers across its thickness), lifts it over the
other objects, carries it in front of the layer's opening (`planner_insert`'s single open side,
`u` out of it) far enough out that the turned book clears the shelf, turns the hand to point
into the opening with the fingers closing across the opening's width (the book's top edge then
faces out, its length into the shelf), lowers it to just over the layer's floor, carries it in
along -u until its centre is over the region's centre, lets go, and withdraws along +u.

The region's test (ν's In) reads the book's origin inside the region's box: LIBERO's book
origin is the middle of its bottom face, which ends at the inner end. An object that is not
upright, too thick for the fingers, or too wide for the layer turned is refused with the
reason (`shelve_stage` returns None when the region is not such a layer).
"""

from __future__ import annotations

import mujoco
import numpy as np

from coda.libero import panda_articulate as PA
from coda.libero import panda_outline as PO
from coda.libero.geoms import collision_geoms, geom_half_extents
from coda.libero.panda_wrist import wrist_closing
from coda.libero.planner_geometry import quat_matrix
from coda.libero.planner_insert import _opening

UPRIGHT = np.cos(np.deg2rad(15.0))  # the object's long axis within 15° of the vertical
MAX_THICK = 0.06  # m: the thickest object the open fingers (8 cm) take with room to spare
GRIP_DEPTH = 0.02  # m: the grasp site below the object's top edge
FLOOR_GAP = 0.008  # m: the turned object's lowest point over the layer's floor, going in
LAYER_MARGIN = 0.01  # m: the turned object's highest point under the layer's roof, at least
CLEAR = 0.03  # m: the hanging object's bottom over the tallest object while carried
TURN_OUT = 0.03  # m: the turned object's inner end outside the opening while the hand turns
ORIGIN_INSET = 0.01  # m: the object's origin inside the region's box along the way in
WITHDRAW = 0.15  # m: how far the open hand goes back out along u
BACK_GAP = 0.005  # m: the object's inner end off the back wall
SIDE_WALL_GAP = 0.015  # m: the object off the layer's side walls
HAND_BACK = 0.15  # m: the hand's reach behind the grasp site, pointing into the opening
DROPPED = 0.03  # m: the object this far from where the hand took it is no longer held


def _box(m: mujoco.MjModel, d: mujoco.MjData, geoms) -> tuple:
    """(axes [3, 3] columns: the object's height (up), width, thickness, all unit; centre [3]
    world; half extents [3] along those axes) of the box round all its collision geoms, in
    the frame of its largest geom (a book's one box; a mug's parts, handle included)."""
    g = max(geoms, key=lambda k: float(np.prod(m.geom_aabb[k, 3:])))
    rot = d.geom_xmat[g].reshape(3, 3)
    pts = PO.geom_corners(d, m, np.asarray(geoms)) @ rot  # in the largest geom's frame
    lo, hi = pts.min(0), pts.max(0)
    centre, half = rot @ ((lo + hi) / 2), (hi - lo) / 2
    up = int(np.argmax(np.abs(rot[2])))
    rest = [k for k in range(3) if k != up]
    wide, thin = sorted(rest, key=lambda k: -half[k])
    axes = np.stack([rot[:, up] * np.sign(rot[2, up]), rot[:, wide], rot[:, thin]], 1)
    return axes, centre, half[[up, wide, thin]]


def _others(env, d: mujoco.MjData, obj: int) -> list:
    """(lo [3], hi [3]) world boxes of the task's objects other than body `obj`."""
    m = env.model
    return [PO.world_box(d, m, PO.body_geoms(m, n))
            for n, _ in env.pt.task.problem.objects if m.body(n).id != obj]  # fmt: skip


def _carry_z(others: list, grasp: np.ndarray, length: float) -> float:
    """The grasp site's height that carries an object hanging `length` under it CLEAR over
    every other object's top (and no lower than where it was taken)."""
    return max([float(hi[2]) for _, hi in others] + [float(grasp[2])]) + length + CLEAR


def _frame(approach: np.ndarray, closing: np.ndarray) -> np.ndarray:
    return np.stack([approach, closing, np.cross(approach, closing)], 1)


def _layer(env, d: mujoco.MjData, atom: tuple):
    """(region centre [3], floor z, roof z, opening tuple of `planner_insert._opening`, front
    edge's distance from the centre along u, region half extents [3] world) or None."""
    m, names = env.model, env.pt.layout.body_names
    owner = m.body(names[atom[2]]).id
    boxes = [
        (d.geom_xpos[g].copy(), geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3)))
        for g in collision_geoms(m, owner)
    ]
    rb = d.xmat[owner].reshape(3, 3)
    c = d.xpos[owner] + rb @ np.asarray(atom[3])
    rs = rb @ quat_matrix(atom[4])
    size = np.abs(rs) @ np.asarray(atom[5])
    over = [(bc, be) for bc, be in boxes if np.all(np.abs(bc[:2] - c[:2]) < be[:2])]
    roofs = [float(bc[2] - be[2]) for bc, be in over if bc[2] - be[2] > c[2]]
    floors = [float(bc[2] + be[2]) for bc, be in over if bc[2] + be[2] <= c[2]]
    if not roofs:
        return None
    roof = min(roofs)
    floor = max(floors) if floors else float(c[2] - size[2])  # the table under the owner
    room = _opening(boxes, c, (roof + floor) / 2)
    if room is None:
        return None
    u = room[0]
    edge = max(
        float((bc[:2] - c[:2]) @ u + np.abs(be[:2]) @ np.abs(u))
        for bc, be in over
        if bc[2] - be[2] > c[2]
    )
    return c, floor, roof, room, edge, size


def _along(origin_up: float, half_h: float, size, u2, back: float) -> float | None:
    """Where the turned object's centre ends along u from the region's centre: 0 unless its
    origin (`origin_up` from the centre along its height, which turns to +u) would leave the
    region's box (within ORIGIN_INSET) or its inner end meet the back wall; None if both
    cannot hold."""
    reg_u = float(np.abs(size[:2]) @ np.abs(u2)) - ORIGIN_INSET
    lo = half_h - (back - BACK_GAP)  # the least offset that keeps the inner end off the wall
    lo_o, hi_o = -reg_u - origin_up, reg_u - origin_up  # the origin's bounds
    a, b = max(lo, lo_o), hi_o
    if a > b:
        return None
    return float(min(max(0.0, a), b))


def _side(others, c, u2, lat2, bounds, half_t, way, floor) -> float:
    """The lateral offset (along lat) from the region's centre at which the way down in front
    of the opening is clear: the hand (PA.HAND_SPAN either side of the fingers) from the
    opening's front edge out to past where it turns, above the layer's floor, meets none of
    the other objects' boxes; the nearest such offset to the centre within the region's side
    walls, else 0. `way`: (the front edge's, the turning grasp site's) distance along u."""
    edge, out = way
    lo, hi = bounds[0] + half_t + SIDE_WALL_GAP, bounds[1] - half_t - SIDE_WALL_GAP
    for s in sorted(np.arange(lo, hi + 1e-9, 0.01), key=abs):
        clear = True
        for blo, bhi in others:
            corners = np.array([[x, y] for x in (blo[0], bhi[0]) for y in (blo[1], bhi[1])])
            pu, pl = (corners - c[:2]) @ u2, (corners - c[:2]) @ lat2
            if (
                pu.max() > edge
                and pu.min() < out + HAND_BACK
                and pl.max() > s - PA.HAND_SPAN
                and pl.min() < s + PA.HAND_SPAN
                and bhi[2] > floor
            ):
                clear = False
                break
        if clear:
            return float(s)
    return 0.0


class PandaShelve(PA._Replanned):
    """A standing book turned on its fore-edge and slid into a shelf's layer (module doc)."""

    n_phases = 12
    signed = True

    def __init__(self, env, atom: tuple, d: mujoco.MjData, layer: tuple):
        super().__init__(env, atom)
        self.layer = layer
        self._plan(env, d)

    def _plan(self, env, d: mujoco.MjData) -> None:
        """The grasp, turn and way in from the state `d`; ValueError with the reason if the
        object cannot go in this way."""
        atom, m, names = self.atom, env.model, env.pt.layout.body_names
        what = f"{names[atom[1]]} into {names[atom[2]]}"
        c, floor, roof, room, edge, size = self.layer
        obj = m.body(names[atom[1]]).id
        geoms = PO.body_geoms(m, names[atom[1]])
        axes, centre, half = _box(m, d, geoms)
        if axes[2, 0] < UPRIGHT or half[0] < half[1]:
            raise ValueError(f"{what}: it is not a flat object standing on its short edge")
        if 2 * half[2] > MAX_THICK:
            raise ValueError(f"{what}: {2 * half[2]:.3f} m thick, the fingers take {MAX_THICK}")
        if floor + FLOOR_GAP + 2 * half[1] > roof - LAYER_MARGIN:
            raise ValueError(
                f"{what}: {2 * half[1]:.3f} m wide, turned it does not fit the layer's "
                f"{roof - floor:.3f} m"
            )
        u2, back, lat2, lat_hi, lat_lo = room
        u, lat = np.r_[u2, 0.0], np.r_[lat2, 0.0]
        self.obj, self.u = obj, u
        self.grasp = centre + axes[:, 0] * (half[0] - GRIP_DEPTH)
        self.c0 = wrist_closing(env, d, PA.horizontal(axes[:, 2]))
        f0 = _frame(PA.DOWN, self.c0)
        # the turned hand points into the opening, closing across its width: of the two signs,
        # the one the smaller turn reaches (the larger trace of the relative rotation)
        f1 = max((_frame(-u, c1) for c1 in (lat, -lat)), key=lambda f: float(np.trace(f @ f0.T)))
        self.c1 = f1[:, 1]
        rel = f0.T @ (centre - self.grasp)  # the object's centre in the hand's frame
        length = 2 * float(half[0]) - GRIP_DEPTH  # the grasp site to the object's far end
        along = _along(float((d.xpos[obj] - centre) @ axes[:, 0]), half[0], size, u2, back)
        if along is None:
            raise ValueError(f"{what}: {2 * half[0]:.3f} m long, its origin cannot end inside")
        others = _others(env, d, obj)
        self.carry_z = _carry_z(others, self.grasp, length)
        out = edge + length + TURN_OUT  # the grasp site's distance out of the centre, turning
        side = _side(others, c, u2, lat2, (-lat_lo, lat_hi), half[2], (edge, out), floor)
        want = np.r_[c[:2] + u2 * along + lat2 * side, floor + FLOOR_GAP + half[1]]
        self.end = want - f1 @ rel
        turn_xy = self.end[:2] + u2 * (out - float((self.end[:2] - c[:2]) @ u2))
        self.turn = np.r_[turn_xy, self.carry_z]

    def step(self, env, b: int, d: mujoco.MjData) -> tuple[np.ndarray, bool]:
        run = self.runs[b]
        if 3 <= run.phase <= 8:  # carried: the object must stay where the hand took it
            rel = d.site_xpos[env.idx.site] - d.xpos[self.obj]
            hand = PA.hand_axes(env, d)
            rel = _frame(*hand).T @ rel
            held = run.fixed.setdefault("held", rel.copy())
            if np.linalg.norm(rel - held) > DROPPED:  # lost on the way: back out
                run.phase, run.count = 10, 0
        return super().step(env, b, d)

    def _phase(self, env, b, d, run):
        g, down, up = self.grasp, PA.DOWN, PA.UP
        turn, end = self.turn, self.end
        c0, c1, u = self.c0, self.c1, self.u
        tcp = d.site_xpos[env.idx.site]
        steps = (  # (target, grip, approach, closing, tolerance, steps held)
            (g + up * PA.HOVER, PA.OPEN, down, c0, PA.REACHED, 0),
            (g, PA.OPEN, down, c0, PA.FINE, 0),
            (g, PA.CLOSE, down, c0, PA.REACHED, PA.GRIP_STEPS),
            (np.r_[g[:2], self.carry_z], PA.CLOSE, down, c0, PA.REACHED, 0),
            (np.r_[turn[:2], self.carry_z], PA.CLOSE, down, c0, PA.REACHED, 0),
            (turn, PA.CLOSE, down, c0, PA.REACHED, 0),
            (turn, PA.CLOSE, -u, c1, PA.REACHED, 0),
            (np.r_[turn[:2], end[2]], PA.CLOSE, -u, c1, PA.REACHED, 0),
            (end, PA.CLOSE, -u, c1, PA.REACHED, 0),
        )
        if run.phase < len(steps):
            return steps[run.phase]
        if run.phase == 9:  # let go where the hand is
            at = run.fixed.setdefault("release", tcp.copy())
            return at, PA.OPEN, -u, c1, PA.REACHED, PA.GRIP_STEPS
        out = run.fixed.setdefault("out", tcp + u * WITHDRAW)
        if run.phase == 10:
            return out, PA.OPEN, None, None, PA.REACHED, 0
        return out + up * 0.1, PA.OPEN, None, None, PA.REACHED, 0


def shelve_stage(env, atom: tuple, d: mujoco.MjData) -> PandaShelve | None:
    """The stage putting atom's object into its region's layer from the side, or None when the
    region is not a layer with one open side; ValueError with the reason for an object this
    way cannot take."""
    if atom[0] != "in_region" or atom[2] < 0:
        return None
    layer = _layer(env, d, atom)
    if layer is None:
        return None
    return PandaShelve(env, atom, d, layer)


__all__ = ["PandaShelve", "shelve_stage"]

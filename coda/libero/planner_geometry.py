"""Host-side geometry of LIBERO placements, read once per task from the compiled model (numpy
and MuJoCo, outside jit): the moved object's collision box, the drawer a placement region moves
with, where in an opened drawer an object clears what overhangs it, what a closed drawer slides
under, whether a tall object must be laid down (`topple`) and the hand's yaw for that push, the
rim-ring grasp of a flat object (`flat_grasp`), and whether an object must be turned to fit a
region. `planner.stages_for` turns these into the static fields of the planner stages.
"""

from __future__ import annotations

import mujoco
import numpy as np

from coda.libero.geoms import collision_geoms, geom_half_extents
from coda.libero.planner_articulated import goal_q
from coda.libero.predicates import order_atoms
from coda.sim import predicates as SP
from coda.sim import robot
from coda.sim.tasks.waypoints import wrap

ALIGN_FRACTION = 0.8  # an elongated object longer than this share of a region's short half
# size is turned to the region's axis for an In placement
TOPPLE_MARGIN = 0.005  # m: an In region's top above the origin for the placement to count
TOPPLE_WALL = 0.012  # m: a toppled object's standing base off the region's end
TOPPLE_BELOW_TOP = 0.03  # m: the pushing tcp below the standing object's top
PUSH_CLEAR = 0.01  # m: fixture clearance of the palm across a topple push (else along it)
FLAT_HEIGHT = 0.03  # m: an object wider than the jaws and lower than this is taken flat
FLAT_JAW_SLACK = 0.006  # m: jaw half opening beyond a flat object's ring half width and pad
FLAT_PAD_CLEAR = 0.001  # m: the pads' bottoms above a flat object's bottom at the grasp
UPRIGHT_COS = 0.95  # cos of the tilt below which an object counts as upright
# bodies of the robots (our floating gripper; LIBERO's Panda, its gripper and mount, as robosuite
# prefixes them): never obstacles
ROBOT_PREFIXES = ("gripper", "robot0_", "mount0_")
CLEAR_MARGIN = 0.01  # m: gap kept to a neighbour when a placement is moved inside its region
TOPPLE_BEHIND = 0.03  # m: the pushing tcp behind the object's outline before the push
TOPPLE_PUSH = 0.08  # m: the push's end beyond the standing base's centre


def quat_matrix(q) -> np.ndarray:
    """Rotation [3, 3] of a (w, x, y, z) quaternion (host side)."""
    out = np.zeros(9)
    mujoco.mju_quat2Mat(out, np.asarray(q, float))
    return out.reshape(3, 3)


def object_box(compiled, body: int) -> tuple:
    """(lo xyz, hi xyz) of a tracked body's collision geoms in its own frame (host side), with
    those of the bodies welded to it (no joint between: LIBERO's new_salad_dressing keeps all
    its geoms in a child body, and without them it was planned as a point)."""
    m = compiled.model
    bid = m.body(compiled.layout.body_names[body]).id
    d = mujoco.MjData(m)
    d.qpos[:] = compiled.init_qpos
    mujoco.mj_kinematics(m, d)
    welded, grow = {bid}, True
    while grow:
        kids = {k for k in range(m.nbody) if m.body_parentid[k] in welded and k not in welded}
        kids = {k for k in kids if m.body_jntnum[k] == 0}
        grow = bool(kids)
        welded |= kids
    rb, pb = d.xmat[bid].reshape(3, 3), d.xpos[bid]
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for b in sorted(welded):
        for g in collision_geoms(m, b):
            c = rb.T @ (d.geom_xpos[g] - pb)
            ext = geom_half_extents(m, g, rb.T @ d.geom_xmat[g].reshape(3, 3))
            lo, hi = np.minimum(lo, c - ext), np.maximum(hi, c + ext)
    if not np.isfinite(lo).all():
        return ()
    return tuple(tuple(float(v) for v in side) for side in (lo, hi))


SLOT_SPREAD = 0.6  # fraction of a shared region's half size between placements' centres


def shared_slots(compiled, ordered: tuple) -> dict[int, tuple]:
    """{atom index: (x, y) in the region's frame} for several objects into one region (two moka
    pots on the stove, two boxes in the basket): spread along the region's longer axis so the
    second does not land on the first."""
    shared: dict[tuple, list[int]] = {}
    for i, a in enumerate(ordered):
        if a[0] in ("on_region", "in_region"):
            shared.setdefault((a[2], a[3]), []).append(i)
    slots: dict[int, tuple] = {}
    for idx in shared.values():
        if len(idx) < 2:
            continue
        size = ordered[idx[0]][5]
        ax = 0 if size[0] >= size[1] else 1
        for k, i in enumerate(idx):
            reach = SLOT_SPREAD * size[ax]
            if ordered[i][0] == "in_region":  # inside walls: the whole object must fit
                box = object_box(compiled, ordered[i][1])
                obj_half = max(abs(v) for v in box[0][:2] + box[1][:2]) if box else 0.0
                reach = max(0.0, min(reach, size[ax] - obj_half - 0.005))
            off = (2 * k / (len(idx) - 1) - 1) * reach
            slots[i] = (off, 0.0) if ax == 0 else (0.0, off)
    return slots


def implicit_open(compiled, atom: tuple) -> tuple | None:
    """LIBERO's "open the drawer and put X inside" states only In(X, drawer region): the
    ("joint", "<", open bound, ...) atom of the drawer a placement region moves with, or None."""
    layout = compiled.layout
    return drawer_open_atom(compiled.model, layout.body_names, layout.joint_names, atom)


def drawer_open_atom(m: mujoco.MjModel, body_names, joint_names, atom: tuple) -> tuple | None:
    """`implicit_open` from a model and its tracked bodies' and joints' names."""
    if atom[0] != "in_region" or atom[2] < 0:
        return None
    body = m.body(body_names[atom[2]]).id
    for j, name in enumerate(joint_names):
        jid = m.joint(name).id
        if m.jnt_bodyid[jid] == body and m.jnt_type[jid] == mujoco.mjtJoint.mjJNT_SLIDE:
            lo, hi = m.jnt_range[jid]
            kind = SP.LIBERO_JOINT_THRESHOLDS["cabinet_drawer"]["open"]
            if lo < kind[1] < hi:
                return ("joint", kind[0], float(kind[1]), (j,), True)
    return None


def execution_atoms(atoms: tuple, model: mujoco.MjModel, body_names, joint_names) -> tuple:
    """The goal's resolved atoms as the planner executes them: with the Open atom of a drawer
    an In atom's region moves with ("open the top drawer and put the bowl inside" states only
    the In), in `predicates.order_atoms`' order (`coda.libero.planner.stages_for`)."""
    atoms = list(atoms)
    for a in list(atoms):
        extra = drawer_open_atom(model, body_names, joint_names, a)
        if extra is not None and all(b[0] != "joint" or b[3] != extra[3] for b in atoms):
            atoms.append(extra)
    return order_atoms(tuple(atoms))


def _placement_data(compiled, atom: tuple) -> tuple[mujoco.MjModel, mujoco.MjData, int | None]:
    """(model, data at the task's initial state with the drawer the placement region moves with
    at its placement position — its initial q if already open, else the pull stage's goal —,
    that drawer's joint id or None when the region is in no drawer), kinematics done."""
    m = compiled.model
    d = mujoco.MjData(m)
    d.qpos[:] = compiled.init_qpos
    op = implicit_open(compiled, atom)
    jid = None
    if op is not None:
        jid = m.joint(compiled.layout.joint_names[op[3][0]]).id
        adr = m.jnt_qposadr[jid]
        lo, hi = (float(v) for v in m.jnt_range[jid])
        if not d.qpos[adr] < op[2]:
            d.qpos[adr] = goal_q(op[1], op[2], lo, hi, False)
    mujoco.mj_kinematics(m, d)
    return m, d, jid


def _free_bodies(m: mujoco.MjModel) -> set[int]:
    """Bodies with a free joint (the movable objects)."""
    free_joint = mujoco.mjtJoint.mjJNT_FREE
    return {int(m.jnt_bodyid[j]) for j in range(m.njnt) if m.jnt_type[j] == free_joint}


def drawer_slot(compiled, atom: tuple, box: tuple) -> tuple:
    """Region-frame (x, y) offset of an In placement into a drawer, away from what overhangs
    the opened drawer (the handles and fronts of the drawers above, the cabinet's top), or ()
    when the region's centre is clear. Our rim-held bowl came down on the middle drawer's
    handle and stayed tilted against the bottom drawer's wall, which then would not close.

    Host side, at the drawer's placement position (its initial q if already open, else the
    pull stage's goal): obstacles are the collision boxes of the other fixture bodies (no
    free joint) over the region's lateral band between its floor and 0.3 m above it; the
    object's centre goes outward of the outermost obstacle face by its horizontal radius, or,
    when the drawer's front wall leaves less room than that, midway between the two limits."""
    if implicit_open(compiled, atom) is None or not box:
        return ()
    m, d, jid = _placement_data(compiled, atom)
    owner = m.body(compiled.layout.body_names[atom[2]]).id
    obj = m.body(compiled.layout.body_names[atom[1]]).id
    _, o, face, wall, half_o = drawer_limits(m, d, jid, owner, obj, atom)
    rs = d.xmat[owner].reshape(3, 3) @ quat_matrix(atom[4])
    radius = float(np.abs(np.concatenate([box[0][:2], box[1][:2]])).max())
    need = face + radius + CLEAR_MARGIN / 2
    if need <= 0.0:
        return ()
    room = wall - radius - CLEAR_MARGIN / 2
    t = need if need <= room else (need + room) / 2
    t = float(np.clip(t, -half_o + 0.01, half_o - 0.01))
    off = rs.T @ (o * t)  # LIBERO's region frame: d = R (p - p_site)
    return (float(off[0]), float(off[1]))


def drawer_limits(m: mujoco.MjModel, d: mujoco.MjData, jid: int, owner: int, obj: int, atom):
    """(c, o, face, wall, half_o) of an In region riding on a drawer, at state `d` (kinematics
    done): the region's centre c [3] (world), the drawer's opening direction o (unit,
    horizontal; a drawer opens towards q < 0) and, along o from c, the outermost face of what
    overhangs the region (-inf when nothing) and the inner face of the drawer's own front wall
    beyond the centre (inf when none); half_o the region's half extent along o. Overhanging:
    the collision boxes of the other fixture bodies (no free joint, no `ROBOT_PREFIXES`) over
    the region's lateral band between its floor and 0.3 m above (the handles and fronts of the
    drawers above, the cabinet's top). `owner`, `obj`: body ids of the drawer and the object."""
    o = -d.xaxis[jid].copy()
    o[2] = 0.0
    o /= max(float(np.linalg.norm(o)), 1e-9)
    lat = np.array([-o[1], o[0], 0.0])
    rb = d.xmat[owner].reshape(3, 3)
    c = d.xpos[owner] + rb @ np.asarray(atom[3])
    size = np.abs(rb @ quat_matrix(atom[4])) @ np.asarray(atom[5])
    half_o, half_l, floor = float(size @ np.abs(o)), float(size @ np.abs(lat)), c[2] - size[2]
    free = _free_bodies(m)
    face, wall = -np.inf, np.inf
    for g in range(m.ngeom):
        b = int(m.geom_bodyid[g])
        if b in (obj, 0) or b in free or m.body(b).name.startswith(ROBOT_PREFIXES):
            continue
        if m.geom_contype[g] == 0 and m.geom_conaffinity[g] == 0:  # visual only (`collision_geoms`)
            continue
        gc = d.geom_xpos[g] - c
        ext = geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3))
        if abs(gc @ lat) >= half_l + float(ext @ np.abs(lat)):
            continue
        go, eo = float(gc @ o), float(ext @ np.abs(o))
        if b == owner:  # the drawer's own front wall, beyond the centre
            if go - eo > 0 and gc[2] + ext[2] > floor - c[2] + 0.01:
                wall = min(wall, go - eo)
        elif floor - c[2] < gc[2] + ext[2] and gc[2] - ext[2] < floor - c[2] + 0.3:
            if abs(go) < half_o + eo:
                face = max(face, go + eo)
    return c, o, face, wall, half_o


def drawer_ceiling(compiled, atom: tuple) -> float:
    """World z of the lowest fixture face above an In region of a drawer once the drawer is
    closed (the bottom of the drawer above, the cabinet's top), over the region's footprint;
    inf when the region's owner is no drawer or nothing is above it (host side)."""
    op = implicit_open(compiled, atom)
    if op is None:
        return np.inf
    m = compiled.model
    d = mujoco.MjData(m)
    d.qpos[:] = compiled.init_qpos
    jid = m.joint(compiled.layout.joint_names[op[3][0]]).id
    d.qpos[m.jnt_qposadr[jid]] = min(0.0, float(m.jnt_range[jid][1]))  # closed
    mujoco.mj_kinematics(m, d)
    owner = m.body(compiled.layout.body_names[atom[2]]).id
    rb = d.xmat[owner].reshape(3, 3)
    c = d.xpos[owner] + rb @ np.asarray(atom[3])
    size = np.abs(rb @ quat_matrix(atom[4])) @ np.asarray(atom[5])  # world half extents
    floor = c[2] - size[2]
    free = _free_bodies(m)
    out = np.inf
    for b in range(1, m.nbody):
        if b in free or b == owner or m.body(b).name.startswith("gripper"):
            continue
        for g in collision_geoms(m, b):
            gc = d.geom_xpos[g]
            ext = geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3))
            if np.any(np.abs(gc[:2] - c[:2]) >= ext[:2] + size[:2]):
                continue  # not over the region's footprint
            if gc[2] - ext[2] > floor + 0.01:
                out = min(out, float(gc[2] - ext[2]))
    return out


def topple(compiled, atom: tuple, box: tuple, closes: bool = False) -> tuple:
    """((x, y) push direction (world), tcp z, the standing base's offset along it from the
    region's centre, the hand's yaw for the push) for an In placement whose object,
    standing, keeps its origin above the region (a 14.5 cm ketchup bottle, origin at mid
    height, in a 6 cm-deep drawer) but lying down would not: it is placed standing near one
    end of the region's longer horizontal axis, then its top is pushed along that axis so it
    falls inside. Also when the goal closes the region's drawer (`closes`) and the object
    standing would reach above what the closed drawer slides under (`drawer_ceiling`: a
    15.8 cm wine bottle, origin at its base, in the bottom drawer). () when not needed or when
    the lying object would not fit (host side)."""
    if atom[0] != "in_region" or atom[2] < 0 or not box:
        return ()
    m = compiled.model
    d = mujoco.MjData(m)
    d.qpos[:] = compiled.init_qpos
    mujoco.mj_kinematics(m, d)
    obj = m.body(compiled.layout.body_names[atom[1]]).id
    owner = m.body(compiled.layout.body_names[atom[2]]).id
    lo, hi = np.asarray(box[0]), np.asarray(box[1])
    up = d.xmat[obj].reshape(3, 3)[2]  # world z in the object's frame (its row 2)
    k = int(np.argmax(np.abs(up)))
    if abs(up[k]) < UPRIGHT_COS:
        return ()  # not standing on one face
    height = float(hi[k] - lo[k])
    if height < 2.0 * float(np.delete(hi - lo, k).max()):
        return ()  # not a tall object standing on its end
    over_bottom = float(-lo[k] if up[k] > 0 else hi[k])  # origin above the standing bottom
    rb = d.xmat[owner].reshape(3, 3)
    rs = rb @ quat_matrix(atom[4])
    c = d.xpos[owner] + rb @ np.asarray(atom[3])
    size = np.abs(rs) @ np.asarray(atom[5])  # world half extents
    floors = []
    for g in collision_geoms(m, owner):
        gc = d.geom_xpos[g]
        ext = geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3))
        if np.all(np.abs(gc[:2] - c[:2]) < ext[:2]) and gc[2] + ext[2] <= c[2]:
            floors.append(float(gc[2] + ext[2]))
    floor = max(floors) if floors else float(c[2] - size[2])
    top = float(c[2] + size[2])
    others = [j for j in range(3) if j != k]
    lying = max(max(-lo[j], hi[j]) for j in others)  # the origin's height lying, at most
    ceiling = drawer_ceiling(compiled, atom) if closes else np.inf
    if floor + over_bottom <= top - TOPPLE_MARGIN and floor + height <= ceiling - TOPPLE_MARGIN:
        return ()  # fits standing (and under what closes over it)
    if floor + lying > top - TOPPLE_MARGIN or floor + 2 * lying > ceiling - TOPPLE_MARGIN:
        return ()
    e = 0 if size[0] >= size[1] else 1
    u = np.zeros(3)
    u[e] = 1.0
    foot = max(max(-lo[j], hi[j]) for j in others)
    t = -(size[e] - foot - TOPPLE_WALL)  # the standing base near the region's -u end
    if t - foot + height > size[e] - 0.003:
        return ()  # lying along u it would not fit
    z_push = floor + height - TOPPLE_BELOW_TOP
    yaw = _push_yaw(compiled, atom, u, float(z_push), t - foot - TOPPLE_BEHIND, t + TOPPLE_PUSH)
    return (float(u[0]), float(u[1])), float(z_push), float(t), yaw


def _push_yaw(compiled, atom: tuple, u: np.ndarray, z: float, t0: float, t1: float) -> float:
    """Hand yaw for a topple push along world axis u at tcp height z, from t0 to t1 along u
    off the region's centre (host side, the region's drawer opened): the palm (12 cm long)
    across the push, or along it when across it would come within PUSH_CLEAR of a fixture
    (pushing a bottle over in the bottom drawer, the palm across the push caught the handle
    of the drawer above and the bottle spun out of the region)."""
    m, d, _ = _placement_data(compiled, atom)
    owner = m.body(compiled.layout.body_names[atom[2]]).id
    c = d.xpos[owner] + d.xmat[owner].reshape(3, 3) @ np.asarray(atom[3])
    mid = c + u * (t0 + t1) / 2
    mid[2] = z + robot.TCP_OFFSET / 2  # the hand from the tcp to the palm's top
    free = _free_bodies(m)
    fixed = [
        b for b in range(1, m.nbody) if b not in free and not m.body(b).name.startswith("gripper")
    ]
    across = np.abs(u[:2][::-1])  # the horizontal axis across the push (u is a world axis)

    def clearance(long_axis: np.ndarray) -> float:
        half = np.zeros(3)
        half[:2] = long_axis * robot.PALM_HALF[1] + (1 - long_axis) * robot.PALM_HALF[0]
        half[:2] += np.abs(u[:2]) * abs(t1 - t0) / 2  # swept along the push
        half[2] = robot.TCP_OFFSET / 2
        gap = np.inf
        for b in fixed:
            for g in collision_geoms(m, b):
                ext = geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3))
                gap = min(gap, float(np.max(np.abs(d.geom_xpos[g] - mid) - ext - half)))
        return gap

    yaw_across = float(np.arctan2(u[1], u[0]))  # hand y (the palm's length) across u
    if clearance(across) >= PUSH_CLEAR:
        return yaw_across
    return float(wrap(yaw_across + np.pi / 2, np.pi))


def flat_grasp(compiled, body: int, box: tuple) -> tuple:
    """(ring's mid radius, jaw half opening, tcp height above the bottom) for a flat object
    wider than the jaws everywhere whose collision boxes form a raised rim ring round a lower
    middle (LIBERO's plate: a 14 cm, 1.9 cm-high ring of boxes, 3.9 cm wide, round a 0.6 cm
    base): the jaws straddle the ring, the inner finger over the middle, the pads' bottoms
    above the base. Read along the object's local +x axis (host side); () when not flat or
    no such ring leaves room for the fingers."""
    if not box:
        return ()
    lo, hi = np.asarray(box[0]), np.asarray(box[1])
    height = float(hi[2] - lo[2])
    if height > FLAT_HEIGHT or float(np.min(np.maximum(-lo[:2], hi[:2]))) <= robot.FINGER_OPEN:
        return ()
    m = compiled.model
    d = mujoco.MjData(m)
    d.qpos[:] = compiled.init_qpos
    mujoco.mj_kinematics(m, d)
    bid = m.body(compiled.layout.body_names[body]).id
    rb, pb = d.xmat[bid].reshape(3, 3), d.xpos[bid]
    geoms = [
        (rb.T @ (d.geom_xpos[g] - pb), rb.T @ d.geom_xmat[g].reshape(3, 3), m.geom_size[g])
        for g in collision_geoms(m, bid)
        if m.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX
    ]
    radii = np.arange(0.0, float(hi[0]), 0.001)
    tops = np.zeros(len(radii))  # the top's height above the bottom along local +x
    for i, r in enumerate(radii):
        for c, rg, size in geoms:
            pg = rg.T @ (np.array([r, 0.0, c[2]]) - c)
            if np.all(np.abs(pg[:2]) <= size[:2]):
                tops[i] = max(tops[i], float(c[2] + np.abs(rg[2]) @ size - lo[2]))
    ring = tops >= 0.7 * tops.max()
    if not ring.any() or ring[0]:
        return ()  # no lower middle
    out = int(np.nonzero(ring)[0][-1])
    inn = out
    while inn > 0 and ring[inn - 1]:
        inn -= 1
    r_in, r_out = float(radii[inn]), float(radii[out])
    open_half = (r_out - r_in) / 2 + robot.FINGER_HALF[1] + FLAT_JAW_SLACK
    r_mid = (r_in + r_out) / 2
    if open_half > robot.FINGER_OPEN or r_mid - open_half - robot.FINGER_HALF[1] < 0.0:
        return ()
    # the pads' bottoms just above the object's bottom (with them above its middle instead,
    # the inner pad pressed on the rim's 19.5 deg slope and the plate slipped out: 0/10)
    pad_reach = 0.024 + 2 * float(robot.FINGER_HALF[2]) - robot.TCP_OFFSET  # below the tcp
    z = pad_reach + FLAT_PAD_CLEAR
    return float(r_mid), float(open_half), float(z)


def needs_turn(atom: tuple, box: tuple) -> bool:
    """Whether an In placement must turn the object: it is elongated and its long horizontal
    extent exceeds the region's short horizontal size (LIBERO's `size` is half extents)."""
    if atom[0] != "in_region" or not box:
        return False
    halves = (np.asarray(box[1])[:2] - np.asarray(box[0])[:2]) / 2
    # elongated (a round bowl gains nothing from turning) and too long to go in crosswise or
    # at a slant (a book, 11 cm, held at 25 deg in a caddy compartment 12.4 cm square caught
    # the wall's top)
    return bool(
        halves.max() > 1.3 * halves.min() and halves.max() > ALIGN_FRACTION * min(atom[5][:2])
    )

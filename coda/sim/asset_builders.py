"""Builders of the object pool's categories (`coda.sim.assets`): each adds one object's bodies and
geoms (boxes, spheres and capsules only; see `coda.sim.assets`) to an `mjSpec` body.
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

from coda.sim.asset_types import BOX, CAPSULE, SPHERE, Built, Instance, Part

# ----------------------------------------------------------------------------- geom helpers


def _geom(body, name, gtype, size, pos=(0, 0, 0), rgba=None, friction=None, mass=None, quat=None):
    kw: dict[str, Any] = {"name": name, "type": gtype, "size": list(size) + [0] * (3 - len(size))}
    g = body.add_geom(**kw)
    g.pos = list(pos)
    if quat is not None:
        g.quat = list(quat)
    if rgba is not None:
        g.rgba = list(rgba)
    if friction is not None:
        g.friction = [friction, 0.005, 0.0001]
    if mass is not None:
        g.mass = mass
    return g


def _p(inst: Instance, i: int) -> float:
    return inst.proportions[i]


# ----------------------------------------------------------------------------- builders
# Each builder gets (body, name, attrs, instance) and returns Built. `attrs["dims"]` holds the
# sampled size parameters; masses are split over geoms so the body mass equals attrs["mass"].


def build_box(body, name, attrs, inst) -> Built:
    d = attrs["dims"]
    half = np.array([d["half"] * _p(inst, 0), d["half"] * _p(inst, 1), d["half"] * _p(inst, 2)])
    _geom(
        body,
        f"{name}/g0",
        BOX,
        half,
        rgba=attrs["rgba"],
        friction=attrs["friction"],
        mass=attrs["mass"],
    )
    return Built(half=half, geoms=[f"{name}/g0"])


def build_ball(body, name, attrs, inst) -> Built:
    r = attrs["dims"]["radius"] * _p(inst, 0)
    _geom(
        body,
        f"{name}/g0",
        SPHERE,
        [r],
        rgba=attrs["rgba"],
        friction=attrs["friction"],
        mass=attrs["mass"],
    )
    return Built(half=np.array([r, r, r]), geoms=[f"{name}/g0"])


def build_can(body, name, attrs, inst) -> Built:
    """Upright capsule on a thin square foot (a capsule alone would topple)."""
    d = attrs["dims"]
    r, hl = d["radius"] * _p(inst, 0), d["half_height"] * _p(inst, 2)
    foot_h = 0.004
    total_half = hl + r + foot_h  # foot + capsule (half length + 2 caps) stacked
    m = attrs["mass"]
    foot_half = [0.8 * r, 0.8 * r, foot_h]
    _geom(
        body,
        f"{name}/g0",
        BOX,
        foot_half,
        pos=(0, 0, -total_half + foot_h),
        rgba=attrs["rgba"],
        friction=attrs["friction"],
        mass=0.2 * m,
    )
    geoms = [f"{name}/g0"]
    cz = -total_half + 2 * foot_h + r + hl
    _geom(
        body,
        f"{name}/g1",
        CAPSULE,
        [r, hl],
        pos=(0, 0, cz),
        rgba=attrs["rgba"],
        friction=attrs["friction"],
        mass=0.8 * m if inst.variant != "bottle" else 0.65 * m,
    )
    geoms.append(f"{name}/g1")
    half_z = total_half
    if inst.variant == "bottle":
        nr, nh = 0.45 * r, 0.5 * hl
        nz = cz + hl + r + nh * 0.5
        _geom(
            body,
            f"{name}/g2",
            CAPSULE,
            [nr, nh],
            pos=(0, 0, nz),
            rgba=attrs["rgba"],
            friction=attrs["friction"],
            mass=0.15 * m,
        )
        geoms.append(f"{name}/g2")
        top = nz + nh + nr
        # Re-centre: shift all geoms so the bbox is centred on the body frame.
        shift = (top - (-total_half)) / 2 - total_half
        half_z = (top + total_half) / 2
        for geom in _body_geoms(body):
            geom.pos = [geom.pos[0], geom.pos[1], geom.pos[2] - shift]
    return Built(half=np.array([r, r, half_z]), geoms=geoms)


def _body_geoms(body):
    out, g = [], body.first_geom()
    while g is not None:
        out.append(g)
        g = body.next_geom(g)
    return out


def build_fruit(body, name, attrs, inst) -> Built:
    d = attrs["dims"]
    r = d["radius"] * _p(inst, 0)
    kw = {"rgba": attrs["rgba"], "friction": attrs["friction"]}
    m = attrs["mass"]
    if inst.variant == "banana":  # a capsule lying along x
        hl = 1.6 * r
        _geom(
            body,
            f"{name}/g0",
            CAPSULE,
            [0.55 * r, hl],
            quat=(0.7071068, 0, 0.7071068, 0),
            mass=m,
            **kw,
        )
        return Built(half=np.array([hl + 0.55 * r, 0.55 * r, 0.55 * r]), geoms=[f"{name}/g0"])
    if inst.variant == "pear":  # a big sphere under a small one, standing on a flat base
        r2 = 0.65 * r
        top = -r + 2 * r + r2 * 1.2
        half_z = (top + r2 + r) / 2
        c0 = -half_z + r
        _geom(body, f"{name}/g0", SPHERE, [r], pos=(0, 0, c0), mass=0.65 * m, **kw)
        _geom(body, f"{name}/g1", SPHERE, [r2], pos=(0, 0, c0 + r + 0.2 * r2), mass=0.25 * m, **kw)
        # Its centre of mass is above the big sphere's centre, so on the sphere alone it is a
        # ball balanced on a point: any push topples it (verify's "fragile" check). The base
        # (as a real pear's flat bottom) tips only past ~20 degrees.
        foot = 0.003
        _geom(
            body,
            f"{name}/g2",
            BOX,
            [0.45 * r, 0.45 * r, foot],
            (0, 0, -half_z + foot),
            mass=0.1 * m,
            **kw,
        )
        geoms = [f"{name}/g0", f"{name}/g1", f"{name}/g2"]
        return Built(half=np.array([r, r, half_z]), geoms=geoms)
    _geom(body, f"{name}/g0", SPHERE, [r], mass=m, **kw)  # apple, orange, plum
    return Built(half=np.array([r, r, r]), geoms=[f"{name}/g0"])


def _walls(
    body, name, inner_hx, inner_hy, wall_h, t, base_t, rgba, friction, with_base=True, mass=None
):
    """Open-top container centred on the body frame: base plate + four walls."""
    half_z = (base_t * 2 + wall_h) / 2
    geoms = []
    z0 = -half_z
    if with_base:
        _geom(
            body,
            f"{name}/g0",
            BOX,
            [inner_hx + t, inner_hy + t, base_t],
            pos=(0, 0, z0 + base_t),
            rgba=rgba,
            friction=friction,
            mass=mass,
        )
        geoms.append(f"{name}/g0")
    wz = z0 + 2 * base_t + wall_h / 2
    specs = [
        ([t, inner_hy + t, wall_h / 2], (inner_hx + t, 0, wz)),
        ([t, inner_hy + t, wall_h / 2], (-(inner_hx + t), 0, wz)),
        ([inner_hx, t, wall_h / 2], (0, inner_hy + t, wz)),
        ([inner_hx, t, wall_h / 2], (0, -(inner_hy + t), wz)),
    ]
    for size, pos in specs:
        gname = f"{name}/g{len(geoms)}"
        _geom(body, gname, BOX, size, pos=pos, rgba=rgba, friction=friction, mass=mass)
        geoms.append(gname)
    half = np.array([inner_hx + 2 * t, inner_hy + 2 * t, half_z])
    return half, geoms, z0 + 2 * base_t


def build_plate(body, name, attrs, inst) -> Built:
    d = attrs["dims"]
    hx, hy = d["half"] * _p(inst, 0), d["half"] * _p(inst, 1)
    t = 0.006
    _geom(body, f"{name}/g0", BOX, [hx, hy, t], rgba=attrs["rgba"], friction=attrs["friction"])
    return Built(
        half=np.array([hx, hy, t]),
        geoms=[f"{name}/g0"],
        inner_half=np.array([hx, hy, 0.05]),
        inner_floor_z=t,
    )


def build_container(body, name, attrs, inst) -> Built:
    d = attrs["dims"]
    hx, hy = d["inner_half"] * _p(inst, 0), d["inner_half"] * _p(inst, 1)
    wall_h = d["wall_height"] * _p(inst, 2)
    half, geoms, floor_z = _walls(
        body, name, hx, hy, wall_h, 0.006, 0.004, attrs["rgba"], attrs["friction"]
    )
    built = Built(
        half=half, geoms=geoms, inner_half=np.array([hx, hy, wall_h / 2]), inner_floor_z=floor_z
    )
    if inst.variant == "lid":  # hinged lid at the back (+x) edge, closed at q=0
        lid = body.add_body(name=f"{name}/lid", pos=[0, 0, half[2] + 0.004])
        j = lid.add_joint(
            name=f"{name}/lid_joint",
            type=mujoco.mjtJoint.mjJNT_HINGE,
            axis=[0, -1, 0],
            pos=[half[0], 0, 0],
            range=[0, 1.9],
            damping=[0.05, 0, 0],
        )
        j.limited = True
        _geom(
            lid,
            f"{name}/lid/g0",
            BOX,
            [half[0], half[1], 0.004],
            rgba=attrs["rgba"],
            friction=attrs["friction"],
            mass=0.05,
        )
        built.parts.append(Part("lid", np.array([half[0], half[1], 0.004])))
        built.part_geoms["lid"] = [f"{name}/lid/g0"]
        built.joint, built.joint_range = f"{name}/lid_joint", (0.0, 1.9)
    return built


HANDLE_HALF = np.array([0.02, 0.012, 0.012])  # protrudes toward the robot (-x)


def build_cabinet(body, name, attrs, inst) -> Built:
    """Shell open at the front (-x) with a drawer (slide) or a door (hinge) and a handle."""
    d = attrs["dims"]
    hx, hy, hz = d["depth"] / 2, d["width"] / 2 * _p(inst, 1), d["height"] / 2 * _p(inst, 2)
    t = 0.01
    rgba, fr = attrs["rgba"], attrs["friction"]
    geoms = []
    for k, (size, pos) in enumerate(
        [
            ([hx, hy, t], (0, 0, -hz + t)),  # bottom
            ([hx, hy, t], (0, 0, hz - t)),  # top
            ([t, hy, hz - 2 * t], (hx - t, 0, 0)),  # back
            ([hx - t, t, hz - 2 * t], (-t, hy - t, 0)),  # side +y
            ([hx - t, t, hz - 2 * t], (-t, -(hy - t), 0)),  # side -y
        ]
    ):
        _geom(body, f"{name}/g{k}", BOX, size, pos=pos, rgba=rgba, friction=fr)
        geoms.append(f"{name}/g{k}")
    half = np.array([hx, hy, hz])
    dark = [0.25, 0.25, 0.25, 1.0]
    if inst.variant == "drawer":
        travel = 0.8 * (2 * hx)
        dr = body.add_body(name=f"{name}/drawer", pos=[-t, 0, 0])
        j = dr.add_joint(
            name=f"{name}/joint",
            type=mujoco.mjtJoint.mjJNT_SLIDE,
            axis=[-1, 0, 0],
            range=[0, travel],
            damping=[2.0, 0, 0],
        )
        j.limited = True
        iy, iz = hy - 2 * t - 0.004, hz - 2 * t - 0.004
        ix = hx - 2 * t
        dgeoms = []
        # front plate, bottom, back, sides (an open-top tray)
        for k, (size, pos) in enumerate(
            [
                ([t / 2, iy, iz], (-ix, 0, 0)),
                ([ix, iy, t / 2], (0, 0, -iz + t / 2)),
                ([t / 2, iy, iz * 0.6], (ix - t / 2, 0, -iz * 0.4)),
            ]
        ):
            _geom(dr, f"{name}/drawer/g{k}", BOX, size, pos=pos, rgba=rgba, friction=fr, mass=0.3)
            dgeoms.append(f"{name}/drawer/g{k}")
        hd = dr.add_body(name=f"{name}/handle", pos=[-ix - t / 2 - HANDLE_HALF[0], 0, 0])
        _geom(hd, f"{name}/handle/g0", BOX, HANDLE_HALF, rgba=dark, friction=1.2, mass=0.05)
        built = Built(half=half, geoms=geoms, joint=f"{name}/joint", joint_range=(0.0, travel))
        built.parts = [Part("drawer", np.array([ix, iy, iz])), Part("handle", HANDLE_HALF)]
        built.part_geoms = {"drawer": dgeoms, "handle": [f"{name}/handle/g0"]}
        return built
    # door: hinge on the -y edge of the front opening, axis z; opens toward the robot.
    door_w = hy - 0.002
    dr = body.add_body(name=f"{name}/door", pos=[-hx - t / 2, -hy, 0])
    j = dr.add_joint(
        name=f"{name}/joint",
        type=mujoco.mjtJoint.mjJNT_HINGE,
        axis=[0, 0, 1],
        range=[0, 1.75],
        damping=[0.5, 0, 0],
    )
    j.limited = True
    _geom(
        dr,
        f"{name}/door/g0",
        BOX,
        [t / 2, door_w, hz - 0.004],
        pos=(0, door_w, 0),
        rgba=rgba,
        friction=fr,
        mass=0.4,
    )
    hd = dr.add_body(name=f"{name}/handle", pos=[-t / 2 - HANDLE_HALF[0], 2 * door_w - 0.04, 0])
    _geom(hd, f"{name}/handle/g0", BOX, HANDLE_HALF, rgba=dark, friction=1.2, mass=0.05)
    built = Built(half=half, geoms=geoms, joint=f"{name}/joint", joint_range=(0.0, 1.75))
    built.parts = [Part("door", np.array([t / 2, door_w, hz - 0.004])), Part("handle", HANDLE_HALF)]
    built.part_geoms = {"door": [f"{name}/door/g0"], "handle": [f"{name}/handle/g0"]}
    return built


def build_hole(body, name, attrs, inst) -> Built:
    """Four blocks around a square hole of half width `hole_half` (the peg fits inside)."""
    d = attrs["dims"]
    h, depth = d["hole_half"], d["depth"] * _p(inst, 2)
    w = 0.03 * _p(inst, 0)  # rim width
    rgba, fr = attrs["rgba"], attrs["friction"]
    geoms = []
    for k, (size, pos) in enumerate(
        [
            ([w / 2, h + w, depth / 2], (h + w / 2, 0, 0)),
            ([w / 2, h + w, depth / 2], (-(h + w / 2), 0, 0)),
            ([h, w / 2, depth / 2], (0, h + w / 2, 0)),
            ([h, w / 2, depth / 2], (0, -(h + w / 2), 0)),
        ]
    ):
        _geom(body, f"{name}/g{k}", BOX, size, pos=pos, rgba=rgba, friction=fr)
        geoms.append(f"{name}/g{k}")
    return Built(
        half=np.array([h + w, h + w, depth / 2]),
        geoms=geoms,
        inner_half=np.array([h, h, depth / 2]),
        inner_floor_z=-depth / 2,
    )

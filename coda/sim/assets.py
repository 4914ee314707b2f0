"""Object pool: categories of MJX-friendly primitive-built objects with metric-scale ranges.

Every object is built from boxes, spheres and capsules only. MJX's JAX backend has no
cylinder-box, box-ellipsoid or mesh pairs that we could rely on, and mesh geoms become static
convex hulls at `put_model` (their size could not vary inside a bucket). Boxes, spheres and
capsules read `geom_size` at run time, so sizes may vary per variant inside one MJX bucket.

Conventions (shared by compile, geometry helpers, planner):
- the frame of every tracked body is the centre of its bounding box; `half` is the bbox half
  extent in that frame, so an object resting on the table has body z = half[2];
- receptacles (plate, bowl, bin, box, cabinets, hole fixture) are static fixtures; movable
  objects get a free joint; articulated parts (drawer, door, lid) get one slide/hinge joint;
- handles are their own bodies so that their world pose is tracked like any other body.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import mujoco
import numpy as np

from coda.runconfig import SPLITS

BOX = mujoco.mjtGeom.mjGEOM_BOX
SPHERE = mujoco.mjtGeom.mjGEOM_SPHERE
CAPSULE = mujoco.mjtGeom.mjGEOM_CAPSULE

MOVABLE, FIXTURE = "movable", "fixture"
# Relative slack around a category's ranges that still counts as metric scale: verify's scale
# check flags values beyond it, and the SDK refuses them when a program sets them.
SCALE_SLACK = 0.25


@dataclasses.dataclass(frozen=True)
class Instance:
    """A shape/colour/proportion variant of a category."""

    name: str
    proportions: tuple[float, float, float] = (1.0, 1.0, 1.0)
    color: tuple[float, float, float, float] = (0.7, 0.7, 0.7, 1.0)
    variant: str = ""  # builder-specific shape variant
    split: str = "train"  # "train" | "heldout"


@dataclasses.dataclass
class Part:
    """A tracked sub-body of an object (articulated part or handle)."""

    suffix: str  # body name = f"{object}/{suffix}"
    half: np.ndarray  # [3]


@dataclasses.dataclass
class Built:
    """What a builder made; the compiler turns it into the symbol table and state layout."""

    half: np.ndarray  # [3] bbox half extents of the main body
    geoms: list[str]  # collision geom names of the main body (and its welded children)
    parts: list[Part] = dataclasses.field(default_factory=list)
    part_geoms: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    joint: str | None = None  # articulated joint name
    joint_range: tuple[float, float] = (0.0, 0.0)
    # Interior of a container, in the body frame: centre z offset and half extents.
    inner_half: np.ndarray | None = None
    inner_floor_z: float = 0.0


@dataclasses.dataclass(frozen=True)
class Category:
    """A category: metric ranges for its attributes α and a builder."""

    name: str
    kind: str  # MOVABLE | FIXTURE
    dims: dict[str, tuple[float, float]]  # named size parameters in metres
    mass: tuple[float, float]  # kg
    friction: tuple[float, float]
    instances: tuple[Instance, ...]
    build: Callable[..., Built]
    graspable: bool = False
    container: bool = False
    articulated: bool = False
    split: str = "train"  # a held-out category is never sampled for training

    def instance(self, name: str | None) -> Instance:
        if name is None:
            return self.instances[0]
        for inst in self.instances:
            if inst.name == name:
                return inst
        raise KeyError(
            f"unknown instance {name!r} of category {self.name!r}; "
            f"valid: {[i.name for i in self.instances]}"
        )

    def sample_attributes(self, rng: np.random.Generator, instance: Instance) -> dict[str, Any]:
        dims = {k: float(rng.uniform(lo, hi)) for k, (lo, hi) in self.dims.items()}
        jitter = rng.uniform(-0.08, 0.08, size=3)
        rgba = np.clip(np.asarray(instance.color[:3]) + jitter, 0.0, 1.0).tolist() + [1.0]
        return {
            "dims": dims,
            "mass": float(rng.uniform(*self.mass)),
            "friction": float(rng.uniform(*self.friction)),
            "rgba": [round(c, 4) for c in rgba],
        }

    def default_attributes(self, instance: Instance) -> dict[str, Any]:
        return {
            "dims": {k: 0.5 * (lo + hi) for k, (lo, hi) in self.dims.items()},
            "mass": 0.5 * sum(self.mass),
            "friction": 0.5 * sum(self.friction),
            "rgba": list(instance.color),
        }

    def scale_problems(
        self, attrs: dict[str, Any], slack: float | None = None
    ) -> list[tuple[str, float]]:
        """Attributes outside the category's metric ranges (with slack): (field, value)."""
        slack = SCALE_SLACK if slack is None else slack
        bad = []
        for k, (lo, hi) in self.dims.items():
            v = attrs["dims"].get(k)
            if v is None or not (lo * (1 - slack) <= v <= hi * (1 + slack)):
                bad.append((f"dims.{k}", float("nan") if v is None else float(v)))
        for field in ("mass", "friction"):
            lo, hi = getattr(self, field)
            v = attrs[field]
            if not (lo * (1 - slack) <= v <= hi * (1 + slack)):
                bad.append((field, float(v)))
        return bad


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


def _build_box(body, name, attrs, inst) -> Built:
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


def _build_ball(body, name, attrs, inst) -> Built:
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


def _build_can(body, name, attrs, inst) -> Built:
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


def _build_fruit(body, name, attrs, inst) -> Built:
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


def _build_plate(body, name, attrs, inst) -> Built:
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


def _build_container(body, name, attrs, inst) -> Built:
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


def _build_cabinet(body, name, attrs, inst) -> Built:
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


def _build_hole(body, name, attrs, inst) -> Built:
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


# ----------------------------------------------------------------------------- the pool

_R, _G, _B = (0.85, 0.2, 0.2, 1), (0.2, 0.7, 0.3, 1), (0.2, 0.35, 0.85, 1)
_Y, _O, _P = (0.9, 0.8, 0.2, 1), (0.95, 0.55, 0.1, 1), (0.6, 0.3, 0.75, 1)
_W, _K = (0.85, 0.85, 0.8, 1), (0.45, 0.3, 0.2, 1)

CATEGORIES: dict[str, Category] = {}


def _add(cat: Category) -> None:
    CATEGORIES[cat.name] = cat


_add(
    Category(
        "block",
        MOVABLE,
        {"half": (0.014, 0.02)},
        (0.05, 0.2),
        (0.8, 1.2),
        (
            Instance("block_long", (1.6, 1.0, 1.0), _R),
            Instance("block_flat", (1.5, 1.2, 0.7), _G),
            Instance("block_wide", (1.3, 1.3, 1.0), _B),
            Instance("block_tall", (1.0, 1.0, 1.6), _Y, split="heldout"),
        ),
        _build_box,
        graspable=True,
    )
)
_add(
    Category(
        "cube",
        MOVABLE,
        {"half": (0.017, 0.024)},
        (0.05, 0.2),
        (0.8, 1.2),
        (
            Instance("cube_red", color=_R),
            Instance("cube_green", color=_G),
            Instance("cube_blue", color=_B),
            Instance("cube_yellow", color=_Y, split="heldout"),
        ),
        _build_box,
        graspable=True,
    )
)
_add(
    Category(
        "can",
        MOVABLE,
        {"radius": (0.018, 0.026), "half_height": (0.015, 0.03)},
        (0.08, 0.3),
        (0.7, 1.1),
        (
            Instance("can_soda", color=_R),
            Instance("can_soup", (1.0, 1.0, 0.8), _O),
            Instance("can_tall", (0.9, 0.9, 1.3), _W, split="heldout"),
        ),
        _build_can,
        graspable=True,
    )
)
_add(
    Category(
        "bottle",
        MOVABLE,
        {"radius": (0.018, 0.024), "half_height": (0.025, 0.035)},
        (0.1, 0.3),
        (0.7, 1.0),
        (
            Instance("bottle_water", color=(0.5, 0.7, 0.95, 1), variant="bottle"),
            Instance("bottle_ketchup", (1.0, 1.0, 0.9), _R, variant="bottle"),
        ),
        _build_can,
        graspable=True,
        split="heldout",
    )
)
_add(
    Category(
        "ball",
        MOVABLE,
        {"radius": (0.02, 0.032)},
        (0.03, 0.15),
        (0.8, 1.2),
        (
            Instance("ball_tennis", color=(0.8, 0.9, 0.2, 1)),
            Instance("ball_red", color=_R),
            Instance("ball_small", (0.8, 0.8, 0.8), _B, split="heldout"),
        ),
        _build_ball,
        graspable=True,
    )
)
_add(
    Category(
        "fruit",
        MOVABLE,
        {"radius": (0.022, 0.032)},
        (0.05, 0.2),
        (0.8, 1.2),
        (
            Instance("apple", color=_R),
            Instance("orange", color=_O),
            Instance("banana", color=_Y, variant="banana"),
            Instance("pear", color=_G, variant="pear"),
            Instance("plum", (0.8, 0.8, 0.8), _P, split="heldout"),
        ),
        _build_fruit,
        graspable=True,
    )
)
_add(
    Category(
        "peg",
        MOVABLE,
        {"half": (0.012, 0.016)},
        (0.03, 0.1),
        (0.7, 1.0),
        (
            Instance("peg_square", (1.0, 1.0, 3.0), _K),
            Instance("peg_short", (1.0, 1.0, 2.4), _O),
            Instance("peg_long", (1.0, 1.0, 3.5), _B, split="heldout"),
        ),
        _build_box,
        graspable=True,
    )
)
_add(
    Category(
        "plate",
        FIXTURE,
        {"half": (0.065, 0.09)},
        (0.2, 0.5),
        (0.8, 1.2),
        (
            Instance("plate_white", color=_W),
            Instance("plate_blue", color=(0.6, 0.7, 0.9, 1)),
            Instance("plate_oval", (1.2, 0.85, 1.0), (0.9, 0.85, 0.7, 1), split="heldout"),
        ),
        _build_plate,
        container=True,
    )
)
_add(
    Category(
        "bowl",
        FIXTURE,
        {"inner_half": (0.055, 0.075), "wall_height": (0.03, 0.045)},
        (0.2, 0.5),
        (0.8, 1.2),
        (
            Instance("bowl_white", color=_W),
            Instance("bowl_green", color=_G),
            Instance("bowl_deep", (0.95, 0.95, 1.3), _B, split="heldout"),
        ),
        _build_container,
        container=True,
    )
)
_add(
    Category(
        "bin",
        FIXTURE,
        {"inner_half": (0.065, 0.09), "wall_height": (0.05, 0.07)},
        (0.3, 0.8),
        (0.8, 1.2),
        (
            Instance("bin_grey", color=(0.5, 0.5, 0.55, 1)),
            Instance("bin_blue", color=_B),
            Instance("bin_long", (1.3, 0.9, 1.0), _G, split="heldout"),
        ),
        _build_container,
        container=True,
    )
)
_add(
    Category(
        "box",
        FIXTURE,
        {"inner_half": (0.06, 0.08), "wall_height": (0.04, 0.06)},
        (0.2, 0.6),
        (0.8, 1.2),
        (
            Instance("box_open", color=_K),
            Instance("box_lid", color=(0.7, 0.55, 0.35, 1), variant="lid"),
            Instance("box_shallow", (1.1, 1.1, 0.7), _O, split="heldout"),
        ),
        _build_container,
        container=True,
    )
)
_add(
    Category(
        "cabinet_drawer",
        FIXTURE,
        {"depth": (0.2, 0.26), "width": (0.26, 0.34), "height": (0.12, 0.16)},
        (5.0, 10.0),
        (0.8, 1.2),
        (
            Instance("drawer_wood", color=(0.6, 0.45, 0.3, 1), variant="drawer"),
            Instance("drawer_white", color=_W, variant="drawer"),
            Instance("drawer_wide", (1.0, 1.2, 1.0), _B, variant="drawer", split="heldout"),
        ),
        _build_cabinet,
        articulated=True,
    )
)
_add(
    Category(
        "cabinet_door",
        FIXTURE,
        {"depth": (0.2, 0.26), "width": (0.2, 0.26), "height": (0.16, 0.22)},
        (5.0, 10.0),
        (0.8, 1.2),
        (
            Instance("door_wood", color=(0.6, 0.45, 0.3, 1), variant="door"),
            Instance("door_white", color=_W, variant="door"),
            Instance("door_tall", (1.0, 1.0, 1.2), _G, variant="door", split="heldout"),
        ),
        _build_cabinet,
        articulated=True,
    )
)
_add(
    Category(
        "hole",
        FIXTURE,
        {"hole_half": (0.017, 0.022), "depth": (0.04, 0.06)},
        (1.0, 3.0),
        (0.6, 1.0),
        (
            Instance("hole_square", color=(0.55, 0.55, 0.6, 1)),
            Instance("hole_wide_rim", (1.5, 1.5, 1.0), _K),
            Instance("hole_deep", (1.0, 1.0, 1.3), _B, split="heldout"),
        ),
        _build_hole,
        container=True,
    )
)


def get_category(name: str) -> Category:
    if name not in CATEGORIES:
        raise KeyError(f"unknown object category {name!r}; valid: {sorted(CATEGORIES)}")
    return CATEGORIES[name]


def split_of(category: str, instance: str) -> str:
    """'train' or 'heldout' (held-out instance or held-out category)."""
    cat = get_category(category)
    if cat.split == "heldout":
        return "heldout"
    return cat.instance(instance).split


def instances_for(category: str, split: str = "train") -> list[Instance]:
    if split not in SPLITS:  # a typo must not silently mean "all"
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    cat = get_category(category)
    if split == "train":
        return [] if cat.split == "heldout" else [i for i in cat.instances if i.split == "train"]
    if split == "heldout":
        return (
            list(cat.instances)
            if cat.split == "heldout"
            else [i for i in cat.instances if i.split == "heldout"]
        )
    return list(cat.instances)


HELDOUT_CATEGORIES = tuple(n for n, c in CATEGORIES.items() if c.split == "heldout")

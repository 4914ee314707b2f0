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

from coda.runconfig import SPLITS
from coda.sim.asset_builders import (
    build_ball,
    build_box,
    build_cabinet,
    build_can,
    build_container,
    build_fruit,
    build_hole,
    build_plate,
)

# the types live in coda.sim.asset_types; re-exported here, where callers use them from
from coda.sim.asset_types import (  # noqa: F401
    BOX,
    CAPSULE,
    FIXTURE,
    MOVABLE,
    SCALE_SLACK,
    SPHERE,
    Built,
    Category,
    Instance,
    Part,
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
        build_box,
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
        build_box,
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
        build_can,
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
        build_can,
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
        build_ball,
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
        build_fruit,
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
        build_box,
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
        build_plate,
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
        build_container,
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
        build_container,
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
        build_container,
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
        build_cabinet,
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
        build_cabinet,
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
        build_hole,
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

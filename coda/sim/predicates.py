"""Success predicates ν: pure JAX functions of `SimState` + a `SymbolTable`.

ν decides success everywhere (all methods and baselines); the critic never does. Each predicate
is built from the shared helpers in `geometry.py`, closes over static task parameters, and maps
a state batch [...] to a bool batch [...]. ν is evaluated at chunk endpoints; states come from
`state.decode`, so contacts and velocities are MuJoCo's, identical on both backends.

Semantics: ours (task families) next to LIBERO's (what the LIBERO benchmark's BDDL predicates
check; a LIBERO import must evaluate LIBERO's, not ours). Every number is a constant below.

| relation | our families (this module)                    | LIBERO                             |
|----------|-----------------------------------------------|------------------------------------|
| On(a,b)  | a touches b (contact sensor), a's centre over | a touches b, a's origin not below  |
|          | b's footprint and above b's top, no finger    | b's, xy origins within ON_XY_TOL   |
|          | touches a. Hovering 1.5 cm: not on.           | (0.03 m). No release check.        |
| On(a,    | (no regions in our scenes)                    | a inside the region's footprint,   |
| region)  |                                               | between -0.005 and +0.10 m above   |
|          |                                               | it (LIBERO_REGION_ON_Z), touching  |
|          |                                               | the region's parent body           |
| In(a,c)  | a's centre in c's interior (xy), above its    | a's origin inside the region box,  |
|          | floor (INSIDE_FLOOR_TOL), a's bottom below    | whose lower z bound is extended by |
|          | the rim; no finger touches a; a at rest       | LIBERO_IN_Z_LOW (-0.01 m). No      |
|          | (REST_MAX_SPEED, REST_MAX_TUMBLE): released   | contact, release or rest check.    |
|          | and settled, not falling through / held there |                                    |
| stacked  | On(top, base) and the top box lies flat on    | (no stacking predicate)            |
|          | one of its 6 faces (STACK_TILT_TOL).          |                                    |
| inserted | peg centre within the hole's opening, peg     | (no insertion predicate)           |
|          | bottom INSERT_DEPTH below the rim, released.  |                                    |
| Open /   | joint fraction of its range >= OPEN_FRACTION  | raw joint q thresholds by object,  |
| Close    | / <= CLOSED_FRACTION (drawers and doors)      | LIBERO_JOINT_THRESHOLDS: cabinet   |
|          |                                               | drawer open q < -0.14, closed      |
|          |                                               | q > 0; microwave open q < -1.3,    |
|          |                                               | closed q > -0.005                  |
| TurnOn / | (no knobs in our scenes)                      | stove knob on q >= 0.5, off q < 0  |
| TurnOff  |                                               |                                    |

`libero_on` and `libero_joint_at` implement LIBERO's On and Open/Close/TurnOn/TurnOff over
`SimState`; LIBERO's region predicates need region boxes, which `SimState` does not carry.
Geometry helpers' own default tolerances serve potentials; ν passes every number from here.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp

from coda.sim import geometry as G
from coda.sim.state import SimState, SymbolTable

Predicate = Callable[[SimState, SymbolTable], jnp.ndarray]

# ----------------------------------------------------------------------------- tolerances
# Our families.
REST_MAX_SPEED = 0.03  # m/s: "at rest" — body origin slower than this (free fall from 1.5 cm
#                        reaches 0.54 m/s; a settled object reads < 1e-3)
REST_MAX_TUMBLE = 1.0  # rad/s: "at rest" — and rolling / tipping slower than this (spin about
#                        the vertical is ignored: see `geometry.at_rest`)
INSIDE_FLOOR_TOL = 0.005  # m: an object's centre may sit this far below the interior floor
STACK_TILT_TOL = 0.35  # rad: the top box's most vertical axis within this of world z (flat)
INSERT_DEPTH = 0.015  # m: default depth of the peg's bottom below the hole's rim
OPEN_FRACTION = 0.5  # articulated: "open" means at least half of the joint range
CLOSED_FRACTION = 0.08  # articulated: "closed" means within 8% of the closed end
# LIBERO (reference semantics for LIBERO scenes; see the table above).
ON_XY_TOL = 0.03  # m: On(a, b) xy distance between the two body origins
LIBERO_REGION_ON_Z = (-0.005, 0.10)  # m: region On — height band above the region's surface
LIBERO_IN_Z_LOW = -0.01  # m: In — the region box's lower z bound is extended by this
LIBERO_JOINT_THRESHOLDS: dict[str, dict[str, tuple[str, float]]] = {
    "cabinet_drawer": {"open": ("<", -0.14), "close": (">", 0.0)},
    "microwave": {"open": ("<", -1.3), "close": (">", -0.005)},
    "stove_knob": {"turn_on": (">=", 0.5), "turn_off": ("<", 0.0)},
}


# ----------------------------------------------------------------------------- our families


def placed_on(
    state: SimState, sym: SymbolTable, obj: str = "target", support: str = "goal"
) -> jnp.ndarray:
    """obj rests on support (contact, centre over its footprint, above its top), let go."""
    a, b = sym.body(obj), sym.body(support)
    return G.supported_on(state, a, b) & G.fingers_off(state, a)


def placed_inside(
    state: SimState, sym: SymbolTable, obj: str = "target", container: str = "container"
) -> jnp.ndarray:
    """obj lies in the container's interior, let go and at rest (not held or falling there)."""
    a, c = sym.body(obj), sym.body(container)
    return (
        G.inside(state, a, c, floor_tol=INSIDE_FLOOR_TOL)
        & G.fingers_off(state, a)
        & G.at_rest(state, a, REST_MAX_SPEED, REST_MAX_TUMBLE)
    )


def stacked(state: SimState, sym: SymbolTable, obj: str = "top", base: str = "base") -> jnp.ndarray:
    """obj rests on base, let go, lying flat on any of its faces (the family stacks boxes:
    cubes and blocks, for which every face is a stable resting pose; a tipped box is not)."""
    a, b = sym.body(obj), sym.body(base)
    return (
        G.supported_on(state, a, b)
        & G.fingers_off(state, a)
        & G.face_down(state, a, STACK_TILT_TOL)
    )


def inserted(
    state: SimState,
    sym: SymbolTable,
    obj: str = "peg",
    hole: str = "hole",
    depth: float = INSERT_DEPTH,
) -> jnp.ndarray:
    """The peg's centre is over the hole's opening and its bottom `depth` below the rim, let go."""
    p, h = sym.body(obj), sym.body(hole)
    in_xy = G.within_footprint(state, G.pos(state, p), h, use_inner=True)
    return in_xy & (G.bottom(state, p) < G.top(state, h) - depth) & G.fingers_off(state, p)


def articulated_at(
    state: SimState, sym: SymbolTable, obj: str = "cabinet", action: str = "open"
) -> jnp.ndarray:
    """The articulated joint is open (>= OPEN_FRACTION of its range) or closed."""
    if action not in ("open", "close"):
        raise ValueError(f"articulated_at: action must be 'open' or 'close', got {action!r}")
    f = G.joint_fraction(state, sym.joint(obj))
    return f >= OPEN_FRACTION if action == "open" else f <= CLOSED_FRACTION


# ----------------------------------------------------------------------------- LIBERO


def libero_on(
    state: SimState, sym: SymbolTable, obj: str = "target", support: str = "goal"
) -> jnp.ndarray:
    """LIBERO's On(obj, support): in contact, obj's origin not below support's, and the two
    origins within ON_XY_TOL in xy (held objects count; no footprint or release check)."""
    a, b = sym.body(obj), sym.body(support)
    pa, pb = G.pos(state, a), G.pos(state, b)
    return (
        G.touching(state, a, b) & (pa[..., 2] >= pb[..., 2]) & (G.xy_distance(pa, pb) < ON_XY_TOL)
    )


def libero_joint_at(
    state: SimState, sym: SymbolTable, obj: str, kind: str, action: str
) -> jnp.ndarray:
    """LIBERO's Open / Close / TurnOn / TurnOff: raw joint position q of `obj` against
    LIBERO_JOINT_THRESHOLDS[kind][action] (LIBERO's own joint sign conventions)."""
    if kind not in LIBERO_JOINT_THRESHOLDS:
        raise ValueError(
            f"libero_joint_at: unknown object kind {kind!r}; "
            f"known: {sorted(LIBERO_JOINT_THRESHOLDS)}"
        )
    actions = LIBERO_JOINT_THRESHOLDS[kind]
    if action not in actions:
        raise ValueError(
            f"libero_joint_at: {kind!r} has no action {action!r}; actions: {sorted(actions)}"
        )
    op, bound = actions[action]
    q = state.joint_pos[..., sym.joint(obj)]
    return {"<": q < bound, ">": q > bound, ">=": q >= bound}[op]

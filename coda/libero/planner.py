"""The scripted LIBERO planner: a goal's atoms as ordered stages, chained into one phase list.

`planner_for(compiled)` -> `LiberoPlanner`, a `ChunkPolicy` stepping like
`coda.sim.planner.ScriptedPlanner` (the shared `servo_chunk`: closed-loop on the servo
setpoint, phase advance on reaching a waypoint, pure JAX) with a per-phase hand pitch. Stages:
`planner_pickplace.LiberoPickPlace` for On / In atoms, `planner_insert.LiberoInsert` for In
atoms of an enclosed region (the microwave: taken by the handle, slid in under the roof through
the opening), `planner_slide.LiberoSlide` / `LiberoTopplePush` for In atoms of a low roofed
layer on the table (a pan dragged in by its handle; a tall book laid down, then pushed in),
`planner_push.LiberoPush` for plates (wide and 2 cm high: pushed onto level targets) and
`planner_articulated.Articulation` for Open / Close / TurnOn / TurnOff. `stages_for` picks the
stage of each atom (`_stage`). A compound goal runs opening / turning on first, then
placements, then closing / turning off (`order_atoms`); "put X in the drawer" gets the drawer's
Open atom first (`implicit_open`); several objects into one region are spread over it
(`planner_geometry.shared_slots`). Each chunk, a stage whose atom already holds is skipped and
one that finished with its atom false is run again. The host-side geometry the stages read
from the model lives in `planner_geometry`, the pure-JAX reads of the bodies around an object
in `planner_bodies`.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from coda.libero import predicates as P
from coda.libero.planner_articulated import articulation_for

# re-exported under the names the tests read here (their home is planner_bodies)
from coda.libero.planner_bodies import GRASP_REACH_MARGIN  # noqa: F401
from coda.libero.planner_bodies import clear_of_neighbours as _clear_of_neighbours  # noqa: F401
from coda.libero.planner_bodies import into_reach as _into_reach  # noqa: F401
from coda.libero.planner_geometry import (
    drawer_slot,
    execution_atoms,
    flat_grasp,
    implicit_open,
    needs_turn,
    object_box,
    shared_slots,
    topple,
)
from coda.libero.planner_insert import LiberoInsert, enclosure, long_handle
from coda.libero.planner_pickplace import RIM_OPEN, LiberoPickPlace
from coda.libero.planner_push import LiberoPush, pushable
from coda.libero.planner_slide import LiberoSlide, LiberoTopplePush, slide_in, topple_in
from coda.libero.predicates import atom_action, order_atoms  # the goal's order (re-exported)
from coda.sim import geometry as G
from coda.sim.planner import PlannerCarry, ScriptedPlanner, Waypoint, servo_chunk
from coda.sim.state import SimState

__all__ = [
    "RIM_OPEN",
    "LiberoPickPlace",
    "LiberoPlanner",
    "atom_action",
    "order_atoms",
    "planner_for",
    "stages_for",
    "supported",
]

SAFE_Z = 0.28  # m: tcp height for moving between the stages of a compound goal


def supported(atoms: tuple) -> bool:
    """Goals this planner handles: a single On / In atom (object or region target)."""
    return len(atoms) == 1 and atoms[0][0] in ("on_obj", "on_region", "in_region")


# ----------------------------------------------------------------------------- compound goals


def _placement(compiled, a: tuple, slot: tuple, ordered: tuple):
    """The stage of an On / In atom the special stages do not take: a push for a plate onto a
    level region (not into a shared one), else pick-and-place with the object's specifics."""
    box = object_box(compiled, a[1])
    radius = pushable(compiled, a, box)
    if radius > 0 and not slot:
        return LiberoPush("libero", (), compiled.sym, 10, a, radius, box[0][2])
    op = implicit_open(compiled, a)  # the drawer a placement region moves with
    closes = op is not None and any(
        b[0] == "joint" and b[1] == ">" and b[3] == op[3] for b in ordered
    )
    tip = topple(compiled, a, box, closes) if not slot else ()
    if not slot and a[0] == "in_region":
        slot = drawer_slot(compiled, a, box)
    handle = long_handle(compiled, a[1])
    fits = needs_turn(a, box) and not tip  # a toppled object stands: nothing to align
    flat = flat_grasp(compiled, a[1], box) if not handle else ()
    return LiberoPickPlace("libero", (), compiled.sym, 10, a, box, slot, fits, handle, tip, flat)


def _in_region_special(compiled, a: tuple):
    """The stage of an In atom into a low roofed layer (a pan slid in, a tall book laid down
    and pushed in) or an enclosed region (a mug taken by its handle), or None."""
    sl = slide_in(compiled, a)
    if sl is not None:
        return LiberoSlide("libero", (), compiled.sym, 10, a, sl)
    tp = topple_in(compiled, a)
    if tp is not None:
        return LiberoTopplePush("libero", (), compiled.sym, 10, a, tp)
    enc = enclosure(compiled, a)
    if enc is not None:
        return LiberoInsert("libero", (), compiled.sym, 10, a, enc)
    return None


def _stage(compiled, a: tuple, slot: tuple, ordered: tuple):
    """The stage of one atom, by its kind."""
    if a[0] == "joint":
        return articulation_for(compiled, a)
    special = _in_region_special(compiled, a) if a[0] == "in_region" else None
    if special is not None:
        return special
    if a[0] in ("on_obj", "on_region", "in_region"):
        return _placement(compiled, a, slot, ordered)
    raise ValueError(f"no planner stage for atom kind {a[0]!r}")


def stages_for(compiled, atoms: tuple) -> tuple:
    """Ordered stages (a `LiberoPickPlace`, another placement stage or an `Articulation` each)
    for a goal's atoms."""
    lay = compiled.layout
    ordered = execution_atoms(tuple(atoms), compiled.model, lay.body_names, lay.joint_names)
    slots = shared_slots(compiled, ordered)
    return tuple(_stage(compiled, a, slots.get(i, ()), ordered) for i, a in enumerate(ordered))


@dataclasses.dataclass(frozen=True)
class LiberoPlanner(ScriptedPlanner):
    """The stages' phases chained into one phase sequence (ScriptedPlanner's stepping).

    At each chunk start: a stage whose atom already holds is skipped when it has not started,
    and a stage that finished with its atom false is started again (a drawer the fingers slid
    off, a dropped object), so a failure costs time, not the episode."""

    stages: tuple = ()

    def _stage_phases(self, k: int) -> tuple[Waypoint, ...]:
        own = self.stages[k].phases
        if k == 0:
            return own
        # between stages: straight up, then across at a safe height above the next stage's
        # first waypoint (a straight line from an opened drawer to a bowl beside it would
        # sweep the drawer shut)
        return (
            Waypoint("clear", own[0].grip, tol=0.02),
            Waypoint("over", own[0].grip, tol=0.01),
        ) + own

    @property
    def phases(self) -> tuple[Waypoint, ...]:
        return tuple(p for k in range(len(self.stages)) for p in self._stage_phases(k))

    @property
    def starts(self) -> tuple[int, ...]:
        """First phase index of each stage, and the total."""
        out = [0]
        for k in range(len(self.stages)):
            out.append(out[-1] + len(self._stage_phases(k)))
        return tuple(out)

    def _waypoints(self, s: SimState, target: jnp.ndarray):
        """xyz [B, P, 3], yaw [B, P], path to go [B, P], pitch [B, P] and gripper command
        [B, P] of all stages."""
        parts = []
        for k, st in enumerate(self.stages):
            w = st._waypoints(s, target)
            w = w if len(w) >= 4 else (*w, jnp.zeros_like(w[1]))
            if len(w) == 4:  # the phases' own grip commands
                grip = jnp.asarray([p.grip for p in st.phases], w[1].dtype)
                w = (*w, jnp.broadcast_to(grip, w[1].shape))
            if k > 0:
                first = w[0][:, 0]  # [B, 3]
                z = jnp.maximum(SAFE_Z, first[..., 2])
                up = jnp.stack([target[..., 0], target[..., 1], z], -1)
                over = jnp.stack([first[..., 0], first[..., 1], z], -1)
                zero = jnp.zeros((first.shape[0], 2))
                w = (
                    jnp.concatenate([jnp.stack([up, over], 1), w[0]], 1),
                    jnp.concatenate([jnp.repeat(w[1][:, :1], 2, 1), w[1]], 1),
                    jnp.concatenate([zero, w[2]], 1),
                    jnp.concatenate([zero, w[3]], 1),
                    jnp.concatenate([jnp.repeat(w[4][:, :1], 2, 1), w[4]], 1),
                )
            parts.append(w)
        return tuple(jnp.concatenate([p[i] for p in parts], 1) for i in range(5))

    def _resume(self, state: SimState, carry: PlannerCarry) -> PlannerCarry:
        """Skip stages already done, redo stages that finished with their atom false."""
        starts = self.starts
        phase, count = carry.phase, carry.count
        settle_last = self.phases[-1].settle
        for k, st in enumerate(self.stages):
            holds = P.atom_holds(state, st.atom)  # [B]
            a, b = starts[k], starts[k + 1]
            if isinstance(st, LiberoPickPlace) or hasattr(st, "carried"):
                # carrying nothing (the object slipped out in the lift): grasp again rather
                # than lower empty jaws into the target (they catch a basket's rim)
                own = b - len(st.phases)  # the stage's "approach"
                steps = getattr(st, "carried", (4, 5))  # transport, lower
                carried = jnp.zeros_like(phase, bool)
                for i in steps:
                    carried = carried | (phase == own + i)
                lost = carried & ~G.grasped(state, st.atom[1])
                phase = jnp.where(lost, a, phase)
                count = jnp.where(lost, 0, count)
            if k < len(self.stages) - 1:
                skip = (phase == a) & (count == 0) & holds
                finished = (phase == b) & (count == 0)
            else:
                skip = jnp.zeros_like(holds)
                finished = (phase == b - 1) & (count > settle_last)
            redo = finished & ~holds
            phase = jnp.where(skip, b, jnp.where(redo, a, phase))
            count = jnp.where(skip | redo, 0, count)
        # all done but an earlier atom undone since (a later placement knocked it off): back to
        # the earliest such stage; stages still true on the way are skipped
        done = (phase == starts[-1] - 1) & (count > settle_last)
        for k in reversed(range(len(self.stages) - 1)):
            back = done & ~P.atom_holds(state, self.stages[k].atom)
            phase = jnp.where(back, starts[k], phase)
            count = jnp.where(back, 0, count)
        return PlannerCarry(phase, count)

    def act(self, params, state: SimState, carry: PlannerCarry, rng):
        """`ScriptedPlanner.act`'s stepping (`servo_chunk`) with a per-phase pitch (a tilted
        hand reaches a handle under another one) and the stage bookkeeping of `_resume`."""
        del params, rng
        carry = self._resume(state, carry)
        return servo_chunk(self._waypoints, self.phases, state, carry, self.horizon)


def planner_for(compiled, horizon: int = 10) -> LiberoPlanner:
    """The planner of a compiled LIBERO task: its goal's atoms as ordered stages; a clear error
    for goals it does not handle."""
    atoms = compiled.success.keywords["atoms"]
    try:
        stages = stages_for(compiled, atoms)
    except ValueError as e:
        raise ValueError(
            f"the LIBERO planner cannot script {compiled.scene.task['params']['task']} "
            f"({[atom_action(a) for a in atoms]}): {e}"
        ) from e
    return LiberoPlanner("libero", (), compiled.sym, horizon, stages)

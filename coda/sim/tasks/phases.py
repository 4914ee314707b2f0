"""Task phases: ordered sub-goals of a task with a completion predicate each, and the phase
segmentation of a trace.

A family owns its phases (`TaskFamily.task_phases(task)`); the last phase is always ν, so a
trace that completes every phase reached success. Completion predicates are pure JAX over
`SimState` (built from `geometry` helpers) and map a state batch [...] to bool [...].

`segment` reads a trace of chunk-endpoint states [B, T] and says, at each endpoint, how many
phases have been completed *in order* so far. A phase is complete when its predicate holds and
is not undone before the next phase starts: phase k counts from the first endpoint s (at or
after phase k-1 counted) such that its predicate holds at every endpoint from s up to the first
one at which phase k+1's start condition holds (`Phase.start` of phase k+1), or up to the end
of the trace when phase k+1 never starts. A phase without a start condition starts the moment
the previous one completes, so the previous one need only hold once (a lifted object is later
put down: lift stays complete). With one, passing through the previous phase's goal does not
count: carry families start ν when the object leaves the jaws, so transport (the object at the
destination) is complete only if the object is still there when it is let go (or at the end,
still held), not when it was carried across the destination on its way elsewhere. Several
phases may complete at one endpoint (a chunk is many control steps). `stopped_at` is the first
phase never completed (== number of phases when all were), i.e. where progress stopped.

Reaching an object that rests on the table means the hand is where closing the jaws would
hold it (`reach(ready=True)`, `jaws_around`: its centre between the open jaws), not only near
it; a handle is reached when the tcp is at it with the jaws open at least its width
(`reach_open`); a grasp also completes its reach (`either`): only a reached object can be
held, even when no sampled state shows the hand in between. The critic segments each failure on
its control-step replay (`coda.critic.replay`), so a phase completed and undone inside one chunk
still counts.

A grasp means the object is held: both pads on it with its centre between their faces
(`between_pads`; jaws closed beside it, on its edge or above it touch it but do not hold it),
and the robot moves on from it: carry families' lift has `moved_on` = the hand rose (`hand_up`),
so a grip the hand never lifts from (stuck pushing the object along the table, or still
closing at the end) is not a finished grasp; a grip the hand rose from without the object (the
jaws slackened as it rose) is a finished grasp and a failed lift.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from coda.sim import geometry as G
from coda.sim import robot
from coda.sim.state import SimState, SymbolTable

PhasePredicate = Callable[[SimState, SymbolTable], jnp.ndarray]

# Tolerances of the generic phase predicates (m).
REACH_MARGIN = 0.02  # tcp within the body's bounding box grown by this on every side
LIFT_HEIGHT = 0.02  # held object's bottom this far above the table
GRASP_MARGIN = 0.01  # a grasp's jaw gap is at least the body's narrowest width less this
HAND_RISE = 0.01  # the hand has moved on to lifting: the tcp this far above a resting grasp
# The finger pads' faces in the tcp frame (`coda.sim.robot`): along the face (x) +- the pad's
# half-length, vertically from the pads' lower edge (1 cm below the tcp) to their upper edge.
PAD_FACE_X = float(robot.FINGER_HALF[0])
PAD_TOP = 0.024  # m the pads' upper edge lies below the wrist (`robot.build`: fz)
PAD_Z = (  # the pads' lower and upper edges above the tcp (m): about -0.01 and 0.05
    robot.TCP_OFFSET - PAD_TOP - 2.0 * float(robot.FINGER_HALF[2]),
    robot.TCP_OFFSET - PAD_TOP,
)


@dataclasses.dataclass(frozen=True)
class Phase:
    """One ordered sub-goal: a name, its completion predicate (state, sym) -> bool [...] and
    its start condition: when the robot has visibly moved on to this phase, so the previous
    phase must still hold then (None: it starts as soon as the previous phase completes), and
    `moved_on`: the robot has gone on from the previous phase to this one, so the previous
    phase counts at t only if this holds at some endpoint at or after t (a grip the hand never
    lifts from is not a finished grasp; None: no such requirement)."""

    name: str
    done: PhasePredicate
    start: PhasePredicate | None = None
    moved_on: PhasePredicate | None = None


def held_until_next(done: jnp.ndarray, next_start: jnp.ndarray | None) -> jnp.ndarray:
    """ok [B, T]: `done` [B, T] holds at t and at every endpoint after t up to the first one
    (from t on) where `next_start` [B, T] holds, or to the end of the trace if it never does
    (None: the next phase starts at once, ok = done). A reverse scan:
    ok[t] = done[t] & (next_start[t] | ok[t + 1]), ok[T] = True."""
    if next_start is None:
        return done

    def back(later, x):  # later [B]: ok at t + 1
        d, st = x
        ok = d & (st | later)
        return ok, ok

    xs = (jnp.moveaxis(done, 1, 0), jnp.moveaxis(next_start, 1, 0))  # [T, B] each
    _, ok = jax.lax.scan(back, jnp.ones(done.shape[0], bool), xs, reverse=True)
    return jnp.moveaxis(ok, 0, 1)


def later(x: jnp.ndarray) -> jnp.ndarray:
    """[B, T]: x [B, T] holds at some endpoint at or after t (a reverse cumulative or)."""
    return jnp.flip(jnp.cumsum(jnp.flip(x.astype(jnp.int32), -1), -1), -1) > 0


def segment(
    states: SimState, sym: SymbolTable, phases: Sequence[Phase]
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Phase segmentation of chunk-endpoint traces (pure JAX, jittable with static phases).

    states: leaves [B, T, ...] (t=0 and every chunk endpoint, as `RolloutResult.states`).
    Returns phase_index [B, T] int32 (phases completed in order by endpoint t, monotone
    non-decreasing in t) and stopped_at [B] int32 (first phase never completed; len(phases)
    when all were). A phase completed at t is one whose predicate held from t until the next
    phase started (module docstring), so phase_index[t] may depend on endpoints after t.
    """
    if not phases:
        raise ValueError("segment needs at least one phase")
    if states.ee_pos.ndim != 3:
        raise ValueError(
            f"segment expects states with leaves [B, T, ...]; SimState.ee_pos has shape "
            f"{states.ee_pos.shape}"
        )
    n = len(phases)
    done = []  # per phase [B, T]: predicate holds from t until the next phase starts
    for k, p in enumerate(phases):
        nxt = phases[k + 1].start if k + 1 < n else None
        start = None if nxt is None else nxt(states, sym)
        ok = held_until_next(p.done(states, sym), start)
        on = phases[k + 1].moved_on if k + 1 < n else None
        done.append(ok if on is None else ok & later(on(states, sym)))
    done = jnp.stack(done, -1)  # [B, T, P] bool
    done_t = jnp.moveaxis(done, 1, 0)  # [T, B, P]
    ks = jnp.arange(n)  # [P]

    def step(idx, d):  # idx [B] phases completed so far; d [B, P] completions now
        # earlier phases already count; advance over the run of completions from idx on
        ok = d | (ks[None, :] < idx[:, None])  # [B, P]
        new = jnp.sum(jnp.cumprod(ok.astype(jnp.int32), axis=-1), axis=-1).astype(jnp.int32)
        new = jnp.maximum(new, idx)
        return new, new

    idx0 = jnp.zeros(done.shape[0], jnp.int32)
    last, index = jax.lax.scan(step, idx0, done_t)
    return jnp.moveaxis(index, 0, 1), last  # [B, T], [B]


# ----------------------------------------------------------------------------- predicates


def tcp_near(state: SimState, i: int, margin: float = REACH_MARGIN) -> jnp.ndarray:
    """The tool centre point lies in body i's bounding box grown by `margin` (scale-free reach)."""
    local = G.to_local(state, i, state.ee_pos)  # [..., 3]
    return jnp.all(jnp.abs(local) <= G.half(state, i) + margin, axis=-1)


def reach(role: str, ready: bool = False) -> PhasePredicate:
    """Phase predicate: tcp at the body playing `role`: in its bounding box grown by
    REACH_MARGIN (a part held anywhere along it, a handle), or with `ready` (objects that rest
    on the table) the hand is where closing the jaws would hold it (`jaws_around`): a hand
    stopped above the object, or beside it, has not reached it even within a few cm."""
    if ready:
        return lambda s, sym: jaws_around(s, sym.body(role))
    return lambda s, sym: tcp_near(s, sym.body(role))


def either(*preds: PhasePredicate) -> PhasePredicate:
    """Phase predicate: any of `preds` holds. A reach is also complete where the object is
    already held (`grasp`): the hand got there, even if no sampled state shows it in between."""
    return lambda s, sym: functools.reduce(jnp.logical_or, (p(s, sym) for p in preds))


def reach_open(role: str) -> PhasePredicate:
    """Phase predicate for a part held anywhere along it (a handle): the tcp at it (`tcp_near`)
    with the jaws open at least its narrowest width, ready to close on it (a hand arriving
    with the jaws already closed has not reached it to grasp it)."""

    def done(s: SimState, sym: SymbolTable) -> jnp.ndarray:
        i = sym.body(role)
        width = 2.0 * jnp.min(G.half(s, i)[..., :2], axis=-1)
        return tcp_near(s, i) & (G.gripper_opening(s) >= width)

    return done


def jaws_around(state: SimState, i: int) -> jnp.ndarray:
    """Body i's centre lies between the jaws: between the pads' faces (`between_pads`) and,
    along the closing axis (the tcp frame's y), inside the jaws' opening, so closing them
    now would hold it (the grasp phase's own test, `grasp`, one step before)."""
    m = G.quat_to_mat(state.ee_quat)
    local = jnp.einsum("...ji,...j->...i", m, G.pos(state, i) - state.ee_pos)
    inside = jnp.abs(local[..., 1]) <= 0.5 * G.gripper_opening(state)
    return between_pads(state, i) & inside


def between_jaws(state: SimState, i: int, margin: float = GRASP_MARGIN) -> jnp.ndarray:
    """Body i spans the jaws: their gap is at least its narrowest horizontal width less
    `margin` (jaws closed beside it, or pinching its edge, are narrower)."""
    width = 2.0 * jnp.min(G.half(state, i)[..., :2], axis=-1)
    return G.gripper_opening(state) >= width - margin


def between_pads(state: SimState, i: int) -> jnp.ndarray:
    """Body i's centre lies between the finger pads' faces: in the tcp frame, within the pads'
    half-length along the face (x) and between their lower and upper edges (z). Pads touching
    an object whose centre is beside them (an edge pinched, jaws closed off-centre) or below
    them (jaws closed above it) do not hold it."""
    m = G.quat_to_mat(state.ee_quat)  # [..., 3, 3] tcp frame -> world
    local = jnp.einsum("...ji,...j->...i", m, G.pos(state, i) - state.ee_pos)
    return (
        (jnp.abs(local[..., 0]) <= PAD_FACE_X)
        & (local[..., 2] >= PAD_Z[0])
        & (local[..., 2] <= PAD_Z[1])
    )


def grasp(role: str, or_lifted: bool = True) -> PhasePredicate:
    """Phase predicate: the body playing `role` is held. For objects that rest on the table
    (`or_lifted`): both finger pads touch it and its centre is between their faces
    (`between_pads`), or it is held `LIFT_HEIGHT` off the table; jaws closing beside it, on its
    edge or above it do not count. Parts that never rest on the table (a handle, held anywhere
    along its bar) pass or_lifted=False: both pads on it and it spans the jaws (`between_jaws`)."""

    def done(s: SimState, sym: SymbolTable) -> jnp.ndarray:
        i = sym.body(role)
        if not or_lifted:
            return G.grasped(s, i) & between_jaws(s, i)
        return G.grasped(s, i) & (between_pads(s, i) | G.lifted(s, i, LIFT_HEIGHT))

    return done


def hand_up(role: str, rise: float = HAND_RISE) -> PhasePredicate:
    """Phase `moved_on` condition: the tcp is `rise` above where it holds the body playing
    `role` resting on the table (its half-height above the table): the hand has started to
    lift, with the object or without it."""

    def done(s: SimState, sym: SymbolTable) -> jnp.ndarray:
        i = sym.body(role)
        return s.ee_pos[..., 2] - G.TABLE_Z > G.half(s, i)[..., 2] + rise

    return done


def lift(role: str, height: float = LIFT_HEIGHT) -> PhasePredicate:
    """Phase predicate: the body playing `role` is held with its bottom `height` off the table."""
    return lambda s, sym: G.grasped(s, sym.body(role)) & G.lifted(s, sym.body(role), height)


def released(role: str) -> PhasePredicate:
    """Phase start condition: no finger pad touches the body playing `role` (it left the jaws,
    let go or lost)."""
    return lambda s, sym: G.fingers_off(s, sym.body(role))


def at(role: str, dest: str, interior: bool = False) -> PhasePredicate:
    """Phase predicate: `role` is at `dest`: over it (`over`) or, for an interior destination,
    already lowered into it (`geometry.inside`), so putting it down does not undo being there."""
    above = over(role, dest, interior)
    if not interior:  # over already covers resting on top (bottom not below dest's top - 1 cm)
        return above
    return lambda s, sym: above(s, sym) | G.inside(s, sym.body(role), sym.body(dest))


def over(role: str, dest: str, interior: bool = False) -> PhasePredicate:
    """Phase predicate: `role`'s centre is over `dest`'s footprint (its interior if `interior`)
    and its bottom not below `dest`'s top (less 1 cm, as `geometry.above`)."""

    def done(s: SimState, sym: SymbolTable) -> jnp.ndarray:
        a, b = sym.body(role), sym.body(dest)
        xy = G.within_footprint(s, G.pos(s, a), b, use_inner=interior)
        return xy & (G.bottom(s, a) > G.top(s, b) - 0.01)

    return done

"""Success predicates ν: pure JAX functions of `SimState` + a `SymbolTable`.

ν decides success everywhere (all methods and baselines); the critic never does. Each predicate
is built from the shared helpers in `geometry.py`, closes over static task parameters, and maps
a state batch [...] to a bool batch [...].
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp

from coda.sim import geometry as G
from coda.sim.state import SimState, SymbolTable

Predicate = Callable[[SimState, SymbolTable], jnp.ndarray]

OPEN_FRACTION = 0.5  # articulated: "open" means at least half of the joint range
CLOSED_FRACTION = 0.08
INSERT_DEPTH = 0.015  # m below the hole's rim


def placed_on(
    state: SimState, sym: SymbolTable, obj: str = "target", support: str = "goal"
) -> jnp.ndarray:
    a, b = sym.body(obj), sym.body(support)
    return G.on_top(state, a, b, tol=0.02) & ~G.grasped(state, a)


def placed_inside(
    state: SimState, sym: SymbolTable, obj: str = "target", container: str = "container"
) -> jnp.ndarray:
    a, c = sym.body(obj), sym.body(container)
    return G.inside(state, a, c) & ~G.grasped(state, a)


def stacked(state: SimState, sym: SymbolTable, obj: str = "top", base: str = "base") -> jnp.ndarray:
    a, b = sym.body(obj), sym.body(base)
    return G.on_top(state, a, b, tol=0.015) & ~G.grasped(state, a) & G.upright(state, a)


def inserted(
    state: SimState,
    sym: SymbolTable,
    obj: str = "peg",
    hole: str = "hole",
    depth: float = INSERT_DEPTH,
) -> jnp.ndarray:
    p, h = sym.body(obj), sym.body(hole)
    in_xy = G.within_footprint(state, G.pos(state, p), h, use_inner=True)
    return in_xy & (G.bottom(state, p) < G.top(state, h) - depth) & ~G.grasped(state, p)


def articulated_at(
    state: SimState, sym: SymbolTable, obj: str = "cabinet", action: str = "open"
) -> jnp.ndarray:
    f = G.joint_fraction(state, sym.joint(obj))
    return f >= OPEN_FRACTION if action == "open" else f <= CLOSED_FRACTION

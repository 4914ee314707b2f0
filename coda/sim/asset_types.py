"""The object pool's types: geom kinds, what a category is (`Category`, `Instance`) and what its
builder returns (`Built`, `Part`). The pool itself is `coda.sim.assets`, which re-exports these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import mujoco
import numpy as np

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

"""Declared regions of a family's scene space: the focused experiment's planted hard regions.

A region is text, clauses joined by ``&``, each ``<role>.<key> <op> <value>``:

* role: ``object`` (the object the task moves), ``destination`` (where it goes) or a τ role;
* key: ``x`` | ``y`` (σ: the role's initial position, m) or ``mass`` | ``friction`` | ``size``
  (α: the role's mass, friction, ``half`` or ``radius`` dim in m);
* op: ``>`` ``<`` ``>=`` ``<=``; value: a number.

All clauses of one region read one factor (layout or attributes), so a region is a part of that
factor's space: e.g. ``"object.y > 0.15"`` (the far-left strip of the table) or
``"object.size > 0.0226"`` (the largest cubes). A scene is *in* a region when every clause holds;
a clause whose role or key the scene does not have does not hold. A scene in no region is
*nominal*.

Uses (`sim.hard_regions`): the training pool and round 0's demos are nominal scenes only (the
BC start never sees a hard region: the difficulty is planted by withholding data, and its
location is known), the `ood_hard` suite holds held-out scenes inside the regions (split evenly),
and allocators resample inside a region (`oracle_regions`) or outside all of them
(`nominal_only`). `parse_regions` checks the text and imports no JAX (`coda.runconfig` calls it);
membership reads the scene through `coda.sim.flaws`' conditions, imported when first needed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

OPS = (">=", "<=", ">", "<")
LAYOUT_KEYS = ("x", "y")
ATTRIBUTE_KEYS = ("mass", "friction", "size")
_CLAUSE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\.([a-z]+)\s*(>=|<=|>|<)\s*([-+0-9.eE]+)\s*$")
FORM = "'<role>.<key> <op> <value>' clauses joined by '&' (key x | y | mass | friction | size)"


class RegionError(ValueError):
    """A region's text does not parse; the message names it and the valid form."""


@dataclasses.dataclass(frozen=True)
class Clause:
    role: str
    key: str
    op: str
    value: float

    @property
    def factor(self) -> str:
        return "layout" if self.key in LAYOUT_KEYS else "attributes"

    def condition(self) -> Any:
        """The `coda.sim.flaws` condition that evaluates this clause on a scene."""
        from coda.sim import flaws  # lazy: flaws imports JAX; parsing must not (runconfig)

        if self.factor == "layout":
            return flaws.Layout(self.role, self.key, self.op, self.value)
        return flaws.Attribute(self.role, self.key, self.op, self.value)


@dataclasses.dataclass(frozen=True)
class Region:
    text: str
    clauses: tuple[Clause, ...]

    @property
    def factor(self) -> str:
        return self.clauses[0].factor

    def __contains__(self, scene: Any) -> bool:
        for c in self.clauses:
            try:
                if not c.condition()(scene):
                    return False
            except (KeyError, TypeError):  # the scene has no such role or key
                return False
        return True


def parse_region(text: str) -> Region:
    if not isinstance(text, str) or not text.strip():
        raise RegionError(f"hard region {text!r} is not a region; valid: {FORM}")
    clauses = []
    for part in text.split("&"):
        m = _CLAUSE.match(part)
        if m is None:
            raise RegionError(f"hard region {text!r}: {part.strip()!r} is not {FORM}")
        role, key, op, value = m.groups()
        if key not in LAYOUT_KEYS + ATTRIBUTE_KEYS:
            raise RegionError(f"hard region {text!r}: unknown key {key!r}; valid: {FORM}")
        try:
            v = float(value)
        except ValueError:
            raise RegionError(f"hard region {text!r}: {value!r} is not a number") from None
        clauses.append(Clause(role, key, op, v))
    if len({c.factor for c in clauses}) > 1:
        raise RegionError(
            f"hard region {text!r} mixes layout and attribute clauses; one factor per region"
        )
    return Region(text.strip(), tuple(clauses))


def parse_regions(texts: Sequence[str]) -> tuple[Region, ...]:
    """The regions of `sim.hard_regions` (RegionError naming the first bad one)."""
    if isinstance(texts, str):
        raise RegionError(f"sim.hard_regions={texts!r} must be a tuple of regions ({FORM})")
    return tuple(parse_region(t) for t in texts)


def which(regions: Sequence[Region], scene: Any) -> int:
    """Index of the first region holding `scene`; -1 when it is nominal."""
    for i, r in enumerate(regions):
        if scene in r:
            return i
    return -1


def accept_for(regions: Sequence[Region], where: str) -> Callable[[Any], bool]:
    """A scene predicate: "nominal" (in no region), "hard:<i>" (in region i), "" (any scene)."""
    if where == "":
        return lambda scene: True
    if where == "nominal":
        return lambda scene: which(regions, scene) < 0
    if where.startswith("hard:") and where[5:].isdigit() and int(where[5:]) < len(regions):
        region = regions[int(where[5:])]
        return lambda scene: scene in region
    raise ValueError(f"where={where!r}: valid '', 'nominal', 'hard:<i>' with i < {len(regions)}")


def factor_of(regions: Sequence[Region], where: str) -> str | None:
    """The factor a "hard:<i>" draw redraws (its region's); None for "" and "nominal"."""
    return regions[int(where[5:])].factor if where.startswith("hard:") else None


def config_problems(value: Any, strategy: str | None = None) -> list[str]:
    """`coda.runconfig`'s check of `sim.hard_regions` (pure Python: no JAX, no scene)."""
    del strategy
    try:
        parse_regions(tuple(value) if isinstance(value, (list, tuple)) else value)
    except RegionError as e:
        return [str(e)]
    return []

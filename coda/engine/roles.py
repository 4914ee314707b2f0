"""Symbolic roles: how a generation program names objects without naming them.

A program in Ω says "the target", "the goal", "distractor_0" — never "cube_red" — so that it
re-binds to any scene whose family provides those roles, including another family (transfer).
A role resolves against a scene in this order:

1. a task role of the scene itself (``scene.task["roles"]``: target, goal, container, top, base,
   peg, hole, cabinet, ...);
2. an abstract alias (`ALIASES`): ``target`` is whatever the task moves (pick-place / put-inside
   target, the stacked ``top``, the inserted ``peg``); ``goal`` is where it goes (goal plate,
   ``container``, ``base``, ``hole``). The table is keyed on role names only, so no family names
   are switched on here;
3. ``distractor_k``: the k-th object (in the scene's object order) that plays no task role.
   After a task edit rebinds the goal to a former distractor, the old goal becomes a distractor,
   so the numbering always describes the scene as it is.

Anything else is missing, and `bind_roles` fails with every missing role, the roles the scene
does provide and its family, so a caller (or an LLM writing a program) can repair the request.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from coda.sim.scene import Scene

__all__ = ["ALIASES", "RoleBindingError", "available_roles", "bind_roles", "resolve_role"]

# abstract role -> the task roles that can play it, in order of preference
ALIASES: dict[str, tuple[str, ...]] = {
    "target": ("target", "top", "peg"),
    "goal": ("goal", "container", "base", "hole"),
    "container": ("container",),
}
_DISTRACTOR = re.compile(r"^distractor_(\d+)$")


class RoleBindingError(ValueError):
    """A program needs roles the scene does not provide; names them and what is available."""

    def __init__(self, missing: list[str], available: list[str], family: str) -> None:
        super().__init__(
            f"scene of family {family!r} does not provide role(s) {missing}; "
            f"available roles: {available}"
        )
        self.missing, self.available, self.family = missing, available, family

    def __reduce__(self):  # pickles across the sandbox's worker boundary
        return type(self), (self.missing, self.available, self.family)


def _distractors(scene: Scene) -> list[str]:
    bound = set(scene.task.get("roles", {}).values())
    return [o.name for o in scene.objects if o.name not in bound]


def resolve_role(scene: Scene, role: str) -> str | None:
    """Object name playing `role` in `scene`, or None (see the module docstring for the order)."""
    roles = scene.task.get("roles", {})
    if role in roles:
        return roles[role]
    for concrete in ALIASES.get(role, ()):
        if concrete in roles:
            return roles[concrete]
    m = _DISTRACTOR.match(role)
    if m:
        free = _distractors(scene)
        k = int(m.group(1))
        return free[k] if k < len(free) else None
    return None


def concrete_task_role(scene: Scene, role: str) -> str | None:
    """The key in ``scene.task["roles"]`` that `role` resolves through (None for distractors)."""
    roles = scene.task.get("roles", {})
    if role in roles:
        return role
    return next((c for c in ALIASES.get(role, ()) if c in roles), None)


def available_roles(scene: Scene) -> list[str]:
    """Every role name that resolves in `scene` (task roles, aliases, distractor_k)."""
    roles = scene.task.get("roles", {})
    out = list(roles)
    out += [a for a, cs in ALIASES.items() if a not in roles and any(c in roles for c in cs)]
    out += [f"distractor_{k}" for k in range(len(_distractors(scene)))]
    return out


def bind_roles(scene: Scene, roles: Iterable[str]) -> dict[str, str]:
    """{role: object name} for every role; `RoleBindingError` listing all missing ones."""
    out, missing = {}, []
    for r in dict.fromkeys(roles):
        name = resolve_role(scene, r)
        if name is None:
            missing.append(r)
        else:
            out[r] = name
    if missing:
        raise RoleBindingError(missing, available_roles(scene), scene.task.get("family", "?"))
    return out

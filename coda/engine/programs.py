"""Generation programs Ω: role-bound, parameterised edits of one factor, stored as data.

A program is JSON-able. Either a list of parameterised edits of ONE factor against symbolic
roles (never object names)::

    {"factor": "layout", "edits": [{"edit": "place_distractor", "role": "distractor_0",
     "relative_to": "target", "side": "approach", "distance": [0.0, 0.015]}]}
    {"factor": "attributes", "edits": [{"edit": "scale_width", "role": "target",
     "range": [0.8, 1.2]}]}

(a single flat edit, ``{"factor": ..., "edit": ..., ...}``, is accepted too), or an LLM-written
edit program in the SDK (``{"factor": ..., "source": "..."}``) whose roles are the literal
arguments of its ``role("...")`` calls. `bind` resolves the roles against a scene (any family
that provides them: see `coda.engine.roles`); `apply` runs the edits on an `EditBuilder`
locked to the program's factor, so the result differs from its parent in that factor only.

Edits (`EDITS`; ranges are [lo, hi], sampled uniformly per variant):
  layout      place_distractor(role=distractor_0, relative_to=target, side=approach,
                               distance=[0, 0.02] m gap between footprints)
              toward_workspace_edge(role=target, margin=[0, 0.04] m, sides=[far, left, right])
              shift(role=target, distance=[0.05, 0.15] m, random direction)
              resample_layout()
  attributes  scale_width(role=target, range=[0.8, 1.2] category quantile of the width size)
              friction(role=target, range=[-0.2, 0.15] quantile)    (low = slippery)
              mass(role=target, range=[0.85, 1.2] quantile)          (high = heavy)
              perturb_attributes(role=target, magnitude=0.3)  one random field, random sign
              resample_attributes()
  task        rebind_goal(role=goal)      another object becomes the goal / container / base
              rebind_target(role=target)  another object is moved
              resample_task()             the family's own (open <-> close, depth, swap)
A quantile q puts a value at lo + q (hi - lo) of the category's range (q < 0 or > 1 reaches into
the ±25 % slack the SDK accepts).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coda import sandbox
from coda.engine import neighbourhood as N
from coda.engine.edits import (
    EDGE_SIDES,
    FACTORS,
    SIDES,
    EditBuilder,
    changed_factors,
    factor_magnitude,
)
from coda.engine.roles import RoleBindingError, bind_roles
from coda.sim.scene import Scene
from coda.sim.sdk import SceneProgramError

__all__ = [
    "EDITS",
    "BoundProgram",
    "EditSpec",
    "Program",
    "ProgramError",
    "apply",
    "apply_many",
    "apply_with_magnitude",
    "bind",
    "load_programs",
    "memory_factor",
    "program_to_source",
    "scene_factor",
    "store_program",
]


class ProgramError(ValueError):
    """A generation program is malformed (unknown edit, bad parameter, mixed factors)."""


# ----------------------------------------------------------------------------- factor names
# memory (coda.memory.store.FACTORS) says spatial / attribute; scenes say layout / attributes.
_TO_SCENE = {
    "task": "task",
    "layout": "layout",
    "spatial": "layout",
    "attributes": "attributes",
    "attribute": "attributes",
    "execution": "execution",
}
_TO_MEMORY = {
    "task": "task",
    "layout": "spatial",
    "attributes": "attribute",
    "execution": "execution",
}


def scene_factor(factor: str) -> str:
    """A factor name in the scene's vocabulary (task / layout / attributes / execution)."""
    if factor not in _TO_SCENE:
        raise ValueError(f"unknown factor {factor!r}; valid: {sorted(_TO_SCENE)}")
    return _TO_SCENE[factor]


def memory_factor(factor: str) -> str:
    """The same factor in memory's vocabulary (task / spatial / attribute / execution)."""
    return _TO_MEMORY[scene_factor(factor)]


# ----------------------------------------------------------------------------- edits


@dataclasses.dataclass(frozen=True)
class EditSpec:
    """One parameterised edit: its factor, role slots (with defaults) and parameters."""

    name: str
    factor: str
    roles: tuple[tuple[str, str], ...]  # (slot, default role)
    params: tuple[tuple[str, str, Any], ...]  # (name, kind, default); kind: range | float | ...
    run: Callable[[EditBuilder, dict[str, str], dict[str, Any]], None]
    param_roles: Callable[[Mapping[str, Any]], tuple[str, ...]] | None = None  # roles in params


def _check_param(edit: str, name: str, kind: str, v: Any) -> Any:
    where = f"edit {edit!r}: {name}"
    if callable(kind):  # a checker of the neighbourhood edits (coda.engine.neighbourhood)
        try:
            return kind(v)
        except (TypeError, ValueError) as e:
            raise ProgramError(f"{where} {e}") from None
    if kind == "range":
        ok = (
            isinstance(v, (list, tuple))
            and len(v) == 2
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
            and v[0] <= v[1]
        )
        if not ok:
            raise ProgramError(f"{where} must be [lo, hi] numbers with lo <= hi, got {v!r}")
        return [float(v[0]), float(v[1])]
    if kind == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ProgramError(f"{where} must be a number, got {v!r}")
        return float(v)
    if kind == "side":
        if v not in SIDES:
            raise ProgramError(f"{where} must be one of {list(SIDES)}, got {v!r}")
        return v
    if kind == "sides":
        if not isinstance(v, (list, tuple)) or not v or any(s not in EDGE_SIDES for s in v):
            raise ProgramError(f"{where} must be a non-empty list from {list(EDGE_SIDES)}")
        return list(v)
    raise AssertionError(kind)


def _u(b: EditBuilder, rng: Sequence[float]) -> float:
    return float(b.rng.uniform(rng[0], rng[1]))


EDITS: dict[str, EditSpec] = {
    e.name: e
    for e in (
        EditSpec(
            "place_distractor",
            "layout",
            (("role", "distractor_0"), ("relative_to", "target")),
            (("side", "side", "approach"), ("distance", "range", [0.0, 0.02])),
            lambda b, r, p: b.place_beside(
                r["role"], r["relative_to"], p["side"], p["distance"][0], p["distance"][1]
            ),
        ),
        EditSpec(
            "toward_workspace_edge",
            "layout",
            (("role", "target"),),
            (("margin", "range", [0.0, 0.04]), ("sides", "sides", list(EDGE_SIDES))),
            lambda b, r, p: b.move_to_edge(r["role"], p["margin"][0], p["margin"][1], p["sides"]),
        ),
        EditSpec(
            "shift",
            "layout",
            (("role", "target"),),
            (("distance", "range", [0.05, 0.15]),),
            lambda b, r, p: b.shift(r["role"], _u(b, p["distance"])),
        ),
        EditSpec("resample_layout", "layout", (), (), lambda b, r, p: b.resample_layout()),
        EditSpec(
            "scale_width",
            "attributes",
            (("role", "target"),),
            (("range", "range", [0.8, 1.2]),),
            lambda b, r, p: b.set_quantile(r["role"], "width", *p["range"]),
        ),
        EditSpec(
            "friction",
            "attributes",
            (("role", "target"),),
            (("range", "range", [-0.2, 0.15]),),
            lambda b, r, p: b.set_quantile(r["role"], "friction", *p["range"]),
        ),
        EditSpec(
            "mass",
            "attributes",
            (("role", "target"),),
            (("range", "range", [0.85, 1.2]),),
            lambda b, r, p: b.set_quantile(r["role"], "mass", *p["range"]),
        ),
        EditSpec(
            "perturb_attributes",
            "attributes",
            (("role", "target"),),
            (("magnitude", "float", 0.3),),
            lambda b, r, p: b.perturb(r["role"], p["magnitude"]),
        ),
        EditSpec(
            "resample_attributes", "attributes", (), (), lambda b, r, p: b.resample_attributes()
        ),
        EditSpec(
            "rebind_goal", "task", (("role", "goal"),), (), lambda b, r, p: b.rebind(p["role"])
        ),
        EditSpec(
            "rebind_target", "task", (("role", "target"),), (), lambda b, r, p: b.rebind(p["role"])
        ),
        EditSpec("resample_task", "task", (), (), lambda b, r, p: b.resample_task()),
        *N.edit_specs(EditSpec),
    )
}


def _normalise_edit(e: Any, factor: str | None) -> dict[str, Any]:
    if not isinstance(e, Mapping) or not isinstance(e.get("edit"), str):
        raise ProgramError(f"an edit must be an object with an 'edit' name, got {e!r}")
    spec = EDITS.get(e["edit"])
    if spec is None:
        raise ProgramError(f"unknown edit {e['edit']!r}; valid: {sorted(EDITS)}")
    if factor is not None and spec.factor != factor:
        raise ProgramError(
            f"edit {spec.name!r} changes {spec.factor}, but the program's factor is {factor!r} "
            "(a program edits one factor)"
        )
    known = {"edit", "factor"} | {s for s, _ in spec.roles} | {n for n, _, _ in spec.params}
    extra = sorted(set(e) - known)
    if extra:
        raise ProgramError(f"edit {spec.name!r} has unknown keys {extra}; valid: {sorted(known)}")
    out: dict[str, Any] = {"edit": spec.name}
    for slot, default in spec.roles:
        r = e.get(slot, default)
        if not isinstance(r, str) or not r:
            raise ProgramError(f"edit {spec.name!r}: {slot} must be a role name, got {r!r}")
        out[slot] = r
    for name, kind, default in spec.params:
        out[name] = _check_param(spec.name, name, kind, e.get(name, default))
    return out


def _source_roles(source: str) -> tuple[str, ...]:
    """Literal role names a source program asks for: the first string argument of its
    role(...) and rebind(...) calls."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise ProgramError(f"source program does not parse: {e.msg} (line {e.lineno})") from None
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("role", "rebind")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            out.append(node.args[0].value)
    return tuple(dict.fromkeys(out))


@dataclasses.dataclass(frozen=True)
class Program:
    """A generation program: one factor, and either parameterised edits or SDK source."""

    factor: str
    edits: tuple[dict[str, Any], ...] = ()
    source: str | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.factor not in FACTORS:
            raise ProgramError(f"program factor must be one of {FACTORS}, got {self.factor!r}")
        if (self.source is None) == (not self.edits):
            raise ProgramError("a program has either edits or source (exactly one)")

    @property
    def roles(self) -> tuple[str, ...]:
        """Every symbolic role the program needs (what `bind` resolves)."""
        if self.source is not None:
            return _source_roles(self.source)
        out = []
        for e in self.edits:
            spec = EDITS[e["edit"]]
            out += [e[slot] for slot, _ in spec.roles]
            out += list(spec.param_roles(e)) if spec.param_roles else []
        return tuple(dict.fromkeys(out))

    @property
    def primary_role(self) -> str | None:
        """The role the difficulty is about: the anchor of a relative edit, else the edited
        role (a control batch varies another factor of this role)."""
        if self.source is not None:
            return self.roles[0] if self.roles else None
        e = self.edits[0]
        return e.get("relative_to") or e.get("role") or e.get("focus")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"factor": self.factor}
        if self.source is not None:
            d["source"] = self.source
        else:
            d["edits"] = [dict(e) for e in self.edits]
        if self.note:
            d["note"] = self.note
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Program:
        """Validated program from JSON data (flat single edits normalised; defaults filled)."""
        if isinstance(d, Program):
            return d
        if not isinstance(d, Mapping):
            raise ProgramError(f"a program must be an object, got {type(d).__name__}")
        factor = d.get("factor")
        if factor is not None:
            try:
                factor = scene_factor(factor)
            except ValueError as e:
                raise ProgramError(str(e)) from None
        note = str(d.get("note", ""))
        if "source" in d:
            if not isinstance(d["source"], str) or factor is None:
                raise ProgramError("a source program needs a 'factor' and a 'source' string")
            _source_roles(d["source"])
            return cls(factor, (), d["source"], note)
        raw = d.get("edits")
        if raw is None:
            raw = [{k: v for k, v in d.items() if k not in ("factor", "note")}]
        if not isinstance(raw, (list, tuple)) or not raw:
            raise ProgramError("'edits' must be a non-empty list")
        if factor is None:
            first = raw[0].get("edit") if isinstance(raw[0], Mapping) else None
            if first not in EDITS:
                raise ProgramError(f"unknown edit {first!r}; valid: {sorted(EDITS)}")
            factor = EDITS[first].factor
        return cls(factor, tuple(_normalise_edit(e, factor) for e in raw), None, note)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


# ----------------------------------------------------------------------------- bind / apply


@dataclasses.dataclass(frozen=True)
class BoundProgram:
    """A program with its roles resolved against one scene: {role: object name}."""

    program: Program
    family: str
    binding: dict[str, str]


def bind(program: Program | Mapping[str, Any], scene: Scene) -> BoundProgram:
    """Resolves the program's roles in `scene` (any family that provides them);
    `coda.engine.roles.RoleBindingError` lists the missing roles and the available ones."""
    program = Program.from_dict(program)
    return BoundProgram(program, scene.task["family"], bind_roles(scene, program.roles))


class _Batch:
    """One sandbox run, many variants: the SDK names dispatch to the selected `EditBuilder`.

    A worker process costs seconds to start (it imports the simulator), so the variants of one
    call share it: the program body runs once per builder (`select_variant(k)` first).
    """

    def __init__(self, builders: list[EditBuilder]) -> None:
        self.builders, self.k = builders, 0

    def select(self, k: int) -> None:
        self.k = int(k)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.builders[self.k], name)(*args, **kwargs)

    def finish(self) -> list[dict[str, Any]]:
        return [b.build().to_dict() for b in self.builders]


_BATCH_WRAPPER = """def edit_one_variant():
{body}
for variant_k in range({n}):
    select_variant(variant_k)
    edit_one_variant()
result = finish_variants()
"""


def _run_source(
    program: Program,
    jobs: Sequence[tuple[Scene, int]],
    isolation: str,
    time_limit_s: float,
) -> list[Scene]:
    """Runs a source program once per (parent, seed) in ONE sandbox call (see `_Batch`)."""
    builders = [EditBuilder(scene, int(seed), program.factor) for scene, seed in jobs]
    names = tuple(builders[0].namespace())
    sandbox.validate(program.source, names)  # the program alone: its own line numbers
    batch = _Batch(builders)
    ns: dict[str, Any] = {n: functools.partial(batch.call, n) for n in names}
    ns["select_variant"], ns["finish_variants"] = batch.select, batch.finish
    body = "\n".join("    " + ln for ln in program.source.rstrip("\n").splitlines()) or "    pass"
    full = _BATCH_WRAPPER.format(body=body, n=len(jobs))
    try:
        out = sandbox.execute(
            full,
            ns,
            time_limit_s=time_limit_s * len(jobs),
            memory_limit_mb=1024.0,
            isolation=isolation,
        )
    except sandbox.SandboxError as e:  # report lines of the program, not of the wrapper
        line = e.line - 1 if e.line is not None and e.line > 1 else e.line
        raise sandbox.SandboxError(e.stage, e.reason, line) from None
    return [Scene.from_dict(d, where="edited scene") for d in out]


def apply(
    program: Program | Mapping[str, Any],
    scene: Scene,
    seed: int,
    *,
    isolation: str | None = None,
    time_limit_s: float = 10.0,
) -> Scene:
    """The variant of `scene` that `program` makes with `seed` (deterministic in it).

    Only the program's factor changes (`EditBuilder` refuses every other setter, and the result
    is checked). Edits run in-process (trusted code of this module); source programs are
    LLM-written and run in the sandbox (`isolation`, default ``"subprocess"``).
    Raises `RoleBindingError`, `SceneProgramError` (an edit that cannot be made here, e.g. no
    other object can be the goal) or `coda.sandbox.SandboxError`.
    """
    bound = bind(program, scene)
    program = bound.program
    if program.source is not None:
        (out,) = _run_source(program, [(scene, seed)], isolation or "subprocess", time_limit_s)
    else:
        builder = EditBuilder(scene, int(seed), program.factor)
        for e in program.edits:
            spec = EDITS[e["edit"]]
            roles = {slot: bound.binding[e[slot]] for slot, _ in spec.roles}
            spec.run(builder, roles, e)
        out = builder.build()
    changed = set(changed_factors(scene, out)) - {program.factor}
    if changed:  # the builder's lock makes this unreachable; kept as the contract's check
        raise SceneProgramError(f"program changed {sorted(changed)} besides {program.factor}")
    return out


def apply_many(
    program: Program | Mapping[str, Any],
    jobs: Sequence[tuple[Scene, int]],
    *,
    isolation: str | None = None,
    time_limit_s: float = 10.0,
) -> list[Scene | Exception]:
    """`apply` for many (parent, seed) pairs; an error is returned in its slot, not raised.

    A source program runs all jobs in one sandbox worker; if that call fails, each job is
    retried alone so that one bad parent does not sink the others.
    """
    program = Program.from_dict(program)

    if program.source is not None and len(jobs) > 1:
        try:
            for scene, _ in jobs:
                bind(program, scene)
            out = _run_source(program, jobs, isolation or "subprocess", time_limit_s)
        except (RoleBindingError, SceneProgramError, sandbox.SandboxError):
            pass
        else:
            for (scene, _), o in zip(jobs, out, strict=True):
                changed = set(changed_factors(scene, o)) - {program.factor}
                if changed:
                    raise SceneProgramError(f"program changed {sorted(changed)}")
            return list(out)
    res: list[Scene | Exception] = []
    for scene, seed in jobs:
        try:
            res.append(apply(program, scene, seed, isolation=isolation, time_limit_s=time_limit_s))
        except (RoleBindingError, SceneProgramError, sandbox.SandboxError) as e:
            res.append(e)
    return res


def apply_with_magnitude(
    program: Program | Mapping[str, Any], scene: Scene, seed: int, **kw: Any
) -> tuple[Scene, float]:
    """`apply` plus the variant's normalised magnitude along the program's factor."""
    program = Program.from_dict(program)
    out = apply(program, scene, seed, **kw)
    return out, factor_magnitude(scene, out, program.factor)


# ----------------------------------------------------------------------------- memory Ω


def store_program(
    store: Any,
    program: Program,
    *,
    round: int,
    mode_id: int | None,
    variants: Sequence[Any] = (),
    compile_checks: Sequence[Any] = (),
    parent_scene_program_id: int | None = None,
    meta: Mapping[str, Any] | None = None,
) -> int:
    """Writes the program into procedural memory Ω (keyed by its role signature)."""
    return store.add_generation_program(
        round=round,
        mode_id=mode_id,
        parent_scene_program_id=parent_scene_program_id,
        factor=memory_factor(program.factor),
        variants=list(variants),
        compile_checks=list(compile_checks),
        roles=list(program.roles),
        meta={**dict(meta or {}), "program": program.to_dict()},
    )


def load_programs(store: Any, **query: Any) -> list[tuple[Any, Program]]:
    """(Ω entry, Program) pairs from memory (`store.generation_programs(**query)`, newest
    first); entries without a program in their meta are skipped."""
    out = []
    for gp in store.generation_programs(**query):
        d = (gp.meta or {}).get("program")
        if d is not None:
            out.append((gp, Program.from_dict(d)))
    return out


# ----------------------------------------------------------------------------- as SDK source


def _src_edit(e: Mapping[str, Any]) -> str:
    r = json.dumps
    name = e["edit"]
    if name == "place_distractor":
        lo, hi = e["distance"]
        return (
            f"place_beside(role({r(e['role'])}), role({r(e['relative_to'])}), {r(e['side'])}, "
            f"{lo!r}, {hi!r})"
        )
    if name == "toward_workspace_edge":
        lo, hi = e["margin"]
        return f"move_to_edge(role({r(e['role'])}), {lo!r}, {hi!r}, {r(e['sides'])})"
    if name == "shift":
        lo, hi = e["distance"]
        return f"shift(role({r(e['role'])}), uniform({lo!r}, {hi!r}))"
    if name in ("scale_width", "friction", "mass"):
        field = "width" if name == "scale_width" else name
        lo, hi = e["range"]
        return f"set_quantile(role({r(e['role'])}), {r(field)}, {lo!r}, {hi!r})"
    if name == "perturb_attributes":
        return f"perturb(role({r(e['role'])}), {e['magnitude']!r})"
    if name in ("rebind_goal", "rebind_target"):
        return f"rebind({r(e['role'])})"
    if name in ("resample_task", "resample_layout", "resample_attributes"):
        return f"{name}()"
    return N.edit_source(e)


def program_to_source(program: Program | Mapping[str, Any]) -> str:
    """The same program as an SDK edit program (what the LLM engine writes): one helper call
    per edit, objects named through role(...). Source programs come back unchanged."""
    program = Program.from_dict(program)
    if program.source is not None:
        return program.source
    return "\n".join(_src_edit(e) for e in program.edits) + "\n"

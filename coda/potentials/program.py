"""The training-program language of Text2potential (§3.4) and its compiler to a staged Φ(s).

A **training program** is one restricted-Python source text (untrusted: it goes through
``coda.sandbox``) that declares an ordered subgoal decomposition::

    SUBGOALS = [
        {"name": "reach", "tool": "reeval", "description": "tcp at the target"},
        {"name": "grasp", "tool": "shaped_awr"},
    ]

    def subgoal_0_done(s, sym):          # completion predicate: bool per state
        return ee_distance(s, sym.body("target")) < 0.03

    def subgoal_0_potential(s, sym):     # progress inside the stage: float in [0, 1] per state
        return distance_progress(ee_distance(s, sym.body("target")), 0.1)

    def subgoal_1_done(s, sym): ...
    def subgoal_1_potential(s, sym): ...

Rules (checked before anything runs):

* ``SUBGOALS`` is a literal list of 1..``MAX_SUBGOALS`` dicts with a unique ``name`` and a
  learning ``tool`` from ``LEARNING_TOOLS``; optional ``description``.
* For every k there is ``subgoal_<k>_done(s, sym)`` and ``subgoal_<k>_potential(s, sym)``.
  Other top-level functions (shared helpers) and literal constants are allowed; nothing else
  runs at top level.
* Functions may read: the geometry helpers (``coda.sim.geometry.HELPERS``), ``jnp`` restricted to
  ``JNP_NAMES``, ``TABLE_Z``, ``OPEN_FRACTION``/``CLOSED_FRACTION``/``INSERT_DEPTH``,
  the state ``s`` (a ``SimState``: ``s.ee_pos``, ``s.finger``, ``s.body_pos``, ...) and the role
  resolver ``sym`` (``sym.body(role)``, ``sym.joint(role)``, ``sym.site(role)`` (a static box
  for the ``site_*`` helpers), ``sym.entity(role)``, ``sym.has(role)``; roles such as
  ``"target"``, ``"goal"``, ``"cabinet.handle"``).
  Attribute access is limited to state fields, ``sym`` methods and ``jnp`` function names
  (``x.append``, ``x.tolist``, ``s.replace``, ... are refused).
* The sandbox's ``"potential"`` profile applies: no imports, ``while``, reflection, ...

Semantics (pure jnp, jittable, vmappable over any leading batch dims)::

    k(s) = number of leading subgoals whose done(s) holds, evaluated in order on the same s
    Φ(s) = (k(s) + φ_k(s)) / K          (φ_K := 0, so Φ = 1 exactly when all K are done)

A later subgoal's progress never counts before all earlier ones are done. Completion is *not*
sticky (Φ is a function of the state only, as potential-based shaping requires), so a done
predicate must describe "this subgoal has been achieved" as a property of the state that stays
true along a successful execution (e.g. "grasped OR already placed"), not as an event. Progress
values are clipped to [0, 1] and non-finite values become 0 inside Φ, so a deployed Φ is always
bounded; ``coda.potentials.checks`` rejects programs whose *raw* values leave [0, 1] or are not
finite, so such clipping never hides a bad program.

Terminal handling (policy invariance): for the shaped chunk return
``r + β(γ^H Φ(s') − Φ(s))`` to leave optimal advantages unchanged in an episodic task, an absorbing
terminal state must have Φ = 0 (Ng et al. 1999; Grześ 2017). ``endpoint_potential(pot, s,
terminal)`` applies that convention: callers pass ``terminal=True`` for endpoints after which the
episode is absorbing (ν reached with termination, or failure/explosion), and ``False`` for time-
limit truncation, where the critic bootstraps and Φ(s') is used as is.

Roles resolve to static Python ints while JAX traces Φ; ``compile_program`` traces once with
abstract shapes (``jax.eval_shape`` under ``jax.checking_leaks``), so an unknown role, a Python
branch on a traced value, a leaked tracer or a shape error is reported at compile time with the
program line, not during training.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coda import sandbox
from coda.sim import geometry as G
from coda.sim import predicates as P
from coda.sim.state import N_FIXED_ENTITIES, SimState, SymbolTable

__all__ = [
    "JNP_NAMES",
    "LEARNING_TOOLS",
    "MAX_SUBGOALS",
    "Potential",
    "ProgramError",
    "Roles",
    "Subgoal",
    "abstract_state",
    "compile_program",
    "endpoint_potential",
    "parse_subgoals",
    "program_namespace",
]

LEARNING_TOOLS = ("bc", "shaped_awr", "reeval")
MAX_SUBGOALS = 12
# Address-space budget of the probe worker: XLA's CPU runtime alone maps ~1 GB (thread stacks).
PROBE_MEMORY_MB = 4096.0
JNP_NAMES = (
    "abs",
    "all",
    "any",
    "arctan2",
    "asarray",
    "clip",
    "cos",
    "exp",
    "log",
    "logical_and",
    "logical_not",
    "logical_or",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "ones_like",
    "pi",
    "prod",
    "sin",
    "sqrt",
    "square",
    "stack",
    "sum",
    "tanh",
    "where",
    "zeros_like",
)
_CONSTANTS = {
    "TABLE_Z": G.TABLE_Z,
    "OPEN_FRACTION": P.OPEN_FRACTION,
    "CLOSED_FRACTION": P.CLOSED_FRACTION,
    "INSERT_DEPTH": P.INSERT_DEPTH,
}
_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(SimState))
_ROLE_METHODS = ("body", "joint", "site", "entity", "has")
ALLOWED_ATTRS = frozenset(_STATE_FIELDS) | frozenset(_ROLE_METHODS) | frozenset(JNP_NAMES)
_ERROR_STAGES = ("syntax", "validate", "trace")


class ProgramError(Exception):
    """A training program could not be compiled. ``stage``: syntax | validate | trace."""

    def __init__(self, stage: str, message: str, line: int | None = None, **details: Any):
        if stage not in _ERROR_STAGES:
            raise ValueError(f"unknown program error stage {stage!r}; valid: {_ERROR_STAGES}")
        self.stage, self.message, self.line = stage, message, line
        self.details = dict(details)
        where = f" (line {line})" if line is not None else ""
        super().__init__(f"[{stage}]{where} {message}")

    def to_feedback(self) -> dict[str, Any]:
        return {"stage": self.stage, "message": self.message, "line": self.line, **self.details}


@dataclasses.dataclass(frozen=True)
class Subgoal:
    name: str
    tool: str
    description: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "tool": self.tool, "description": self.description}


class Roles:
    """What a program sees as ``sym``: role -> static int, nothing else (no table internals)."""

    __slots__ = ("_table",)

    def __init__(self, table: SymbolTable) -> None:
        self._table = table

    def body(self, role: str) -> int:
        return self._table.body(role)

    def joint(self, role: str) -> int:
        return self._table.joint(role)

    def site(self, role: str) -> tuple:
        return self._table.site(role)

    def entity(self, role: str) -> int:
        return self._table.entity(role)

    def has(self, role: str) -> bool:
        return self._table.has(role)

    def __reduce__(self):  # picklable for the sandbox's probe worker
        return (Roles, (self._table,))


def program_namespace() -> dict[str, Any]:
    """Names a training program may read (helpers, restricted jnp, constants)."""
    ns: dict[str, Any] = dict(G.HELPERS)
    ns["jnp"] = sandbox.restricted_module(jnp, JNP_NAMES)
    ns.update(_CONSTANTS)
    return ns


# ----------------------------------------------------------------------------- static checks


def _literal(node: ast.AST, what: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ProgramError(
            "validate", f"{what} must be a literal (numbers, strings, lists, dicts)", node.lineno
        ) from None


def parse_subgoals(tree: ast.Module) -> tuple[Subgoal, ...]:
    """Read the SUBGOALS literal and check the top-level shape of a program."""
    subgoals = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # docstring / comment string
        if isinstance(node, ast.Assign):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                raise ProgramError(
                    "validate", "top-level assignments must bind one plain name", node.lineno
                )
            name = node.targets[0].id
            value = _literal(node.value, f"top-level value of {name!r}")
            if name == "SUBGOALS":
                subgoals = (value, node.lineno)
            continue
        raise ProgramError(
            "validate",
            f"top level may hold only SUBGOALS, literal constants and function definitions; "
            f"found {type(node).__name__}",
            getattr(node, "lineno", None),
        )
    if subgoals is None:
        raise ProgramError("validate", "program must assign SUBGOALS = [{...}, ...]")
    value, line = subgoals
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_SUBGOALS:
        raise ProgramError("validate", f"SUBGOALS must be a list of 1..{MAX_SUBGOALS} dicts", line)
    out = []
    for k, sg in enumerate(value):
        if not isinstance(sg, dict) or not isinstance(sg.get("name"), str) or not sg["name"]:
            raise ProgramError("validate", f"SUBGOALS[{k}] must be a dict with a 'name'", line)
        extra = set(sg) - {"name", "tool", "description"}
        if extra:
            raise ProgramError(
                "validate",
                f"SUBGOALS[{k}] has unknown keys {sorted(extra)}; allowed: name, tool, description",
                line,
            )
        tool = sg.get("tool", "shaped_awr")
        if tool not in LEARNING_TOOLS:
            raise ProgramError(
                "validate",
                f"SUBGOALS[{k}] tool {tool!r} unknown; valid: {list(LEARNING_TOOLS)}",
                line,
            )
        out.append(Subgoal(sg["name"], tool, str(sg.get("description", ""))))
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise ProgramError("validate", f"subgoal names must be unique: {names}", line)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for k in range(len(out)):
        for part in ("done", "potential"):
            fn = f"subgoal_{k}_{part}"
            if fn not in defs:
                raise ProgramError("validate", f"missing function {fn}(s, sym)")
            args = defs[fn].args
            if len(args.args) != 2 or args.vararg or args.kwarg or args.kwonlyargs:
                raise ProgramError("validate", f"{fn} must take exactly (s, sym)", defs[fn].lineno)
    stray = [n for n in defs if n.startswith("subgoal_") and _subgoal_index(n) >= len(out)]
    if stray:
        raise ProgramError(
            "validate", f"functions {stray} have no matching entry in SUBGOALS ({len(out)})"
        )
    return tuple(out)


def _subgoal_index(name: str) -> int:
    parts = name.split("_")
    return int(parts[1]) if len(parts) >= 3 and parts[1].isdigit() else -1


def _check_attributes(tree: ast.Module) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr not in ALLOWED_ATTRS:
            raise ProgramError(
                "validate",
                f"attribute {node.attr!r} is not available; state fields: {list(_STATE_FIELDS)}, "
                f"sym methods: {list(_ROLE_METHODS)}, jnp functions: {list(JNP_NAMES)}",
                node.lineno,
            )


# ----------------------------------------------------------------------------- potential


def abstract_state(sym: SymbolTable, batch: tuple[int, ...] = (2,)) -> SimState:
    """ShapeDtypeStruct state big enough for every index in ``sym`` (for compile-time tracing)."""
    nb = max([i for _, i in sym.bodies] + [int(v[0]) for _, v in sym.sites], default=-1) + 1
    nj = max([j for _, j in sym.joints], default=-1) + 1
    ne = N_FIXED_ENTITIES + nb

    def sd(*shape: int) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(batch + shape, jnp.float32)

    return SimState(
        ee_pos=sd(3),
        ee_quat=sd(4),
        finger=sd(2),
        body_pos=sd(nb, 3),
        body_quat=sd(nb, 4),
        joint_pos=sd(nj),
        contact=sd(ne, ne),
        body_half=sd(nb, 3),
        inner=sd(nb, 4),
        joint_range=sd(nj, 2),
        body_linvel=sd(nb, 3),
        body_angvel=sd(nb, 3),
    )


def _batch_shape(state: SimState) -> tuple[int, ...]:
    return tuple(state.ee_pos.shape[:-1])


@dataclasses.dataclass(frozen=True, eq=False)
class Potential:
    """A compiled training program: Φ(s) = (k + φ_k(s)) / K. Hashable by identity (jit-static).

    ``phi``, ``stage`` and ``raw`` are pure jnp functions of a ``SimState`` with any leading
    batch dims ([...]); role indices are baked in as static ints.
    """

    source: str
    sym: SymbolTable
    subgoals: tuple[Subgoal, ...]
    done_fns: tuple[Callable[..., Any], ...]
    potential_fns: tuple[Callable[..., Any], ...]

    def __post_init__(self) -> None:
        # one compiled function per Potential: eager calls do not dispatch op by op, and
        # calls inside an outer jit/vmap inline it
        object.__setattr__(self, "_compiled", jax.jit(self.phi_and_stage))

    @property
    def num_stages(self) -> int:
        return len(self.subgoals)

    @property
    def tools(self) -> dict[str, str]:
        return {s.name: s.tool for s in self.subgoals}

    def raw(self, state: SimState) -> tuple[jnp.ndarray, jnp.ndarray]:
        """Unclipped per-subgoal outputs: done [..., K] bool, progress [..., K] float32.

        Raises ``ProgramError('trace')`` if an output is not one value per state.
        """
        roles = Roles(self.sym)
        batch = _batch_shape(state)
        done, prog = [], []
        for k in range(self.num_stages):
            d = jnp.asarray(self.done_fns[k](state, roles))
            p = jnp.asarray(self.potential_fns[k](state, roles), jnp.float32)
            for name, x in ((f"subgoal_{k}_done", d), (f"subgoal_{k}_potential", p)):
                if x.shape not in (batch, ()):
                    raise ProgramError(
                        "trace",
                        f"{name} must return one value per state: expected shape {batch} "
                        f"(or a scalar), got {x.shape}",
                        function=name,
                    )
            done.append(jnp.broadcast_to(d.astype(bool), batch))
            prog.append(jnp.broadcast_to(p, batch))
        return jnp.stack(done, -1), jnp.stack(prog, -1)

    @staticmethod
    def _stage_of(done: jnp.ndarray) -> jnp.ndarray:
        # leading run of True: cumprod over the subgoal axis, then count
        return jnp.sum(jnp.cumprod(done.astype(jnp.int32), axis=-1), axis=-1)

    def stage(self, state: SimState) -> jnp.ndarray:
        """k: number of subgoals completed in order. [...] int32 in [0, K]."""
        return self._compiled(state)[1]

    def phi_and_stage(self, state: SimState) -> tuple[jnp.ndarray, jnp.ndarray]:
        """(Φ [...] float32, k [...] int32) from one evaluation of the program."""
        return self.combine(*self.raw(state))

    def combine(self, done: jnp.ndarray, prog: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        """Staged Φ and k from raw outputs (done [..., K], progress [..., K])."""
        k = self._stage_of(done)
        prog = jnp.clip(jnp.nan_to_num(prog, nan=0.0, posinf=0.0, neginf=0.0), 0.0, 1.0)
        prog = jnp.concatenate([prog, jnp.zeros_like(prog[..., :1])], -1)  # φ_K := 0
        cur = jnp.take_along_axis(prog, k[..., None], axis=-1)[..., 0]
        return (k.astype(jnp.float32) + cur) / self.num_stages, k.astype(jnp.int32)

    def phi(self, state: SimState) -> jnp.ndarray:
        """Φ(s) in [0, 1]. [...] float32."""
        return self._compiled(state)[0]

    __call__ = phi


def endpoint_potential(
    potential: Potential | Callable[[SimState], jnp.ndarray],
    state: SimState,
    terminal: jnp.ndarray | None = None,
) -> jnp.ndarray:
    """Φ at a chunk endpoint with the absorbing-terminal convention Φ(terminal) = 0. [...]"""
    phi = potential.phi(state) if isinstance(potential, Potential) else potential(state)
    if terminal is None:
        return phi
    return jnp.where(jnp.asarray(terminal, bool), 0.0, phi)


def compile_program(
    source: str,
    sym: SymbolTable,
    *,
    probe_state: SimState | None = None,
    time_limit_s: float = 10.0,
    probe_memory_limit_mb: float = PROBE_MEMORY_MB,
    limits: sandbox.Limits | None = None,
) -> Potential:
    """Validate a training program and compile it into a jittable staged potential.

    ``probe_state``: an optional concrete (numpy) state; the whole program is then first run on
    it in the sandbox's limited worker subprocess (catches non-termination and memory blow-ups
    before anything runs in-process; costs a process start). Raises ``ProgramError``.
    """
    if not isinstance(source, str):
        raise ProgramError("validate", f"program source must be a str, got {type(source)}")
    ns = program_namespace()
    try:
        tree = sandbox.validate(source, ns.keys(), profile="potential", limits=limits)
    except sandbox.SandboxError as e:
        raise ProgramError(_stage(e), e.reason, e.line) from None
    subgoals = parse_subgoals(tree)
    _check_attributes(tree)
    entries = [f"subgoal_{k}_{p}" for k in range(len(subgoals)) for p in ("done", "potential")]
    try:
        if probe_state is not None:
            probe_src = source + "\n\ndef t2p_probe_all(s, sym):\n    return [{}]\n".format(
                ", ".join(f"jnp.asarray({e}(s, sym), 'float32')" for e in entries)
            )
            sandbox.compile_function(
                probe_src,
                "t2p_probe_all",
                ns,
                time_limit_s=time_limit_s,
                probe_args=(jax.tree_util.tree_map(np.asarray, probe_state), Roles(sym)),
                probe_memory_limit_mb=probe_memory_limit_mb,
                limits=limits,
            )
        fns = {
            e: sandbox.compile_function(source, e, ns, time_limit_s=time_limit_s, limits=limits)
            for e in entries
        }
    except sandbox.SandboxError as e:
        raise ProgramError(_stage(e), e.reason, e.line) from None
    pot = Potential(
        source=source,
        sym=sym,
        subgoals=subgoals,
        done_fns=tuple(fns[f"subgoal_{k}_done"] for k in range(len(subgoals))),
        potential_fns=tuple(fns[f"subgoal_{k}_potential"] for k in range(len(subgoals))),
    )
    trace_check(pot)
    return pot


def _stage(e: sandbox.SandboxError) -> str:
    return {"syntax": "syntax", "validate": "validate"}.get(e.stage, "trace")


def trace_check(pot: Potential, state: SimState | None = None) -> None:
    """Trace Φ with abstract shapes under ``jax.checking_leaks``; unknown roles, Python branches
    on traced values, leaked tracers and shape errors become ``ProgramError('trace')``."""
    state = abstract_state(pot.sym) if state is None else state
    try:
        with jax.checking_leaks():
            jax.eval_shape(pot.raw, state)
        return
    except Exception:  # noqa: BLE001 - diagnosed below
        pass
    # retrace without the leak checker for the program's own error; if that trace succeeds the
    # failure was a leak (JAX itself sometimes fails while describing a leak: no message match)
    try:
        jax.eval_shape(pot.raw, state)
    except ProgramError:
        raise
    except sandbox.SandboxError as e:
        raise ProgramError("trace", _hint(e.reason), e.line) from None
    except Exception as e:  # noqa: BLE001 - any tracing failure is the program's fault
        msg = str(e).split("\n")[0][:400]
        msg = _hint(f"{type(e).__name__} while tracing Φ with JAX: {msg}")
        raise ProgramError("trace", msg, _program_line(e)) from None
    raise ProgramError("trace", LEAK_MESSAGE)


def is_leak_error(e: BaseException) -> bool:
    """Raised by ``jax.checking_leaks`` (also when JAX fails while describing the leak)."""
    import traceback

    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:  # JAX hides its frames in a chained error
        seen.add(id(cur))
        if "Leaked" in str(cur):
            return True
        names = {f.f_code.co_name for f, _ in traceback.walk_tb(cur.__traceback__)}
        if names & {"ensure_no_leaks", "leaked_tracer_error", "_why_alive"}:
            return True
        cur = cur.__cause__ or cur.__context__
    return False


LEAK_MESSAGE = (
    "a traced value escaped the program (kept in a default argument or a container that "
    "outlives the call); potential functions must be pure functions of (s, sym)"
)


def _hint(msg: str) -> str:
    if any(k in msg for k in ("truth value", "Tracer", "Concretization")):
        msg += " (Φ is traced by JAX: branch with jnp.where, not Python if/and/or)"
    return msg


def _program_line(exc: BaseException) -> int | None:
    import traceback

    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == sandbox.SANDBOX_FILENAME:
            line = lineno
    return line


def source_summary(pot: Potential) -> dict[str, Any]:
    """JSON-ready description (for memory and reports)."""
    return {"subgoals": [s.to_dict() for s in pot.subgoals], "tools": pot.tools}

"""The Text2potential compiler R_hone (§3.4): diagnosis → training program, with checked repair.

Two compilers share one interface (``propose(request, sym, history, examples) -> Proposal``):

* ``LLMCompiler``: the ``"compiler"`` role of ``coda.llm.LLMClient``. The prompt holds the failure
  record ψ = (δ factor, p phase, c cause, e evidence), the task τ, the scene's symbol table, the
  language reference with helper signatures, accepted training programs of the same mode from
  memory Φ as examples, and this loop's failed attempts with their structured check errors. The
  reply is structured output ``{"source": ..., "notes": ...}``.
* ``OfflineCompiler``: deterministic, no network: (task family, diagnosed phase, roles) → a real
  subgoal program from ``coda.potentials.library``; each failed attempt moves one step down the
  repair ladder (full decomposition → coarse → task-description potential). It is also installed
  as the offline handler of the ``"compiler"`` role, so an ``LLMClient`` with the (default)
  offline backend runs the same ``LLMCompiler`` path with no network — the embedded default.

``compile_with_repair`` runs propose → compile → check for at most ``max_rounds`` rounds and
records every attempt (source, check results, accepted or not) in memory Φ.

Ablation (``CompileRequest.ablation=True``): the potential is compiled from the task description
(τ's terminal relation) instead of the diagnosis.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from coda.llm import LLMClient, offline_handlers, register_offline_handler
from coda.memory import role_signature
from coda.potentials import library
from coda.potentials.checks import CheckFailure, CheckReport, Demos, check_program
from coda.potentials.program import (
    JNP_NAMES,
    LEARNING_TOOLS,
    Potential,
    ProgramError,
    compile_program,
)
from coda.sim import geometry as G
from coda.sim.state import SymbolTable

__all__ = [
    "COMPILER_SCHEMA",
    "Attempt",
    "CompileRequest",
    "Compiler",
    "FailureRecord",
    "LLMCompiler",
    "OfflineCompiler",
    "Proposal",
    "compile_with_repair",
    "offline_compiler_handler",
    "retrieve_examples",
]

REQUEST_MARKER = "REQUEST_JSON:"

COMPILER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "source": {
            "type": "string",
            "description": "the complete training program in the restricted language",
        },
        "notes": {"type": "string", "description": "one or two sentences on the decomposition"},
    },
    "required": ["source", "notes"],
    "additionalProperties": False,
}


@dataclasses.dataclass(frozen=True)
class FailureRecord:
    """ψ = (δ, p, c, e): failure factor, phase, cause, evidence (from the critic / memory)."""

    factor: str
    phase: str
    cause: str = ""
    evidence: Any = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class CompileRequest:
    """What to compile: τ (family, instruction, roles, params, terminal), ψ, mode, round."""

    task: Mapping[str, Any]
    diagnosis: FailureRecord | None = None
    mode_id: int | None = None
    round: int = 0
    ablation: bool = False  # compile from the task description instead of the diagnosis

    @property
    def family(self) -> str:
        return str(self.task.get("family", ""))

    @property
    def phase(self) -> str | None:
        return None if self.diagnosis is None else self.diagnosis.phase

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": _jsonable(self.task),
            "diagnosis": None if self.diagnosis is None else _jsonable(self.diagnosis.to_dict()),
            "mode_id": self.mode_id,
            "round": self.round,
            "ablation": self.ablation,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CompileRequest:
        diag = d.get("diagnosis")
        return cls(
            task=dict(d["task"]),
            diagnosis=None if diag is None else FailureRecord(**diag),
            mode_id=d.get("mode_id"),
            round=int(d.get("round", 0)),
            ablation=bool(d.get("ablation", False)),
        )


@dataclasses.dataclass(frozen=True)
class Proposal:
    source: str | None  # None: the compiler produced no program (e.g. an LLM failure)
    notes: str = ""
    compiler: str = ""


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One round of the repair loop, as recorded in memory Φ."""

    index: int
    source: str | None
    report: CheckReport
    notes: str = ""
    compiler: str = ""
    program_id: int | None = None

    @property
    def accepted(self) -> bool:
        return self.source is not None and self.report.ok

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "source": self.source,
            "accepted": self.accepted,
            "checks": self.report.to_dict(),
            "notes": self.notes,
            "compiler": self.compiler,
            "program_id": self.program_id,
        }


class Compiler(Protocol):
    name: str

    def propose(
        self,
        request: CompileRequest,
        sym: SymbolTable,
        history: Sequence[Attempt] = (),
        examples: Sequence[Any] = (),
    ) -> Proposal: ...


# ----------------------------------------------------------------------------- offline


class OfflineCompiler:
    """Deterministic R_hone: program templates per family; repairs step down the ladder."""

    name = "offline"

    def propose(
        self,
        request: CompileRequest,
        sym: SymbolTable,
        history: Sequence[Attempt] = (),
        examples: Sequence[Any] = (),
    ) -> Proposal:
        del sym, examples
        return _offline_proposal(request, len(history))


def _offline_proposal(request: CompileRequest, n_failed: int) -> Proposal:
    if request.ablation:
        src = library.task_description_program(request.task)
        return Proposal(src, "task-description potential (ablation)", "offline")
    level = min(n_failed, library.REPAIR_LEVELS - 1)
    diag = request.diagnosis
    src = library.subgoal_program(
        request.task,
        phase=None if diag is None else diag.phase,
        factor=None if diag is None else diag.factor,
        level=level,
    )
    what = ("full subgoal decomposition", "coarse decomposition", "task-description fallback")
    return Proposal(src, f"{what[level]} (repair level {level})", "offline")


def offline_compiler_handler(request: Any, role: str) -> dict[str, str]:
    """The ``"compiler"`` role of the offline LLM backend: reads the request JSON in the prompt."""
    del role
    payload = _payload_from_messages(request.messages)
    req = CompileRequest.from_dict(payload["request"])
    prop = _offline_proposal(req, len(payload.get("attempts", [])))
    return {"source": prop.source or "", "notes": prop.notes}


def _payload_from_messages(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    for m in reversed(messages):
        content = m.get("content")
        if isinstance(content, list):  # multimodal parts
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        if isinstance(content, str) and REQUEST_MARKER in content:
            return json.loads(content.split(REQUEST_MARKER, 1)[1])
    raise ValueError(f"compiler prompt has no {REQUEST_MARKER} block")


# ----------------------------------------------------------------------------- LLM


def _helper_signatures() -> list[str]:
    out = []
    for name, fn in G.HELPERS.items():
        sig = str(inspect.signature(fn)).replace("jnp.ndarray", "array").replace("'", "")
        doc = (inspect.getdoc(fn) or "").split("\n")[0]
        out.append(f"{name}{sig}" + (f"  # {doc}" if doc else ""))
    return out


LANGUAGE_GUIDE = """You write training programs for robot-learning potentials (Text2potential).
A training program is restricted Python (no imports, no while, no classes, no reflection; only
the names listed below). It declares an ordered subgoal decomposition of the task:

SUBGOALS = [{"name": "<unique>", "tool": "<tool>", "description": "<short>"}, ...]   # 1..12
def subgoal_<k>_done(s, sym):       # bool per state: subgoal k is achieved
def subgoal_<k>_potential(s, sym):  # float in [0, 1] per state: progress inside stage k

Φ(s) = (k + φ_k(s)) / K where k = number of leading subgoals whose done() holds, in order, on the
same state. Completion is NOT sticky: write done() as a property of the state that stays true for
the rest of a successful execution (e.g. "grasped OR already placed"). The last subgoal's done()
must hold whenever the task succeeds. Φ is traced by JAX: branch with jnp.where, never Python
if/and/or on state values; combine booleans with & | ~. Other top-level functions and literal
constants are allowed.

s: simulator state with fields ee_pos [...,3], ee_quat [...,4], finger [...,2], body_pos [...,NB,3],
body_quat [...,NB,4], joint_pos [...,NJ], contact [...,NE,NE], body_half [...,NB,3],
inner [...,NB,4], joint_range [...,NJ,2], body_linvel [...,NB,3], body_angvel [...,NB,3]
(indices come from sym).
sym: sym.body(role) -> body index, sym.joint(role) -> joint index, sym.site(role) -> a box fixed
to a body (for the site_* helpers), sym.entity(role), sym.has(role). Roles are those of the
symbol table below (e.g. "target", "cabinet.handle"; a LIBERO goal's "goal0.object").
Learning tools: @TOOLS@. jnp functions: @JNP@. Constants: TABLE_Z, OPEN_FRACTION,
CLOSED_FRACTION, INSERT_DEPTH.
Geometry helpers:
@HELPERS@

A program is accepted when, on rollout states, every output is finite, progress lies in [0, 1],
each function returns one value per state, Φ rises along successful planner demonstrations
(mean Spearman rank correlation with time >= 0.8), and the last stage is complete wherever the
task's success predicate holds. Failed checks come back to you as {stage, message, details}.

Reply with JSON {"source": "<the whole program>", "notes": "<one or two sentences>"}."""


def retrieve_examples(memory: Any, request: CompileRequest, limit: int = 3) -> list[Any]:
    """Accepted training programs of the same mode (else the same role signature) from Φ."""
    if memory is None:
        return []
    rows: list[Any] = []
    if request.mode_id is not None:
        rows = memory.training_programs(mode_id=request.mode_id)
    if not rows:
        roles = request.task.get("roles") or {}
        if roles:
            rows = memory.training_programs(role_signature=role_signature(roles))
    ok = [r for r in rows if isinstance(r.meta, Mapping) and r.meta.get("accepted")]
    return ok[:limit]


class LLMCompiler:
    """R_hone on an ``LLMClient`` (role ``"compiler"``); offline backend → ``OfflineCompiler``."""

    name = "llm"
    talks_to_llm = True  # `coda.potentials.task.make_compiler` hands it the loop's client

    def __init__(self, client: Any | None = None, *, role: str = "compiler") -> None:
        if client is None:
            client = LLMClient()
        self.client = client
        self.role = role
        self.last_response: Any = None

    def messages(
        self,
        request: CompileRequest,
        sym: SymbolTable,
        history: Sequence[Attempt] = (),
        examples: Sequence[Any] = (),
    ) -> list[dict[str, Any]]:
        system = (
            LANGUAGE_GUIDE.replace("@TOOLS@", ", ".join(LEARNING_TOOLS))
            .replace("@JNP@", ", ".join(JNP_NAMES))
            .replace("@HELPERS@", "\n".join(_helper_signatures()))
        )
        payload = {
            "request": request.to_dict(),
            "symbol_table": sym.to_dict(),
            "examples": [
                {"phase": e.phase, "subgoals": e.subgoals, "source": e.potential_source}
                for e in examples
            ],
            "attempts": [
                {"source": a.source, "failures": [f.to_dict() for f in a.report.failures]}
                for a in history
            ],
        }
        if request.ablation:
            task_line = (
                "Write a potential from the task description only (its terminal relation), "
                "ignoring any diagnosis."
            )
        else:
            task_line = (
                "Write a subgoal decomposition that gives dense progress where the policy fails "
                "(the diagnosed phase), with learning tools per subgoal."
            )
        if history:
            task_line += (
                " Your previous attempts failed the checks listed under attempts; fix them."
            )
        user = f"{task_line}\n\n{REQUEST_MARKER}\n" + json.dumps(
            _jsonable(payload), indent=1, sort_keys=True
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def propose(
        self,
        request: CompileRequest,
        sym: SymbolTable,
        history: Sequence[Attempt] = (),
        examples: Sequence[Any] = (),
    ) -> Proposal:
        resp = self.client.chat(
            self.role,
            self.messages(request, sym, history, examples),
            schema=COMPILER_SCHEMA,
            schema_name="training_program",
            round=request.round,
        )
        self.last_response = resp
        if not resp.ok:
            f = resp.failure
            return Proposal(None, f"LLM failure: {f.kind}: {f.message}", f"llm:{resp.backend}")
        return Proposal(
            str(resp.parsed["source"]), str(resp.parsed["notes"]), f"llm:{resp.backend}"
        )


# ----------------------------------------------------------------------------- repair loop


def compile_with_repair(
    compiler: Compiler,
    request: CompileRequest,
    sym: SymbolTable,
    demos: Demos,
    memory: Any | None = None,
    max_rounds: int = 3,
    *,
    probe: bool = True,
    min_rank_corr: float = 0.8,
    min_completion: float = 1.0,
) -> tuple[Potential | None, list[Attempt]]:
    """Propose → compile → check, repairing from structured failures for ≤ ``max_rounds``.

    ``demos``: successful planner rollouts of the scene (``Demos.from_rollout``) for the runtime,
    usefulness and completion checks. ``probe``: first run each program in the sandbox's limited
    worker (catches non-termination / memory blow-ups; costs a process start with a JAX import).
    Every attempt is written to ``memory`` (``add_training_program``; ``meta.accepted`` marks the
    accepted one). Returns the accepted potential (or None) and all attempts.
    """
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
    examples = retrieve_examples(memory, request)
    attempts: list[Attempt] = []
    for i in range(max_rounds):
        prop = compiler.propose(request, sym, tuple(attempts), examples)
        pot: Potential | None = None
        if prop.source is None:
            report = CheckReport((CheckFailure("compiler", prop.notes or "no program"),))
        else:
            try:
                pot = compile_program(
                    prop.source, sym, probe_state=demos.first_state() if probe else None
                )
            except ProgramError as e:
                report = CheckReport((CheckFailure.from_program_error(e),))
            else:
                report = check_program(
                    pot,
                    demos.states,
                    demos.success,
                    demos.nu,
                    min_rank_corr=min_rank_corr,
                    min_completion=min_completion,
                    until_success=demos.until_success,
                )
        attempt = Attempt(i, prop.source, report, prop.notes, prop.compiler or compiler.name)
        if memory is not None:
            pid = _record(memory, request, attempt, pot)
            attempt = dataclasses.replace(attempt, program_id=pid)
        attempts.append(attempt)
        if attempt.accepted:
            return pot, attempts
    return None, attempts


def _record(memory: Any, request: CompileRequest, attempt: Attempt, pot: Potential | None) -> int:
    if pot is not None:
        subgoals = [s.to_dict() for s in pot.subgoals]
        tools = pot.tools
    else:
        subgoals, tools = [], {}
    diag = request.diagnosis
    meta = {
        "accepted": attempt.accepted,
        "attempt": attempt.index,
        "compiler": attempt.compiler,
        "notes": attempt.notes,
        "checks": attempt.report.to_dict(),
        "family": request.family,
        "ablation": request.ablation,
        "factor": None if diag is None else diag.factor,
        "cause": None if diag is None else diag.cause,
    }
    return memory.add_training_program(
        round=request.round,
        mode_id=request.mode_id,
        phase=request.phase,
        subgoals=subgoals,
        potential_source=attempt.source or "",
        tools=tools,
        roles=request.task.get("roles") or (),
        evidence=[],
        meta=_jsonable(meta),
    )


def _jsonable(x: Any) -> Any:
    """Round-trip through JSON with numpy scalars/arrays made plain (NaN → None)."""
    import math

    import numpy as np

    def fix(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {str(k): fix(w) for k, w in v.items()}
        if isinstance(v, (list, tuple, set, frozenset)):
            return [fix(w) for w in v]
        if isinstance(v, np.ndarray):
            return fix(v.tolist())
        if isinstance(v, np.generic):
            return fix(v.item())
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if v is None or isinstance(v, (str, int, float, bool)):
            return v
        return str(v)

    return fix(x)


def _register_offline() -> None:
    if "compiler" not in offline_handlers():
        register_offline_handler("compiler", offline_compiler_handler)


_register_offline()

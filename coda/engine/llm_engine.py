"""The LLM engine: a coding agent that writes role-bound edit programs against the scene SDK.

Per mode, the agent (``coda.llm`` client, role ``engine``) gets the SDK's documentation (the
docstrings of `coda.sim.sdk` and of the edit helpers in `coda.engine.edits`), the mode
(δ, p, cause), the roles the parent scenes provide and one parent scene, and replies with an
edit program (JSON ``{"program": source, "notes": text}``). Each attempt is

1. parsed into a `Program` (factor = the mode's, roles = its ``role("...")`` calls);
2. executed on `probe_variants` parents (round-robin, distinct seeds) in the sandbox
   (``isolation="subprocess"`` by default: the program is untrusted), on an `EditBuilder`
   that refuses every setter outside the mode's factor;
3. verified (`coda.sim.verify`); accepted if at least `min_pass` of the probes verify.

A rejected attempt's errors (sandbox stage / line / message, SDK errors, missing roles,
verification reasons with object and magnitude) go back to the agent as repair feedback, for at
most `max_attempts` attempts. Every attempt is recorded: in `self.attempts`, and, with a
memory, as a scene program (`add_scene_program`) plus a generation trace
(`add_generation_trace`: violated checks, repair step, outcome).

Offline, the ``engine`` role's handler (`offline_engine_handler`, registered on import) answers
with the rule table's program written as SDK source (`program_to_source`), moving down the
table's candidates on each repair request, so the whole loop runs without a model.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any

from coda.engine.edits import SDK_EXTRAS_DOC
from coda.engine.engines import ModeSpec, mode_spec
from coda.engine.programs import (
    Program,
    ProgramError,
    apply_many,
    bind,
    memory_factor,
    program_to_source,
)
from coda.engine.roles import RoleBindingError, available_roles, resolve_role
from coda.engine.rules import NoProgram, candidate_programs
from coda.engine.seeding import verify_scenes
from coda.llm import LLMClient, offline_handlers, register_offline_handler
from coda.sim import sdk
from coda.sim.scene import Scene
from coda.sim.verify import CHECKS

__all__ = [
    "ENGINE_SCHEMA",
    "REQUEST_MARKER",
    "EngineAttempt",
    "LLMEngine",
    "LLMEngineError",
    "offline_engine_handler",
    "sdk_documentation",
]

REQUEST_MARKER = "ENGINE REQUEST (JSON):"
ENGINE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["program", "notes"],
    "properties": {
        "program": {"type": "string", "minLength": 1, "maxLength": 8000},
        "notes": {"type": "string", "maxLength": 2000},
    },
}
MAX_FEEDBACK = 8


class LLMEngineError(RuntimeError):
    """No attempt was accepted within the attempt budget; `attempts` says why each failed."""

    def __init__(self, message: str, attempts: list[EngineAttempt]) -> None:
        super().__init__(message)
        self.attempts = attempts


@dataclasses.dataclass
class EngineAttempt:
    index: int
    source: str | None
    notes: str
    errors: list[str]  # repair feedback (empty when accepted)
    made: int  # probes the program produced a scene for
    verified: int  # of those, verified
    probes: int
    accepted: bool
    scene_program_id: int | None = None
    trace_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _method_doc(fn: Any) -> str:
    sig = str(inspect.signature(fn)).replace("(self, ", "(").replace("(self)", "()")
    doc = inspect.getdoc(fn) or ""
    return f"{fn.__name__}{sig}" + (f"\n    {doc}" if doc else "")


def sdk_documentation() -> str:
    """What the agent is told about the SDK: its module documentation, the setters' signatures
    and docstrings, and the edit helpers (`coda.engine.edits.SDK_EXTRAS_DOC`)."""
    b = sdk.SceneBuilder
    setters = "\n".join(
        _method_doc(getattr(b, n))
        for n in ("set_layout", "set_attributes", "set_task", "uniform", "randint", "choice")
    )
    return f"{inspect.getdoc(sdk)}\n\nSetters:\n{setters}\n\n{SDK_EXTRAS_DOC}"


SYSTEM = """You are the data engine of a robot-learning system. A failure mode of the policy
was diagnosed as (factor, phase, cause). Write a short Python *edit program* against the scene
SDK below that turns a parent scene into a variant recreating that difficulty.

Rules:
- Change ONLY the {factor} factor. Setters of other factors raise; objects and table are fixed.
- Name objects only through role("..."), never by literal object names, so the program
  transfers to other scenes (roles available: {roles}).
- Use uniform()/choice()/randint() for variation: every seed must give a different variant.
- The variant must pass verification: {checks} (no interpenetration, objects supported, on the
  table, reachable by the gripper, in the cameras' view, stable).
- No imports, no attribute access on modules, no classes; plain calls and arithmetic.
Reply with JSON {{"program": "<source>", "notes": "<one line: what it does>"}}.

SDK documentation:
{sdk_doc}
"""


def _summary(scene: Scene) -> dict[str, Any]:
    """The parent scene as the agent sees it: roles -> category, instance, pose, attributes."""
    by_role = {}
    for r in available_roles(scene):
        n = resolve_role(scene, r)
        o = scene.object(n)
        by_role[r] = {
            "category": o.category,
            "instance": o.instance,
            "pose": scene.layout[n],
            "attributes": scene.attributes[n],
        }
    return {
        "family": scene.task["family"],
        "instruction": scene.task.get("instruction", ""),
        "roles": by_role,
    }


class LLMEngine:
    """Writes, runs, verifies and repairs edit programs through an LLM client (see module)."""

    name = "llm"

    def __init__(
        self,
        client: Any | None = None,
        *,
        role: str = "engine",
        memory: Any | None = None,
        max_attempts: int = 3,
        probe_variants: int = 4,
        min_pass: float = 0.5,
        isolation: str = "subprocess",
        time_limit_s: float = 10.0,
    ) -> None:
        if max_attempts < 1 or probe_variants < 1 or not 0.0 < min_pass <= 1.0:
            raise ValueError("need max_attempts >= 1, probe_variants >= 1, 0 < min_pass <= 1")
        if client is None:
            client = LLMClient()  # offline backend: the rule table, as SDK source
        self.client, self.role, self.memory = client, role, memory
        self.max_attempts, self.probe_variants, self.min_pass = (
            max_attempts,
            probe_variants,
            min_pass,
        )
        self.isolation, self.time_limit_s = isolation, time_limit_s
        self.attempts: list[EngineAttempt] = []
        self.last_responses: list[Any] = []

    # ------------------------------------------------------------------ prompt
    def messages(
        self, m: ModeSpec, parents: Sequence[Scene], history: Sequence[EngineAttempt]
    ) -> list[dict[str, Any]]:
        roles = sorted({r for p in parents for r in available_roles(p)})
        system = SYSTEM.format(
            factor=m.factor, roles=roles, checks=", ".join(CHECKS), sdk_doc=sdk_documentation()
        )
        payload = {
            "mode": {"factor": m.factor, "phase": m.phase, "cause": m.cause},
            "available_roles": roles,
            "parent": _summary(parents[0]),
            "attempts": [{"program": a.source, "errors": a.errors[:MAX_FEEDBACK]} for a in history],
        }
        task = f"Write an edit program that recreates: {m.factor} / {m.phase} / {m.cause}."
        if history:
            task += " Your previous attempts failed with the errors listed; repair them."
        user = f"{task}\n\n{REQUEST_MARKER}\n{json.dumps(payload, indent=1, sort_keys=True)}"
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    # ------------------------------------------------------------------ one attempt
    def _probe(self, program: Program, parents: Sequence[Scene], seed: int) -> tuple:
        errors: list[str] = []
        usable = []
        for p in parents:
            try:
                bind(program, p)
                usable.append(p)
            except RoleBindingError as e:
                errors.append(f"roles: {e}")
        if not usable:
            return 0, 0, list(dict.fromkeys(errors))
        jobs = [(usable[j % len(usable)], seed + j) for j in range(self.probe_variants)]
        made = []
        for out in apply_many(
            program, jobs, isolation=self.isolation, time_limit_s=self.time_limit_s
        ):
            if isinstance(out, Scene):
                made.append(out)
            elif hasattr(out, "stage"):  # SandboxError: stage and line for the repair
                where = f" (line {out.line})" if getattr(out, "line", None) else ""
                errors.append(f"sandbox {out.stage}{where}: {out.reason}")
            else:
                errors.append(f"sdk: {out}")
        verified = 0
        for _, v in verify_scenes(made):
            verified += v.ok
            errors += [
                f"verification {r.check}: {r.detail or r.object} (magnitude {r.magnitude:.4g})"
                for r in v.reasons
            ]
        return len(made), verified, list(dict.fromkeys(errors))

    def program_for(
        self, mode: Any, parents: Sequence[Scene], *, seed: int = 0, round: int = 0
    ) -> Program:
        """Propose -> sandbox -> verify -> repair, at most `max_attempts` times; the accepted
        program, or `LLMEngineError` carrying every attempt."""
        m = mode_spec(mode)
        if m.factor == "execution":
            raise NoProgram("an execution mode names no scene factor to vary")
        if not parents:
            raise ValueError("program_for needs at least one parent scene")
        history: list[EngineAttempt] = []
        for i in range(self.max_attempts):
            resp = self.client.chat(
                self.role,
                self.messages(m, parents, history),
                schema=ENGINE_SCHEMA,
                schema_name="edit_program",
                round=round,
            )
            self.last_responses.append(resp)
            source, notes, program = None, "", None
            if not resp.ok:
                errors = [f"llm {resp.failure.kind}: {resp.failure.message}"]
                made = verified = 0
            else:
                source, notes = str(resp.parsed["program"]), str(resp.parsed["notes"])
                try:
                    program = Program.from_dict({"factor": m.factor, "source": source})
                except ProgramError as e:
                    errors, made, verified = [f"program: {e}"], 0, 0
                else:
                    made, verified, errors = self._probe(program, parents, seed + 1000 * i)
            accepted = program is not None and verified >= max(
                1, self.min_pass * self.probe_variants
            )
            att = EngineAttempt(
                i, source, notes, [] if accepted else errors, made, verified,
                self.probe_variants, accepted,
            )  # fmt: skip
            self._record(m, att, round, resp)
            history.append(att)
            self.attempts.append(att)
            if accepted:
                return dataclasses.replace(program, note=notes)
        raise LLMEngineError(
            f"no edit program accepted in {self.max_attempts} attempts; last errors: "
            f"{history[-1].errors[:3]}",
            history,
        )

    def _record(self, m: ModeSpec, att: EngineAttempt, round: int, resp: Any) -> None:
        if self.memory is None:
            return
        meta = {
            "engine": self.name,
            "attempt": att.index,
            "backend": getattr(resp, "backend", ""),
            "model": getattr(resp, "model", ""),
            "mode": {"factor": m.factor, "phase": m.phase, "cause": m.cause},
            "notes": att.notes,
        }
        sp = self.memory.add_scene_program(
            att.source or "",
            round=round,
            mode_id=m.id,
            factor=memory_factor(m.factor),
            meta=meta,
        )
        att.scene_program_id = sp
        att.trace_id = self.memory.add_generation_trace(
            round=round,
            scene_program_id=sp,
            violated=att.errors,
            repair_steps=[{"attempt": att.index, "notes": att.notes}],
            outcome="accepted" if att.accepted else "rejected",
            meta={**meta, "made": att.made, "verified": att.verified, "probes": att.probes},
        )


# ----------------------------------------------------------------------------- offline


def _payload(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    for msg in reversed(messages):
        content = msg.get("content")
        if isinstance(content, str) and REQUEST_MARKER in content:
            return json.loads(content.split(REQUEST_MARKER, 1)[1])
    raise ValueError("no engine request in the messages")


def offline_engine_handler(request: Any, role: str) -> dict[str, str]:
    """The rule table as an agent: the k-th candidate program whose roles are available, as
    SDK source, where k is the number of failed attempts so far (deterministic)."""
    p = _payload(request.messages)
    mode, roles = p["mode"], set(p["available_roles"])
    cands = [  # never empty: the factor's fallback needs no roles
        (prog, why)
        for prog, why in candidate_programs(mode["factor"], mode["phase"], mode["cause"])
        if set(prog.roles) <= roles
    ]
    prog, why = cands[min(len(p["attempts"]), len(cands) - 1)]
    return {"program": program_to_source(prog), "notes": why}


def _register_offline() -> None:
    if "engine" not in offline_handlers():
        register_offline_handler("engine", offline_engine_handler)


_register_offline()

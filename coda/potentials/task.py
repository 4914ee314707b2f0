"""Φ for a scene's task from a named compiler (R_hone), checked on planner demos.

The loop compiles Φ per validated mode (with its diagnosis); a fine-tuning benchmark needs Φ for
a task with no diagnosis yet (the §4 shaped-vs-sparse comparison). Both pick the compiler by
name: ``offline`` (the rule-based templates, the embedded default) or ``llm`` (an ``LLMClient``'s
``"compiler"`` role, recorded in its run folder and replayable with the server gone).
"""

from __future__ import annotations

from typing import Any

from coda import registries
from coda.potentials.checks import Demos
from coda.potentials.compiler import (
    Attempt,
    Compiler,
    CompileRequest,
    compile_with_repair,
)
from coda.potentials.program import Potential

COMPILERS = registries.COMPILERS  # name -> compiler class (coda.registries)


class TaskPotentialError(RuntimeError):
    """No proposal passed the checks within the repair budget; `attempts` says why."""

    def __init__(self, message: str, attempts: list[Attempt]) -> None:
        super().__init__(message)
        self.attempts = attempts


def make_compiler(name: str, client: Any | None = None) -> Compiler:
    """The compiler registered as `name`; ``llm`` talks through `client` (its "compiler" role)."""
    factory = COMPILERS[name]  # UnknownName (a ValueError) lists the valid names
    if getattr(factory, "talks_to_llm", False):
        if client is None:
            raise ValueError(f"compiler {name!r} needs an LLMClient (client=...)")
        return factory(client)
    return factory()


def task_potential(
    compiler: Compiler,
    bucket: Any,
    demos: Any,
    *,
    memory: Any | None = None,
    max_rounds: int = 3,
    round: int = 0,
) -> tuple[Potential, list[Attempt]]:
    """Φ of `bucket`'s task (no diagnosis), proposed → compiled → checked on the planner rollout
    `demos` (a ``RolloutResult`` of `bucket`) and repaired up to `max_rounds` times.

    Raises ``TaskPotentialError`` (with every attempt) when none is accepted: an experiment must
    not silently run its shaped arm without a potential.
    """
    req = CompileRequest(task=bucket.scene_task, round=int(round))
    pot, attempts = compile_with_repair(
        compiler,
        req,
        bucket.sym,
        Demos.from_rollout(demos, bucket),
        memory,
        max_rounds=max_rounds,
        probe=False,
    )
    if pot is None:
        last = attempts[-1].report.failures if attempts else ()
        why = "; ".join(f"{f.stage}: {f.message}" for f in last[:3]) or "no attempt"
        raise TaskPotentialError(
            f"compiler {getattr(compiler, 'name', compiler)!r}: no potential accepted in "
            f"{len(attempts)} attempt(s) ({why})",
            attempts,
        )
    return pot, attempts

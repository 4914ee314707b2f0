"""LIBERO episodes as the loop's (program, seed) pairs.

The loop names every episode by a scene program and a seed (pool.jsonl, suites.json, memory's
scene programs), and rebuilds the episode from them on resume. A LIBERO episode is a task of a
(possibly LIBERO-PRO perturbed) data suite at one of its 50 fixed initial states, optionally
with its table objects shifted (LIBERO-Plus layout, `perturb.layout_shift`). Its program is a
spec string that says exactly that; the seed is the shift's seed (0 without a shift):

    libero:<data suite>/<task>@<init index>             LIBERO's own initial state
    libero:<data suite>/<task>@<init index>#layout<L>   ... its table objects shifted at level L

`compile_episode(program, seed)` is deterministic in (program, seed), like `sdk.exec_program`.
"""

from __future__ import annotations

import dataclasses
import re

PREFIX = "libero:"
_SPEC = re.compile(
    r"^libero:(?P<suite>[a-z0-9_]+)/(?P<task>[^@#]+)@(?P<index>\d+)(#layout(?P<level>\d))?$"
)


@dataclasses.dataclass(frozen=True)
class Episode:
    suite: str  # the data suite (a base suite or a LIBERO-PRO perturbed one)
    task: str
    index: int  # LIBERO's initial state, 0..49
    level: int = 0  # LIBERO-Plus layout shift level (0: none)

    @property
    def program(self) -> str:
        tail = f"#layout{self.level}" if self.level else ""
        return f"{PREFIX}{self.suite}/{self.task}@{self.index}{tail}"


def is_libero(program: str | None) -> bool:
    return bool(program) and program.startswith(PREFIX)


def parse(program: str) -> Episode:
    """The episode a spec names; ValueError with the expected form otherwise."""
    m = _SPEC.match(program or "")
    if m is None:
        raise ValueError(
            f"not a LIBERO episode program: {program!r} "
            "(expected 'libero:<suite>/<task>@<init index>[#layout<level>]')"
        )
    level = int(m["level"] or 0)
    return Episode(m["suite"], m["task"], int(m["index"]), level)


def compile_episode(program: str, seed: int = 0):
    """The `CompiledScene` of a LIBERO episode program; its scene carries (program, seed)."""
    from coda.libero import perturb  # lazy: the LIBERO data stack (is_libero / parse stay light)
    from coda.libero import scene as S  # lazy: the LIBERO data stack (as above)

    ep = parse(program)
    if ep.level:
        c = perturb.layout_shift(ep.suite, ep.task, ep.index, ep.level, int(seed))
    else:
        c = S.compile_task(ep.suite, ep.task, ep.index)
    scene = dataclasses.replace(c.scene, program=ep.program, seed=int(seed))
    return dataclasses.replace(c, scene=scene)


def verify(compiled) -> bool:
    """LIBERO's verification of one compiled episode (`verify.verify_task_state`)."""
    from coda.libero.verify import verify_task_state  # lazy: the LIBERO data stack (as above)

    return bool(verify_task_state(compiled).verdict.ok)

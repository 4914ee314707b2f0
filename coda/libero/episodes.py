"""LIBERO episodes as the loop's (program, seed) pairs.

The loop names every episode by a scene program and a seed (pool.jsonl, suites.json, memory's
scene programs), and rebuilds the episode from them on resume. A LIBERO episode is a task of a
(possibly LIBERO-PRO perturbed) data suite at one of its 50 fixed initial states, optionally
with its table objects shifted (LIBERO-Plus layout, `perturb.layout_shift`). Its program is a
spec string that says exactly that; the seed is the shift's seed (0 without a shift):

    libero:<data suite>/<task>@<init index>             LIBERO's own initial state
    libero:<data suite>/<task>@<init index>#layout<L>   ... its table objects shifted at level L
    libero:<data suite>/<task>@<init index>!<edits>     ... a factored edit of the task
                                                        (`coda.libero.program`: swap / move /
                                                        inst / goal), optionally #layout<L> too
    ...#say<k>                                          ... told in the goal's k-th wording
                                                        (`coda.libero.goals.phrasings`: training
                                                        with instruction variety)

`compile_episode(program, seed)` is deterministic in (program, seed), like `sdk.exec_program`.
"""

from __future__ import annotations

import dataclasses
import re

PREFIX = "libero:"
_SPEC = re.compile(
    r"^libero:(?P<suite>[a-z0-9_]+)/(?P<task>[^@#!]+)@(?P<index>\d+)"
    r"(!(?P<edits>[a-z0-9_,+();]+))?(#layout(?P<level>\d))?(#say(?P<say>\d+))?$"
)
EDIT_SUITE = "edit:"  # the pseudo-suite of edited tasks (`coda.libero.program.PREFIX`)


@dataclasses.dataclass(frozen=True)
class Episode:
    suite: str  # the data suite (a base suite or a LIBERO-PRO perturbed one)
    task: str
    index: int  # LIBERO's initial state, 0..49
    level: int = 0  # LIBERO-Plus layout shift level (0: none)
    edits: str = ""  # factor edits of the task ("" = LIBERO's own; `coda.libero.program`)
    say: int = 0  # the wording of the goal (0: the task's own; `coda.libero.goals.phrasings`)

    @property
    def program(self) -> str:
        tail = f"!{self.edits}" if self.edits else ""
        tail += f"#layout{self.level}" if self.level else ""
        tail += f"#say{self.say}" if self.say else ""
        return f"{PREFIX}{self.suite}/{self.task}@{self.index}{tail}"

    @property
    def task_ref(self) -> tuple[str, str]:
        """(suite, task) that `coda.libero.scene.load_task` / `compile_task` take: the edited
        task's pseudo-suite and name when there are edits."""
        if not self.edits:
            return self.suite, self.task
        return EDIT_SUITE + self.suite, f"{self.task}!{self.edits}"


def is_libero(program: str | None) -> bool:
    return bool(program) and program.startswith(PREFIX)


def parse(program: str) -> Episode:
    """The episode a spec names; ValueError with the expected form otherwise."""
    m = _SPEC.match(program or "")
    if m is None:
        raise ValueError(
            f"not a LIBERO episode program: {program!r} "
            "(expected 'libero:<suite>/<task>@<init index>[!<edits>][#layout<level>][#say<k>]')"
        )
    level, say = int(m["level"] or 0), int(m["say"] or 0)
    return Episode(m["suite"], m["task"], int(m["index"]), level, m["edits"] or "", say)


def compile_episode(program: str, seed: int = 0):
    """The `CompiledScene` of a LIBERO episode program; its scene carries (program, seed)."""
    from coda.libero import goals, perturb  # lazy: the LIBERO data stack (parse stays light)
    from coda.libero import scene as S  # lazy: the LIBERO data stack (as above)

    ep = parse(program)
    suite, task = ep.task_ref
    if ep.level:
        c = perturb.layout_shift(suite, task, ep.index, ep.level, int(seed))
    else:
        c = S.compile_task(suite, task, ep.index)
    scene = dataclasses.replace(c.scene, program=ep.program, seed=int(seed))
    if ep.say:  # the k-th wording of the goal (cycling over the wordings there are)
        words = goals.phrasings(S.load_task(suite, task))
        scene = dataclasses.replace(
            scene, task={**scene.task, "instruction": words[ep.say % len(words)]}
        )
    return dataclasses.replace(c, scene=scene)


def verify(compiled) -> bool:
    """LIBERO's verification of one compiled episode (`verify.verify_task_state`)."""
    from coda.libero.verify import verify_task_state  # lazy: the LIBERO data stack (as above)

    return bool(verify_task_state(compiled).verdict.ok)

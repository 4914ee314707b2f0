"""LIBERO scenes as a scene kind (`coda.registries.SCENE_KINDS["libero"]`): what the critic
reads of a compiled LIBERO scene where it reads a family's own code for ours: its phases
(`coda.libero.phases`: from the resolved goal, so one segmenter per task model) and its
counterfactual probes (`coda.libero.program.probe`, compiled and checked by LIBERO's
verification); and what the engine steps call (`coda.engine.kinds`): records loaded through
their episode program, targeted-vs-control pairs and targeted variants as choices over edits
(`coda.libero.engine`), and the Φ template of its goal (`coda.libero.potential`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from coda.libero import engine, potential, program
from coda.libero import scene as S
from coda.libero.episodes import compile_episode
from coda.libero.phases import goal_phases
from coda.libero.planner_geometry import execution_atoms
from coda.libero.verify import verify_task_state

# probe kinds with no LIBERO change of their own that fall back to a redraw, as the critic's
# family probes do (`coda.critic.probes.probe_plan`); "away" and "near" are skipped instead
FALLBACK = ("recategorized", "relation")


@dataclasses.dataclass(frozen=True)
class LiberoKind:
    name: str = "libero"
    # Φ's usefulness check reads planner demos up to success: they run the suite's step cap
    demos_until_success: bool = True

    def phases(self, compiled) -> tuple:
        """The goal's ordered phases, ν last (`coda.libero.phases.goal_phases`)."""
        return goal_phases(compiled)

    def trace_roles(self, compiled) -> tuple[int, str, int | None, int | None]:
        """(object body, its scene object's name, destination body or None, joint or None) the
        critic's trace features read: the first atom of the goal in execution order
        (`potential.goal_symbols`' goal0 roles), the atom the phases start with. A placement's
        object and its support (an object, or the body a region sits on; None for a world
        region); an articulation's moving part and its joint. LIBERO's `:obj_of_interest`
        can name a region or list the destination first, so τ's roles are not read."""
        sym = compiled.sym
        if sym.has("goal0.object"):
            obj, joint = sym.body("goal0.object"), None
            if sym.has("goal0.support"):
                dest = sym.body("goal0.support")
            else:
                site = next(v for k, v in sym.sites if k.startswith("goal0."))
                dest = int(site[0]) if int(site[0]) >= 0 else None
        elif sym.has("goal0.part"):
            obj, dest = sym.body("goal0.part"), None
            joint = next(v for k, v in sym.joints if k.startswith("goal0."))
        else:
            raise ValueError(f"{compiled.scene.task.get('instruction', '?')!r}: no goal roles")
        owner = {n.split(".")[0] for n, i in sym.bodies if i == obj and not n.startswith("goal")}
        names = sorted(owner & set(compiled.scene.attributes))
        if not names:
            raise ValueError(f"body {obj} of the goal belongs to no scene object")
        return obj, names[0], dest, joint

    def segment_key(self, compiled) -> str:
        """What makes two compiled scenes share a segmenter: the task model (its goal's
        resolved atoms are the model's)."""
        return compiled.structure_key

    def probe(self, compiled, factor: str, kind: str, seed: int):
        """A compiled probe of `kind` changing `factor` of a LIBERO episode, or None."""
        rng = np.random.default_rng(seed)
        p = program.probe(compiled.scene.program, factor, kind, rng)
        if p is None and kind in FALLBACK:  # a redraw (the task's: isolated, see probe)
            p = program.probe(compiled.scene.program, factor, "redraw", rng)
        return None if p is None else compile_episode(p, seed)

    def verify(self, compiled):
        """LIBERO's checks of a compiled scene (`coda.libero.verify`): a `Verdict`."""
        return verify_task_state(compiled).verdict

    def load(self, record: Mapping[str, Any]):
        """A scene again from its record: its episode program and seed compiled (`Scene`)."""
        return self.compile(record).scene

    def compile(self, record: Mapping[str, Any]):
        """The compiled episode of a record (`coda.libero.episodes.compile_episode`)."""
        return compile_episode(record["program"], int(record.get("seed", 0)))

    def validation_batches(self, mode, bases, n: int, seed: int, **kw: Any):
        """Recreate pairs over edits (`coda.libero.engine.validation_batches`)."""
        return engine.validation_batches(mode, bases, n, seed, **kw)

    def generate_targeted(self, mode, bases, n: int, seed: int, **kw: Any):
        """The mode's edits on `bases` (`coda.libero.engine.generate_targeted`)."""
        return engine.generate_targeted(mode, bases, n, seed, **kw)

    def potential_template(self, task: Mapping[str, Any]):
        """The offline Φ template of a LIBERO scene's τ (`coda.libero.potential`): its task read
        back through its suite and name and resolved against the compiled model as ν is.
        ValueError if τ names no LIBERO task."""
        params = task.get("params", {})
        suite, name = params.get("suite"), params.get("task")
        if not suite or not name:
            raise ValueError(f"a LIBERO τ needs params.suite and params.task; got {sorted(params)}")
        c = S.compile_task(str(suite), str(name), 0, settle=False)
        goal = tuple(c.success.keywords["atoms"])
        lay = c.layout
        ordered = execution_atoms(goal, c.model, lay.body_names, lay.joint_names)
        parts = tuple(c.sym.has(f"goal{k}.part") for k in range(len(ordered)))
        return potential.template_of(goal, ordered, parts)

    def has_potential(self, task: Mapping[str, Any]) -> bool:
        """Every goal LIBERO's vocabulary writes has a Φ template (placements and joints)."""
        try:
            self.potential_template(task)
        except (ValueError, KeyError):
            return False
        return True


KIND = LiberoKind()

__all__ = ["KIND", "LiberoKind"]

"""Strategies: CoDA, its baselines and ablations as bundles of behaviour the round calls.

A strategy never copies the loop (`coda.loop.round`) and the loop never asks a strategy's name:
each part answers one question of a round.

* `allocator` (`coda.loop.allocators`): how the round's scene budget is spent (`plan`);
* `critique`: whether and how failures are diagnosed and modes validated (`run`), and when a
  run stops for lack of informative modes (`stop_reason`);
* `potential`: which Φ shapes the critic's targets (`phi` for a mode's program on a bucket,
  `compile` for the round's validated modes);
* `update`: what the round's rollouts feed (`observe`) and how the policy learns (`run`);
* `start`: whether round 0 clones the planner's demos (the SFT start);
* `memory`: which memory backs the run and what of the loop's mode tables survives a round.

Every strategy is charged the same way (env steps, scenes, critiques, LLM tokens:
`coda.loop.state.Budgets`). A new strategy is a `Strategy` registered in
`coda.registries.STRATEGIES` (tests/test_strategies.py adds one with its own allocation rule).

This module imports no JAX (`coda.runconfig` reads strategies before JAX is imported), so the
parts that run a loop step import it when called (the `# lazy:` imports below).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Protocol

from coda import registries
from coda.loop.allocators import (
    Allocator,
    NoScenes,
    NovelTasks,
    PoolResample,
    UCBModes,
    UniformModes,
)

log = logging.getLogger(__name__)

_LAZY = "strategies resolve before JAX is imported (coda.runconfig); the step imports JAX"


# ----------------------------------------------------------------------------- critique


class Critique(Protocol):
    reads_failures: bool  # step 3 keeps the failed episodes for this critique
    tests_modes: bool  # diagnoses become modes tested against a control factor

    def run(self, svc: Any, state: Any, r: int, episodes: tuple, key: Any) -> Any: ...
    def stop_reason(self, config: Any, row: dict) -> str: ...
    def critic_name(self, config: Any) -> str: ...


@dataclasses.dataclass(frozen=True)
class Diagnose:
    """≤ C failures per mode to the critic (`critic.name`), clustered into modes; candidate modes
    tested targeted vs control; the run stops once modes are validated but none is in the band."""

    reads_failures = True
    tests_modes = True

    def run(self, svc: Any, state: Any, r: int, episodes: tuple, key: Any) -> Any:
        from coda.loop.steps.critique import critique_and_validate  # lazy: see _LAZY

        return critique_and_validate(svc, state, r, episodes, key)

    def stop_reason(self, config: Any, row: dict) -> str:
        validated = row.get("modes", {}).get("validated", 0)
        late = row["round"] >= int(config.loop.min_stop_round)
        if late and validated and not row.get("modes_in_band"):
            return "no validated mode in the success band"
        return ""

    def critic_name(self, config: Any) -> str:
        return str(config.critic.name)


@dataclasses.dataclass(frozen=True)
class NoCritique:
    """No critic, no modes, no control experiments."""

    reads_failures = False
    tests_modes = False

    def run(self, svc: Any, state: Any, r: int, episodes: tuple, key: Any) -> None:
        return None

    def stop_reason(self, config: Any, row: dict) -> str:
        return ""

    def critic_name(self, config: Any) -> str:
        return "not run"


# ----------------------------------------------------------------------------- potential


@dataclasses.dataclass(frozen=True)
class Potential:
    """Text2potential Φ per validated mode, written from the diagnosis (or, for the ablation,
    from τ's terminal relation alone), repaired up to `repair_rounds` times; rollouts of a
    mode's variants are shaped by its Φ."""

    name: str = "diagnosis"  # "diagnosis" | "task_description" (reports, memory transfer)
    from_task_description: bool = False
    repair_rounds: int = 3  # 1: the first compiled program is kept (no refinement)
    shapes = True

    def phi(self, source: str, bucket: Any) -> Any:
        """The mode's Φ compiled for `bucket`'s symbols (None: it does not fit this bucket)."""
        from coda.potentials import compile_program  # lazy: see _LAZY

        try:
            return compile_program(source, bucket.sym).phi
        except Exception as e:  # noqa: BLE001 - a program that does not fit this bucket
            log.info("Φ does not compile for this bucket: %s", e)
            return None

    def compile(self, svc: Any, state: Any, r: int, key: Any) -> Any:
        from coda.loop.steps.potentials import compile_potentials  # lazy: see _LAZY

        return compile_potentials(
            svc,
            state,
            r,
            key,
            task_description=self.from_task_description,
            max_rounds=self.repair_rounds,
        )


@dataclasses.dataclass(frozen=True)
class NoPotential:
    """Sparse ν reward only."""

    name = "none"
    shapes = False

    def phi(self, source: str, bucket: Any) -> None:
        return None

    def compile(self, svc: Any, state: Any, r: int, key: Any) -> None:
        return None


# ----------------------------------------------------------------------------- update


class _Recipe:
    """What every update recipe shares: the learner's mode follows the potential (shaped or
    sparse targets), nothing to do once round 0 is done."""

    def learner_mode(self, potential: Any) -> str:
        """`coda.train.LearnerConfig.mode` the learner is built with."""
        return "shaped" if potential.shapes else "sparse"

    def after_start(self, learner: Any) -> None:
        """Called once round 0 is done (or restored)."""


@dataclasses.dataclass(frozen=True)
class AWR(_Recipe):
    """Own rollouts into the replay; chunk critic + AWR updates (+ routed planner demos)."""

    name = "awr"
    trains = True
    needs_scenes = True  # learns from the round's own rollouts
    advantage: str = ""  # the advantage estimator (coda.train ADVANTAGES); "" = loop.advantage

    def observe(self, learner: Any, result: Any, bucket: Any, phi: Any, source: Any = None) -> int:
        """A rollout's transitions into the replay (Φ-shaped when `phi`; `source`: each row's
        data-source id); how many."""
        return int(learner.add_rollout(result, bucket, phi_fn=phi, source=source)["transitions"])

    def run(self, svc, state, r, gens, routing, n_in_band, key) -> Any:  # noqa: ANN001
        from coda.loop.steps.update import awr_update  # lazy: see _LAZY

        return awr_update(svc, state, gens, routing, n_in_band, key)


@dataclasses.dataclass(frozen=True)
class FrozenPolicy(AWR):
    """Round 0 clones the planner (the SFT start); then the policy's weights stay, while the
    critic trains on the rollouts and selects chunks (best-of-j)."""

    name = "frozen"

    def learner_mode(self, potential: Any) -> str:
        return "shaped"  # round 0's BC needs a policy that learns; `after_start` freezes it

    def after_start(self, learner: Any) -> None:
        learner.cfg = dataclasses.replace(learner.cfg, mode="frozen_policy")


@dataclasses.dataclass(frozen=True)
class BC(_Recipe):
    """Each round: planner demos on the round's scenes join the kept demo rows; BC on them."""

    name = "bc"
    trains = True
    needs_scenes = True  # demos on the round's scenes

    def observe(self, learner: Any, result: Any, bucket: Any, phi: Any, source: Any = None) -> int:
        return 0  # own rollouts are not trained on

    def run(self, svc, state, r, gens, routing, n_in_band, key) -> Any:  # noqa: ANN001
        from coda.loop.steps.update import bc_update  # lazy: see _LAZY

        return bc_update(svc, state, gens, key)


@dataclasses.dataclass(frozen=True)
class SeedBC(BC):
    """Each round: `loop.policy_updates` BC updates on round 0's seed demonstrations only (no
    new data): the paper's SFT baseline, given the same updates as the others."""

    name = "seed_bc"
    needs_scenes = False

    def run(self, svc, state, r, gens, routing, n_in_band, key) -> Any:  # noqa: ANN001
        from coda.loop.steps.update import seed_bc_update  # lazy: see _LAZY

        return seed_bc_update(svc, state, key)


@dataclasses.dataclass(frozen=True)
class NoUpdate(BC):
    """The policy is never trained after round 0."""

    name = "none"
    trains = False

    def run(self, svc, state, r, gens, routing, n_in_band, key) -> Any:  # noqa: ANN001
        return None


# ----------------------------------------------------------------------------- start, memory


@dataclasses.dataclass(frozen=True)
class PlannerBC:
    """Round 0 clones the planner's demos (`loop.bc_steps` updates): the SFT start."""

    clones = True

    def run(self, svc: Any, demos: Any, key: Any, progress: bool) -> dict:
        from coda.loop.steps.update import bc_start  # lazy: see _LAZY

        return bc_start(svc, demos, key, progress)


@dataclasses.dataclass(frozen=True)
class Untrained:
    """Round 0 leaves the policy as initialised."""

    clones = False

    def run(self, svc: Any, demos: Any, key: Any, progress: bool) -> dict:
        return {}


@dataclasses.dataclass(frozen=True)
class Memory:
    """The run's memory: a `coda.registries.MEMORY_MODES` store, kept across rounds."""

    name: str = "full"  # "full" | "single_store"
    forgets = False

    def open(self, path: str) -> Any:
        return registries.MEMORY_MODES[self.name](path)

    def round_start(self, state: Any) -> Any:
        """The run state a round starts from (the loop's mode tables as memory keeps them)."""
        return state


@dataclasses.dataclass(frozen=True)
class NoMemory:
    """Memory forgets everything each round, and so do the loop's mode tables."""

    name = "none"
    forgets = True

    def open(self, path: str) -> Any:
        return registries.MEMORY_MODES["none"](None)

    def round_start(self, state: Any) -> Any:
        return state.replace(mode_parents={}, mode_potentials={}, times_allocated={})


# ----------------------------------------------------------------------------- strategies


@dataclasses.dataclass(frozen=True)
class Strategy:
    name: str
    kind: str  # "method" | "baseline" | "ablation" | "control" (the focused experiment's arms)
    description: str
    allocator: Allocator = UCBModes()
    critique: Critique = Diagnose()
    potential: Any = Potential()  # Potential | NoPotential
    update: Any = AWR()  # AWR | FrozenPolicy | BC | NoUpdate
    start: Any = PlannerBC()  # PlannerBC | Untrained
    memory: Any = Memory()  # Memory | NoMemory

    @property
    def learner_mode(self) -> str:
        """`coda.train.LearnerConfig.mode` of this strategy's rounds."""
        if isinstance(self.update, FrozenPolicy):
            return "frozen_policy"
        return self.update.learner_mode(self.potential)


NO_TRAINING = dict(critique=NoCritique(), potential=NoPotential())

CODA = Strategy("coda", "method", "CoDA: diagnose, validate, target, shape, route (§3.5)")
ZERO_SHOT = Strategy(
    "zero_shot",
    "baseline",
    "the start policy, never trained (no BC, no updates; evaluated every round)",
    allocator=NoScenes(),
    update=NoUpdate(),
    start=Untrained(),
    **NO_TRAINING,
)
SFT = Strategy(
    "sft",
    "baseline",
    "fine-tuning on the seed demonstrations only (round 0's planner demos, the same updates "
    "per round as the others; no new scenes): the paper's SFT",
    allocator=NoScenes(),
    update=SeedBC(),
    **NO_TRAINING,
)
FRESH_TASK_BC = Strategy(
    "fresh_task_bc",
    "baseline",
    "BC on planner demos of fresh tasks: each round's budget buys new seeded tasks from the "
    "training distribution + their demos (an extra row: not a baseline of the paper)",
    allocator=NovelTasks(),
    update=BC(),
    **NO_TRAINING,
)
DOMAIN_RANDOMIZATION = Strategy(
    "domain_randomization",
    "baseline",
    "the seed tasks with layout and attributes redrawn over the families' hand-set ranges, "
    "uniformly over the pool; AWR on the rollouts",
    allocator=PoolResample(("layout", "attributes")),
    **NO_TRAINING,
)
UNIFORM_VARIANTS = Strategy(
    "uniform_variants",
    "baseline",
    "open-loop variants of the seed tasks from the same SDK (any factor, task edits included: "
    "`resample(scene, factor)`), uniformly over the pool; no critic, no modes, no Φ; AWR",
    allocator=PoolResample(("layout", "attributes", "task")),
    **NO_TRAINING,
)
SUCCESS_RATE_GUIDED = Strategy(
    "success_rate_guided",
    "baseline",
    "the budget split over the generator's seed tasks by their measured failure rate "
    "(variants of any factor); no diagnosis, no Φ; AWR",
    allocator=PoolResample(("layout", "attributes", "task"), by_failure_rate=True),
    **NO_TRAINING,
)
CODA_SELFIMIT = Strategy(
    "coda_selfimit",
    "ablation",
    "CoDA with success-filtered self-imitation instead of the chunk critic's advantages: the "
    "own rows of successful episodes at weight 1, the rest 0 (the default before issue 29)",
    update=AWR(advantage="success"),
)
NO_MEMORY = Strategy(
    "no_memory", "ablation", "memory forgets everything each round", memory=NoMemory()
)
SINGLE_STORE = Strategy(
    "single_store",
    "ablation",
    "one undivided store: no modes by (δ, p), no keyed retrieval",
    memory=Memory("single_store"),
)
SKILL_LIBRARY = Strategy(
    "skill_library",
    "ablation",
    "skill-library memory: programs kept undivided and used uniformly (no UCB)",
    memory=Memory("single_store"),
    allocator=UniformModes(),
)
SPARSE_ONLY = Strategy(
    "sparse_only", "ablation", "no potential: sparse ν reward only", potential=NoPotential()
)
TASKDESC_POTENTIAL = Strategy(
    "taskdesc_potential",
    "ablation",
    "Φ from the task description (terminal relation), not the diagnosis",
    potential=Potential("task_description", from_task_description=True),
)
NO_REFINEMENT = Strategy(
    "no_refinement",
    "ablation",
    "first compiled Φ kept: no repair rounds",
    potential=Potential(repair_rounds=1),
)
FROZEN_POLICY = Strategy(
    "frozen_policy",
    "ablation",
    "policy weights frozen; the critic trains and selects chunks (best-of-j)",
    update=FrozenPolicy(),
)
NOMINAL_ONLY = Strategy(
    "nominal_only",
    "control",
    "the focused experiment's floor: the seed tasks' layout and attributes redrawn only outside "
    "the declared sim.hard_regions (the data a generator blind to the hard regions buys); AWR",
    allocator=PoolResample(("layout", "attributes"), where="nominal"),
    **NO_TRAINING,
)
ORACLE_REGIONS = Strategy(
    "oracle_regions",
    "control",
    "the focused experiment's ceiling: the budget split evenly over the declared "
    "sim.hard_regions, each variant a seed task with that region's factor redrawn inside it "
    "(what a perfect critic and engine would buy); AWR",
    allocator=PoolResample(("layout", "attributes"), where="hard"),
    **NO_TRAINING,
)

# The focused experiment's fourth run (configs/focused.py:v4): the same four allocations, each
# learning by BC on planner demos of the scenes it bought (the round's scenes routed to the
# planner, `BC`), so the data's location, not whether the policy already succeeds there, decides
# what it teaches. Own rollouts still feed the critic (coda's diagnoses, validation, modes).


def _from_demos(base: Strategy, description: str, kind: str = "control") -> Strategy:
    """`base`'s allocation (and critique) learning by BC on its scenes' planner demos."""
    return dataclasses.replace(
        base, name=f"{base.name}_demos", kind=kind, description=description, update=BC()
    )


CODA_DEMOS = _from_demos(
    CODA,
    "CoDA with every scene it generates (targeted, pool, novel) routed to the planner: BC on "
    "their demos instead of AWR on its own rollouts",
    kind="ablation",
)
DOMAIN_RANDOMIZATION_DEMOS = _from_demos(
    DOMAIN_RANDOMIZATION, "domain_randomization's scenes, learned by BC on their planner demos"
)
UNIFORM_VARIANTS_DEMOS = _from_demos(
    UNIFORM_VARIANTS,
    "uniform_variants' scenes (any factor, task edits included), learned by BC on their "
    "planner demos",
)
NOMINAL_ONLY_DEMOS = _from_demos(
    NOMINAL_ONLY,
    "nominal_only's scenes (outside the hard regions), learned by BC on their planner demos",
)
ORACLE_REGIONS_DEMOS = _from_demos(
    ORACLE_REGIONS,
    "oracle_regions' scenes (inside the hard regions), learned by BC on their planner demos",
)

# name -> strategy: coda.registries.STRATEGIES holds the names (for checks before JAX) and
# resolves them to the constants above.
STRATEGIES = registries.STRATEGIES


def get_strategy(name: str) -> Strategy:
    """The registered strategy; an unknown name lists the valid ones."""
    return STRATEGIES[name]

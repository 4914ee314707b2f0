"""Strategies: CoDA, its baselines and ablations as small objects plugged into the loop's steps.

A strategy never copies the loop (`coda.loop.rounds`); it answers the questions the steps ask:
how to spend a round's scene budget (`allocation`), whether failures are critiqued and modes
validated (`critique`), which potential shapes the critic's targets (`potential`), which memory
backs the run (`memory`), whether round 0 clones the planner (`bc_start`) and how the policy is
updated in later rounds (`update`). Every strategy is charged the same way (env steps, scenes,
critiques, LLM tokens: `coda.loop.state.Budgets`).

Allocations:
* ``ucb``: `coda.engine.allocate` over validated modes (UCB on hardness + learning progress,
  ε novel seeds, replay of modes at or above the band);
* ``uniform_modes``: the same modes and programs, split equally (no hardness, no LP);
* ``success_rate``: the training pool's programs weighted by their failure rate, each variant
  one randomly resampled factor (no diagnosis, no engine programs);
* ``domain_randomization``: the training pool uniformly, layout or attributes resampled;
* ``novel``: fresh seeded tasks only (what BC on planner demos spends its budget on).
"""

from __future__ import annotations

import dataclasses

from coda import registries

ALLOCATIONS = ("ucb", "uniform_modes", "success_rate", "domain_randomization", "novel", "none")
POTENTIALS = ("diagnosis", "task_description", "none")
UPDATES = ("awr", "bc", "frozen", "none")


@dataclasses.dataclass(frozen=True)
class Strategy:
    name: str
    kind: str  # "method" | "baseline" | "ablation"
    description: str
    allocation: str = "ucb"
    critique: bool = True  # critic on failures, clustering into modes, control validation
    potential: str = "diagnosis"  # Φ source: the diagnosis, τ's terminal relation, or none
    repair: bool = True  # Text2potential repair rounds (False: first program, no refinement)
    memory: str = "full"  # coda.memory.MEMORY_MODES name
    bc_start: bool = True  # round 0 clones the planner's demos (the SFT start)
    update: str = "awr"  # later rounds: AWR (+ routed BC demos), BC only, frozen policy, none

    def __post_init__(self) -> None:
        for field, valid in (
            ("allocation", ALLOCATIONS),
            ("potential", POTENTIALS),
            ("memory", tuple(registries.MEMORY_MODES)),
            ("update", UPDATES),
        ):
            v = getattr(self, field)
            if v not in valid:
                raise ValueError(f"strategy {self.name}: {field}={v!r}; valid: {valid}")

    @property
    def learner_mode(self) -> str:
        """`coda.train.LearnerConfig.mode` for this strategy."""
        if self.update == "frozen":
            return "frozen_policy"
        return "shaped" if self.potential != "none" else "sparse"

    @property
    def trains(self) -> bool:
        return self.update in ("awr", "bc", "frozen")


CODA = Strategy("coda", "method", "CoDA: diagnose, validate, target, shape, route (§3.5)")
ZERO_SHOT = Strategy(
    "zero_shot",
    "baseline",
    "the start policy, never trained (no BC, no updates; evaluated every round)",
    allocation="none",
    critique=False,
    potential="none",
    bc_start=False,
    update="none",
)
SFT = Strategy(
    "sft",
    "baseline",
    "BC on planner demos only: each round's budget buys fresh seeded tasks + demos",
    allocation="novel",
    critique=False,
    potential="none",
    update="bc",
)
DOMAIN_RANDOMIZATION = Strategy(
    "domain_randomization",
    "baseline",
    "uniform resampling of layout and attributes of the training pool, AWR",
    allocation="domain_randomization",
    critique=False,
    potential="none",
)
UNIFORM_VARIANTS = Strategy(
    "uniform_variants",
    "baseline",
    "engine variants of validated modes with a uniform allocation (no UCB)",
    allocation="uniform_modes",
)
SUCCESS_RATE_GUIDED = Strategy(
    "success_rate_guided",
    "baseline",
    "allocation by the pool's failure rate, no diagnosis, no Φ",
    allocation="success_rate",
    critique=False,
    potential="none",
)
NO_MEMORY = Strategy("no_memory", "ablation", "memory forgets everything each round", memory="none")
SINGLE_STORE = Strategy(
    "single_store",
    "ablation",
    "one undivided store: no modes by (δ, p), no keyed retrieval",
    memory="single_store",
)
SKILL_LIBRARY = Strategy(
    "skill_library",
    "ablation",
    "skill-library memory: programs kept undivided and used uniformly (no UCB)",
    memory="single_store",
    allocation="uniform_modes",
)
SPARSE_ONLY = Strategy(
    "sparse_only", "ablation", "no potential: sparse ν reward only", potential="none"
)
TASKDESC_POTENTIAL = Strategy(
    "taskdesc_potential",
    "ablation",
    "Φ from the task description (terminal relation), not the diagnosis",
    potential="task_description",
)
NO_REFINEMENT = Strategy(
    "no_refinement", "ablation", "first compiled Φ kept: no repair rounds", repair=False
)
FROZEN_POLICY = Strategy(
    "frozen_policy",
    "ablation",
    "policy weights frozen; the critic trains and selects chunks (best-of-j)",
    update="frozen",
)

# name -> strategy: coda.registries.STRATEGIES holds the names (for checks before JAX) and
# resolves them to the constants above.
STRATEGIES = registries.STRATEGIES


def get_strategy(name: str) -> Strategy:
    """The registered strategy; an unknown name lists the valid ones."""
    return STRATEGIES[name]

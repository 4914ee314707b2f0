"""Every built-in name of every pluggable part, in one light module (`coda.registry.Registry`).

Entries are ``"module:attribute"`` strings, imported on first lookup: importing this module
imports nothing heavy, so `coda.runconfig` (and through it `launch.main`) checks a whole config's
names before JAX is imported, and no other module keeps a copy of a name list. Add your own
entry with ``REGISTRY.register(name, obj_or_"module:attr")``; the loop, the checks and the
error messages see it at once.
"""

from __future__ import annotations

from coda.registry import Registry, UnknownName

# Task families (`coda.sim.tasks.base.TaskFamily` instances), in proposal order.
FAMILIES: Registry = Registry(
    "task family",
    {
        "pick_place": "coda.sim.tasks.pick_place:FAMILY",
        "articulated": "coda.sim.tasks.articulated:FAMILY",
        "put_inside": "coda.sim.tasks.put_inside:FAMILY",
        "stack_or_insert": "coda.sim.tasks.stack_or_insert:FAMILY",
    },
)

# Policy configs (`coda.policy.configs`): name -> a function returning its ConfigDict.
POLICIES: Registry = Registry(
    "policy config",
    {
        name: f"coda.policy.configs:{name}"
        for name in (
            "pi05",
            "pi05_libero",
            "tiny",
            "small",
            "small_tiny",
            "small_vision",
            "oft",
            "oft_tiny",
        )
    },
)

# Physics backends (`coda.sim.rollout`); "auto" (not an entry) picks mjx on an accelerator.
PHYSICS_BACKENDS: Registry = Registry(
    "physics backend",
    {"native": "coda.sim.rollout:NativeBackend", "mjx": "coda.sim.rollout:MjxBackend"},
)

# Failure critics (`coda.critic`): factories of objects with `critique(...)`.
CRITICS: Registry = Registry(
    "critic",
    {"offline": "coda.critic.offline:OfflineCritic", "vlm": "coda.critic.vlm:VLMCritic"},
)

# Scene-program engines (`coda.engine`): factories of objects with `propose(...)`.
ENGINES: Registry = Registry(
    "engine",
    {"offline": "coda.engine.engines:OfflineEngine", "llm": "coda.engine.llm_engine:LLMEngine"},
)

# Potential compilers (Text2potential's R_hone, `coda.potentials.compiler`).
COMPILERS: Registry = Registry(
    "potential compiler",
    {
        "offline": "coda.potentials.compiler:OfflineCompiler",
        "llm": "coda.potentials.compiler:LLMCompiler",
    },
)

# LLM backends (`coda.llm.backends`): what an `LLMClient` role talks to.
LLM_BACKENDS: Registry = Registry(
    "LLM backend",
    {
        "offline": "coda.llm.backends:OfflineBackend",
        "openai": "coda.llm.backends:OpenAIBackend",
        "openai_compatible": "coda.llm.backends:OpenAICompatibleBackend",
    },
)

# Memory layouts (`coda.memory`): the full three-tier store and its ablations.
MEMORY_MODES: Registry = Registry(
    "memory mode",
    {
        "full": "coda.memory.store:MemoryStore",
        "single_store": "coda.memory.ablations:SingleStoreMemory",
        "none": "coda.memory.ablations:NoMemory",
    },
)

# Loop strategies (`coda.loop.strategies`): CoDA, its baselines and ablations.
STRATEGIES: Registry = Registry(
    "strategy",
    {
        name: f"coda.loop.strategies:{name.upper()}"
        for name in (
            "coda",
            "zero_shot",
            "sft",
            "fresh_task_bc",
            "domain_randomization",
            "uniform_variants",
            "success_rate_guided",
            "coda_selfimit",
            "no_memory",
            "single_store",
            "skill_library",
            "sparse_only",
            "taskdesc_potential",
            "no_refinement",
            "frozen_policy",
            "nominal_only",
            "oracle_regions",
            "coda_demos",
            "domain_randomization_demos",
            "uniform_variants_demos",
            "nominal_only_demos",
            "oracle_regions_demos",
        )
    },
)

# Scene kinds other than our task families (a family not listed here is one of FAMILIES, read
# by the SDK's own code): what the critic needs of another kind's compiled scenes (its phases;
# the rest of the port: docs/libero_coda_port_plan.md), looked up by the scene's family.
SCENE_KINDS: Registry = Registry("scene kind", {"libero": "coda.libero.kind:KIND"})

# LIBERO's task suites (the data wheel's folders) and those LIBERO-PRO perturbs.
LIBERO_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
LIBERO_PERTURBABLE = ("libero_spatial", "libero_object", "libero_goal", "libero_10")

# Checks of a config field that need a higher layer's knowledge (pure Python, no JAX), which
# `coda.runconfig` looks up by field instead of importing upward: field -> function(value,
# context) -> problems (context: the strategy; for libero.tasks, the LIBERO suite).
CONFIG_CHECKS: Registry = Registry(
    "config check",
    {
        "loop.memory_from": "coda.loop.transfer:source_problems",
        "sim.hard_regions": "coda.sim.regions:config_problems",
        "libero.tasks": "coda.libero.suites:task_id_problems",
    },
)

# AWR advantage estimators of the learner (`coda.train.learner.LearnerConfig.advantage`): names
# of a fixed rule set inside one jitted update, not pluggable objects.
ADVANTAGES = ("critic", "mc", "nstep", "success")

# The loop's evaluation suites (`coda.loop.evaluation`): our families' and a LIBERO source's
# (`sim.source=libero:<suite>`, `coda.loop.sources`: held-out initial states, their LIBERO-Plus
# layout shift, LIBERO-PRO's swap / object / language / task suites).
SUITE_NAMES = (
    "id",
    "ood_layouts",
    "ood_instances",
    "ood_categories",
    "ood_tasks",
    "ood_hard",  # held-out scenes inside `sim.hard_regions` (the focused experiment)
)
LIBERO_SUITE_NAMES = (
    "id",
    "ood_layouts",
    "ood_shift",
    "ood_swap",
    "ood_objects",
    "ood_language",
    "ood_tasks",
)

__all__ = [
    "LIBERO_PERTURBABLE",
    "LIBERO_SUITES",
    "LIBERO_SUITE_NAMES",
    "SUITE_NAMES",
    "ADVANTAGES",
    "COMPILERS",
    "CONFIG_CHECKS",
    "CRITICS",
    "ENGINES",
    "FAMILIES",
    "LLM_BACKENDS",
    "MEMORY_MODES",
    "PHYSICS_BACKENDS",
    "POLICIES",
    "SCENE_KINDS",
    "STRATEGIES",
    "Registry",
    "UnknownName",
]

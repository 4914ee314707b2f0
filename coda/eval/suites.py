"""Evaluation suites: success with a standard error on training and held-out scenes.

A policy trained on some scene programs × layout seeds is measured on four suites, so that
memorisation and generalisation are told apart:

* ``train_layouts``: the training programs at the training layout seeds (what it was fit on);
* ``heldout_layouts``: the same programs at layout seeds never trained on;
* ``heldout_instances``: each program with one task object swapped for a *held-out instance* of
  the same category (the asset pool's ``heldout`` split: ``cube_yellow``, ``plate_oval``, ...);
* ``heldout_categories``: each program with one task object swapped for an instance of a
  *held-out category* (``assets.HELDOUT_CATEGORIES``, e.g. ``bottle``), kept only where the
  family's task accepts it (stacking needs cubes or blocks, so stack has no such programs and
  that suite is reported empty, n = 0).

Everything is deterministic given the seed: the held-out layout seeds, the swaps and the rollout
keys. The episode count is fixed per suite (≥ 128 for a headline number; small for intermediate
evaluations, which report their larger s.e.); when a suite has fewer distinct scenes than
episodes, scenes repeat with independent policy noise.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from coda.libero.episodes import compile_episode as libero_episode
from coda.libero.episodes import is_libero
from coda.sandbox import SandboxError
from coda.sim import assets
from coda.sim.compile import compile_scene
from coda.sim.planner import RandomPolicy, planner_for
from coda.sim.rollout import make_buckets
from coda.sim.sdk import SceneProgramError, exec_program

SUITES = ("train_layouts", "heldout_layouts", "heldout_instances", "heldout_categories")

# `add_object("<category>", role="<role>", instance="<instance>")` as the task generators and the
# benchmark programs write it (coda.sim.tasks.families._line).
_ADD = re.compile(r'add_object\("([^"]+)", role="([^"]+)", instance="([^"]+)"\)')


@dataclasses.dataclass(frozen=True)
class SuiteResult:
    """Success of one suite: counts, rate and its binomial standard error."""

    suite: str
    n: int
    successes: int
    rate: float  # successes / n (nan when n == 0)
    se: float  # sqrt(rate (1 - rate) / n)
    # Per-episode outcomes in the suite's episode order ("1" = success), "" where only counts
    # are known. A run measures the same fixed episodes every round, so two rounds compare
    # episode by episode (`coda.loop.evaluation.learning`).
    outcomes: str = dataclasses.field(default="", repr=False)

    @classmethod
    def from_successes(cls, suite: str, success: Sequence[bool]) -> SuiteResult:
        s = np.asarray(success, bool).reshape(-1)
        n, k = int(s.size), int(s.sum())
        rate = k / n if n else math.nan
        se = math.sqrt(rate * (1 - rate) / n) if n else math.nan
        return cls(suite, n, k, rate, se, "".join("1" if x else "0" for x in s))

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        if self.n == 0:
            return f"{self.suite}: n/a (no scenes)"
        return f"{self.suite}: {100 * self.rate:.1f} ± {100 * self.se:.1f} % (n={self.n})"


def pooled(results: Sequence[SuiteResult]) -> SuiteResult:
    """Several evaluations of one suite (e.g. small batches) pooled into one result."""
    if not results:
        raise ValueError("nothing to pool")
    names = {r.suite for r in results}
    if len(names) != 1:
        raise ValueError(f"pooling results of different suites: {sorted(names)}")
    return concat(results[0].suite, results)


def concat(name: str, results: Sequence[SuiteResult]) -> SuiteResult:
    """Results concatenated in order into one (outcomes kept when every part has them)."""
    k, n = sum(r.successes for r in results), sum(r.n for r in results)
    if all(len(r.outcomes) == r.n for r in results):
        return SuiteResult.from_successes(name, [c == "1" for r in results for c in r.outcomes])
    return dataclasses.replace(
        SuiteResult.from_successes(name, [True] * k + [False] * (n - k)), outcomes=""
    )


# ----------------------------------------------------------------------------- program swaps


def program_objects(source: str) -> list[tuple[str, str, str]]:
    """(category, role, instance) of every `add_object` line written in the standard form."""
    return _ADD.findall(source)


def _replace(source: str, role: str, category: str, instance: str) -> str:
    def sub(m: re.Match) -> str:
        if m.group(2) != role:
            return m.group(0)
        return f'add_object("{category}", role="{role}", instance="{instance}")'

    return _ADD.sub(sub, source)


def _task_objects(source: str) -> list[tuple[str, str, str]]:
    """Objects that play a task role (distractors excluded)."""
    return [o for o in program_objects(source) if not o[1].startswith("distractor")]


def _accepted(source: str, seed: int) -> bool:
    """Does the program run and compile with a verifier ν (the family accepts the swap)?"""
    try:
        compile_scene(exec_program(source, seed=seed, split="all", isolation="inprocess"))
    except (SandboxError, SceneProgramError):
        return False
    return True


def heldout_instance_programs(source: str) -> list[str]:
    """One program per (task object, held-out instance of its category): a single swap each."""
    out = []
    for cat, role, inst in _task_objects(source):
        if assets.get_category(cat).split == "heldout":
            continue
        for alt in assets.instances_for(cat, "heldout"):
            if alt.name != inst:
                prog = _replace(source, role, cat, alt.name)
                if _accepted(prog, 0):
                    out.append(prog)
    return out


def heldout_category_programs(source: str) -> list[str]:
    """One program per (task object, instance of a held-out category) the task accepts."""
    out = []
    for cat, role, _ in _task_objects(source):
        graspable = assets.get_category(cat).graspable
        for hc in assets.HELDOUT_CATEGORIES:
            if hc == cat or assets.get_category(hc).graspable != graspable:
                continue
            for alt in assets.instances_for(hc, "heldout"):
                prog = _replace(source, role, hc, alt.name)
                if _accepted(prog, 0):
                    out.append(prog)
    return out


# ----------------------------------------------------------------------------- suites


SUCCESS_RULES = ("final", "any")


@dataclasses.dataclass
class Suite:
    """A fixed list of episodes (program, layout seed); buckets are compiled once, on first use."""

    name: str
    programs: list[str]  # one per episode
    seeds: list[int]  # layout seed per episode
    split: str = "all"  # asset split the programs are executed under
    batch_size: int | None = None  # variants per rollout (None: one bucket per structure)
    # when an episode counts as a success: "final" (ν at the last chunk endpoint, ours) or
    # "any" (ν at any chunk endpoint: LIBERO's protocol, whose episode ends at success)
    success: str = "final"
    _buckets: list | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        if self.success not in SUCCESS_RULES:
            raise ValueError(f"Suite.success={self.success!r}; valid: {SUCCESS_RULES}")

    @property
    def n(self) -> int:
        return len(self.programs)

    @property
    def buckets(self) -> list:
        if self._buckets is None:
            self._buckets = (
                build_buckets(self.programs, self.seeds, self.split, self.batch_size)
                if self.programs
                else []
            )
        return self._buckets


def build_buckets(
    programs: Sequence[str], seeds: Sequence[int], split: str = "all", batch_size: int | None = None
) -> list:
    """Compile (program, seed) episodes and group them into same-structure buckets (padded to
    `batch_size` so that every bucket of a structure shares one compiled policy step)."""
    if len(programs) != len(seeds):
        raise ValueError(f"{len(programs)} programs but {len(seeds)} layout seeds")
    compiled = [compile_episode(p, int(s), split) for p, s in zip(programs, seeds, strict=True)]
    return make_buckets(compiled, batch_size)


def compile_episode(program: str, seed: int, split: str = "all"):
    """One episode of a suite: an SDK scene program at a layout seed, or a LIBERO episode
    program (`coda.libero.episodes`: task, initial state, layout shift; `seed` the shift's)."""
    if is_libero(program):
        return libero_episode(program, seed)
    return compile_scene(exec_program(program, seed=seed, split=split, isolation="inprocess"))


def build_bucket(programs: Sequence[str], seeds: Sequence[int], split: str = "train"):
    """One bucket of same-structure episodes (e.g. a training set); errors if they differ."""
    buckets = build_buckets(programs, seeds, split)
    if len(buckets) != 1:
        raise ValueError(f"episodes fall into {len(buckets)} structures, expected one")
    return buckets[0]


def _cycle(items: Sequence, n: int) -> list:
    return [items[i % len(items)] for i in range(n)] if items else []


def heldout_seeds(train_seeds: Sequence[int], n: int, seed: int) -> list[int]:
    """`n` distinct layout seeds, none of them a training seed (deterministic in `seed`)."""
    rng = np.random.default_rng(seed)
    taken, out = set(int(s) for s in train_seeds), []
    while len(out) < n:
        s = int(rng.integers(1_000_000, 2**31 - 1))
        if s not in taken:
            taken.add(s)
            out.append(s)
    return out


def make_suites(
    train_programs: Sequence[str],
    train_seeds: Sequence[int],
    episodes: int = 128,
    seed: int = 0,
    names: Sequence[str] = SUITES,
    batch_size: int | None = None,
) -> dict[str, Suite]:
    """The four suites for a policy trained on `train_programs[i]` at `train_seeds[i]`.

    Held-out suites draw fresh layout seeds for every episode, and cycle over the swapped
    programs of every training program.
    """
    unknown = [s for s in names if s not in SUITES]
    if unknown:
        raise ValueError(f"unknown suites {unknown}; valid: {list(SUITES)}")
    if len(train_programs) != len(train_seeds) or not train_programs:
        raise ValueError("need one layout seed per training program (and at least one)")
    distinct = list(dict.fromkeys(train_programs))
    out = {}
    for i, name in enumerate(names):
        if name == "train_layouts":
            pairs = _cycle(list(zip(train_programs, train_seeds, strict=True)), episodes)
            progs, seeds = [p for p, _ in pairs], [s for _, s in pairs]
        else:
            if name == "heldout_layouts":
                pool = distinct
            elif name == "heldout_instances":
                pool = [q for p in distinct for q in heldout_instance_programs(p)]
            else:
                pool = [q for p in distinct for q in heldout_category_programs(p)]
            progs = _cycle(pool, episodes)
            seeds = heldout_seeds(train_seeds, len(progs), seed * 1000 + i) if progs else []
        out[name] = Suite(name, progs, seeds, batch_size=batch_size)
    return out


# ----------------------------------------------------------------------------- evaluation

# bucket -> (the rollout ChunkPolicy for it, its params)
AgentFor = Callable[[Any], tuple[Any, Any]]


Split = tuple[int, int, Callable[[Any], list[Any]]]  # (this host, hosts, all-gather)


def split_map(n: int, fn: Callable[[int], Any], split: Split | None = None) -> dict[int, Any]:
    """{i: fn(i)} for i < n, the work spread over the hosts of a run.

    `split` = (index, count, gather): this host computes the i with i % count == index and
    `gather` (every host's JSON-able value, in host order, on every host;
    `coda.loop.distributed.gather_json`) merges the shares, so every host gets the same dict;
    fn(i) must then be JSON-able and is returned as it reads back from JSON. Every host must
    call it. None: one host computes everything (values as fn returned them).
    """
    index, count, gather = split if split is not None else (0, 1, None)
    if not 0 <= index < count:
        raise ValueError(f"split index {index} is not in [0, {count})")
    mine = {i: fn(i) for i in range(n) if i % count == index}
    if count == 1:
        return mine
    return {int(i): v for share in gather(sorted(mine.items())) for i, v in share}


def evaluate(
    agent_for: AgentFor,
    suite: Suite,
    backend,
    rng: jax.Array,
    num_chunks: int,
    max_episodes: int | None = None,
    split: Split | None = None,
) -> SuiteResult:
    """ν success at the last chunk endpoint (`suite.success="any"`: at any endpoint) over the
    episodes of a suite (failed = 0).

    `max_episodes` evaluates only the first buckets holding at least that many episodes (cheap
    intermediate evaluations; the result's n and s.e. say what was measured).

    `split` spreads the buckets over the hosts of a run (`split_map`). Each bucket keeps its own
    key, so every host gets the result one host rolling out all buckets would, in about
    1/count of the time.
    """
    chosen, n = [], 0  # the buckets evaluated: decided from the suite alone, same on every host
    for bucket in suite.buckets:
        if max_episodes is not None and n >= max_episodes:
            break
        chosen.append(bucket)
        n += int(np.asarray(bucket.valid, bool).sum())

    def one(i: int) -> list:
        agent, params = agent_for(chosen[i])
        res = backend.rollout(chosen[i], agent, params, jax.random.fold_in(rng, i), num_chunks)
        ok = np.asarray(res.success)
        if suite.success == "any":  # LIBERO: success at any endpoint, a frozen (failed) one not
            ok = np.asarray(res.success_any) & ~np.asarray(res.failed)
        return ok[chosen[i].valid].tolist()

    mine = {i: np.asarray(v) for i, v in split_map(len(chosen), one, split).items()}
    if sorted(mine) != list(range(len(chosen))):
        raise RuntimeError(f"suite {suite.name}: hosts returned buckets {sorted(mine)}")
    success = [mine[i] for i in range(len(chosen))]
    return SuiteResult.from_successes(suite.name, np.concatenate(success) if success else [])


def evaluate_all(
    agent_for: AgentFor,
    suites: dict[str, Suite],
    backend,
    rng: jax.Array,
    num_chunks: int,
) -> dict[str, SuiteResult]:
    """Every suite with its own key (fold_in of the suite's position)."""
    return {
        name: evaluate(agent_for, s, backend, jax.random.fold_in(rng, i), num_chunks)
        for i, (name, s) in enumerate(suites.items())
    }


def planner_agent(bucket) -> tuple[Any, None]:
    """The scripted planner (privileged state): an upper reference for every suite."""
    return planner_for(bucket), None


def random_agent(bucket) -> tuple[Any, None]:
    """Uniform random actions: the floor."""
    return RandomPolicy(), None


def policy_agent(
    policy, params: Any, norm, critic_params: Any = None, agents: dict | None = None
) -> AgentFor:
    """A `coda.policy` policy as a (cached) `PolicyAgent` per batch size, plain sampling (j = 1).

    The instruction tokens travel in the traced params (`AgentParams.tokens`), so every bucket
    of one structure and batch size reuses one compiled chunk step; pass the same `agents`
    dict to later calls (new weights) to keep reusing it.
    """
    # lazy: coda.train.agent brings orbax and the policy models (~450 modules, +1.3 s) into
    # coda.eval, which coda.critic imports (split_map) without needing them
    from coda.train.agent import AgentParams, PolicyAgent, bucket_prompts, instruction_tokens

    agents = {} if agents is None else agents

    def agent_for(bucket):
        tokens, mask = instruction_tokens(policy, bucket_prompts(bucket))
        b = bucket.batch_size
        if b not in agents:
            agents[b] = PolicyAgent(policy, tokens, mask)
        return agents[b], AgentParams(params, norm, critic_params, tokens=(tokens, mask))

    return agent_for

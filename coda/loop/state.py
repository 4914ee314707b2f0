"""The run state: everything a round reads from the previous one, one value the round returns anew.

Device state (policy / critic / optimizer / replay) lives in the `Learner`'s `LearnerState`
pytree, saved by orbax beside this record (`coda.loop.checkpoint`); memory lives in SQLite and is
snapshotted with the backup API beside it. What stays here is host bookkeeping: the round index,
the PRNG key data, the allocator's counters, the budgets spent, the per-mode parents and
potential programs, one metrics row per finished round, and the planner-demo rows BC reads
(`demos`: arrays, saved by orbax beside state.json, not in its JSON). The numpy generator of a
round is derived from (seed, round), never carried, so a resumed round draws exactly what the
uninterrupted one would have.

Both records are frozen: a step returns what it changed and the round builds the next state with
`dataclasses.replace` (`RunState.with_modes`, `Budgets.plus`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

STATE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Spend:
    """What one step spent in rollouts (added to `Budgets.env_steps` / `rollout_seconds`)."""

    env_steps: int = 0
    seconds: float = 0.0

    def __add__(self, other: Spend) -> Spend:
        return Spend(self.env_steps + int(other.env_steps), self.seconds + float(other.seconds))


@dataclasses.dataclass(frozen=True)
class Budgets:
    """What a run has spent so far (the cost report divides these by accepted environments)."""

    env_steps: int = 0  # physics steps of every rollout (collection, probes, validation, eval)
    rollout_seconds: float = 0.0  # wall time inside backend rollouts
    update_seconds: float = 0.0  # wall time of critic / policy updates
    scenes_generated: int = 0  # variants proposed (targeted + novel + resampled)
    scenes_accepted: int = 0  # variants that passed verification
    critiques: int = 0  # failed episodes sent to the critic
    policy_updates: int = 0
    critic_updates: int = 0
    llm_tokens: int = 0  # prompt + completion, all roles (replayed calls count once)
    llm_usd: float = 0.0
    llm: Mapping[str, dict] = dataclasses.field(default_factory=dict)  # role -> calls/tokens/usd

    def plus(self, spend: Spend | None = None, **added: Any) -> Budgets:
        """These budgets with `spend` and each named amount added (counters set with `set_`:
        ``set_policy_updates=n`` replaces rather than adds)."""
        d = dataclasses.asdict(self)
        if spend is not None:
            d["env_steps"] += int(spend.env_steps)
            d["rollout_seconds"] += float(spend.seconds)
        for k, v in added.items():
            if k.startswith("set_"):
                d[k[4:]] = v
            else:
                d[k] += v
        return Budgets(**d)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class RunState:
    """Host part of the loop state (see the module docstring); `to_json` / `from_json`."""

    round: int = -1  # last complete round (-1: nothing done yet; 0: the start is done)
    key: list[int] = dataclasses.field(default_factory=list)  # raw jax key data of the loop
    times_allocated: dict[int, int] = dataclasses.field(default_factory=dict)  # n_j for UCB
    mode_parents: dict[int, list[dict]] = dataclasses.field(default_factory=dict)  # Scene dicts
    mode_potentials: dict[int, str] = dataclasses.field(default_factory=dict)  # Φ source per mode
    program_success: dict[str, float] = dataclasses.field(default_factory=dict)  # pool success
    budgets: Budgets = dataclasses.field(default_factory=Budgets)
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # metrics per round
    stopped: str = ""  # why the run stopped ("" while it runs)
    plateau: int = 0  # policy updates since the ID success last improved
    best_id: float = -1.0
    # where the demo rows came from, in row order: [[source, rows], ...] (coda.loop.demo_pool)
    demo_segments: list[list] = dataclasses.field(default_factory=list)
    # the planner-demo rows BC reads (a `coda.train` demo batch or None): orbax, not JSON
    demos: Any = dataclasses.field(default=None, compare=False, repr=False)

    def to_json(self) -> str:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "demos"}
        d["budgets"] = self.budgets.as_dict()
        d["version"] = STATE_VERSION
        return json.dumps(d, indent=1, default=_default, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, demos: Any = None) -> RunState:
        d = json.loads(text)
        version = d.pop("version", None)
        if version != STATE_VERSION:
            raise ValueError(f"run state version {version!r}; this code reads {STATE_VERSION}")
        d["budgets"] = Budgets(**d["budgets"])
        for k in ("times_allocated", "mode_parents", "mode_potentials"):
            d[k] = {int(m): v for m, v in d[k].items()}
        return cls(**d, demos=demos)

    def replace(self, **changes: Any) -> RunState:
        return dataclasses.replace(self, **changes)

    def with_modes(
        self,
        parents: Mapping[int, list[dict]] | None = None,
        potentials: Mapping[int, str] | None = None,
        times_allocated: Mapping[int, int] | None = None,
    ) -> RunState:
        """This state with the per-mode tables updated (new dicts; `self` is unchanged)."""
        return self.replace(
            mode_parents={**self.mode_parents, **(parents or {})},
            mode_potentials={**self.mode_potentials, **(potentials or {})},
            times_allocated={**self.times_allocated, **(times_allocated or {})},
        )


def _default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Mapping):
        return dict(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def round_rng(seed: int, round_idx: int, stream: int = 0) -> np.random.Generator:
    """The host generator of one round's step (deterministic in (seed, round, stream))."""
    return np.random.default_rng([int(seed), int(round_idx) + 1, int(stream), 0xC0DA])

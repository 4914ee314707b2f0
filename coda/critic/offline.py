"""The offline critic (the embedded default): ψ from the trace and counterfactual probes.

Rules:
- phase p: where progress stopped, the first phase of the family's ordered phases whose
  completion predicate never held in order without being undone before the next phase started
  (`coda.sim.tasks.phases`; `Episode.stopped_at`; the last phase when every phase completed
  but ν was false at the end).
- factor δ: counterfactual probes (`coda.critic.probes`, `coda.critic.directed`): the same
  policy re-run on the scene with one factor changed at a time (redraws; the focus object moved
  "away" to the other side / the other end of its ranges; task probes that give the role to an
  object of another category or a same-category twin, holding its attributes and pose), on
  "near" perturbations of the layout and attributes (controls) and on the unchanged scene. δ is
  the factor whose change most often flips the failure to success beyond its controls (the
  unchanged scene's and its near probes' success rates); "execution" when none does, with the
  evidence in the cause text and `execution_evidence`. Enough probes to decide: an episode the
  first round leaves undecided (no factor beat its controls, or several tied; no repeat
  succeeded) gets a second round of its undecided factors' probes (`probes.undecided`,
  `probes.followup_plan`); the rollouts of both rounds are counted in the evidence.
  Remaining ties go to the factor the measured cause points at (`types.CAUSE_FACTOR_HINT`).
- cause c: measured evidence in the stopped phase (`coda.critic.evidence`: contacts, openings,
  widths vs the gripper, mass vs the grip's capacity, distractor contacts, joint motion; an
  object out of the jaws was let go when the jaws were commanded open wider than it, else lost).
- evidence e: the chunk endpoints that show the cause, keyframes (phase boundaries, the stop,
  the end) and the numbers: the rule's measurements and every probe's flip rate and count.
All probes of a batch of episodes run together (`run_probes`: one rollout per bucket structure).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import jax

from coda.critic.base import Critique, record
from coda.critic.episode import Episode, keyframe_indices
from coda.critic.evidence import infer_cause
from coda.critic.probes import (
    PolicyLike,
    attribute,
    followup_plan,
    merge,
    probe_text,
    run_probes,
    undecided,
)
from coda.critic.types import CAUSE_FACTOR_HINT, Diagnosis, Evidence, validate_diagnosis


class OfflineCritic:
    """State-based critic with counterfactual probes (see the module docstring).

    Args:
      policy: the policy that failed (a `ChunkPolicy`, or a factory `bucket -> ChunkPolicy` such
        as `coda.sim.planner.planner_for` for bucket-bound policies).
      params: its parameters (passed to `backend.rollout`).
      backend: a physics backend (`coda.sim.rollout.make_backend`).
      num_chunks: chunks per probe episode (use the episodes' own length).
      n_probes: verified probes per factor per episode; n_repeats: unchanged-scene reruns.
      memory: a `coda.memory.MemoryStore` to record diagnoses in (None: not recorded).
      split: the probe rollouts spread over the hosts of a run (`coda.eval.split_map`).
    """

    name = "offline"

    def __init__(
        self,
        *,
        policy: PolicyLike,
        params: Any,
        backend: Any,
        num_chunks: int,
        n_probes: int = 4,
        n_repeats: int = 2,
        max_tries: int = 3,
        pad_to: int = 8,
        memory: Any = None,
        split: Any = None,
    ) -> None:
        if n_probes < 1 or n_repeats < 0 or num_chunks < 1:
            raise ValueError(
                f"need n_probes >= 1, n_repeats >= 0, num_chunks >= 1; got {n_probes}, "
                f"{n_repeats}, {num_chunks}"
            )
        self.policy = policy
        self.params = params
        self.backend = backend
        self.num_chunks = int(num_chunks)
        self.n_probes = int(n_probes)
        self.n_repeats = int(n_repeats)
        self.max_tries = int(max_tries)
        self.pad_to = int(pad_to)
        self.memory = memory
        self.split = split  # probe buckets spread over a run's hosts (`run_probes`)

    def _probe(self, episodes: Sequence[Episode], key: jax.Array) -> list:
        """Probe outcomes per episode: the first round (`run_probes`), then, for the episodes
        it left undecided (`probes.undecided`: no factor beat its controls, or several tied,
        and no repeat succeeded), a second round of the undecided factors' probes
        (`probes.followup_plan`), merged into the first."""
        common = dict(
            policy=self.policy,
            params=self.params,
            backend=self.backend,
            num_chunks=self.num_chunks,
            n_probes=self.n_probes,
            max_tries=self.max_tries,
            pad_to=self.pad_to,
            split=self.split,
        )
        k1, k2 = jax.random.split(key)
        stats = run_probes(episodes, key=k1, n_repeats=self.n_repeats, **common)
        more = [(i, undecided(st)) for i, st in enumerate(stats)]
        more = [(i, fs) for i, fs in more if fs]
        if not more:
            return stats
        extra = run_probes(
            [episodes[i] for i, _ in more],
            key=k2,
            n_repeats=0,
            plan=followup_plan,
            factors_for=[fs for _, fs in more],
            **common,
        )
        for (i, _), st in zip(more, extra, strict=True):
            stats[i] = merge(stats[i], st)
        return stats

    def diagnose(
        self, episodes: Sequence[Episode], key: jax.Array, *, round: int = 0
    ) -> list[Critique]:
        t0 = time.perf_counter()
        stats = self._probe(episodes, key)
        out = []
        for ep, st in zip(episodes, stats, strict=True):
            finding = infer_cause(ep)
            factor, probe_numbers = attribute(st, CAUSE_FACTOR_HINT.get(finding.cause))
            numbers = {**finding.numbers, **probe_numbers}
            evidence = Evidence(
                chunks=tuple(sorted(set(finding.chunks))),
                keyframes=tuple(keyframe_indices(ep, finding.chunks)),
                numbers=numbers,
            )
            text = finding.text + probe_text(factor, st, probe_numbers)
            diag = Diagnosis(factor, ep.stopped_phase, finding.cause, text, evidence)
            # the offline critic's own output passes the same validation as a VLM's
            diag = validate_diagnosis(
                diag.to_json(),
                ep.phase_names,
                num_endpoints=ep.num_endpoints,
                family=ep.family,
                critic=self.name,
                model="offline-rules",
            )
            assignment = None
            if self.memory is not None:
                assignment = record(self.memory, ep, diag, round=round)
            out.append(Critique(ep, diag, None, assignment))
        per = (time.perf_counter() - t0) / max(len(episodes), 1)
        return [Critique(c.episode, c.diagnosis, c.rejected, c.assignment, per) for c in out]

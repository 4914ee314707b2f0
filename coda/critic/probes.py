"""Counterfactual probes: re-run the same policy on a failed scene with one factor resampled.

For each failed episode and each factor f in (task, layout, attributes), `n_probes` verified
variants `resample(scene, f, seed)` are rolled out with the episode's policy, plus `n_repeats`
copies of the unchanged scene (a baseline: a stochastic policy may succeed on the same scene).
All probes of all episodes are compiled, verified and grouped into buckets together
(`make_buckets`), so a call costs one rollout per distinct bucket structure: typically one for
the layout / attribute / repeat probes of a scene and one per distinct task-probe structure.

Isolating the task factor: resampling τ may hand a role to another object, which changes that
role's shape, size, mass and friction too, so a task probe could "fix" an attribute failure
(measured: a too-wide cube's task probe handing the role to a ball of the same width succeeded
every time). A task probe is therefore kept only when every re-bound role's new object has the
old one's category (its shape), and that object gets the old role object's mass and friction
and sizes scaled so its narrowest horizontal width matches (the width the jaws span). Other
task probes are counted as `confounded` and not rolled out; a scene without a same-category
alternative has no task probe. Transferred attributes can leave an instance's realistic range,
so task probes ignore verification's `scale` check (every other check applies); other probes
pass all checks.

Seeds come from the PRNG key (one `randint` draw, then numpy `SeedSequence`s per episode, factor
and try), so probes are deterministic given the key.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from coda.critic.episode import Episode
from coda.eval import split_map
from coda.sim.compile import CompiledScene, compile_scene
from coda.sim.rollout import Bucket, ChunkPolicy, make_buckets
from coda.sim.scene import FACTORS, Scene, resample
from coda.sim.verify import verify

PolicyLike = ChunkPolicy | Callable[[Bucket], ChunkPolicy]


def policy_for(policy: PolicyLike, bucket: Bucket) -> ChunkPolicy:
    """A `ChunkPolicy` as is, or a factory such as `planner_for` applied to the bucket (a
    bucket-bound policy must be rebuilt for a task probe's own roles)."""
    return policy if hasattr(policy, "act") else policy(bucket)


@dataclasses.dataclass
class ProbeStats:
    """Outcomes of one episode's probes: per factor, successes out of verified probes."""

    success: dict[str, int] = dataclasses.field(default_factory=dict)
    n: dict[str, int] = dataclasses.field(default_factory=dict)
    rejected: dict[str, int] = dataclasses.field(default_factory=dict)  # failed verification
    unavailable: dict[str, str] = dataclasses.field(default_factory=dict)  # why no probe
    confounded: int = 0  # task probes dropped: a re-bound role changed category (shape)
    repeat_success: int = 0
    n_repeats: int = 0

    def rate(self, factor: str) -> float | None:
        n = self.n.get(factor, 0)
        return self.success.get(factor, 0) / n if n else None

    @property
    def repeat_rate(self) -> float | None:
        return self.repeat_success / self.n_repeats if self.n_repeats else None


def _width(compiled: CompiledScene, name: str) -> float:
    half = compiled.consts["body_half"][compiled.object_bodies[name]]
    return float(2.0 * min(half[0], half[1]))


def isolate_task_probe(original: CompiledScene, probe: Scene) -> Scene | None:
    """`probe` (a task resample of `original.scene`) with every re-bound role's new object given
    the old role object's mass, friction and width; None when a re-bound role's new object has
    another category (shape), i.e. the probe cannot hold the attributes (module docstring)."""
    out = copy.deepcopy(probe)
    old_roles, new_roles = original.scene.task["roles"], probe.task["roles"]
    for role, new_name in new_roles.items():
        old_name = old_roles.get(role)
        if old_name is None or old_name == new_name:
            continue
        if out.object(new_name).category != original.scene.object(old_name).category:
            return None
        old_a, new_a = original.scene.attributes[old_name], out.attributes[new_name]
        new_a["mass"] = old_a["mass"]
        new_a["friction"] = old_a["friction"]
        scale = _width(original, old_name) / max(_width(original, new_name), 1e-6)
        new_a["dims"] = {k: round(v * scale, 5) for k, v in new_a["dims"].items()}
    return out


def _seed(base: int, *path: int) -> int:
    return int(np.random.SeedSequence([base, *path]).generate_state(1)[0])


def run_probes(
    episodes: Sequence[Episode],
    *,
    policy: PolicyLike,
    params: Any,
    backend: Any,
    key: jax.Array,
    num_chunks: int,
    n_probes: int = 4,
    n_repeats: int = 2,
    max_tries: int = 3,
    pad_to: int = 8,
    factors: Sequence[str] = FACTORS,
    split: Any = None,
) -> list[ProbeStats]:
    """Probe outcomes per episode (see the module docstring). `max_tries` rounds of resampling
    replace probes that fail verification; buckets are padded to a multiple of `pad_to` (and of
    the backend's device count) so repeated calls reuse compiled policies. `split`: the probe
    buckets spread over the hosts of a run (`coda.eval.split_map`; each bucket keeps its key,
    so every host gets the outcomes one host rolling out all would)."""
    k_seed, k_roll = jax.random.split(key)
    base = int(jax.random.randint(k_seed, (), 0, 2**31 - 1))
    stats = [ProbeStats() for _ in episodes]
    probes, owner = _verified_probes(
        episodes,
        stats,
        base,
        n_probes=n_probes,
        n_repeats=n_repeats,
        max_tries=max_tries,
        factors=factors,
    )
    if not probes:
        return stats
    multiple = int(np.lcm(max(pad_to, 1), int(getattr(backend, "n_devices", 1))))
    buckets = make_buckets(probes, multiple_of=multiple)

    def one(b: int) -> list[bool]:
        bucket = buckets[b]
        result = backend.rollout(
            bucket, policy_for(policy, bucket), params, jax.random.fold_in(k_roll, b), num_chunks
        )
        return np.asarray(result.success).tolist()

    outcomes = split_map(len(buckets), one, split)
    if sorted(outcomes) != list(range(len(buckets))):
        raise RuntimeError(f"hosts returned probe buckets {sorted(outcomes)} of {len(buckets)}")
    # an episode's repeats are the same object n times: map rows by position, not by id
    for b, bucket in enumerate(buckets):
        ok = outcomes[b]
        for c, s in zip(bucket.variants, ok, strict=False):
            i, f = owner[id(c)]
            if f == "repeat":
                stats[i].repeat_success += int(s)
            else:
                stats[i].success[f] = stats[i].success.get(f, 0) + int(s)
    return stats


def _verified_probes(
    episodes: Sequence[Episode],
    stats: list[ProbeStats],
    base: int,
    *,
    n_probes: int,
    n_repeats: int,
    max_tries: int,
    factors: Sequence[str],
) -> tuple[list[CompiledScene], dict[int, tuple[int, str]]]:
    """(probes, owner): each episode's scene `n_repeats` times, then up to `n_probes` verified
    resamples per (episode, factor), drawn in `max_tries` rounds from seeds derived from `base`;
    owner maps id(compiled) -> (episode, factor or "repeat"). Counts go into `stats`."""
    owner: dict[int, tuple[int, str]] = {}
    probes: list[CompiledScene] = []
    for i, ep in enumerate(episodes):
        for _ in range(n_repeats):
            probes.append(ep.compiled)
        stats[i].n_repeats = n_repeats
    want = {(i, f): n_probes for i in range(len(episodes)) for f in factors}
    for attempt in range(max_tries):
        cands: list[tuple[int, str, CompiledScene]] = []
        for (i, f), k in want.items():
            ep = episodes[i]
            for j in range(k):
                seed = _seed(base, i, FACTORS.index(f), attempt, j)
                try:
                    scene = resample(ep.scene, f, seed)
                except ValueError as e:  # e.g. no other object can play the role
                    stats[i].unavailable[f] = str(e)
                    break
                if f == "task":
                    scene = isolate_task_probe(ep.compiled, scene)
                    if scene is None:
                        stats[i].confounded += 1
                        continue
                cands.append((i, f, compile_scene(scene)))
        if not cands:
            break
        verdicts = verify([c for _, _, c in cands])
        want = {}
        for (i, f, c), v in zip(cands, verdicts, strict=True):
            bad = [r for r in v.reasons if not (f == "task" and r.check == "scale")]
            if bad:
                stats[i].rejected[f] = stats[i].rejected.get(f, 0) + 1
                want[(i, f)] = want.get((i, f), 0) + 1
            else:
                stats[i].n[f] = stats[i].n.get(f, 0) + 1
                owner[id(c)] = (i, f)
                probes.append(c)
        if not want:
            break
    for i, ep in enumerate(episodes):
        owner.setdefault(id(ep.compiled), (i, "repeat"))
    return probes, owner


def attribute(stats: ProbeStats, hint: str | None = None) -> tuple[str, dict[str, float]]:
    """(factor, numbers): the factor whose resampling most often flips the failure to success,
    if its flip rate beats the unchanged scene's repeat success rate; "execution" when none
    does. Ties go to `hint` (the cause's factor), then to the order attributes, layout, task."""
    base = stats.repeat_rate or 0.0
    numbers = {
        "repeat_success_rate": base,
        "n_repeats": float(stats.n_repeats),
        "task_probes_confounded": float(stats.confounded),
    }
    rates = {}
    for f in FACTORS:
        r = stats.rate(f)
        numbers[f"n_probes_{f}"] = float(stats.n.get(f, 0))
        if r is not None:
            numbers[f"flip_rate_{f}"] = r
            rates[f] = r
    order = ("attributes", "layout", "task")
    best = max(rates.values(), default=0.0)
    if best <= base or best == 0.0:
        return "execution", numbers
    tied = [f for f in order if rates.get(f) == best]
    return (hint if hint in tied else tied[0]), numbers

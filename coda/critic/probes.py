"""Counterfactual probes: re-run the same policy on a failed scene with one factor changed.

For each failed episode and each factor f in (task, layout, attributes), the verified probes of
`probe_plan(f, n_probes)` are rolled out with the episode's policy, plus `n_repeats` copies of
the unchanged scene (a baseline: a stochastic policy may succeed on the same scene). Task:
`n_probes` probes alternating a recategorized one (the focus role played by an object of
another category, in place, attributes held: `coda.critic.directed.recategorized`) and a
redraw (`resample(scene, "task", seed)`, isolated as below; articulated's redraw changes the
goal relation, open <-> close). Layout and attributes: one "away" probe (the focus object to
the other side of the table / the other end of its ranges), `n_probes - 1` redraws and one
"near" probe (a small perturbation). `attribute` names the factor whose change probes flip
the failure more often than its controls (`control`: the repeats and the other factors' near
probes). An episode this leaves undecided (`undecided`) gets a second round of its undecided
factors' probes (`followup_plan`, run by the critic and `merge`d into the first).
All probes of all episodes are compiled, verified and grouped into buckets together
(`make_buckets`), so a call costs one rollout per distinct bucket structure: typically one for
the layout / attribute / repeat probes of a scene and one per distinct task-probe structure.

Isolating the task factor: resampling τ may hand a role to another object, which changes that
role's shape, size, mass and friction too, so a task probe could "fix" an attribute failure
(measured: a too-wide cube's task probe handing the role to a ball of the same width succeeded
every time). A task probe is therefore kept only when every re-bound role's new object has the
old one's category (its shape), and that object gets the old role object's mass and friction,
sizes scaled so its narrowest horizontal width matches (the width the jaws span), and its place
(the two swap poses: a redraw that hands the role to an object elsewhere would move it too). Other
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

from coda.critic import directed
from coda.critic.episode import Episode
from coda.eval import split_map
from coda.registries import SCENE_KINDS
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

    near_success: dict[str, int] = dataclasses.field(default_factory=dict)  # near probes
    near_n: dict[str, int] = dataclasses.field(default_factory=dict)
    kinds: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # "f/kind": [s, n]

    def count(self, factor: str, kind: str, success: int | None = None) -> None:
        """Count a verified probe (success None) or its outcome (success 0 / 1). Near probes
        are controls, kept apart from the factor's change probes (`success`, `n`)."""
        succ, n = (self.near_success, self.near_n) if kind == "near" else (self.success, self.n)
        k = self.kinds.setdefault(f"{factor}/{kind}", [0, 0])
        if success is None:
            n[factor] = n.get(factor, 0) + 1
            k[1] += 1
        else:
            succ[factor] = succ.get(factor, 0) + success
            k[0] += success

    def near_rate(self, factor: str) -> float | None:
        n = self.near_n.get(factor, 0)
        return self.near_success.get(factor, 0) / n if n else None

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
    the old role object's mass, friction and width and its place (the two objects swap poses:
    the role's object stays where it was, so a task probe does not move the layout either);
    None when a re-bound role's new object has another category (shape), i.e. the probe cannot
    hold the attributes (module docstring)."""
    out = copy.deepcopy(probe)
    old_roles, new_roles = original.scene.task["roles"], probe.task["roles"]
    layout = original.scene.layout
    for role, new_name in new_roles.items():
        old_name = old_roles.get(role)
        if old_name is None or old_name == new_name:
            continue
        if out.object(new_name).category != original.scene.object(old_name).category:
            return None
        if out.layout[new_name] != layout[old_name]:  # not already there (roles swapped)
            out.layout[new_name], out.layout[old_name] = (
                dict(layout[old_name]),
                dict(layout[new_name]),
            )
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
    plan: Callable[[str, int], list[str]] | None = None,
    factors_for: Sequence[Sequence[str]] | None = None,
) -> list[ProbeStats]:
    """Probe outcomes per episode (see the module docstring). `max_tries` rounds of resampling
    replace probes that fail verification; buckets are padded to a multiple of `pad_to` (and of
    the backend's device count) so repeated calls reuse compiled policies. `split`: the probe
    buckets spread over the hosts of a run (`coda.eval.split_map`; each bucket keeps its key,
    so every host gets the outcomes one host rolling out all would). `plan`: the probe kinds per
    factor (default `probe_plan`); `factors_for`: each episode's own factors (default
    `factors` for all)."""
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
        plan=plan or probe_plan,
        factors_for=factors_for,
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
            i, f, kind = owner[id(c)]
            if f == "repeat":
                stats[i].repeat_success += int(s)
            else:
                stats[i].count(f, kind, int(s))
    return stats


def probe_plan(factor: str, n_probes: int) -> list[str]:
    """The probe kinds of one factor per episode: task: `n_probes` probes alternating
    recategorized / redraw (recategorized first); layout and attributes: one away probe,
    `n_probes - 1` redraws and one near probe (the control). A kind with no probe for a scene
    falls back to a redraw (recategorized, relation) or is skipped (away, near)."""
    if factor == "task":
        return [("recategorized", "redraw")[j % 2] for j in range(n_probes)]
    return ["away"] + ["redraw"] * max(n_probes - 1, 0) + ["near"]


def followup_plan(factor: str, n_probes: int) -> list[str]:
    """The second round's probe kinds for a factor still undecided after the first
    (`undecided`): task as `probe_plan` (new seeds: other categories, other redraws); layout and
    attributes `n_probes` redraws, layout's first one the relation probe
    (`directed.layout_relation`: the focus object's distance to its partner at the other end);
    the away probe would be the same scene again, near is a control the first round has."""
    if factor == "task":
        return probe_plan(factor, n_probes)
    if factor == "layout":  # positions were tried: now the relation to the partner object
        return ["relation"] + ["redraw"] * max(n_probes - 1, 0)
    return ["redraw"] * n_probes


def undecided(stats: ProbeStats) -> tuple[str, ...]:
    """Factors worth a second round of probes after the first: none when a repeat of the
    unchanged scene succeeded (the failure is inconsistent: that is execution's evidence) or
    one factor's flip margin over its controls is alone at the top; the tied factors when
    several share the top margin; every probed factor when none beat its controls."""
    if (stats.repeat_rate or 0.0) > 0.0:
        return ()
    _, numbers = attribute(stats)
    margins = {f: m for f in FACTORS if (m := numbers.get(f"margin_{f}")) is not None}
    best = max(margins.values(), default=0.0)
    if best <= 0.0:
        return tuple(f for f in FACTORS if stats.n.get(f, 0) + stats.near_n.get(f, 0))
    tied = tuple(f for f in FACTORS if margins.get(f) == best)
    return tied if len(tied) > 1 else ()


def merge(a: ProbeStats, b: ProbeStats) -> ProbeStats:
    """The outcomes of two rounds of probes of one episode, summed."""

    def add(x: dict, y: dict) -> dict:
        return {k: x.get(k, 0) + y.get(k, 0) for k in {*x, *y}}

    kinds = {
        k: [*map(sum, zip(a.kinds.get(k, [0, 0]), b.kinds.get(k, [0, 0]), strict=True))]
        for k in {*a.kinds, *b.kinds}
    }
    return ProbeStats(
        success=add(a.success, b.success),
        n=add(a.n, b.n),
        rejected=add(a.rejected, b.rejected),
        unavailable={**a.unavailable, **b.unavailable},
        confounded=a.confounded + b.confounded,
        repeat_success=a.repeat_success + b.repeat_success,
        n_repeats=a.n_repeats + b.n_repeats,
        near_success=add(a.near_success, b.near_success),
        near_n=add(a.near_n, b.near_n),
        kinds=kinds,
    )


_DIRECTED = {
    ("task", "recategorized"): directed.recategorized,
    ("layout", "away"): directed.layout_away,
    ("layout", "near"): directed.layout_near,
    ("layout", "relation"): directed.layout_relation,
    ("attributes", "away"): directed.attributes_away,
    ("attributes", "near"): directed.attributes_near,
}


def _probe_scene(ep: Episode, f: str, kind: str, seed: int, st: ProbeStats) -> Scene | None:
    """One candidate probe of kind `kind` for factor `f` (None: none; counted in `st`)."""
    if kind != "redraw":
        scene = _DIRECTED[(f, kind)](ep.scene, seed)
        if scene is not None or kind not in ("recategorized", "relation"):
            return scene
    try:
        scene = resample(ep.scene, f, seed)
    except ValueError as e:  # e.g. no other object can play the role
        st.unavailable[f] = str(e)
        return None
    if f == "task":
        scene = isolate_task_probe(ep.compiled, scene)
        if scene is None:
            st.confounded += 1
    return scene


def _verified_probes(
    episodes: Sequence[Episode],
    stats: list[ProbeStats],
    base: int,
    *,
    n_probes: int,
    n_repeats: int,
    max_tries: int,
    factors: Sequence[str],
    plan: Callable[[str, int], list[str]] = None,  # type: ignore[assignment]
    factors_for: Sequence[Sequence[str]] | None = None,
) -> tuple[list[CompiledScene], dict[int, tuple[int, str, str]]]:
    """(probes, owner): each episode's scene `n_repeats` times, then each (episode, factor)'s
    planned probes (`probe_plan`), verified, drawn in `max_tries` rounds from seeds derived from
    `base`; owner maps id(compiled) -> (episode, factor or "repeat", kind). Counts go into
    `stats`."""
    owner: dict[int, tuple[int, str, str]] = {}
    probes: list[CompiledScene] = []
    for i, ep in enumerate(episodes):
        for _ in range(n_repeats):
            probes.append(ep.compiled)
        stats[i].n_repeats = n_repeats
    plan = plan or probe_plan
    want = [
        (i, f, j, kind)
        for i in range(len(episodes))
        for f in (factors if factors_for is None else factors_for[i])
        for j, kind in enumerate(plan(f, n_probes))
    ]
    kinds = [_scene_kind(ep) for ep in episodes]
    for attempt in range(max_tries):
        cands: list[tuple[int, str, int, str, CompiledScene]] = []
        for i, f, j, kind in want:
            seed = _seed(base, i, FACTORS.index(f), attempt, j)
            if kinds[i] is not None:  # another scene kind probes its own compiled scene
                c = kinds[i].probe(episodes[i].compiled, f, kind, seed)
                if c is None:
                    stats[i].unavailable.setdefault(f, f"no {kind} probe of {f}")
                else:
                    cands.append((i, f, j, kind, c))
                continue
            scene = _probe_scene(episodes[i], f, kind, seed, stats[i])
            if scene is not None:
                cands.append((i, f, j, kind, compile_scene(scene)))
        if not cands:
            break
        verdicts = _verdicts(cands, kinds)
        want = []
        for (i, f, j, kind, c), v in zip(cands, verdicts, strict=True):
            bad = [r for r in v.reasons if not (f == "task" and r.check == "scale")]
            if bad:
                stats[i].rejected[f] = stats[i].rejected.get(f, 0) + 1
                want.append((i, f, j, kind))
            else:
                stats[i].count(f, kind)
                owner[id(c)] = (i, f, kind)
                probes.append(c)
        if not want:
            break
    for i, ep in enumerate(episodes):
        owner.setdefault(id(ep.compiled), (i, "repeat", "repeat"))
    return probes, owner


def _scene_kind(ep: Episode) -> Any:
    """The episode's scene kind (`registries.SCENE_KINDS`, e.g. LIBERO), None for our families."""
    family = ep.compiled.scene.task["family"]
    return SCENE_KINDS[family] if family in SCENE_KINDS else None


def _verdicts(cands: list, kinds: list) -> list:
    """Each candidate probe's verdict: our families' in one `verify` batch, another kind's by
    its own checks."""
    ours = [k for k, c in enumerate(cands) if kinds[c[0]] is None]
    batch = dict(zip(ours, verify([cands[k][-1] for k in ours]), strict=True)) if ours else {}
    return [
        batch[k] if kinds[c[0]] is None else kinds[c[0]].verify(c[-1]) for k, c in enumerate(cands)
    ]


def control(stats: ProbeStats, factor: str) -> float:
    """The success rate `factor`'s change probes must beat: the unchanged scene's repeats and
    the near probes of every other factor (small perturbations that should not matter)."""
    near = [stats.near_rate(g) for g in FACTORS if g != factor]
    return max([stats.repeat_rate or 0.0, *(r for r in near if r is not None)])


def attribute(stats: ProbeStats, hint: str | None = None) -> tuple[str, dict[str, float]]:
    """(factor, numbers): the factor whose change (redraws, away and recategorized probes) most
    often flips the failure to success beyond its controls (`control`): the unchanged scene's
    repeat success rate and the *other* factors' near-probe success rates (a small
    perturbation of something else that succeeds says the failure is fragile, not tied to this
    factor; a small perturbation of this factor that succeeds says its value sits near the
    edge of the failing range: evidence for it, not against). "execution" when no factor's rate
    beats its controls. Recategorized task probes do not count when the attribute probes
    explain the failure (shape is confounded with size). Ties go to `hint` (the cause's
    factor), then to the order attributes, layout, task. numbers: per factor the flip rate and
    count of change probes, the near probes' rate and count, per probe kind successes and
    count, and `execution_evidence` (1: the unchanged scene succeeded on a repeat, 2: no
    factor's change flipped it, 3: a factor flipped it no more often than its controls; 0: a
    factor was named)."""
    base = stats.repeat_rate or 0.0
    numbers = {
        "repeat_success_rate": base,
        "n_repeats": float(stats.n_repeats),
        "task_probes_confounded": float(stats.confounded),
    }
    margins = {}
    rate = {f: stats.rate(f) for f in FACTORS}
    # a recategorized task probe changes the object's shape with its category; when the focus
    # object's attribute probes flip the failure beyond their controls, its flips are confounded
    # (a ball of a too-wide cube's width is gripped above its equator) and the task rate is the
    # same-category probes' alone
    a_rate = rate["attributes"]
    s_r, n_r = stats.kinds.get("task/recategorized", [0, 0])
    if n_r and a_rate is not None and a_rate > control(stats, "attributes"):
        n_t = stats.n.get("task", 0) - n_r
        rate["task"] = (stats.success.get("task", 0) - s_r) / n_t if n_t else None
        numbers["task_recategorized_confounded"] = float(n_r)
    for f in FACTORS:
        r, near = rate[f], stats.near_rate(f)
        n_all = stats.n.get(f, 0) + stats.near_n.get(f, 0)
        numbers[f"n_probes_{f}"] = float(n_all)  # every rollout of this factor's probes
        if near is not None:
            numbers[f"flip_rate_near_{f}"] = near
            numbers[f"n_near_{f}"] = float(stats.near_n[f])
        if r is not None:
            numbers[f"flip_rate_{f}"] = r
            if r > 0.0:
                margins[f] = r - control(stats, f)
                numbers[f"margin_{f}"] = margins[f]
    for k, (s_k, n_k) in sorted(stats.kinds.items()):
        numbers[f"probes_{k.replace('/', '_')}"] = float(n_k)
        numbers[f"flips_{k.replace('/', '_')}"] = float(s_k)
    order = ("attributes", "layout", "task")
    best = max(margins.values(), default=0.0)
    if best <= 0.0:
        numbers["execution_evidence"] = 1.0 if base > 0 else (3.0 if margins else 2.0)
        return "execution", numbers
    numbers["execution_evidence"] = 0.0
    tied = [f for f in order if margins.get(f) == best]
    return (hint if hint in tied else tied[0]), numbers


def probe_text(factor: str, stats: ProbeStats, numbers: dict[str, float]) -> str:
    """What the probes said, for the cause text: the flips per factor (change probes, near
    controls, repeats) and, for "execution", why; factors without a probe are named."""
    parts = []
    for f in FACTORS:
        n, nn = stats.n.get(f, 0), stats.near_n.get(f, 0)
        if not n and not nn:
            continue
        part = f"{f} {stats.success.get(f, 0)}/{n}"
        if nn:
            part += f" (near {stats.near_success.get(f, 0)}/{nn})"
        parts.append(part)
    text = "; probes flipped " + (", ".join(parts) or "nothing")
    if stats.n_repeats:
        text += f", repeats {stats.repeat_success}/{stats.n_repeats}"
    missing = [f for f in FACTORS if not stats.n.get(f) and f in stats.unavailable]
    if missing:
        text += "; no probe for " + ", ".join(missing)
    if factor == "execution":
        why = {
            1.0: "the unchanged scene succeeded on a repeat",
            2.0: "no factor's change flipped the failure",
            3.0: "no factor's change flipped it more often than its controls",
        }.get(numbers.get("execution_evidence", 2.0), "")
        text += f"; execution: {why}"
    return text

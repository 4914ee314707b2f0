"""Host helpers the loop's steps share: compiled agents, rollouts, demos, the obs norm.

Compiles are the expensive part on a CPU: a `PolicyAgent` is a static jit argument hashed by
identity, so a fresh agent per bucket recompiles the policy step. `Agents` keeps one agent per
(batch size, j) and passes each bucket's instruction tokens through the traced `AgentParams`
(the trick `coda.eval.policy_agent` uses), so every bucket of a round shares a handful of
compiled programs. Buckets are padded to `loop.bucket_size` for the same reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coda.eval.suites import Split, split_map
from coda.loop import distributed
from coda.policy.base import Batch, fit_prompt
from coda.sim.compile import CompiledScene
from coda.sim.observe import image_spec_for, with_images
from coda.sim.rollout import Bucket, RolloutResult, make_buckets
from coda.sim.state import flat_observation
from coda.train.agent import AgentParams, ObsNorm, PolicyAgent, bucket_prompts, instruction_tokens
from coda.train.awr import demo_batch


class Agents:
    """One compiled `PolicyAgent` per (batch size, j); per-bucket tokens travel in the params."""

    def __init__(self, learner: Any, policy: Any = None, devices: Sequence[Any] = ()) -> None:
        """`policy`: the same network under another sampler (e.g. a narrower flow-noise prior
        for collecting training data); None = the learner's policy. `devices`: where rollouts
        run (`distributed.acting_devices`); the weights are copied there when the learner's
        live elsewhere (a data-parallel mesh, other hosts); () = where they are."""
        self.learner = learner
        self.policy = policy
        self.devices = tuple(devices)
        self._placed: tuple[Any, Any] = (None, None)  # (learner state, its acting weights)
        self.cache: dict[tuple[int, int], PolicyAgent] = {}
        self._tokens: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}

    def tokens(self, bucket: Bucket) -> tuple[np.ndarray, np.ndarray]:
        """[B, L] tokens and mask of the bucket's instructions at the policy's full width."""
        # keyed by the prompts themselves: an id(bucket) key handed a new bucket the tokens of a
        # garbage-collected one whose id it reused (rollouts with another task's instruction)
        key = tuple(bucket_prompts(bucket))
        if key not in self._tokens:
            pol = self.learner.policy
            tok, mask = instruction_tokens(pol, list(key))
            if len(self._tokens) >= 4096:  # bounded: a long run sees many distinct buckets
                self._tokens.clear()
            self._tokens[key] = fit_prompt(tok, mask, int(pol.config.max_token_len))
        return self._tokens[key]

    def __call__(self, bucket: Bucket, j: int = 1) -> tuple[PolicyAgent, AgentParams]:
        tok, mask = self.tokens(bucket)
        key = (bucket.batch_size, j)
        lrn = self.learner
        if key not in self.cache:
            critic = lrn.critic if j > 1 else None
            pol = self.policy or lrn.policy
            self.cache[key] = PolicyAgent(pol, tok, mask, num_candidates=j, critic=critic)
        if self._placed[0] is not lrn.state:  # copied once per learner state, not per bucket
            weights = (lrn.acting_params, lrn.norm, lrn.cstate.params)
            self._placed = (lrn.state, distributed.place(weights, self.devices))
        policy, norm, critic = self._placed[1]
        tokens = (jnp.asarray(tok, jnp.int32), jnp.asarray(mask))
        return self.cache[key], AgentParams(policy, norm, critic, tokens=tokens)


def buckets_of(compiled: Sequence[CompiledScene], size: int, multiple_of: int = 1) -> list[Bucket]:
    """Same-structure buckets padded to `size` variants (a few shapes, a few compiles)."""
    return make_buckets(list(compiled), batch_size=size, multiple_of=multiple_of)


def rollout(
    backend: Any, bucket: Bucket, policy: Any, params: Any, key: jax.Array, num_chunks: int
) -> tuple[RolloutResult, float]:
    """One rollout and its wall seconds (blocked until done)."""
    t0 = time.perf_counter()
    res = backend.rollout(bucket, policy, params, key, num_chunks)
    jax.block_until_ready(res.success)
    return res, time.perf_counter() - t0


def rollouts_of(
    backend: Any,
    buckets: Sequence[Bucket],
    policy_for: Callable[[Bucket], tuple[Any, Any]],
    key: jax.Array,
    num_chunks: int,
    repeats: int,
    split: Split | None = None,
    key_of: Callable[[int, int], jax.Array] | None = None,
) -> list[list[tuple[RolloutResult, float]]]:
    """`repeats` rollouts of every bucket (bucket i, repeat n keyed fold_in(key, 1000 i + n)):
    [bucket][repeat] -> (result, wall seconds), in order.

    `split`: the buckets spread over the hosts of a run (`coda.loop.distributed.host_split`
    with `objects=True`: the results travel pickled, as numpy), so every host gets every
    bucket's results, the ones one host rolling out all would get (the round's training
    rollouts: every host then feeds the same transitions to its replica of the replay).
    `key_of(i, n)`: another keying of bucket i's repeat n (the planner demos keep theirs)."""

    def one(i: int) -> list[tuple[RolloutResult, float]]:
        out = []
        for n in range(repeats):
            pol, params = policy_for(buckets[i])
            k = jax.random.fold_in(key, i * 1000 + n) if key_of is None else key_of(i, n)
            res, sec = rollout(backend, buckets[i], pol, params, k, num_chunks)
            out.append((jax.tree.map(np.asarray, res) if split else res, sec))
        return out

    got = split_map(len(buckets), one, split)
    if sorted(got) != list(range(len(buckets))):
        raise RuntimeError(f"hosts rolled out buckets {sorted(got)} of {len(buckets)}")
    return [got[i] for i in range(len(buckets))]


def success_of(
    backend: Any,
    variants: Sequence[CompiledScene],
    policy_for: Callable[[Bucket], tuple[Any, Any]],
    key: jax.Array,
    num_chunks: int,
    size: int,
    split: Split | None = None,
) -> tuple[np.ndarray, int]:
    """ν success [N] (in order) of one rollout per variant, and the env steps spent (all hosts').

    `split`: the buckets spread over the hosts of a run (`coda.eval.split_map`; each bucket keeps
    its own key), so every host returns what one host rolling out all would.
    """
    index = {id(c): i for i, c in enumerate(variants)}
    if len(index) != len(variants):
        raise ValueError("the same compiled variant twice; give each its own object")
    buckets = buckets_of(variants, size)

    def one(i: int) -> list:  # [variant positions, successes, env steps] of bucket i
        b = buckets[i]
        pol, params = policy_for(b)
        res, _ = rollout(backend, b, pol, params, jax.random.fold_in(key, i), num_chunks)
        ok = np.asarray(res.success)
        pos = [index[id(c)] for c in b.variants]
        return [pos, [bool(ok[j]) for j in range(len(pos))], int(res.env_steps)]

    out, steps, seen = np.zeros(len(variants), bool), 0, 0
    for pos, ok, st in split_map(len(buckets), one, split).values():
        out[np.asarray(pos, int)] = ok
        steps += int(st)
        seen += len(pos)
    if seen != len(variants):
        raise RuntimeError(f"hosts rolled out {seen} of {len(variants)} variants")
    return out, steps


def fit_norm(learner: Any, results: Sequence[RolloutResult]) -> None:
    """Obs statistics over rollouts of different structures (state widths differ per bucket):
    each dimension's mean / std over the rows that have it; padding dimensions stay identity."""
    dim = int(learner.policy.config.max_state_dim)
    total = np.zeros(dim)
    sq = np.zeros(dim)
    count = np.zeros(dim)
    for r in results:
        keep = np.asarray(r.valid, bool)
        flat = np.asarray(flat_observation(r.states), np.float64)[keep]  # [B, T, d]
        flat = flat.reshape(-1, flat.shape[-1])
        d = flat.shape[1]
        if d > dim:
            raise ValueError(f"state dim {d} exceeds the policy's max_state_dim {dim}")
        total[:d] += flat.sum(0)
        sq[:d] += (flat**2).sum(0)
        count[:d] += flat.shape[0]
    has = count > 0
    mean = np.where(has, total / np.maximum(count, 1), 0.0)
    var = np.where(has, sq / np.maximum(count, 1) - mean**2, 1.0)
    std = np.where(has, np.maximum(np.sqrt(np.maximum(var, 0.0)), 1e-2), 1.0)
    learner.norm = ObsNorm(jnp.asarray(mean, jnp.float32), jnp.asarray(std, jnp.float32))


def demo_rows(learner: Any, agents: Agents, result: RolloutResult, bucket: Bucket) -> Batch | None:
    """Successful planner demos of one bucket as BC rows at the policy's full prompt width."""
    if not np.any(np.asarray(result.success) & np.asarray(result.valid)):
        return None
    tok, mask = agents.tokens(bucket)
    spec = image_spec_for(learner.policy.config)  # image mode: frames rendered from qpos
    ok = np.asarray(result.success) & np.asarray(result.valid) & ~np.asarray(result.failed)
    result = with_images(result, bucket, spec, keep=ok)  # only the rows that become demos
    return demo_batch(
        result, tok, mask, learner.norm, int(learner.policy.config.max_state_dim), True, spec
    )


def concat_batches(batches: Sequence[Batch], cap: int | None = None) -> Batch | None:
    """Rows of several BC batches in one (the newest `cap` rows kept)."""
    batches = [b for b in batches if b is not None]
    if not batches:
        return None
    out = jax.tree.map(lambda *xs: jnp.concatenate(xs, 0), *batches)
    if cap is not None and out.actions.shape[0] > cap:
        out = jax.tree.map(lambda x: x[-cap:], out)
    return out


class BoundFactory:
    """(factory, params) for APIs that take a policy factory and ONE params object (the
    critic's probes): the factory returns the shared compiled agent of the bucket's batch size
    and remembers the bucket's params; `params` reads them when the rollout flattens it.

    This relies on the caller building the policy for a bucket right before rolling that bucket
    out (`coda.critic.probes.run_probes` does: `backend.rollout(bucket, policy_for(bucket),
    params, ...)`); it raises if params are read before any bucket was seen.
    """

    def __init__(self, agents: Agents, j: int = 1) -> None:
        self.agents, self.j = agents, j
        self.current: AgentParams | None = None
        self.params = _LateParams(self)

    def __call__(self, bucket: Bucket) -> PolicyAgent:
        agent, self.current = self.agents(bucket, self.j)
        return agent


@jax.tree_util.register_pytree_node_class
class _LateParams:
    """Flattens to the `AgentParams` of the bucket its factory saw last (see `BoundFactory`)."""

    def __init__(self, owner: BoundFactory) -> None:
        self.owner = owner

    def _now(self) -> AgentParams:
        if self.owner.current is None:
            raise RuntimeError("params read before the factory built an agent for a bucket")
        return self.owner.current

    def __getattr__(self, name: str) -> Any:
        if name == "owner":
            raise AttributeError(name)
        return getattr(self._now(), name)

    def tree_flatten(self):
        p = self._now()
        return (p.policy, p.norm, p.critic, p.tokens), None

    @classmethod
    def tree_unflatten(cls, aux: Any, children: Any) -> AgentParams:
        policy, norm, critic, tokens = children
        return AgentParams(policy, norm, critic, tokens=tokens)

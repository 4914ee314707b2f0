"""The learner on device: K-step critic scans from the device replay, LearnerState resume,
data parallel over forced host devices equals one device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda.policy import Batch, Observation, get_policy
from coda.train import ChunkCritic, Learner, LearnerConfig, init_critic_state
from coda.train.critic import make_critic_fit, make_critic_train_step
from coda.train.multistep import make_critic_scan
from coda.train.replay import Replay, insert

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def synthetic_transitions(policy, n: int, seed: int, prompt: int = 5):
    """Chunk transitions [n] shaped for `policy` (state-only), prompts of `prompt` tokens."""
    from coda.train.critic import Transitions

    c = policy.config
    rng = np.random.default_rng(seed)
    d, length, h = c.max_state_dim, c.max_token_len, c.action_horizon
    state_mask = np.broadcast_to(np.arange(d) < d - 3, (n, d))
    tok_mask = np.broadcast_to(np.arange(length) < prompt, (n, length))
    f32 = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)  # noqa: E731
    return Transitions(
        state=f32(n, d) * state_mask,
        state_mask=jnp.asarray(state_mask),
        tokens=jnp.asarray(np.where(tok_mask, rng.integers(4, 500, (n, length)), 0), jnp.int32),
        token_mask=jnp.asarray(tok_mask),
        actions=jnp.tanh(f32(n, h, c.env_action_dim)),
        ret=jnp.asarray(rng.random(n), jnp.float32),
        boot_state=f32(n, d) * state_mask,
        boot_disc=jnp.asarray(rng.random(n) * 0.9, jnp.float32),
        mc=jnp.asarray(rng.random(n), jnp.float32),
        success=jnp.asarray(rng.random(n) < 0.5, jnp.float32),
    )


def synthetic_demos(policy, n: int, seed: int) -> Batch:
    tr = synthetic_transitions(policy, n, seed, prompt=7)
    obs = Observation(tr.tokens, tr.token_mask, tr.state, tr.state_mask)
    return Batch(obs, tr.actions, jnp.ones((n,), jnp.float32))


@pytest.mark.slow  # ~22 s; like the policy's k-step scan equivalence (tests/test_policy_train.py)
def test_critic_k_step_scan_equals_k_single_steps_and_the_old_fit():
    policy = get_policy("small_tiny")
    critic = ChunkCritic.for_policy(policy, hidden=16)
    data = synthetic_transitions(policy, 24, seed=0)
    buf = insert(Replay.create(data, 64), data)  # not wrapped: slot i = row i
    state0 = init_critic_state(critic, jax.random.key(0), 1e-3)
    keys = jax.random.split(jax.random.key(1), 3)
    scan = make_critic_scan(critic, 1e-3, 0.05, 8)
    s_scan, m_scan = scan(jax.tree.map(jnp.copy, state0), buf, keys)
    step = make_critic_train_step(critic, 1e-3, 0.05)
    s = state0
    for k in keys:
        s, m = step(s, buf.sample(k, 8))
    s_fit, _ = make_critic_fit(critic, 1e-3, 0.05, 8)(state0, data, keys)  # on the raw rows
    for ref in (s, s_fit):
        for a, b in zip(jax.tree.leaves(s_scan), jax.tree.leaves(ref), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(m_scan["loss"]), float(m["loss"]), rtol=1e-5, atol=1e-6)


CFG = LearnerConfig(
    critic_hidden=16,
    critic_batch=8,
    policy_batch=4,
    n_step=2,
    replay_size=20,  # wraps around within two rounds
    demo_capacity=16,
    demo_fraction=0.5,
    policy_ema=0.9,
    updates_per_call=2,
)


def _round(learner: Learner, r: int, demos: Batch, policy: bool) -> None:
    learner.add_transitions(synthetic_transitions(learner.policy, 12, seed=10 + r))
    learner.update_critic(2, learner.next_key())
    if policy:
        learner.update_policy_awr(2, learner.next_key())
        learner.update_policy_bc(demos, 2, learner.next_key())


def _resume_equals_no_resume(tmp_path, policy_updates: bool) -> None:
    """k rounds, save, restore into a fresh Learner, continue == the uninterrupted run."""
    policy = get_policy("small_tiny")
    demos = synthetic_demos(policy, 10, seed=3)
    a = Learner(policy, CFG, jax.random.key(0))
    a.set_demos(demos)
    b = Learner(policy, CFG, jax.random.key(0))
    b.set_demos(demos)
    for r in range(2):
        _round(a, r, demos, policy_updates)
    _round(b, 0, demos, policy_updates)
    b.save(str(tmp_path / "ckpt"))
    c = Learner(policy, CFG, jax.random.key(99))  # different init: everything comes from disk
    c.restore(str(tmp_path / "ckpt"))
    assert c.critic_updates == b.critic_updates == 2 and c.replay_size == 12
    _round(c, 1, demos, policy_updates)
    assert a.replay_size == c.replay_size == 20 and a.critic_updates == c.critic_updates == 4
    assert a.policy_updates == c.policy_updates == (8 if policy_updates else 0)
    assert a.token_len == 8  # prompts of 5 and 7 tokens train at width 8, not max_token_len
    leaves_a, leaves_c = jax.tree.leaves(a.state), jax.tree.leaves(c.state)
    assert len(leaves_a) == len(leaves_c)
    for x, y in zip(leaves_a, leaves_c, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=1e-6)


def test_learner_resume_equals_no_resume(tmp_path):
    """Critic updates, the wrapping replay, demos, rng, counters and the (EMA) policy state
    survive an orbax save / restore: resuming equals never stopping."""
    _resume_equals_no_resume(tmp_path, policy_updates=False)


@pytest.mark.slow
def test_learner_resume_equals_no_resume_with_policy_updates(tmp_path):
    """The same with AWR (demo-mixed) and BC policy updates in every round."""
    _resume_equals_no_resume(tmp_path, policy_updates=True)


PARALLEL_SCRIPT = textwrap.dedent("""
    import json, os, sys
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    )
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax, numpy as np
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    from tests.test_train_learner import CFG, synthetic_demos, synthetic_transitions
    from coda.policy import get_policy
    from coda.train import Learner
    from coda.train.multistep import data_mesh
    assert len(jax.devices()) == 4
    policy = get_policy("small_tiny")
    demos = synthetic_demos(policy, 10, seed=3)
    out = {}
    for name, mesh in (("one", None), ("four", data_mesh())):
        learner = Learner(policy, CFG, jax.random.key(0), mesh=mesh)
        learner.set_demos(demos)
        learner.add_transitions(synthetic_transitions(policy, 12, seed=10))
        learner.update_critic(2, jax.random.key(1))
        learner.update_policy_awr(2, jax.random.key(2))
        learner.update_policy_bc(demos, 2, jax.random.key(3))
        out[name] = [np.asarray(x) for x in jax.tree.leaves(learner.state)]
        if mesh is not None:
            (prog,) = learner._progs["critic_scan"].values()
            st = learner.state
            hlo = prog.lower(st.critic, st.replay, jax.random.split(jax.random.key(0), 2))
            out["all_reduce"] = "all-reduce" in hlo.compile().as_text()
            out["devices"] = len(st.policy.params["PaliGemma"]["llm"]["embedder"]["input_embedding"].sharding.device_set)
    diffs = [float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0))
             for a, b in zip(out["one"], out["four"])]
    print(json.dumps({"max_diff": max(diffs), "all_reduce": out["all_reduce"],
                      "devices": out["devices"]}))
""")


@pytest.mark.slow
def test_data_parallel_on_four_host_devices_equals_one_device(tmp_path):
    """Critic / AWR / BC updates with minibatches split over 4 forced host devices (params
    replicated, gradients all-reduced) give the single-device learner state (atol)."""
    from tests.conftest import _CACHE

    script = tmp_path / "parallel.py"
    script.write_text(PARALLEL_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), _CACHE, ROOT],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["all_reduce"] and res["devices"] == 4, res
    assert res["max_diff"] == pytest.approx(0.0, abs=1e-4), res


@pytest.mark.parametrize("advantage", ["critic", "mc", "nstep"])
def test_awr_rows_advantage_estimators(advantage):
    """Each estimator's weights equal exp(A/λ) (normalised, clipped) of its own formula:
    critic min Q - V, mc G - V(o), nstep G^(m) + Γ^m(1-d) V(o') - V(o)."""
    from coda.train import awr as awr_lib
    from coda.train.learner import awr_rows

    policy = get_policy("small_tiny")
    critic = ChunkCritic.for_policy(policy, hidden=16)
    params = critic.init(jax.random.key(0))
    data = synthetic_transitions(policy, 16, seed=1)
    buf = insert(Replay.create(data, 16), data)  # full: sampling draws slots 0..15
    kw = dict(batch=8, n_demo=0, temperature=0.5, max_weight=20.0, token_len=8)
    key = jax.random.key(3)
    out = awr_rows(critic, params, buf, buf, key, advantage=advantage, **kw)
    mb = buf.sample(jax.random.split(key)[0], 8)  # the rows awr_rows drew
    obs = Observation(mb.tokens[:, :8], mb.token_mask[:, :8], mb.state, mb.state_mask)
    v = critic.v(params, obs)
    boot = Observation(obs.tokens, obs.token_mask, mb.boot_state, mb.state_mask)
    want_adv = {
        "critic": critic.advantage(params, obs, mb.actions),
        "mc": mb.mc - v,
        "nstep": mb.ret + mb.boot_disc * critic.v(params, boot) - v,
    }[advantage]
    want = awr_lib.awr_weights(want_adv, 0.5, 20.0)
    np.testing.assert_allclose(np.asarray(out.weights), np.asarray(want), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out.actions), np.asarray(mb.actions), atol=0)
    with pytest.raises(ValueError, match="valid: \\['critic', 'mc', 'nstep', 'success'\\]"):
        LearnerConfig(advantage="td")


def test_success_rows_keep_their_share_however_few_succeed():
    """advantage="success": the own rows are drawn among the successful rows only, weight 1
    each, so they carry (batch - n_demo) / batch of the weight whether 1 of 16 rows or 8 of
    16 succeeded (issue 29: the old filter gave them f² of it); with none, weight 0."""
    from coda.train.learner import awr_rows, demo_rows

    policy = get_policy("small_tiny")
    critic = ChunkCritic.for_policy(policy, hidden=16)
    params = critic.init(jax.random.key(0))
    data = synthetic_transitions(policy, 16, seed=1)
    width = int(policy.config.max_token_len)
    demos = Replay.from_rows(demo_rows(synthetic_demos(policy, 8, seed=2), width))
    kw = dict(batch=12, n_demo=4, temperature=0.5, max_weight=20.0, token_len=8)
    for n_ok in (0, 1, 8):
        ok = np.zeros(16, np.float32)
        ok[np.arange(n_ok) * 2] = 1.0
        d = data.replace(success=jnp.asarray(ok), source=jnp.arange(16, dtype=jnp.int32) % 3)
        buf = insert(Replay.create(d, 32), d)  # half full: slots 16.. are empty
        out, src = awr_rows(
            critic,
            params,
            buf,
            demos,
            jax.random.key(5),
            advantage="success",
            with_source=True,
            **kw,
        )
        w = np.asarray(out.weights)
        assert w.shape == (12,) and np.asarray(src).shape == (8,)
        np.testing.assert_allclose(w[8:], 1.0, atol=0)  # the demo rows
        if n_ok == 0:
            np.testing.assert_allclose(w[:8], 0.0, atol=0)
            continue
        np.testing.assert_allclose(w[:8], 1.0, atol=0)
        drawn = np.asarray(out.actions[:8])
        succ = np.asarray(d.actions)[ok > 0]
        for row in drawn:  # every own row is one of the successful rows
            assert np.abs(succ - row).reshape(n_ok, -1).max(-1).min() == pytest.approx(0, abs=0)


def test_mc_returns_reach_the_replay():
    """chunk_transitions stores the discounted return to the episode's end (`mc`)."""
    from coda.train.shaping import mc_returns

    r = np.array([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    m = np.array([[True, True, True, False], [True, True, True, True]])
    np.testing.assert_allclose(
        mc_returns(r, m, 0.5), [[0.25, 0.5, 1.0, 0.0], [0, 0, 0, 0]], atol=1e-9
    )


def test_sample_noise_scale_zero_is_deterministic():
    """`sample_noise_scale` scales the flow prior: 0 gives the same chunk for any key."""
    base = get_policy("small_tiny")
    params = base.init(jax.random.key(0))
    obs = synthetic_demos(base, 2, seed=0).obs
    det = get_policy("small_tiny", sample_noise_scale=0.0)
    a = det.sample_chunks(params, obs, jax.random.key(1))
    b = det.sample_chunks(params, obs, jax.random.key(2))
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    c = base.sample_chunks(params, obs, jax.random.key(1))
    d = base.sample_chunks(params, obs, jax.random.key(2))
    assert float(jnp.max(jnp.abs(c - d))) > 1e-3


@pytest.mark.slow  # two train-step compiles (the BC and the fine-tuning batch)
def test_finetune_phase_switches_batch_and_rate():
    """Updates before `finetune_start` draw policy_batch rows at the BC rate; from it on the
    fine-tuning batch and rate (the loop's loop.finetune_batch / finetune_lr)."""
    import dataclasses

    policy = get_policy("small_tiny")
    demos = synthetic_demos(policy, 10, seed=3)
    cfg = dataclasses.replace(
        CFG, finetune_start=4, finetune_lr=5e-4, finetune_batch=8, finetune_steps=10
    )
    lrn = Learner(policy, cfg, jax.random.key(0), total_policy_steps=4)
    lrn.set_demos(demos)
    lrn.add_transitions(synthetic_transitions(policy, 12, seed=1))
    assert lrn.policy_batch == 4 and lrn.awr_policy_batch(jax.random.key(1)).actions.shape[0] == 4
    lrn.update_policy_bc(demos, 4, lrn.next_key())
    assert lrn.policy_updates == 4 and lrn.policy_batch == 8
    assert lrn.awr_policy_batch(jax.random.key(1)).actions.shape[0] == 8
    m = lrn.update_policy_awr(2, lrn.next_key())
    assert np.isfinite(m["loss"])
    np.testing.assert_allclose(m["lr"], 5e-4, rtol=1e-5, atol=1e-9)  # step 5: past warmup (1)
    with pytest.raises(ValueError, match="finetune_lr"):
        LearnerConfig(finetune_start=3)


@pytest.mark.slow  # its own acting compile
def test_prompt_tokens_follow_the_bucket_not_its_id():
    """The acting caches key tokens by the bucket's instructions: a bucket that reuses a
    collected one's id (CPython recycles them) acts on its own prompts, not the old ones."""
    import gc
    from types import SimpleNamespace

    from coda.loop.collect import Agents
    from coda.train.agent import instruction_tokens

    policy = get_policy("small_tiny")
    learner = Learner(policy, LearnerConfig(), jax.random.PRNGKey(0), total_policy_steps=1)
    agents = Agents(learner)

    def bucket(text):
        v = SimpleNamespace(scene=SimpleNamespace(task={"instruction": text}))
        return SimpleNamespace(padded=[v, v])

    texts = ["put the red cube on the plate", "stack the blue block on the green block"]
    for _ in range(3):
        for text in texts:
            b = bucket(text)
            want, _ = instruction_tokens(policy, [text, text])
            got, _ = agents.tokens(b)
            n = min(want.shape[1], got.shape[1])
            np.testing.assert_array_equal(got[:, :n], want[:, :n])
            agent = learner.agent(b, 1)
            m = agent.token_mask.shape[1]
            np.testing.assert_array_equal(np.asarray(agent.tokens), want[:, :m])
            del b, agent
            gc.collect()


def test_bc_batches_draw_the_round_share_from_the_new_rows():
    """`loop.bc_round_share`: a mixed BC batch takes exactly round(share · batch) rows from the
    rows added after round 0 and the rest from round 0's."""
    from coda.train.learner import _bc_mix_sample
    from coda.train.learner_state import demo_rows

    policy = get_policy("small_tiny")
    demos = synthetic_demos(policy, 10, seed=0)
    new = np.arange(10) >= 7  # 3 of 10 rows are new
    marked = Batch(demos.obs, jnp.asarray(new, jnp.float32)[:, None, None] + 0 * demos.actions)
    width = int(demos.obs.tokens.shape[1])
    replay = Replay.from_rows(demo_rows(marked, width))
    for k in range(4):
        b = _bc_mix_sample(
            (replay, jnp.asarray(new)), jax.random.key(k), batch=8, n_new=4, token_len=width
        )
        assert int(jnp.sum(b.actions[:, 0, 0] > 0.5)) == 4  # 4 new rows of 3, with replacement


@pytest.mark.slow  # the mixed BC scan's own compile
def test_the_learner_trains_on_mixed_bc_batches():
    policy = get_policy("small_tiny")
    demos = synthetic_demos(policy, 10, seed=0)
    new = np.arange(10) >= 7
    lrn = Learner(policy, CFG, jax.random.key(0), total_policy_steps=2)
    m = lrn.update_policy_bc(demos, 2, jax.random.key(1), new, 0.5)
    assert np.isfinite(m["loss"]) and lrn.policy_updates == 2

"""Text2potential vs. sparse rewards: policy updates to reach a success threshold (§4 claim).

Protocol (stack-or-insert family, `small` policy, native backend, CPU-feasible):

1. Scene: one stack-or-insert scene program (stack mode, two cubes, no distractors) and
   `--variants` layouts of it (seeds 0..N-1). Planner demos D_t on those variants.
2. Shared start: the `small` policy behaviour-cloned on the demos for `--bc-steps` updates
   (cached under `--cache`), so that success starts inside the band where AWR has signal —
   from scratch, sparse-reward RL makes no progress at any budget this machine allows.
3. For each seed and each condition (``shaped``: Φ from the offline Text2potential compiler,
   β > 0; ``sparse``: β = 0, everything else identical), run rounds of: collect one batched
   rollout of all variants with best-of-j (j = `--candidates`), add the chunk transitions to
   the replay, `--critic-steps` critic updates, `--policy-steps` AWR policy updates, then
   evaluate plain sampling (j = 1) on all variants.
4. Report per condition: policy updates until the evaluated success first reaches
   `--threshold` (runs that never reach it are counted at the budget and reported as
   censored), mean ± s.e. over seeds; final success at the fixed budget, mean ± s.e.

    .venv/bin/python benchmarks/text2potential.py --out benchmarks/results/text2potential.json
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# Each (seed, condition) builds a fresh learner; the persistent cache makes their identical
# computations compile once.
jax.config.update(
    "jax_compilation_cache_dir", os.environ.get("CODA_JAX_CACHE", os.path.join(ROOT, ".jax_cache"))
)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)

from coda.policy import get_policy  # noqa: E402
from coda.sim.compile import compile_scene  # noqa: E402
from coda.sim.planner import planner_for  # noqa: E402
from coda.sim.rollout import make_backend, make_buckets  # noqa: E402
from coda.sim.sdk import exec_program  # noqa: E402
from coda.train import Learner, LearnerConfig  # noqa: E402
from coda.train.routing import refinement_report  # noqa: E402

SCENE = """add_object("cube", role="top", instance="cube_red")
add_object("cube", role="base", instance="cube_blue")
set_task("stack_or_insert", mode="stack", top="top", base="base")
sample_layout()
"""
NUM_CHUNKS = 14
POLICY_OVERRIDES = dict(max_token_len=16)  # prompts here are < 16 tokens; same parameters


def build(variants: int):
    scenes = [exec_program(SCENE, seed=s, isolation="inprocess") for s in range(variants)]
    comp = [compile_scene(sc) for sc in scenes]
    (bucket,) = make_buckets(comp)
    return bucket


def potential_for(bucket):
    """Φ from the offline Text2potential compiler (R_hone's embedded default) for this task."""
    from coda.potentials import CompileRequest, OfflineCompiler, compile_program

    req = CompileRequest(task=bucket.scene_task)
    prop = OfflineCompiler().propose(req, bucket.sym)
    return compile_program(prop.source, bucket.sym), prop


def evaluate(learner, backend, bucket, rng, potential=None, repeats: int = 1):
    """ν success of plain sampling (j = 1) on all variants, averaged over `repeats` rollouts
    (independent noise; with 32 variants one rollout has a s.e. of ~0.09 at 50 %); with a
    potential also the mean final Φ (a progress diagnostic only: the shaped run optimises it, so
    it is not a fair score)."""
    succ, phis = [], []
    for k in jax.random.split(rng, repeats):
        res = learner.rollout(backend, bucket, k, NUM_CHUNKS, num_candidates=1)
        succ.append(float(np.asarray(res.success)[bucket.valid].mean()))
        if potential is not None:
            phi = np.asarray(potential.phi(jax.tree.map(lambda x: x[:, -1], res.states)))
            phis.append(float(phi[bucket.valid].mean()))
    if potential is None:
        return float(np.mean(succ))
    return float(np.mean(succ)), float(np.mean(phis))


def pretrain(args, policy, bucket, backend, log):
    """BC on planner demos; caches params + obs norm to args.cache."""
    if os.path.exists(args.cache):
        with open(args.cache, "rb") as f:
            blob = pickle.load(f)
        log(f"loaded BC start from {args.cache}: success {blob['success']:.3f}")
        return blob
    t0 = time.time()
    demos = backend.rollout(bucket, planner_for(bucket), None, jax.random.key(0), NUM_CHUNKS)
    learner = Learner(
        policy,
        LearnerConfig(policy_lr=args.bc_lr, policy_batch=32, policy_ema=args.bc_ema),
        jax.random.key(1),
        total_policy_steps=args.bc_steps,
    )
    learner.fit_norm(demos.states)
    data = learner.demo_batch(demos, bucket)
    curve = []
    rng = jax.random.key(2)
    done = 0
    while done < args.bc_steps:
        n = min(args.eval_every_bc, args.bc_steps - done)
        rng, k1, k2 = jax.random.split(rng, 3)
        m = learner.update_policy_bc(data, n, k1)
        done += n
        s = evaluate(learner, backend, bucket, k2)
        curve.append({"step": done, "loss": m["loss"], "success": s, "t": time.time() - t0})
        log(f"BC step {done}: loss {m['loss']:.4f} success {s:.3f} ({time.time() - t0:.0f}s)")
    blob = {
        "params": jax.tree.map(np.asarray, learner.acting_params),
        "norm": jax.tree.map(np.asarray, learner.norm),
        "success": curve[-1]["success"],
        "curve": curve,
        "note": f"BC from scratch, peak lr {args.bc_lr}, EMA {args.bc_ema or 'off'}",
        "planner_success": float(np.asarray(demos.success)[bucket.valid].mean()),
        "wall_s": time.time() - t0,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.cache)), exist_ok=True)
    with open(args.cache, "wb") as f:
        pickle.dump(blob, f)
    return blob


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="benchmarks/results/text2potential.json")
    p.add_argument("--cache", default="/tmp/coda_t2p_bench/bc_start.pkl")
    p.add_argument("--variants", type=int, default=32)
    p.add_argument("--bc-steps", type=int, default=1000)
    p.add_argument("--bc-lr", type=float, default=1e-3)
    p.add_argument("--bc-ema", type=float, default=0.999, help="EMA of BC weights (0 = off)")
    p.add_argument("--eval-every-bc", type=int, default=250)
    p.add_argument("--pretrain-only", action="store_true")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--candidates", type=int, default=4)
    p.add_argument("--critic-steps", type=int, default=300)
    p.add_argument("--policy-steps", type=int, default=10)
    p.add_argument("--policy-lr", type=float, default=1e-4)
    p.add_argument("--beta", type=float, default=1.0)
    p.add_argument(
        "--demo-fraction",
        type=float,
        default=0.0,
        help="fraction of each AWR batch drawn from the planner demos (weight 1); 0 = pure AWR",
    )
    p.add_argument("--threshold", type=float, default=None, help="default: start + 0.15")
    p.add_argument(
        "--awr-ema",
        type=float,
        default=0.0,
        help="EMA of the weights during AWR, which rollouts act with (0 = off)",
    )
    p.add_argument(
        "--eval-repeats",
        type=int,
        default=1,
        help="rollouts averaged per evaluation (the start is re-measured the same way)",
    )
    args = p.parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    policy = get_policy("small", **POLICY_OVERRIDES)
    backend = make_backend("native")
    bucket = build(args.variants)
    blob = pretrain(args, policy, bucket, backend, log)
    if args.pretrain_only:
        return
    potential, proposal = potential_for(bucket)
    t0 = time.time()
    start = start_success(args, policy, bucket, backend, blob)
    log(f"start success ({args.eval_repeats} rollouts): {start:.3f}")
    runs = run_comparison(args, policy, bucket, backend, blob, potential, log, start)
    thr = args.threshold if args.threshold is not None else min(start + 0.15, 1.0)
    budget = args.rounds * args.policy_steps
    summary = {}
    for cond in ("shaped", "sparse"):
        reach, final = [], []
        for r in runs[cond]:
            hit = next((c["updates"] for c in r["curve"] if c["success"] >= thr), None)
            r["updates_to_threshold"] = hit
            reach.append(budget if hit is None else hit)
            final.append(r["curve"][-1]["success"])
        summary[cond] = {
            "updates_to_threshold": _mse(reach),
            "censored_runs": sum(r["updates_to_threshold"] is None for r in runs[cond]),
            "final_success": _mse(final),
        }
    us, uo = (summary[c]["updates_to_threshold"]["mean"] for c in ("shaped", "sparse"))
    result = {
        "command": "python " + " ".join([os.path.relpath(__file__, os.getcwd()), *sys.argv[1:]]),
        "protocol": {
            "family": "stack_or_insert (stack mode, one scene program)",
            "scene_program": SCENE,
            "variants": args.variants,
            "policy": "small",
            "policy_overrides": POLICY_OVERRIDES,
            "backend": "native",
            "num_chunks": NUM_CHUNKS,
            "horizon": int(policy.config.action_horizon),
            "bc_start": {
                "steps": blob["curve"][-1]["step"] if blob["curve"] else args.bc_steps,
                "note": blob.get("note", "BC from scratch (cached start without a recorded note)"),
                "success": start,
                "success_at_pretrain_end": float(blob["success"]),
                "curve": blob["curve"],
                "planner_success": blob["planner_success"],
            },
            "seeds": args.seeds,
            "rounds": args.rounds,
            "policy_updates_per_round": args.policy_steps,
            "critic_updates_per_round": args.critic_steps,
            "candidates_j": args.candidates,
            "beta": args.beta,
            "demo_fraction": args.demo_fraction,
            "awr_ema": args.awr_ema,
            "eval_repeats": args.eval_repeats,
            "threshold": thr,
            "budget_updates": budget,
            "potential_notes": proposal.notes,
            "potential_source": proposal.source,
        },
        "summary": summary,
        "update_reduction_shaped_vs_sparse": None if not uo else 1.0 - us / uo,
        "runs": runs,
        "refinement": _refinement(args, policy, bucket, runs, potential, blob),
        "routing_at_start": _routing(start),
        "wall_s": time.time() - t0,
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, jax {jax.__version__}",
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=float)
    log(json.dumps(summary, indent=1))


def _routing(success: float) -> dict:
    """What the method's router would do with this mode at the start (demos exist)."""
    from coda.train import RoutingConfig, route

    cfg = RoutingConfig()
    r = route({"stack": success}, has_demo={"stack": True}, cfg=cfg)
    return {
        "band": list(cfg.band),
        "tool": r.tools["stack"],
        "reason": r.reasons["stack"],
        "lower_importance": r.lower_importance,
    }


def _mse(xs) -> dict:
    x = np.asarray(xs, float)
    se = float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else 0.0
    return {"mean": float(x.mean()), "se": se, "values": x.tolist()}


def start_success(args, policy, bucket, backend, blob) -> float:
    """The shared start's success, measured like every later evaluation."""
    if args.eval_repeats <= 1:
        return float(blob["success"])
    learner = Learner(
        policy,
        LearnerConfig(),
        jax.random.key(0),
        policy_params=jax.tree.map(jnp.asarray, blob["params"]),
        norm=jax.tree.map(jnp.asarray, blob["norm"]),
    )
    return evaluate(learner, backend, bucket, jax.random.key(999), repeats=args.eval_repeats)


def run_comparison(args, policy, bucket, backend, blob, potential, log, start: float) -> dict:
    """Same start, same seeds and rollout keys for both conditions; only β differs."""
    runs = {"shaped": [], "sparse": []}
    demos = None
    if args.demo_fraction > 0:
        demos = backend.rollout(bucket, planner_for(bucket), None, jax.random.key(0), NUM_CHUNKS)
    for seed in range(args.seeds):
        for cond in ("shaped", "sparse"):
            cfg = LearnerConfig(
                mode=cond,
                beta=args.beta,
                num_candidates=args.candidates,
                policy_lr=args.policy_lr,
                policy_warmup=1,
                demo_fraction=args.demo_fraction,
                policy_ema=args.awr_ema,
            )
            learner = Learner(
                policy,
                cfg,
                jax.random.key(100 + seed),
                policy_params=jax.tree.map(jnp.asarray, blob["params"]),
                norm=jax.tree.map(jnp.asarray, blob["norm"]),
                total_policy_steps=args.rounds * args.policy_steps,
            )
            if demos is not None:
                learner.set_demos(learner.demo_batch(demos, bucket))
            rng = jax.random.key(1000 + seed)
            t0 = time.time()
            curve = [{"updates": 0, "success": start, "collect_success": None}]
            results = []
            for rnd in range(args.rounds):
                rng, kc, kq, kp, ke = jax.random.split(rng, 5)
                res = learner.rollout(backend, bucket, kc, NUM_CHUNKS)
                results.append(res)
                info = learner.add_rollout(res, bucket, phi_fn=potential.phi)
                cm = learner.update_critic(args.critic_steps, kq)
                learner.update_policy_awr(args.policy_steps, kp)
                s, phi_final = evaluate(
                    learner, backend, bucket, ke, potential, repeats=args.eval_repeats
                )
                curve.append(
                    {
                        "updates": learner.policy_updates,
                        "success": s,
                        "collect_success": float(np.asarray(res.success)[bucket.valid].mean()),
                        "rewarded_chunks": info["rewarded"],
                        "critic_td_error": cm["td_error"],
                        "eval_final_phi": phi_final,
                    }
                )
                log(f"seed {seed} {cond} round {rnd}: {curve[-1]} ({time.time() - t0:.0f}s)")
            runs[cond].append({"seed": seed, "curve": curve, "wall_s": time.time() - t0})
            if cond == "shaped" and seed == 0:
                run_comparison.first_results = results
    return runs


def _refinement(args, policy, bucket, runs, potential, blob) -> dict:
    """Refinement check on seed 0's shaped-run rollouts: critic convergence with vs. without Φ."""
    from coda.train import critic_convergence

    results = getattr(run_comparison, "first_results", None)
    if not results:
        return {}
    steps, ew, eo = critic_convergence(
        policy,
        results,
        bucket,
        potential.phi,
        norm=jax.tree.map(jnp.asarray, blob["norm"]),
        rng=jax.random.key(7),
        steps=args.critic_steps * 2,
        eval_every=max(args.critic_steps // 6, 1),
        beta=args.beta,
    )
    rep = refinement_report(steps, ew, eo)
    return {
        "steps": list(steps),
        "value_error_with_phi": list(map(float, ew)),
        "value_error_without_phi": list(map(float, eo)),
        "speedup": rep.speedup,
        "useful": rep.useful,
        "reason": rep.reason,
    }


if __name__ == "__main__":
    main()

"""The learner against the machine's limit: updates/s, analytic FLOPs, measured peak → MFU.

    .venv/bin/python benchmarks/learner.py --out benchmarks/results/learner.json

Side by side in one run, for ``small`` (pi0.5, state-only), ``oft`` (OFT at small scale) and a
dense-MLP reference of about the same FLOPs per update (plain [rows, w] x [w, w] matmuls):

* ``single_step_w32``: today's learner — one jitted train step per Python-level call, the
  minibatch gathered eagerly on the host side of the call, prompts at the fixed
  ``max_token_len`` = 32;
* ``scan_w32``: K updates per jitted call (`make_scan_train_step`), minibatches drawn from a
  device `Replay` inside the scan, prompts still 32 wide;
* ``scan``: the same with prompts cut to the width the data needs (16 for CoDA's instructions).

FLOPs per update are analytic (`coda.policy.flops`, 3 × forward, checked against XLA's cost
analysis in tests): ``useful`` counts the prompt at the needed width (padding is waste),
``executed`` at the width the variant runs. The machine's peak is a large float32 matmul timed
in the same run; MFU = useful FLOP/s / peak. To explain the gap, the run also times the model's
own GEMM shapes (the matmuls of one ``small`` forward at batch 32) and a forward-only pass.

The CPU is shared: the load average is recorded at the start and end of every section.
Compile time is excluded from every rate (reported separately).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from coda.policy import (  # noqa: E402
    Batch,
    Observation,
    get_policy,
    init_train_state,
    make_train_step,
    train_config,
)
from coda.policy.base import fit_prompt, prompt_width, token_bucket  # noqa: E402
from coda.policy.flops import train_flops_per_sample  # noqa: E402
from coda.policy.train import make_scan_train_step  # noqa: E402
from coda.train.replay import Replay  # noqa: E402

PROMPT = 12  # tokens of a typical CoDA instruction (BOS + ~10 pieces + newline) -> width 16


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def best_and_median(fn, repeats: int) -> tuple[float, float]:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        ts.append(time.perf_counter() - t0)
    return float(np.min(ts)), float(np.median(ts))


# --- the machine's peak -------------------------------------------------------------------------


def matmul_rate(m: int, k: int, n: int, repeats: int, inner: int = 1) -> dict:
    """float32 [m, k] x [k, n] GFLOP/s (best and median of `repeats`, `inner` matmuls each)."""
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.float32)
    b = jax.random.normal(kb, (k, n), jnp.float32)

    f = jax.jit(jnp.dot)
    jax.block_until_ready(f(a, b))

    def run():  # `inner` back-to-back dispatches (asynchronous: dispatch overlaps compute)
        return [f(a, b) for _ in range(inner)]

    best, med = best_and_median(run, repeats)
    flops = 2.0 * m * k * n * inner
    return {
        "shape": [m, k, n],
        "gflops_best": flops / best / 1e9,
        "gflops_median": flops / med / 1e9,
    }


def small_gemm_shapes(policy, batch: int, width: int) -> list[tuple[str, int, int, int, int]]:
    """(name, count, m, k, n) of the matmuls in one ``small`` forward (pi0.5 experts)."""
    c = policy.config
    prefix = batch * (c.num_state_tokens + width)
    suffix = batch * c.action_horizon
    out = []
    for tag, e, rows in (("vlm", c.vlm, prefix), ("expert", c.expert, suffix)):
        w, hd = e.width, e.head_dim
        out += [
            (f"{tag}.q", e.depth, rows, w, e.num_heads * hd),
            (f"{tag}.kv", e.depth, rows, w, 2 * e.num_kv_heads * hd),
            (f"{tag}.o", e.depth, rows, e.num_heads * hd, w),
            (f"{tag}.gate_up", e.depth, rows, w, 2 * e.mlp_dim),
            (f"{tag}.down", e.depth, rows, e.mlp_dim, w),
        ]
    return out


# --- models ------------------------------------------------------------------------------------


class DenseMLP:
    """Reference: a residual MLP over [rows, w] activations, MSE to a target; `loss` follows
    the policy protocol so the same train step runs it."""

    def __init__(self, width: int, depth: int):
        self.width, self.depth = width, depth

    def init(self, rng: jax.Array):
        ks = jax.random.split(rng, self.depth)
        scale = 1.0 / np.sqrt(self.width)
        return [
            {
                "w": jax.random.normal(k, (self.width, self.width)) * scale,
                "b": jnp.zeros(self.width),
            }
            for k in ks
        ]

    def loss(self, params, batch: Batch, rng: jax.Array):
        x = batch.obs.state  # [B, T, w]
        for layer in params:
            x = x + jax.nn.gelu(x @ layer["w"] + layer["b"])
        loss = jnp.mean(jnp.square(x - batch.actions))
        return loss, {"loss": loss}

    def train_flops_per_sample(self, rows_per_sample: int) -> int:
        return 3 * 2 * self.depth * rows_per_sample * self.width * self.width


def policy_rows(policy, n: int, width: int, rng: np.random.Generator) -> Batch:
    """n state-only rows with PROMPT-token prompts padded to `width` columns."""
    c = policy.config
    tok = rng.integers(4, 900, (n, c.max_token_len))
    mask = np.arange(c.max_token_len)[None, :].repeat(n, 0) < PROMPT
    tok, mask = fit_prompt(np.where(mask, tok, 0), mask, width)
    d = c.max_state_dim
    state = rng.normal(size=(n, d)).astype(np.float32)
    smask = np.broadcast_to(np.arange(d) < 40, (n, d))
    obs = Observation(
        jnp.asarray(tok, jnp.int32), jnp.asarray(mask), jnp.asarray(state), jnp.asarray(smask)
    )
    actions = np.tanh(rng.normal(size=(n, c.action_horizon, c.env_action_dim)))
    return Batch(obs, jnp.asarray(actions, jnp.float32), jnp.ones((n,), jnp.float32))


def mlp_rows(model: DenseMLP, n: int, rows: int, rng: np.random.Generator) -> Batch:
    x = jnp.asarray(rng.normal(size=(n, rows, model.width)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(n, rows, model.width)), jnp.float32)
    obs = Observation(jnp.zeros((n, 1), jnp.int32), jnp.ones((n, 1), bool), x, None)
    return Batch(obs, y, jnp.ones((n,), jnp.float32))


def bench_variant(model, data: Batch, batch: int, k: int, scan: bool, repeats: int) -> dict:
    """Updates/s of one training variant; compile excluded."""
    cfg = train_config(peak_lr=3e-4, warmup_steps=10, decay_steps=10000, ema_decay=None)
    params = model.init(jax.random.key(0))
    state = init_train_state(params, cfg)
    n = data.actions.shape[0]
    keys = jax.random.split(jax.random.key(1), k)
    t0 = time.perf_counter()
    if scan:
        buf = Replay.from_rows(data)
        run = make_scan_train_step(model, cfg, lambda d, key: d.sample(key, batch))
        state, m = run(state, buf, keys)
        jax.block_until_ready(m)
        compile_s = time.perf_counter() - t0

        def work():
            nonlocal state
            state, m = run(state, buf, keys)
            return m
    else:
        step = make_train_step(model, cfg)
        take = jax.jit(lambda d, idx: jax.tree.map(lambda x: x[idx], d))

        def one(key, state):  # today's Learner: a gathered minibatch, then one jitted step
            k1, k2 = jax.random.split(key)
            idx = jax.random.randint(k1, (batch,), 0, n)
            return step(state, take(data, idx), k2)

        state, m = one(keys[0], state)
        jax.block_until_ready(m)
        compile_s = time.perf_counter() - t0

        def work():
            nonlocal state
            for key in keys:
                state, m = one(key, state)
            return m

    lo = load()
    best, med = best_and_median(work, repeats)
    return {
        "compile_s": compile_s,
        "updates_per_call": k if scan else 1,
        "updates_per_s_best": k / best,
        "updates_per_s_median": k / med,
        "load_before": lo,
        "load_after": load(),
    }


def forward_rate(model, data: Batch, batch: int, repeats: int) -> float:
    """Forward-only (loss) passes per second at `batch` (for the backward / update share)."""
    mb = jax.tree.map(lambda x: x[:batch], data)
    params = model.init(jax.random.key(0))
    f = jax.jit(lambda p, b, r: model.loss(p, b, r)[0])
    jax.block_until_ready(f(params, mb, jax.random.key(0)))
    best, _ = best_and_median(lambda: f(params, mb, jax.random.key(0)), repeats)
    return 1.0 / best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/learner.json")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--k", type=int, default=8, help="updates per jitted call (scan length)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="small,oft,dense")
    ap.add_argument("--big-batch", type=int, default=128, help="extra small variant; 0 = off")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    out = {
        "command": "python " + " ".join(sys.argv),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "jax": jax.__version__,
            "backend": jax.default_backend(),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "loadavg_at_start": load(),
        },
        "batch": args.batch,
        "k": args.k,
        "prompt_tokens": PROMPT,
    }
    print(json.dumps(out, indent=1), flush=True)

    # 1. peak: a large float32 matmul, timed now and again before every model (the CPU is
    # shared: the most the machine delivered during this run is its peak here)
    peaks = []

    def sample_peak(when: str) -> None:
        for n in (1024, 2048):
            r = matmul_rate(n, n, n, repeats=5, inner=16 if n == 1024 else 2)
            peaks.append({"when": when, **r, "load": load()})
            print("peak", peaks[-1], flush=True)

    sample_peak("start")
    small = get_policy("small")
    width = token_bucket(PROMPT, small.config.max_token_len)
    # 2. the model's own GEMMs (one small forward at this batch): what matmuls of that size get
    gemms = []
    for name, count, m, k, n in small_gemm_shapes(small, args.batch, width):
        r = matmul_rate(m, k, n, repeats=3, inner=8)
        gemms.append({"name": name, "count": count, **r})
    tot_flops = sum(2.0 * g["count"] * np.prod(g["shape"]) for g in gemms)
    tot_time = sum(2.0 * g["count"] * np.prod(g["shape"]) / (g["gflops_best"] * 1e9) for g in gemms)
    out["small_forward_gemms"] = {
        "shapes": gemms,
        "gflops_weighted": tot_flops / tot_time / 1e9,
        "load": load(),
    }
    print("gemms", out["small_forward_gemms"]["gflops_weighted"], flush=True)

    # 3. models side by side
    models = {}
    n_rows = 4096
    for name in args.models.split(","):
        sample_peak(f"before {name}")
        t_model = time.perf_counter()
        res: dict = {}
        if name == "dense":
            # rows per sample = small's token count at the needed width; depth for equal FLOPs
            c = small.config
            rows = c.num_state_tokens + width + c.action_horizon
            target = train_flops_per_sample(c, width)
            w = 768
            depth = max(1, round(target / (6 * rows * w * w)))
            model = DenseMLP(w, depth)
            data = mlp_rows(model, 512, rows, rng)
            res["config"] = {"width": w, "depth": depth, "rows_per_sample": rows}
            useful = executed = model.train_flops_per_sample(rows) * args.batch
            variants = {"single_step": (data, False, useful), "scan": (data, True, useful)}
        else:
            model = get_policy(name)
            c = model.config
            res["params"] = int(sum(x.size for x in jax.tree.leaves(model.init(jax.random.key(0)))))
            full = policy_rows(model, n_rows, c.max_token_len, rng)
            assert prompt_width(full.obs.token_mask) == PROMPT
            cut = policy_rows(model, n_rows, width, rng)
            useful = train_flops_per_sample(c, width) * args.batch
            executed = train_flops_per_sample(c, c.max_token_len) * args.batch
            variants = {
                "single_step_w32": (full, False, executed),
                "scan_w32": (full, True, executed),
                "scan": (cut, True, useful),
            }
            if name == "small" and args.big_batch:  # larger matmuls: the small-GEMM effect
                f = args.big_batch / args.batch
                variants[f"scan_b{args.big_batch}"] = (cut, True, useful * f, args.big_batch)
        res["useful_flops_per_update"] = useful
        res["variants"] = {}
        for vname, spec in variants.items():
            data, scan, ex = spec[:3]
            b = spec[3] if len(spec) > 3 else args.batch
            use = ex if len(spec) > 3 else useful
            r = bench_variant(model, data, b, args.k, scan, args.repeats)
            r["batch"] = b
            r["executed_flops_per_update"] = ex
            r["useful_gflops"] = use * r["updates_per_s_best"] / 1e9
            r["executed_gflops"] = ex * r["updates_per_s_best"] / 1e9
            res["variants"][vname] = r
            print(name, vname, json.dumps(r), flush=True)
        last = variants["scan"]
        fwd = forward_rate(model, last[0], args.batch, args.repeats)
        res["forward_per_s"] = fwd
        res["forward_useful_gflops"] = useful / 3 * fwd / 1e9
        res["wall_s"] = time.perf_counter() - t_model
        models[name] = res
    sample_peak("end")
    peak_gflops = max(p["gflops_best"] for p in peaks)
    out["peak"] = {"gflops": peak_gflops, "samples": peaks}
    for res in models.values():  # utilisation against the run's peak
        for r in res["variants"].values():
            r["mfu"] = r["useful_gflops"] / peak_gflops
            r["hardware_utilisation"] = r["executed_gflops"] / peak_gflops
        res["forward_mfu"] = res["forward_useful_gflops"] / peak_gflops
    g = out["small_forward_gemms"]
    g["fraction_of_peak"] = g["gflops_weighted"] / peak_gflops
    out["models"] = models
    out["machine"]["loadavg_at_end"] = load()
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

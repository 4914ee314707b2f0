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
``executed`` at the width the variant runs. The machine's peak is a large float32 matmul (1024³
and 2048³) timed in the same run; MFU = useful FLOP/s / peak. To explain the gap, the run also
times ``small``'s own GEMM shapes (the matmuls of one forward at this batch), a forward-only
pass, and ``small`` at a 4× batch (larger matmuls; 128 is also ``loop.finetune_batch``).

Before/after in the same run (``--before COMMIT``, default the commit before the "v2" layout):
``small/scan_before`` (and ``_b128``) trace the Gemma stack of ``coda/policy/gemma.py`` as it
was at that commit (read with ``git show``; same parameters, same FLOPs) and are timed in the
same interleaved rounds as today's code; ``small/scan_rolled`` is today's code with the layer
scan rolled (``scan_unroll=1``), to separate the two changes (benchmarks/results/learner.md).

The CPU is shared with other work. Every entry is compiled first, then all are timed once per
round for several interleaved rounds, so each sees the same load; rates use the best round.
Besides wall-clock rates (``mfu_wall``), rates per CPU-second of this process
(``mfu_cpu``: useful FLOPs / process CPU time, against the peak matmul's FLOPs per CPU-second)
discount the time the process was descheduled by other load.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import coda.policy.pi05 as pi05_module  # noqa: E402
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = 12  # tokens of a typical CoDA instruction (BOS + ~10 pieces + newline) -> width 16
BEFORE_V2 = "6d5d77d"  # the last commit before the v2 Gemma layout (learner.md "v2")


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --- the machine's peak -------------------------------------------------------------------------


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


@contextlib.contextmanager
def gemma_at(commit: str):
    """pi0.5 built with `coda/policy/gemma.py` as it was at `commit` while the block runs (the
    entries traced inside keep that code: compilation happens in `add`)."""
    src = subprocess.run(
        ["git", "-C", ROOT, "show", f"{commit}:coda/policy/gemma.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(src)
    name = f"gemma_{commit}"
    spec = importlib.util.spec_from_file_location(name, f.name)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    os.unlink(f.name)

    def make(*args, scan_unroll: int = 1, **kwargs):  # the old module has no scan_unroll
        if "scan_unroll" in mod.GemmaMoE.__dataclass_fields__:
            kwargs["scan_unroll"] = scan_unroll
        return mod.GemmaMoE(*args, **kwargs)

    today = pi05_module.GemmaMoE
    pi05_module.GemmaMoE = make
    try:
        yield
    finally:
        pi05_module.GemmaMoE = today


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


def train_runner(model, data: Batch, batch: int, k: int, scan: bool):
    """A `work()` doing k updates of one training variant (compiled here, excluded)."""
    cfg = train_config(peak_lr=3e-4, warmup_steps=10, decay_steps=10000, ema_decay=None)
    state = init_train_state(model.init(jax.random.key(0)), cfg)
    n = data.actions.shape[0]
    keys = jax.random.split(jax.random.key(1), k)
    if scan:
        buf = Replay.from_rows(data)
        run = make_scan_train_step(model, cfg, lambda d, key: d.sample(key, batch))

        def work():
            nonlocal state
            state, m = run(state, buf, keys)
            return m
    else:
        step = make_train_step(model, cfg)
        take = jax.jit(lambda d, idx: jax.tree.map(lambda x: x[idx], d))

        def work():  # today's Learner: per update a gathered minibatch, then one jitted step
            nonlocal state
            for key in keys:
                k1, k2 = jax.random.split(key)
                idx = jax.random.randint(k1, (batch,), 0, n)
                state, m = step(state, take(data, idx), k2)
            return m

    return work


def forward_runner(model, data: Batch, batch: int, k: int):
    """k forward-only (loss) passes at `batch` (the backward + optimiser share by difference)."""
    mb = jax.tree.map(lambda x: x[:batch], data)
    params = model.init(jax.random.key(0))
    f = jax.jit(lambda p, b, r: model.loss(p, b, r)[0])
    return lambda: [f(params, mb, jax.random.key(i)) for i in range(k)]


def matmul_runner(m: int, k: int, n: int, inner: int):
    """`inner` back-to-back float32 [m, k] x [k, n] matmuls (asynchronous dispatch)."""
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.float32)
    b = jax.random.normal(kb, (k, n), jnp.float32)
    f = jax.jit(jnp.dot)
    return lambda: [f(a, b) for _ in range(inner)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/learner.json")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--k", type=int, default=8, help="updates per jitted call (scan length)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    ap.add_argument("--big-batch", type=int, default=128, help="extra small variant; 0 = off")
    ap.add_argument(
        "--before",
        default=BEFORE_V2,
        help="commit whose gemma.py the small/scan_before entries use; '' = no such entries",
    )
    args = ap.parse_args()
    jax.config.update("jax_compilation_cache_dir", os.path.join(ROOT, ".jax_cache"))
    rng = np.random.default_rng(0)
    out: dict = {
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
        "before_commit": args.before,
    }
    b, k = args.batch, args.k
    small = get_policy("small")
    width = token_bucket(PROMPT, small.config.max_token_len)
    out["prompt_width"] = width
    # entries: name -> (work, useful FLOPs per work(), executed FLOPs per work(), group, info)
    entries: dict = {}

    def add(name, work, useful, executed, group, **info):
        t0 = time.perf_counter()
        jax.block_until_ready(work())  # compile + first run, excluded from the rates
        info["compile_and_first_s"] = time.perf_counter() - t0
        entries[name] = (work, float(useful), float(executed), group, info)
        print(f"ready {name} ({info['compile_and_first_s']:.0f}s, load {load()})", flush=True)

    for n, inner in ((1024, 16), (2048, 2)):  # the machine's peak: large float32 matmuls
        add(f"peak_{n}", matmul_runner(n, n, n, inner), 2.0 * n**3 * inner, 0, "peak")
    for name, count, m, kk, n in small_gemm_shapes(small, b, width):  # small's own GEMMs
        f = 2.0 * m * kk * n * 8
        add(f"gemm_{name}", matmul_runner(m, kk, n, 8), f, f, "gemm", count=count, shape=[m, kk, n])

    dense_cfg = None
    for name in ("small", "oft", "dense"):
        if name == "dense":  # rows per sample = small's tokens at the needed width; equal FLOPs
            c = small.config
            rows = c.num_state_tokens + width + c.action_horizon
            w = 768
            depth = max(1, round(train_flops_per_sample(c, width) / (6 * rows * w * w)))
            model = DenseMLP(w, depth)
            dense_cfg = {"width": w, "depth": depth, "rows_per_sample": rows}
            data = mlp_rows(model, 512, rows, rng)
            f = model.train_flops_per_sample(rows) * b * k
            add("dense/single_step", train_runner(model, data, b, k, False), f, f, name)
            add("dense/scan", train_runner(model, data, b, k, True), f, f, name)
            continue
        model = get_policy(name)
        c = model.config
        full = policy_rows(model, 4096, c.max_token_len, rng)
        assert prompt_width(full.obs.token_mask) == PROMPT
        cut = policy_rows(model, 4096, width, rng)
        useful = train_flops_per_sample(c, width) * b * k
        executed = train_flops_per_sample(c, c.max_token_len) * b * k
        add(
            f"{name}/single_step_w32",
            train_runner(model, full, b, k, False),
            useful,
            executed,
            name,
        )
        if name == "small":
            add("small/scan_w32", train_runner(model, full, b, k, True), useful, executed, name)
        add(f"{name}/scan", train_runner(model, cut, b, k, True), useful, useful, name)
        if name == "small":
            fwd = useful / 3
            add("small/forward_only", forward_runner(model, cut, b, k), fwd, fwd, name)
            if args.big_batch:
                bb = args.big_batch
                f = useful * bb / b
                add(f"small/scan_b{bb}", train_runner(model, cut, bb, k, True), f, f, name)
            rolled = get_policy("small", scan_unroll=1)
            add("small/scan_rolled", train_runner(rolled, cut, b, k, True), useful, useful, name)
            if args.before:
                with gemma_at(args.before):
                    old = get_policy("small")
                    run = train_runner(old, cut, b, k, True)
                    add("small/scan_before", run, useful, useful, name, code=args.before)
                    if args.big_batch:
                        run = train_runner(old, cut, bb, k, True)
                        f = useful * bb / b
                        add(f"small/scan_before_b{bb}", run, f, f, name, code=args.before)

    # interleaved rounds: every entry is timed once per round, so all see the same load
    wall = {n: [] for n in entries}
    cpu = {n: [] for n in entries}
    loads = []
    for r in range(args.rounds):
        for name, (work, *_rest) in entries.items():
            w0, c0 = time.perf_counter(), time.process_time()
            jax.block_until_ready(work())
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
        loads.append(load())
        print(f"round {r} done, load {loads[-1]}", flush=True)

    res = {}
    for name, (_, useful, executed, group, info) in entries.items():
        res[name] = {
            "group": group,
            **info,
            "wall_s": wall[name],
            "cpu_s": cpu[name],
            "useful_gflops_wall": useful / min(wall[name]) / 1e9,
            "useful_gflops_per_cpu_s": useful / min(cpu[name]) / 1e9,
            "executed_gflops_wall": executed / min(wall[name]) / 1e9,
        }
        if group in ("small", "oft", "dense") and "forward" not in name:
            bb = args.big_batch if name.endswith(f"_b{args.big_batch}") else b
            res[name]["batch"] = bb
            res[name]["updates_per_s_best"] = k / min(wall[name])
            res[name]["updates_per_s_median"] = k / float(np.median(wall[name]))
            res[name]["useful_flops_per_update"] = useful / k
    peak_wall = max(v["useful_gflops_wall"] for v in res.values() if v["group"] == "peak")
    peak_cpu = max(v["useful_gflops_per_cpu_s"] for v in res.values() if v["group"] == "peak")
    for v in res.values():
        v["mfu_wall"] = v["useful_gflops_wall"] / peak_wall
        v["mfu_cpu"] = v["useful_gflops_per_cpu_s"] / peak_cpu
        v["hardware_utilisation_wall"] = v["executed_gflops_wall"] / peak_wall
    gem = [v for v in res.values() if v["group"] == "gemm"]
    flops = [2.0 * v["count"] * np.prod(v["shape"]) for v in gem]
    secs = [f / (v["useful_gflops_wall"] * 1e9) for f, v in zip(flops, gem, strict=True)]
    out["peak_gflops_wall"] = peak_wall
    out["peak_gflops_per_cpu_s"] = peak_cpu
    out["small_forward_gemms_fraction_of_peak"] = sum(flops) / sum(secs) / 1e9 / peak_wall
    out["dense_config"] = dense_cfg
    out["entries"] = res
    out["loadavg_per_round"] = loads
    out["machine"]["loadavg_at_end"] = load()
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    for name, v in res.items():
        print(
            f"{name:28s} useful {v['useful_gflops_wall']:7.2f} GFLOP/s  mfu_wall "
            f"{v['mfu_wall']:.2f}  mfu_cpu {v['mfu_cpu']:.2f}  "
            f"upd/s {v.get('updates_per_s_best', float('nan')):.3f}"
        )
    print(f"peak wall {peak_wall:.1f} GFLOP/s, per cpu-s {peak_cpu:.1f}; loads {loads}")


if __name__ == "__main__":
    main()

"""Env-steps/s of chunked rollouts vs raw `mujoco.rollout` on a 4-object pick-place bucket.

One run measures, for each batch size N, side by side:
  mujoco_rollout          raw `mujoco.rollout` (all cores, persistent pool, output buffers
                          allocated once and reused), one call over the whole episode,
                          replaying a fixed control sequence (the controls the scripted planner
                          produced), so it does the same physics work as native+planner;
  mujoco_rollout_chunked  the same controls, one `mujoco.rollout` call per chunk with the state
                          fed forward and no policy (isolates the cost of chunking itself);
  native                  `coda.sim.rollout.NativeBackend` with a policy in the loop: the
                          scripted planner, or a `small`-sized Flax MLP stand-in (a few million
                          parameters, flat state -> tanh action chunk);
  mjx                     `coda.sim.rollout.MjxBackend` (chunks capped for large N on CPU).

An env step is one physics step (`robot.SUBSTEPS` per control step). Every timed call follows
a warm-up call of the same shape; `compile_seconds` is the warm-up call's time minus the timed
call's (jit compilation, thread-pool start, first-touch allocation). The CPU backends run in
interleaved rounds (other processes may share the cores): `seconds` is the best round,
`seconds_median` the median, and `native_over_raw` is given from the best times and as the
median of per-round ratios.

    .venv/bin/python benchmarks/rollout_throughput.py \
        --out benchmarks/results/rollout_throughput.json

`--profile N1,N2` adds a cProfile of one native rollout per policy at those batch sizes;
`--diagnose N1,N2` times the pieces of a native rollout (initial data, policy chunk, finalize)
and raw-call variants (fresh output buffers, one shared MjModel) at those batch sizes.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import datetime
import importlib.metadata
import io
import json
import os
import platform
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from coda.sim import robot  # noqa: E402
from coda.sim.compile import compile_scene  # noqa: E402
from coda.sim.planner import planner_for  # noqa: E402
from coda.sim.rollout import Bucket, MjxBackend, NativeBackend, make_buckets  # noqa: E402
from coda.sim.sdk import exec_program  # noqa: E402
from coda.sim.state import SimState, flat_observation  # noqa: E402

# Four objects (target, goal plate, two distractors); σ and α vary with the seed, structure not.
SCENE_PROGRAM = """\
add_object("cube", role="target", instance="cube_red")
add_object("plate", role="goal", instance="plate_white")
add_object("can", role="distractor_0", instance="can_soda")
add_object("block", role="distractor_1", instance="block_long")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""


# ----------------------------------------------------------------------------- MLP policy


class _MLP(nn.Module):
    hidden: int
    depth: int
    out: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        for _ in range(self.depth):
            x = nn.gelu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.out)(x)


@dataclasses.dataclass(frozen=True)
class MLPChunkPolicy:
    """`small`-sized network stand-in: flat state [B, D] -> action chunk [B, H, 7] via tanh.

    Hashable and frozen because rollouts take the policy as a jit-static argument.
    """

    horizon: int = 10
    hidden: int = 1024
    depth: int = 3

    def _module(self) -> _MLP:
        return _MLP(self.hidden, self.depth, self.horizon * robot.ACTION_DIM)

    def init_params(self, obs_dim: int, rng: jax.Array) -> Any:
        return self._module().init(rng, jnp.zeros((1, obs_dim), jnp.float32))

    def init(self, batch: int, rng: jax.Array) -> jnp.ndarray:
        del rng
        return jnp.zeros(batch, jnp.int32)  # [B] chunks taken

    def act(
        self, params: Any, state: SimState, carry: jnp.ndarray, rng: jax.Array
    ) -> tuple[jnp.ndarray, jnp.ndarray, dict[str, jnp.ndarray]]:
        del rng
        obs = flat_observation(state)  # [B, D]
        out = self._module().apply(params, obs)  # [B, H*7]
        actions = jnp.tanh(out).reshape(obs.shape[0], self.horizon, robot.ACTION_DIM)
        return actions, carry + 1, {}


def n_params(params: Any) -> int:
    return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(params)))


# ----------------------------------------------------------------------------- helpers


def build_bucket(compiled: list, n: int) -> Bucket:
    buckets = make_buckets(compiled[:n], batch_size=n)
    if len(buckets) != 1:
        raise RuntimeError(f"expected one bucket for {n} variants, got {len(buckets)}")
    return buckets[0]


def planner_controls(bucket: Bucket, actions: jnp.ndarray) -> np.ndarray:
    """Recorded action chunks [B, C, H, 7] -> the physics-rate control sequence [B, T, NU]."""
    b, c, h, a = actions.shape
    target = jnp.asarray(bucket.init_ctrl[:, :6])
    ctrl, _ = robot.apply_actions(target, actions.reshape(b, c * h, a))  # [B, C*H, NU]
    return np.repeat(np.asarray(ctrl, np.float64), robot.SUBSTEPS, axis=1)


class RawRollout:
    """Raw `mujoco.rollout` over a bucket's models from its initial states (setup untimed).

    Output buffers are allocated once and reused (`reuse_outputs`), the fastest way to call
    `mujoco.rollout`: fresh [B, T, nstate] outputs cost page faults on every call.
    """

    def __init__(self, bucket: Bucket, nthread: int, reuse_outputs: bool = True):
        self.models = bucket.models
        datas = bucket.initial_data()
        spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        self.nstate = mujoco.mj_stateSize(self.models[0], spec)
        self.state0 = np.empty((bucket.batch_size, self.nstate))
        for i, (m, d) in enumerate(zip(self.models, datas, strict=True)):
            mujoco.mj_getState(m, d, self.state0[i], spec)
        self.thread_data = [
            mujoco.MjData(self.models[0]) for _ in range(min(nthread, bucket.batch_size))
        ]
        self.reuse_outputs = reuse_outputs
        self._out: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _outputs(self, nstep: int) -> dict[str, np.ndarray]:
        if not self.reuse_outputs:
            return {}
        if nstep not in self._out:
            b, ns = self.state0.shape[0], self.models[0].nsensordata
            self._out[nstep] = (np.empty((b, nstep, self.nstate)), np.empty((b, nstep, ns)))
        st, sd = self._out[nstep]
        return {"state": st, "sensordata": sd}

    def single(self, ctrl: np.ndarray, models: list | None = None) -> np.ndarray:
        from mujoco import rollout as mjrollout

        st, _ = mjrollout.rollout(
            models or self.models,
            self.thread_data,
            self.state0,
            ctrl,
            persistent_pool=True,
            **self._outputs(ctrl.shape[1]),
        )
        return st[:, -1].copy()

    def chunked(self, ctrl: np.ndarray, chunk_len: int) -> np.ndarray:
        from mujoco import rollout as mjrollout

        state = self.state0
        for t in range(0, ctrl.shape[1], chunk_len):
            u = ctrl[:, t : t + chunk_len]
            st, _ = mjrollout.rollout(
                self.models,
                self.thread_data,
                state,
                u,
                persistent_pool=True,
                **self._outputs(u.shape[1]),
            )
            state = st[:, -1].copy()
        return state


def timed(fn: Callable[[], Any], min_seconds: float) -> tuple[float, int]:
    """Seconds per call, repeating short calls until `min_seconds` have passed."""
    reps, t0 = 0, time.perf_counter()
    while True:
        jax.block_until_ready(fn())
        reps += 1
        dt = time.perf_counter() - t0
        if dt >= min_seconds:
            return dt / reps, reps


def machine_info() -> dict:
    def ver(p: str) -> str | None:
        try:
            return importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            return None

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": ver("jaxlib"),
        "jax_devices": [str(d) for d in jax.devices()],
        "mujoco": mujoco.__version__,
        "mujoco_mjx": ver("mujoco-mjx"),
        "flax": ver("flax"),
        "numpy": np.__version__,
        "xla_flags": os.environ.get("XLA_FLAGS"),
        "jax_platforms": os.environ.get("JAX_PLATFORMS"),
    }


def profile_native(backend, bucket, policy, params, chunks: int, top: int = 25) -> dict:
    """cProfile of one warm native rollout: total time and the top functions by self time."""
    prof = cProfile.Profile()
    prof.enable()
    t0 = time.perf_counter()
    jax.block_until_ready(backend.rollout(bucket, policy, params, jax.random.key(1), chunks))
    total = time.perf_counter() - t0
    prof.disable()
    st = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _) in st.stats.items():
        rows.append(
            {
                "function": f"{Path(file).name}:{line}({func})",
                "calls": nc,
                "self_s": round(tt, 4),
                "cumulative_s": round(ct, 4),
            }
        )
    by_self = sorted(rows, key=lambda r: -r["self_s"])[:top]
    by_cum = sorted(rows, key=lambda r: -r["cumulative_s"])[:top]
    return {"seconds": round(total, 4), "top_self": by_self, "top_cumulative": by_cum}


def measure_cpu(
    bucket: Bucket,
    native: NativeBackend,
    pol: dict[str, tuple[Any, Any]],
    policies: list[str],
    nthread: int,
    args: argparse.Namespace,
) -> tuple[list[dict], list[dict], dict, dict | None]:
    """Raw, raw-chunked and native rows for one bucket, timed in interleaved rounds."""
    n = bucket.batch_size
    rng = jax.random.key(args.seed)
    load = os.getloadavg()
    print(f"N={n} load={load}", flush=True)
    steps = n * args.chunks * args.horizon * robot.SUBSTEPS
    chunk_len = args.horizon * robot.SUBSTEPS
    planner = pol["planner"][0]

    # warm-up: every configuration once; the planner's controls become the raw input
    t = time.perf_counter()
    res_pl = native.rollout(bucket, planner, None, rng, args.chunks)
    jax.block_until_ready(res_pl)
    first = {("native", "planner"): time.perf_counter() - t}
    assert res_pl.env_steps == steps, (res_pl.env_steps, steps)
    ctrl = planner_controls(bucket, res_pl.actions)  # [B, T, NU] float64
    raw = RawRollout(bucket, nthread)
    t = time.perf_counter()
    end_single = raw.single(ctrl)
    first[("mujoco_rollout", "none")] = time.perf_counter() - t
    t = time.perf_counter()
    end_chunked = raw.chunked(ctrl, chunk_len)
    first[("mujoco_rollout_chunked", "none")] = time.perf_counter() - t
    for p in policies:
        if p != "planner":
            t = time.perf_counter()
            jax.block_until_ready(native.rollout(bucket, *pol[p], rng, args.chunks))
            first[("native", p)] = time.perf_counter() - t
    # Same controls, same physics: chunked endpoints match the single call (warm-start
    # resets at chunk boundaries make them close, not bitwise equal).
    nq = bucket.models[0].nq
    qpos_diff = float(np.abs(end_chunked[:, 1 : 1 + nq] - end_single[:, 1 : 1 + nq]).max())

    configs: dict[tuple[str, str], Callable[[], Any]] = {
        ("mujoco_rollout", "none"): lambda: raw.single(ctrl),
        ("mujoco_rollout_chunked", "none"): lambda: raw.chunked(ctrl, chunk_len),
    }
    for p in policies:
        configs[("native", p)] = lambda p=p: native.rollout(bucket, *pol[p], rng, args.chunks)
    times: dict[tuple[str, str], list[float]] = {k: [] for k in configs}
    reps: dict[tuple[str, str], int] = {}
    keys = list(configs)
    for r in range(args.rounds):
        for k in keys[r % len(keys) :] + keys[: r % len(keys)]:  # rotate the order
            dt, reps[k] = timed(configs[k], args.min_seconds)
            times[k].append(dt)
    rows = []
    for k, ts in times.items():
        best = min(ts)
        rows.append(
            {
                "backend": k[0],
                "policy": k[1],
                "n_envs": n,
                "env_steps_per_s": round(steps / best, 1),
                "env_steps_per_s_median": round(steps / statistics.median(ts), 1),
                "seconds": round(best, 5),
                "seconds_median": round(statistics.median(ts), 5),
                "seconds_rounds": [round(x, 5) for x in ts],
                "calls_per_measurement": reps[k],
                "compile_seconds": round(max(0.0, first[k] - best), 4),
                "chunks": args.chunks,
                "env_steps": steps,
                "load_avg": load,
            }
        )
        print(
            f"  {k[0]:>22} {k[1]:>7} {steps / best:>10.0f} env-steps/s "
            f"(median {steps / statistics.median(ts):.0f})",
            flush=True,
        )
    raw_k, chunked_k = ("mujoco_rollout", "none"), ("mujoco_rollout_chunked", "none")
    ratios = []
    for p in policies:
        nat = times[("native", p)]
        paired = [tr / tn for tr, tn in zip(times[raw_k], nat, strict=True)]
        ratio = min(times[raw_k]) / min(nat)
        ratios.append(
            {
                "n_envs": n,
                "policy": p,
                "native_over_raw": round(ratio, 4),
                "native_over_raw_median_paired": round(statistics.median(paired), 4),
                "native_over_raw_chunked": round(min(times[chunked_k]) / min(nat), 4),
                "meets_50pct_target": ratio >= 0.5,
            }
        )
    check = {
        "n_envs": n,
        "planner_success_rate": float(
            np.mean(np.asarray(res_pl.success)[: int(bucket.valid.sum())])
        ),
        "planner_failed": int(np.asarray(res_pl.failed).sum()),
        "max_abs_qpos_raw_single_vs_chunked": qpos_diff,
    }
    prof = None
    if n in {int(x) for x in args.profile.split(",") if x}:
        prof = {p: profile_native(native, bucket, *pol[p], args.chunks) for p in policies}
    return rows, ratios, check, prof


def diagnose_native(
    bucket: Bucket,
    native: NativeBackend,
    pol: dict[str, tuple[Any, Any]],
    policies: list[str],
    nthread: int,
    args: argparse.Namespace,
) -> dict:
    """Seconds of the pieces of one native rollout, and of raw-call variants, at one N.

    Each piece is timed warm, on its own: where native's time goes beyond the physics.
    """
    from coda.sim import rollout as R
    from coda.sim.state import decode

    n = bucket.batch_size
    rng = jax.random.key(args.seed)
    chunk_len = args.horizon * robot.SUBSTEPS
    out: dict[str, Any] = {"n_envs": n, "load_avg": os.getloadavg()}
    ms = args.min_seconds

    def t(fn):
        return round(timed(fn, ms)[0], 5)

    res = native.rollout(bucket, pol["planner"][0], None, rng, args.chunks)
    ctrl = planner_controls(bucket, res.actions)
    raw = RawRollout(bucket, nthread)
    fresh = RawRollout(bucket, nthread, reuse_outputs=False)
    raw.single(ctrl)
    fresh.single(ctrl)
    out["raw_single_reused_outputs_s"] = t(lambda: raw.single(ctrl))
    out["raw_single_fresh_outputs_s"] = t(lambda: fresh.single(ctrl))
    one_model = [bucket.models[0]] * n  # same size signature; layout of variant 0 everywhere
    raw.single(ctrl, one_model)
    out["raw_single_one_shared_model_s"] = t(lambda: raw.single(ctrl, one_model))
    out["raw_chunked_reused_outputs_s"] = t(lambda: raw.chunked(ctrl, chunk_len))
    u = ctrl[:, :chunk_len]
    out["raw_one_chunk_fresh_outputs_s"] = t(lambda: fresh.single(u))
    out["initial_data_s"] = t(bucket.initial_data)
    out["bucket_models_list_s"] = t(lambda: bucket.models)

    consts = {k: jnp.asarray(v) for k, v in bucket.consts.items()}
    target = jnp.asarray(bucket.init_ctrl[:, :6])
    sens = np.stack([d.sensordata.copy() for d in bucket.initial_data()])  # [B, S]
    for p in policies:
        policy, params = pol[p]
        carry = policy.init(n, rng)

        def chunk(policy=policy, params=params, carry=carry):
            a, c, tg, cr, info = R._policy_chunk(
                policy,
                bucket.layout,
                params,
                jnp.asarray(sens, jnp.float32),
                consts,
                target,
                carry,
                rng,
            )
            return (
                np.asarray(c, np.float64),
                np.asarray(a),
                jax.tree_util.tree_map(np.asarray, info),
            )

        chunk()
        out[f"policy_chunk_{p}_s"] = t(chunk)

    sd = jnp.asarray(np.repeat(sens[:, None], args.chunks + 1, 1), jnp.float32)  # [B, C+1, S]
    cmd = jnp.asarray(bucket.init_ctrl[:, None, :6], jnp.float32)  # [B, 1, 6], broadcast
    states = decode(sd, bucket.layout, consts, cmd)

    def nu(st):  # what the backends' result finalization evaluates, eagerly
        return jax.vmap(lambda s: bucket.success(s, bucket.sym), in_axes=1, out_axes=1)(st)

    nu(states)
    out["success_eager_s"] = t(lambda: nu(states))
    nu_jit = jax.jit(nu)
    nu_jit(states)
    out["success_jitted_s"] = t(lambda: nu_jit(states))
    out["decode_eager_s"] = t(lambda: decode(sd, bucket.layout, consts, cmd))
    return out


def measure_mjx(
    bucket: Bucket,
    mjx: MjxBackend,
    name: str,
    policy: Any,
    params: Any,
    chunks: int,
    args: argparse.Namespace,
) -> dict:
    """One MJX row: a warm-up call (compiles the episode), then a timed call of the same shape."""
    n = bucket.batch_size
    rng = jax.random.key(args.seed)
    steps = n * chunks * args.horizon * robot.SUBSTEPS
    load = os.getloadavg()
    t = time.perf_counter()
    out = mjx.rollout(bucket, policy, params, rng, chunks)
    jax.block_until_ready(out)
    first_s = time.perf_counter() - t
    assert out.env_steps == steps
    dt, nrep = timed(lambda: mjx.rollout(bucket, policy, params, rng, chunks), args.min_seconds)
    print(f"  mjx {name} N={n} chunks={chunks}: {steps / dt:.0f} env-steps/s", flush=True)
    return {
        "backend": "mjx",
        "policy": name,
        "n_envs": n,
        "env_steps_per_s": round(steps / dt, 1),
        "seconds": round(dt, 5),
        "calls_per_measurement": nrep,
        "compile_seconds": round(max(0.0, first_s - dt), 4),
        "chunks": chunks,
        "env_steps": steps,
        "load_avg": load,
        "failed": int(np.asarray(out.failed).sum()),
    }


# ----------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-envs", default="1,64,256,1024", help="comma-separated batch sizes")
    ap.add_argument("--chunks", type=int, default=10, help="chunks per episode (CPU backends)")
    ap.add_argument("--horizon", type=int, default=10, help="control steps per chunk")
    ap.add_argument(
        "--mjx-chunks",
        default="1:10,64:10,256:4,1024:2",
        help="'N:chunks,...' for MJX (unlisted N use --chunks), 'full' for --chunks, 'off' to skip",
    )
    ap.add_argument("--policies", default="planner,mlp", help="native policies")
    ap.add_argument("--mjx-policies", default="planner", help="MJX policies")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timed rounds (CPU)")
    ap.add_argument("--min-seconds", type=float, default=1.0, help="min time per measurement")
    ap.add_argument("--mlp-hidden", type=int, default=1024)
    ap.add_argument("--mlp-depth", type=int, default=3)
    ap.add_argument("--nthread", type=int, default=None, help="rollout threads (all cores)")
    ap.add_argument("--profile", default="", help="comma-separated N to cProfile native at")
    ap.add_argument("--diagnose", default="", help="comma-separated N to time native's pieces")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/rollout_throughput.json")
    args = ap.parse_args()

    ns = [int(x) for x in args.n_envs.split(",")]
    policies = [p for p in args.policies.split(",") if p]
    mjx_policies = [p for p in args.mjx_policies.split(",") if p]
    if args.mjx_chunks == "off":
        mjx_chunks: dict[int, int] | None = None
    elif args.mjx_chunks == "full":
        mjx_chunks = {}
    else:
        mjx_chunks = {
            int(k): int(v) for k, v in (kv.split(":") for kv in args.mjx_chunks.split(","))
        }
    for p in set(policies) | set(mjx_policies):
        if p not in ("planner", "mlp"):
            raise SystemExit(f"unknown policy {p!r}; valid: ['mlp', 'planner']")
    nthread = max(1, args.nthread or os.cpu_count() or 1)

    exe = os.path.relpath(sys.executable) if sys.executable else "python"
    res: dict[str, Any] = {
        "command": " ".join([exe] + sys.argv),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "config": vars(args),
        "load_avg_start": os.getloadavg(),
        "scene_program": SCENE_PROGRAM,
    }

    t0 = time.perf_counter()
    compiled = [
        compile_scene(exec_program(SCENE_PROGRAM, seed=k, isolation="inprocess"))
        for k in range(max(ns))
    ]
    m0 = compiled[0].model
    res["scene"] = {
        "objects": len(compiled[0].scene.objects),
        "nq": m0.nq,
        "nv": m0.nv,
        "ngeom": m0.ngeom,
        "nsensordata": m0.nsensordata,
        "compile_s_per_variant": round((time.perf_counter() - t0) / max(ns), 5),
    }
    assert res["scene"]["objects"] >= 4

    mlp = MLPChunkPolicy(args.horizon, args.mlp_hidden, args.mlp_depth)
    mlp_params = mlp.init_params(compiled[0].layout.state_dim, jax.random.key(args.seed))
    res["mlp"] = {
        "hidden": mlp.hidden,
        "depth": mlp.depth,
        "obs_dim": compiled[0].layout.state_dim,
        "params": n_params(mlp_params),
    }

    rows: list[dict] = []
    ratios: list[dict] = []
    native = NativeBackend(nthread)
    for n in ns:
        bucket = build_bucket(compiled, n)
        pol = {"planner": (planner_for(bucket, args.horizon), None), "mlp": (mlp, mlp_params)}
        r, q, check, prof = measure_cpu(bucket, native, pol, policies, nthread, args)
        rows += r
        ratios += q
        res.setdefault("checks", []).append(check)
        if prof:
            res.setdefault("profile", {})[str(n)] = prof
        if n in {int(x) for x in args.diagnose.split(",") if x}:
            res.setdefault("diagnostics", []).append(
                diagnose_native(bucket, native, pol, policies, nthread, args)
            )
            print(f"  diagnostics: {res['diagnostics'][-1]}", flush=True)

    if mjx_chunks is not None:
        mjx = MjxBackend()
        for n in ns:
            bucket = build_bucket(compiled, n)
            pol = {"planner": (planner_for(bucket, args.horizon), None), "mlp": (mlp, mlp_params)}
            for p in mjx_policies:
                rows.append(
                    measure_mjx(bucket, mjx, p, *pol[p], mjx_chunks.get(n, args.chunks), args)
                )
    raw_best = {
        r["n_envs"]: r["env_steps_per_s"]
        for r in rows
        if r["backend"] == "mujoco_rollout" and r["policy"] == "none"
    }
    for r in rows:
        r["over_raw"] = round(r["env_steps_per_s"] / raw_best[r["n_envs"]], 4)
    res["rows"] = rows
    res["native_over_raw"] = ratios
    res["load_avg_end"] = os.getloadavg()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Why no mode is ever validated: targeted vs control success on two kinds of base scenes.

The loop validates a candidate mode by editing its *parents* (the scenes of the diagnosed
failures) twice: along the mode's factor (targeted) and along another factor by a matched amount
(control). This script takes a finished run folder, restores the policy of one round, and for
every mode that names a scene factor measures, with N rollouts per batch:

* the bases unedited, the targeted variants and the control variants, where the bases are
  (a) the mode's parents (what the loop does) and (b) the run's pool scenes of the parents'
  family (in-distribution scenes where the policy succeeds sometimes);
* the one-sided Fisher p of targeted < control for each, as the loop computes it.

    python benchmarks/validation_power.py --run /tmp/loopexp/si10_pool --round 10 --n 32 \
        --out benchmarks/results/validation_power.json

The run folder is copied first (nothing in it is changed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

import jax
import numpy as np
from ml_collections import ConfigDict


def _success(ctx, compiled, key, n):
    from coda.loop import collect

    ok, _ = collect.success_of(
        ctx.backend, compiled, ctx.agents, key, int(ctx.config.sim.num_chunks), 32
    )
    return ok


def _rate(ok):
    n = len(ok)
    p = float(np.mean(ok)) if n else float("nan")
    return {"successes": int(np.sum(ok)), "n": n, "rate": p, "se": (p * (1 - p) / max(n, 1)) ** 0.5}


def _lenient_restore(learner) -> None:
    """Run folders written before a field was added to the replay (e.g. `images`) restore with
    orbax's non-strict matching; only the policy weights matter here."""
    import orbax.checkpoint as ocp

    from coda.train.learner import replicate

    def restore(path: str) -> None:
        with ocp.StandardCheckpointer() as ck:
            raw = ck.restore(os.path.abspath(path))  # the on-disk tree, no target

        def pick(kp, leaf):
            node = raw
            for k in kp:
                name = getattr(k, "name", getattr(k, "key", getattr(k, "idx", None)))
                if isinstance(node, dict) and str(name) in node:
                    node = node[str(name)]
                elif isinstance(node, (list, tuple)) and isinstance(name, int):
                    node = node[name]
                else:
                    return leaf  # not on disk (a field added later): keep the fresh value
            return jax.numpy.asarray(node, leaf.dtype).reshape(leaf.shape)

        learner.state = replicate(
            jax.tree_util.tree_map_with_path(pick, learner.state), learner.mesh
        )

    learner.restore = restore


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--round", type=int, required=True)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--modes", type=int, nargs="*", default=None)
    ap.add_argument("--controls", nargs="+", default=["matched", "resample"])
    # how pairs are made (coda.engine.generate.PAIRINGS); the committed results: "sibling"
    ap.add_argument("--pairing", default="sibling", choices=["sibling", "nested"])
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    from coda.engine import validate as V
    from coda.engine.generate import GenerationError, make_validation_batches
    from coda.engine.seeding import verify_scenes
    from coda.loop import checkpoint as ckpt
    from coda.loop.services import make_services
    from coda.loop.strategies import get_strategy
    from coda.sim.scene import Scene

    tmp = tempfile.mkdtemp(prefix="valpower_")
    work = os.path.join(tmp, "run")
    shutil.copytree(args.run, work)
    with open(os.path.join(work, "config.json")) as f:
        config = ConfigDict(json.load(f))
    ctx = make_services(config, work, get_strategy(config.strategy))
    _lenient_restore(ctx.learner)
    state, _ = ckpt.load_round(work, args.round, ctx.learner, ctx.memory)
    with open(os.path.join(work, "pool.jsonl")) as f:
        pool = [ctx.source.compile(json.loads(line)) for line in f if line.strip()]
    modes = {m.id: m for m in ctx.memory.modes()}
    key = jax.random.PRNGKey(1234)
    rows = []
    t0 = time.perf_counter()
    for mid_s, parent_dicts in sorted(state.mode_parents.items(), key=lambda kv: int(kv[0])):
        mid = int(mid_s)
        m = modes.get(mid)
        if m is None or m.factor == "execution" or (args.modes and mid not in args.modes):
            continue
        parents = [Scene.from_dict(d) for d in parent_dicts]
        fams = {p.task["family"] for p in parents}
        pool_bases = [c.scene for c in pool if c.scene.task["family"] in fams]
        row = {"mode": mid, "factor": m.factor, "phase": m.phase, "label": m.label[:80]}
        combos = [(b, c) for b in ("parents", "pool") for c in args.controls]
        for name, control in combos:
            bases = parents if name == "parents" else pool_bases
            k = jax.random.fold_in(key, mid * 10 + (name == "pool"))
            kb, kt, kc = jax.random.split(k, 3)
            name = f"{name}/{control}"
            try:
                vb = make_validation_batches(
                    m, bases, args.n, mid, memory=None, control=control, pairing=args.pairing
                )
            except (GenerationError, ValueError, KeyError) as e:
                row[name] = {"error": str(e)[:200]}
                continue
            reps = [bases[i % len(bases)] for i in range(args.n)]
            comp = [c for c, v in verify_scenes(reps)]
            comp = [c for c in comp if c is not None]
            b = _success(ctx, comp, kb, args.n)
            t = _success(ctx, [v.compiled for v in vb.targeted], kt, args.n)
            c = _success(ctx, [v.compiled for v in vb.control], kc, args.n)
            res = V.one_sided_test(int(t.sum()), len(t), int(c.sum()), len(c), method="fisher")
            row[name] = {
                "n_bases": len(bases),
                "unedited": _rate(b),
                "targeted": _rate(t),
                "control": _rate(c),
                "fisher_p": res.p_value,
                "program": vb.program.to_dict()
                if hasattr(vb.program, "to_dict")
                else str(vb.program),
                "control_factor": vb.control_factor,
                "magnitude_targeted": float(np.mean([v.magnitude for v in vb.targeted])),
                "magnitude_control": float(np.mean([v.magnitude for v in vb.control])),
            }
            print(
                f"mode {mid} {m.factor}/{m.phase} [{name}, {len(bases)} bases]: unedited "
                f"{int(b.sum())}/{len(b)} targeted {int(t.sum())}/{len(t)} control "
                f"{int(c.sum())}/{len(c)} p={res.p_value:.3f}",
                flush=True,
            )
        rows.append(row)
    out = {
        "command": "python benchmarks/validation_power.py "
        + " ".join(
            f"--{k} {v}" for k, v in (("run", args.run), ("round", args.round), ("n", args.n))
        )
        + " --controls "
        + " ".join(args.controls),
        "run": args.run,
        "round": args.round,
        "n": args.n,
        "wall_seconds": time.perf_counter() - t0,
        "load_average": os.getloadavg(),
        "modes": rows,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    ctx.memory.close()
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""What can the policy's small vision tower separate? (issue 30 item 3)

LIBERO-Spatial's first task has two identical black bowls: the goal's bowl is the one between
the plate and the ramekin, the other is a distractor that differs from it only by where it is.
LIBERO-Object's tasks instead tell objects apart by what they look like. This benchmark asks the
image-mode policy's vision tower (`coda.policy.siglip.SigLIP` at the loop's image-mode sizes,
`coda.policy.configs.vision_overrides`: patch 8, width 64, depth 2) to find the goal's bowl in
the agent view (LIBERO's camera, rendered from the task's visual model) under two conditions
that share every layout:

* ``position``: the distractor is the second black bowl (LIBERO's own scene): the goal bowl can
  be found only by where it is relative to the plate and the ramekin, and not at all once it has
  traded places with another object (a LIBERO-PRO-style swap: two identical bowls, neither where
  the instruction says);
* ``appearance``: the distractor is replaced by another of LIBERO's objects of a similar
  footprint (`inst(akita_black_bowl_2,<category>)`, `coda.libero.program`): the goal bowl is the
  only black bowl in the picture.

Layouts: LIBERO's 50 initial states of the task, each also shifted at LIBERO-Plus levels
1..`--levels` (`coda.libero.perturb.layout_shift`) and with the goal bowl swapped with the
plate, the cookie box and the ramekin (`swap(...)`); and, for testing only, with the goal bowl
and the distractor exchanged (LIBERO-PRO's kind of swap: under ``position`` the picture is that
of the unexchanged layout, so no image model can tell; under ``appearance`` the bowl is seen
where the stand-in was). Target: the goal bowl's (x, y).
Trained from scratch per condition and seed (tower + mean pool + linear head, Adam, squared
error) on the kept and swapped layouts of initial states < 40, tested on initial states >= 40.
Reported per condition and image size, on the kept test layouts (the goal bowl where LIBERO puts
it, shifted or not), the swapped ones and the exchanged ones: test RMSE (cm), the share where
the prediction is nearer the goal bowl than the distractor ("picked the right one"), and the
predict-the-mean baseline; the difference between the conditions is what the tower can separate
by appearance but not by position.

    python benchmarks/vision_separation.py --sizes 32,64 --levels 3 --steps 600 --seeds 0,1,2 \
        --out benchmarks/results/vision_separation.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from coda.libero import episodes as E  # noqa: E402
from coda.libero import scene as S  # noqa: E402
from coda.libero import suites  # noqa: E402
from coda.policy.configs import vision_overrides  # noqa: E402
from coda.policy.siglip import SigLIP, SiglipConfig  # noqa: E402
from coda.sim import render as R  # noqa: E402

SUITE = "libero_spatial"
GOAL, OTHER = "akita_black_bowl_1", "akita_black_bowl_2"
HELDOUT_FROM = 40  # LIBERO's held-out initial states (configs/coda.py's libero.heldout_from)
SHIFT_SEED = 1_000  # layout-shift seeds: SHIFT_SEED + 50 * level + initial state


def _xy(c, obj: str) -> np.ndarray:
    adr = c.model.jnt_qposadr[c.model.joint(f"{obj}/free").id]
    return np.asarray(c.init_qpos[adr : adr + 2], np.float64)


SWAPS = ("plate_1", "cookies_1", "glazed_rim_porcelain_ramekin_1")  # the goal bowl trades places


def layouts(task: str, stand_in: str, levels: int, sizes: list[int]) -> dict:
    """Per layout: agent-view frames per size and condition [N, S, S, 3] in [-1, 1], the goal
    bowl's and the distractor's xy [N, 2], held-out and swapped masks (module docstring)."""
    out: dict = {"frames": {}, "goal": [], "other": [], "held": [], "kind": []}
    variants = [("", lv) for lv in range(levels + 1)] + [(f"swap({GOAL},{x})", 0) for x in SWAPS]
    variants.append((f"swap({GOAL},{OTHER})", 0))  # the two bowls exchanged: test only
    for edit, level in variants:
        for i in range(50):
            seed = SHIFT_SEED + 50 * level + i if level else 0
            for cond, extra in (("position", ""), ("appearance", f"inst({OTHER},{stand_in})")):
                edits = ";".join(e for e in (extra, edit) if e)
                c = E.compile_episode(E.Episode(SUITE, task, i, level, edits).program, seed)
                vis = c.render_model()
                for size in sizes:
                    img = R.render_variants(
                        [vis], c.init_qpos[None], cameras=(S.AGENTVIEW_CAMERA,), width=size,
                        height=size,
                    )[0, 0]  # fmt: skip
                    out["frames"].setdefault((cond, size), []).append(img / 127.5 - 1.0)
            out["goal"].append(_xy(c, GOAL))
            out["other"].append(_xy(c, OTHER))
            out["held"].append(i >= HELDOUT_FROM)
            out["kind"].append("kept" if not edit else "exchanged" if OTHER in edit else "swapped")
    out["frames"] = {k: np.stack(v).astype(np.float32) for k, v in out["frames"].items()}
    return {k: v if k == "frames" else np.array(v) for k, v in out.items()}


class Locator(nn.Module):
    """The policy's vision tower, mean-pooled, then a linear (x, y) head."""

    config: SiglipConfig

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        tokens = SigLIP(self.config, self.config.width)(images)
        return nn.Dense(2)(tokens.mean(axis=1))


def fit(data: dict, cond: str, size: int, steps: int, seed: int, batch: int = 32) -> dict:
    """Train on the non-held-out layouts, score the held-out ones (module docstring)."""
    cfg = SiglipConfig(**vision_overrides(size)["siglip"])
    frames = data["frames"][(cond, size)]
    train = ~data["held"] & (data["kind"] != "exchanged")
    test = data["held"]
    x, y = jnp.asarray(frames[train]), data["goal"][train]
    mu, sd = y.mean(0), y.std(0) + 1e-6
    yn = jnp.asarray((y - mu) / sd)
    model = Locator(cfg)
    key = jax.random.PRNGKey(seed)
    params = model.init(key, x[:1])
    opt = optax.adam(1e-3)
    state = opt.init(params)

    @jax.jit
    def step(params, state, xb, yb):
        loss, g = jax.value_and_grad(lambda p: jnp.mean((model.apply(p, xb) - yb) ** 2))(params)
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state, loss

    rng = np.random.default_rng(seed)
    for _ in range(steps):
        idx = rng.integers(0, x.shape[0], batch)
        params, state, loss = step(params, state, x[idx], yn[idx])
    pred = np.asarray(model.apply(params, jnp.asarray(frames[test]))) * sd + mu
    out = {"train_loss_last": float(loss), "n_train": int(train.sum())}
    kind = data["kind"][test]
    for name in ("kept", "swapped", "exchanged"):
        rows = np.nonzero(kind == name)[0]
        out[name] = _scores(pred[rows], mu, data["goal"][test][rows], data["other"][test][rows])
    return out


def _scores(pred: np.ndarray, mu: np.ndarray, goal: np.ndarray, other: np.ndarray) -> dict:
    """RMSE (cm), share nearer the goal bowl than the distractor, and the same for the mean."""
    err = np.linalg.norm(pred - goal, axis=1)
    base = np.linalg.norm(mu - goal, axis=1)
    return {
        "n": int(len(goal)),
        "rmse_cm": float(100 * np.sqrt(np.mean(err**2))),
        "picked_goal": float((err < np.linalg.norm(pred - other, axis=1)).mean()),
        "mean_rmse_cm": float(100 * np.sqrt(np.mean(base**2))),
        "mean_picked_goal": float((base < np.linalg.norm(mu - other, axis=1)).mean()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="32,64")
    ap.add_argument("--levels", type=int, default=3)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--stand_in", default="butter", help="the appearance condition's distractor")
    ap.add_argument("--out", default="benchmarks/results/vision_separation.json")
    a = ap.parse_args()
    task = suites.tasks(SUITE)[0]
    sizes = [int(x) for x in a.sizes.split(",")]
    seeds = [int(x) for x in a.seeds.split(",")]
    out = {"command": " ".join(sys.argv), "task": task, "stand_in": a.stand_in, "results": []}
    t0 = time.perf_counter()
    data = layouts(task, a.stand_in, a.levels, sizes)
    out["render_seconds"] = time.perf_counter() - t0
    for size in sizes:
        for cond in ("position", "appearance"):
            for seed in seeds:
                r = fit(data, cond, size, a.steps, seed)
                out["results"].append({"size": size, "condition": cond, "seed": seed, **r})
                print(json.dumps(out["results"][-1]), flush=True)
    out["seconds"] = time.perf_counter() - t0
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

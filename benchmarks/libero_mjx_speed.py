"""LIBERO's Panda on MJX (`coda.libero.panda_mjx`) against native MuJoCo (`PandaEnv`), side by side.

One invocation, one task, the same smooth random OSC_POSE actions (seeded) from LIBERO's stored
initial states (cycled over the 50):
  native  `PandaEnv`, every world of a batch stepped on the host (batched numpy OSC), one core;
  mjx     `PandaMJX.step` (jitted: vmap over worlds, scan over substeps) at each `--worlds`
          size, after one warm-up step (compilation excluded, reported apart).
Reported: environment steps per second of each, their ratio, and, over the worlds both ran, the
grasp site's distance between the two at every step (median, max) and ν's agreement. On a CPU
the MJX side runs MuJoCo Warp's CPU backend (a correctness path, slow); the speed figure that
matters is on a GPU, with thousands of worlds.

    .venv/bin/python benchmarks/libero_mjx_speed.py --suite=libero_goal --task=3 \\
        --worlds=2 --native_worlds=2 --steps=10 --out=/tmp/libero_mjx_speed_cpu

Needs MuJoCo Warp (`make warp`) for `--impl=warp`.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import pathlib
import platform
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks.loop_equality import machine  # noqa: E402
from coda.libero import data, suites  # noqa: E402
from coda.libero.panda_env import PandaEnv  # noqa: E402
from coda.libero.panda_mjx import PandaMJX  # noqa: E402


def actions(steps: int, worlds: int, seed: int) -> np.ndarray:
    """[steps, worlds, 7] smooth random OSC_POSE actions (a clipped random walk), gripper ±1."""
    rng = np.random.default_rng(seed)
    a = np.cumsum(rng.normal(0.0, 0.3, (steps, worlds, 7)), 0).clip(-1.0, 1.0)
    a[..., 6] = np.where(a[..., 6] >= 0, 1.0, -1.0)
    return a


def run_native(suite: str, name: str, inits: list[int], acts: np.ndarray) -> dict:
    env = PandaEnv(suite, name, n_envs=len(inits), obs_timing="end")
    env.reset(inits)
    sites, oks = [], []
    t = time.perf_counter()
    for a in acts:
        _, ok = env.step(a)
        sites.append(np.stack([d.site_xpos[env.idx.site].copy() for d in env.datas]))
        oks.append(ok)
    wall = time.perf_counter() - t
    qpos = np.stack([d.qpos.copy() for d in env.datas])
    return {"wall": wall, "site": np.stack(sites), "ok": np.stack(oks), "qpos": qpos}


def run_mjx(mx: PandaMJX, inits: list[int], acts: np.ndarray) -> dict:
    worlds, control = mx.reset(inits)
    t = time.perf_counter()
    worlds, control, ok = mx.step(worlds, control, jnp.asarray(acts[0]))
    jax.block_until_ready(ok)
    compile_s = time.perf_counter() - t
    sites, oks = [np.asarray(worlds.eef_pos)], [np.asarray(ok)]
    t = time.perf_counter()
    for a in acts[1:]:
        worlds, control, ok = mx.step(worlds, control, jnp.asarray(a))
        sites.append(worlds.eef_pos)
        oks.append(ok)
    jax.block_until_ready(ok)
    wall = time.perf_counter() - t
    return {
        "wall": wall,
        "compile": compile_s,
        "site": np.stack([np.asarray(s) for s in sites]),
        "ok": np.stack([np.asarray(o) for o in oks]),
        "qpos": np.asarray(worlds.qpos),
    }


def object_error_mm(mx: PandaMJX, a: np.ndarray, b: np.ndarray) -> float:
    """The largest distance (mm) between the two runs' free objects' positions at the end."""
    m, err = mx.model, 0.0
    for j in range(m.njnt):
        if m.jnt_type[j] == 0:  # a free joint: its body's position is qpos[adr : adr + 3]
            adr = int(m.jnt_qposadr[j])
            err = max(
                err, float(np.linalg.norm(a[:, adr : adr + 3] - b[:, adr : adr + 3], axis=1).max())
            )
    return err * 1e3


def versions() -> dict[str, str]:
    """What makes the figure comparable: Python, the JAX / MuJoCo / Warp stack, the data
    packages (`data.versions`), the host CPU (native's core) and the accelerator."""
    out = {"python": platform.python_version(), **data.versions()}
    for name in ("jax", "jaxlib", "numpy", "mujoco-mjx", "mujoco-warp", "warp-lang"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "missing"
    out["cpu"] = machine()["cpu"] or platform.processor()  # the model name /proc/cpuinfo gives
    out["accelerator"] = getattr(jax.devices()[0], "device_kind", str(jax.devices()[0]))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--suite", default="libero_goal")
    p.add_argument("--task", type=int, default=3, help="task index in the suite")
    p.add_argument("--worlds", default="2", help="comma-separated MJX batch sizes")
    p.add_argument("--native_worlds", type=int, default=2, help="worlds stepped natively")
    p.add_argument("--steps", type=int, default=10, help="20 Hz steps per world")
    p.add_argument("--impl", default="warp", help="MJX backend of the scene: warp | jax")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output path without extension")
    a = p.parse_args(argv)
    if a.suite not in suites.SUITES:
        p.error(f"unknown --suite {a.suite!r}; suites: {', '.join(suites.SUITES)}")
    names = suites.tasks(a.suite)
    if not 0 <= a.task < len(names):
        p.error(f"--task {a.task}: {a.suite} has tasks 0..{len(names) - 1}")
    name = names[a.task]
    try:
        sizes = [int(x) for x in a.worlds.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1 or a.native_worlds < 1 or a.steps < 2:
        p.error("--worlds: comma-separated positive integers; --native_worlds >= 1, --steps >= 2")
    acts = actions(a.steps, max(sizes + [a.native_worlds]), a.seed)
    inits = [i % 50 for i in range(acts.shape[1])]
    nat = run_native(a.suite, name, inits[: a.native_worlds], acts[:, : a.native_worlds])
    mx = PandaMJX(a.suite, name, impl=a.impl)
    res = {
        "command": "python benchmarks/libero_mjx_speed.py " + " ".join(sys.argv[1:]),
        "task": f"{a.suite}/{name}",
        "impl": a.impl,
        "device": str(jax.devices()[0]),
        "versions": versions(),
        "steps": a.steps,
        "native": {
            "worlds": a.native_worlds,
            "steps_per_s": a.native_worlds * a.steps / nat["wall"],
        },
        "mjx": [],
    }
    for n in sizes:  # the files are rewritten after each size: a later timeout keeps them
        out = run_mjx(mx, inits[:n], acts[:, :n])
        k = min(n, a.native_worlds)
        err = np.linalg.norm(out["site"][:, :k] - nat["site"][:, :k], axis=-1)
        sps = n * (a.steps - 1) / out["wall"]
        res["mjx"].append({
            "worlds": n,
            "compile_s": out["compile"],
            "steps_per_s": sps,
            "vs_native": sps / res["native"]["steps_per_s"],
            "site_error_mm_median": float(np.median(err) * 1e3),
            "site_error_mm_max": float(err.max() * 1e3),
            "success_agreement": float((out["ok"][:, :k] == nat["ok"][:, :k]).mean()),
            "object_pos_error_mm_max": object_error_mm(mx, out["qpos"][:k], nat["qpos"]),
        })  # fmt: skip
        write(res, a)


def write(res: dict, a) -> None:
    pathlib.Path(a.out + ".json").write_text(json.dumps(res, indent=1))
    lines = [
        f"# LIBERO's Panda on MJX ({a.impl}) vs native MuJoCo: {res['task']}",
        "",
        f"Command: `{res['command']}`; device {res['device']}; {a.steps} steps per world.",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in res["versions"].items()),
        "",
        f"native ({a.native_worlds} worlds, one core): {res['native']['steps_per_s']:.1f} steps/s",
        "",
        "| worlds | steps/s | × native | compile s | site error median / max (mm) | objects at"
        " the end, max (mm) | ν agrees |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in res["mjx"]:
        lines.append(
            f"| {r['worlds']} | {r['steps_per_s']:.1f} | {r['vs_native']:.2f} | "
            f"{r['compile_s']:.0f} | {r['site_error_mm_median']:.3f} / "
            f"{r['site_error_mm_max']:.3f} | {r['object_pos_error_mm_max']:.3f} | "
            f"{r['success_agreement']:.2f} |"
        )
    pathlib.Path(a.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()

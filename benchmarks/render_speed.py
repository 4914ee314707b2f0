"""Frames/s of coda.sim.render.render_states at 224x224: shadows, reflections, MSAA on vs off.

render_states defaults: no MSAA, 1024 px shadow map. Every setting runs in one process on one
table-top scene (floor, reflective table, a dozen objects, a falling box, two shadow-casting
lights); the JSON written records the exact command:

    .venv/bin/python benchmarks/render_speed.py --out benchmarks/results/render_speed.json

Set MUJOCO_GL=egl or MUJOCO_GL=osmesa to pick a backend; unset, render.py probes egl then osmesa.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from coda.sim import render  # noqa: E402


def _scene_xml() -> str:
    objects = []
    rng = np.random.default_rng(0)
    for i in range(12):
        x, y = rng.uniform(0.25, 0.7), rng.uniform(-0.3, 0.3)
        kind = ("box", "sphere", "cylinder")[i % 3]
        size = {"box": "0.025 0.03 0.025", "sphere": "0.03", "cylinder": "0.025 0.04"}[kind]
        rgba = " ".join(f"{c:.2f}" for c in rng.uniform(0.1, 0.9, 3)) + " 1"
        objects.append(
            f'<body pos="{x:.3f} {y:.3f} 0.08"><freejoint/>'
            f'<geom type="{kind}" size="{size}" rgba="{rgba}"/></body>'
        )
    return f"""
<mujoco>
  <asset>
    <texture name="grid" type="2d" builtin="checker" width="256" height="256"
             rgb1=".55 .55 .55" rgb2=".45 .45 .45"/>
    <material name="floor" texture="grid" texrepeat="8 8" reflectance="0.2"/>
    <material name="table" rgba=".6 .45 .3 1" reflectance="0.3"/>
  </asset>
  <worldbody>
    <light pos="0.3 -0.5 1.8" dir="0.1 0.3 -1" castshadow="true"/>
    <light pos="0.6 0.6 1.5" dir="-0.1 -0.4 -1" castshadow="true"/>
    <geom type="plane" size="3 3 0.1" material="floor"/>
    <geom type="box" pos="0.45 0 0.02" size="0.4 0.5 0.02" material="table"/>
    {"".join(objects)}
    <body name="falling" pos="0.45 0 0.5"><freejoint/>
      <geom type="box" size="0.04 0.04 0.04" rgba="0.9 0.1 0.1 1"/></body>
  </worldbody>
</mujoco>"""


def _trajectory(model: mujoco.MjModel, frames: int) -> np.ndarray:  # [T, nq]
    data = mujoco.MjData(model)
    out = []
    for _ in range(frames):
        out.append(data.qpos.copy())
        for _ in range(5):
            mujoco.mj_step(model, data)
    return np.stack(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=200)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--repeats", type=int, default=3, help="best of N timed passes per setting")
    p.add_argument("--out", type=str, default="")
    args = p.parse_args()

    forced_gl = os.environ.get("MUJOCO_GL")  # before render.py exports its choice
    load_before = os.getloadavg()[0]  # other processes on the machine skew software-GL numbers
    ok, info = render.gl_available()
    if not ok:
        raise SystemExit(f"cannot benchmark rendering: {info}")
    model = mujoco.MjModel.from_xml_string(_scene_xml())
    qpos = _trajectory(model, args.frames)
    s = args.size

    t0 = time.perf_counter()
    render.render_states(model, qpos[:1], width=s, height=s)  # creates the cached renderer
    first_call_s = time.perf_counter() - t0

    settings = {
        "shadows_off_reflections_off": dict(shadows=False, reflections=False),
        "shadows_off_reflections_off_msaa4": dict(shadows=False, reflections=False, antialias=True),
        "shadows_off_reflections_on": dict(shadows=False, reflections=True),
        "shadows_on_reflections_off": dict(shadows=True, reflections=False),
        "shadows_on_reflections_on": dict(shadows=True, reflections=True),
        "shadows_on_mujoco_default_shadow_map_4096": dict(
            shadows=True, reflections=False, shadow_size=4096
        ),
    }
    results = {}
    for name, kw in settings.items():
        render.render_states(model, qpos[:5], width=s, height=s, **kw)  # warm-up
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            frames = render.render_states(model, qpos, width=s, height=s, **kw)
            best = min(best, time.perf_counter() - t0)
        assert frames.shape == (args.frames, s, s, 3)
        results[name] = {
            "kwargs": kw,
            "frames_per_s": round(args.frames / best, 1),
            "ms_per_frame": round(1000 * best / args.frames, 3),
        }
        print(f"{name:44s} {results[name]['frames_per_s']:8.1f} frames/s", flush=True)

    # Overhead of replay alone (qpos -> mj_forward), to show rendering dominates.
    data = mujoco.MjData(model)
    t0 = time.perf_counter()
    for q in qpos:
        data.qpos[:] = q
        mujoco.mj_forward(model, data)
    forward_ms = 1000 * (time.perf_counter() - t0) / len(qpos)

    report = {
        "command": " ".join(
            [f"{k}={os.environ[k]}" for k in ("LD_LIBRARY_PATH",) if os.environ.get(k)]
            + ([f"MUJOCO_GL={forced_gl}"] if forced_gl else [])
            + [".venv/bin/python", *sys.argv]
        ),
        "cpus": os.cpu_count(),
        "load_average_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "backend": info,
        "gl_renderer": render.gl_renderer(),
        "mujoco": mujoco.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "scene": {"ngeom": int(model.ngeom), "nq": int(model.nq), "lights": int(model.nlight)},
        "size": [s, s],
        "frames": args.frames,
        "repeats": args.repeats,
        "first_call_s": round(first_call_s, 3),
        "mj_forward_ms_per_frame": round(forward_ms, 4),
        "results": results,
        "speedup_off_vs_shadows_on": round(
            results["shadows_off_reflections_off"]["frames_per_s"]
            / results["shadows_on_reflections_off"]["frames_per_s"],
            2,
        ),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()

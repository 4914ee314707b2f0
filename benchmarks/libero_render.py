"""Cost of LIBERO observations: both cameras (agent view + wrist) at 256 x 256 per chunk endpoint.

    python benchmarks/libero_render.py --states 8 --repeats 5

For one task per LIBERO scene kind (tabletop: libero_spatial, floor: libero_object, living room:
libero_10) renders `--states` settled initial states with `coda.libero.render`
(`render_observations`: replay qpos through mj_forward, both cameras offscreen) and reports the
first call (GL context + texture upload), the steady per-endpoint wall time (median of
`--repeats`) and CPU time (all threads; steadier when the machine is shared),
the same under each observation perturbation at level 3, the pi0.5 input conversion and the
128 px GIF frame; and on LIBERO's Panda (`PandaEnv`'s visual model) both cameras drawn plainly,
multisampled, and as robosuite draws them (`ROBOSUITE_DRAWING`: visual geoms only, reflections,
MSAA), interleaved, with robosuite's drawing's cost over each. Single process, GL backend as
probed (`coda.sim.render`). Writes benchmarks/results/libero_render.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from coda.libero import perturb as P  # noqa: E402
from coda.libero import render as LR  # noqa: E402
from coda.libero import scene as S  # noqa: E402
from coda.libero import suites  # noqa: E402
from coda.sim import render as R  # noqa: E402

TASKS = (("libero_spatial", 0), ("libero_object", 0), ("libero_10", 0))


def _median_s(repeats: int, fn, *a, **kw) -> float:
    """Median wall seconds of fn(*a, **kw) over `repeats` calls."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(*a, **kw)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _cpu_s(repeats: int, fn, *a, **kw) -> float:
    """Mean CPU seconds (all threads of this process: llvmpipe renders on threads) of one call:
    steadier than wall time on a loaded machine."""
    t = time.process_time()
    for _ in range(repeats):
        fn(*a, **kw)
    return (time.process_time() - t) / repeats


def _gif(path: str, model: mujoco.MjModel, q: np.ndarray) -> None:
    LR.write_gif(path, LR.render_episode(model, q), size=128)


# how the Panda's frames are drawn: plain, multisampled (until session 41), as robosuite does
DRAWINGS = {
    "plain": {},
    "msaa": {"antialias": True},
    "robosuite": LR.ROBOSUITE_DRAWING,
}


def _drawing_cost(suite: str, name: str, states: int, repeats: int) -> dict:
    """ms per endpoint (both cameras) of the Panda's frames under each of `DRAWINGS`,
    interleaved repeat by repeat (medians), and robosuite's over the other two."""
    from coda.libero.panda_env import PandaEnv

    env = PandaEnv(suite, name, n_envs=states)
    env.reset(list(range(states)))
    model, q = env._visual(), np.stack([d.qpos for d in env.datas])

    def draw(how: dict) -> None:
        for cam in LR.CAMERAS:
            R.render_states(model, q, camera=cam, width=256, height=256, **how)

    for how in DRAWINGS.values():  # contexts created, textures uploaded
        draw(how)
    times: dict[str, list] = {k: [] for k in DRAWINGS}
    for _ in range(repeats):
        for k, how in DRAWINGS.items():
            t = time.perf_counter()
            draw(how)
            times[k].append((time.perf_counter() - t) / states)
    ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    return {
        "panda_ms": {k: round(v, 2) for k, v in ms.items()},
        "panda_robosuite_over_plain": round(ms["robosuite"] / ms["plain"], 3),
        "panda_robosuite_over_msaa": round(ms["robosuite"] / ms["msaa"], 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--states", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/libero_render.json")
    args = ap.parse_args()
    ok, backend = R.gl_available()
    if not ok:
        raise SystemExit(backend)
    load0 = [round(x, 2) for x in os.getloadavg()]
    rows = []
    for suite, tid in TASKS:
        name = suites.tasks(suite)[tid]
        q = np.stack([S.compile_task(suite, name, i).init_qpos for i in range(args.states)])
        model = LR.render_model(suite, name)
        b = len(q)
        t = time.perf_counter()
        first = LR.render_observations(model, q[:1])
        first_s = time.perf_counter() - t
        assert first.shape == (1, 2, 256, 256, 3)
        n = args.repeats
        steady = _median_s(n, LR.render_observations, model, q) / b
        cpu = _cpu_s(n, LR.render_observations, model, q) / b
        pert = {}
        for kind in P.OBS_KINDS:
            p = P.ObsPerturbation(kind, 3, 0)
            ms = 1e3 * _median_s(n, LR.render_observations, model, q, perturbation=p) / b
            pert[kind] = round(ms, 2)
        frames = LR.render_observations(model, q)
        pi05 = _median_s(n, LR.pi05_images, frames) / b
        with tempfile.TemporaryDirectory() as tmp:
            gif = _median_s(n, _gif, os.path.join(tmp, "g.gif"), model, q) / b
        rows.append(
            {
                "suite": suite,
                "task": name,
                "ngeom": int(model.ngeom),
                "states": b,
                "first_call_s": round(first_s, 3),
                "ms_per_endpoint_both_cameras": round(1e3 * steady, 2),
                "cpu_ms_per_endpoint_both_cameras": round(1e3 * cpu, 2),
                "ms_per_endpoint_level3": pert,
                "ms_per_endpoint_pi05_inputs": round(1e3 * pi05, 2),
                "ms_per_gif_frame_128": round(1e3 * gif, 2),
                **_drawing_cost(suite, name, b, n),
            }
        )
        print(json.dumps(rows[-1]))
    mean = float(np.mean([r["ms_per_endpoint_both_cameras"] for r in rows]))
    mean_cpu = float(np.mean([r["cpu_ms_per_endpoint_both_cameras"] for r in rows]))
    result = {
        "command": "python " + " ".join([pathlib.Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
        "what": "both LIBERO cameras (agentview + robot0_eye_in_hand), 256x256 RGB, per chunk "
        "endpoint: qpos replay (mj_forward) + offscreen render + readback, one process",
        "gl_backend": backend,
        "gl_renderer": R.gl_renderer(),
        "mujoco": mujoco.__version__,
        "cpu_count": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "load_average_at_start": load0,
        "LP_NUM_THREADS": os.environ.get("LP_NUM_THREADS", "(unset: llvmpipe uses every core)"),
        "mean_ms_per_endpoint_both_cameras": round(mean, 2),
        "mean_cpu_ms_per_endpoint_both_cameras": round(mean_cpu, 2),
        "endpoints_per_s": round(1e3 / mean, 1),
        "per_task": rows,
    }
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "per_task"}, indent=1))


if __name__ == "__main__":
    main()

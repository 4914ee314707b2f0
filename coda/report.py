"""Run report: what ran, rendered frames of planner demos and a short Markdown summary."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
from absl import logging
from ml_collections import ConfigDict

NOT_RUN = (
    "learned policy (no policy is trained or evaluated by this command; `coda/train` and "
    "`benchmarks/` train one separately)",
    "critic, memory and data-engine rounds (the loop runs round 0 only)",
)


def what_ran(config: ConfigDict) -> dict[str, Any]:
    """Which policies this run evaluated, so no reader takes planner success for learning."""
    return {
        "scripted_planner": True,
        "random_policy": bool(config.eval.random_policy),
        "learned_policy": False,
        "not_run": list(NOT_RUN),
    }


def _what_ran_lines(ran: dict[str, Any]) -> list[str]:
    random = (
        "**Random policy**: uniform random actions, the floor every method must beat."
        if ran["random_policy"]
        else "**Random policy**: not run (`eval.random_policy=False`)."
    )
    return [
        "## What ran",
        "",
        "- **Scripted planner** (`coda/sim/planner.py`): hand-written phase controllers that read "
        "the true object poses (privileged state). Their success shows the verified scenes are "
        "solvable in the episode length; **it is not a learning result**.",
        f"- {random}",
        "- **Learned policy: not run.** No number in this report measures a learned policy.",
        "",
        "Not run: " + "; ".join(ran["not_run"]) + ".",
        "",
    ]


def render_demos(demos: dict[str, list], config: ConfigDict, workdir: str) -> dict[str, Any]:
    """Renders `render.per_family` planner rollouts per family (chunk-endpoint frames)."""
    from coda.sim import render

    ok, why = render.gl_available()
    if not ok:
        msg = f"rendering skipped: {why}"
        logging.warning(msg)
        return {"_status": msg}
    out: dict[str, Any] = {"_status": f"ok ({why})"}
    fdir = os.path.join(workdir, "frames")
    os.makedirs(fdir, exist_ok=True)
    for fam, rows in demos.items():
        out[fam] = []
        for variant, result, i in rows[: config.render.per_family]:
            qpos = np.asarray(result.qpos[i])  # [C+1, nq]
            frames = render.render_states(
                variant.model, qpos, width=config.render.width, height=config.render.height
            )
            stem = os.path.join(fdir, f"{fam}_{len(out[fam])}")
            render.save_gif(frames, stem + ".gif", fps=4)
            render.save_png(
                render.contact_sheet(render.subsample(frames, 8), cols=4), stem + ".png"
            )
            out[fam].append(
                {
                    "gif": os.path.relpath(stem + ".gif", workdir),
                    "sheet": os.path.relpath(stem + ".png", workdir),
                    "instruction": variant.scene.task["instruction"],
                    "success": bool(result.success[i]),
                }
            )
    return out


def write_markdown(summary: dict, frames: dict, config: ConfigDict, workdir: str) -> str:
    lines = [
        "# CoDA run report",
        "",
        f"backend **{summary['backend']}**, {summary['env_steps']:,} env steps at "
        f"{summary['env_steps_per_s']:,.0f} env-steps/s; wall {summary['wall_seconds']:.0f} s",
        "",
        *_what_ran_lines(summary["what_ran"]),
        "## Verification",
        "",
        f"pass rate **{summary['verification']['pass_rate']:.3f}** over "
        f"{summary['verification']['n']} scenes; failing scenes per check: "
        f"`{json.dumps(summary['verification']['reasons'])}`",
        "",
        "## Success by ν (batched rollouts)",
        "",
        "| family | scenes | verified | scripted planner (privileged, not learned) | random |",
        "|---|---|---|---|---|",
    ]
    fmt = lambda x: "–" if x is None else f"{x:.3f}"  # noqa: E731
    for fam, e in summary["families"].items():
        lines.append(
            f"| {fam} | {e['scenes']} | {e['verified']} | "
            f"{fmt(e.get('planner_success'))} | {fmt(e.get('random_success'))} |"
        )
    status = frames.get("_status", "disabled")
    lines += ["", "## Scripted-planner demonstrations", "", f"_{status}_", ""]
    for fam, items in frames.items():
        if fam.startswith("_"):
            continue
        for it in items:
            lines += [
                f"**{fam}** — “{it['instruction']}” (success: {it['success']})",
                "",
                f"![{fam}]({it['sheet']}) ",
                f"[animation]({it['gif']})",
                "",
            ]
    lines += ["## Config", "", "```json", config.to_json_best_effort(indent=2), "```", ""]
    path = os.path.join(workdir, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path

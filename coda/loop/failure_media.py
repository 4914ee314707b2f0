"""The run report's diagnosed failures: a GIF and a keyframe sheet per saved failure.

`coda.loop.records.save_failures` keeps each diagnosed failure of a round (scene, qpos at every
chunk endpoint, ψ, phases per endpoint) under <workdir>/failures/; the report renders them here,
through the readable views of `coda.sim.view` (the workspace camera framed on the task's
objects, the wrist camera, a background) and `coda.critic.keyframes` (the labelled sheet).
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np
from ml_collections import ConfigDict

from coda.engine.kinds import kind_of_record


def failure_media(workdir: str, config: ConfigDict) -> list[dict]:
    """GIFs and keyframe sheets of the saved diagnosed failures (rendered now, from the traces:
    `_render_failure`)."""
    items = []
    files = sorted(glob.glob(os.path.join(workdir, "failures", "*.json")))
    if not files:
        return items
    ok, why = (False, "rendering disabled")
    if config.render.enabled:
        from coda.sim import render  # lazy: rendering (GL) only when the report renders GIFs

        ok, why = render.gl_available()
    for path in files:
        with open(path) as f:
            rec = json.load(f)
        item = {"round": rec["round"], "diagnosis": rec["diagnosis"], "mode": rec["mode"]}
        item["instruction"] = rec["scene"]["task"].get("instruction", "")
        if ok:
            try:
                item.update(_render_failure(rec, path[: -len(".json")], workdir, config))
            except Exception as e:  # noqa: BLE001 - a report without a GIF, not a failed run
                item["gif_error"] = str(e)
        else:
            item["gif_error"] = why
        items.append(item)
    return items


def _render_failure(rec: dict, stem: str, workdir: str, config: ConfigDict) -> dict:
    """<stem>.gif (every chunk endpoint: the workspace camera framed on the task's objects
    beside the wrist camera, `coda.sim.view`) and <stem>_sheet.png (keyframes across the
    episode labelled with chunk and phase, the diagnosis on top, `coda.critic.keyframes`)."""
    from coda.critic.keyframes import diagnosis_title, trace_sheet  # lazy: GL, as above
    from coda.sim import render, view  # lazy: rendering (GL), as above

    comp = kind_of_record(rec["scene"]).compile(rec["scene"])  # a family's or LIBERO's
    qpos = np.load(stem + ".npy")
    size = int(max(config.render.width, config.render.height))
    agent, wrist = view.render_views(comp, qpos, size)
    render.save_gif(view.side_by_side(agent, wrist), stem + ".gif", fps=4)
    sheet = trace_sheet(
        comp,
        qpos,
        rec.get("phase_names", ()),
        rec.get("phase_index"),
        title=diagnosis_title(rec["scene"]["task"].get("instruction", ""), rec["diagnosis"]),
        size=size,
    )
    render.save_png(sheet, stem + "_sheet.png")
    return {
        "gif": os.path.relpath(stem + ".gif", workdir),
        "sheet": os.path.relpath(stem + "_sheet.png", workdir),
    }

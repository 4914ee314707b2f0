"""Readable keyframes of a diagnosed episode: what the VLM critic is shown and what the run
report shows a person.

Every keyframe is two views of one chunk endpoint through `coda.sim.view`: the workspace camera
framed on the task's objects and the tool centre point over the whole episode (one framing for
every keyframe, so the camera does not jump), and the wrist camera; the scene has a background
(skybox, floor texture) in these views only. `readable_keyframes` puts the two views side by
side (one image per keyframe for the VLM); `keyframe_sheet` tiles keyframes across the episode
into one labelled PNG (chunk endpoint and the phase being worked on above each column, the
instruction and the diagnosis on top). Rendering needs headless GL (`RenderUnavailable`
otherwise); nothing renders on import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from coda.critic.episode import Episode, keyframe_indices
from coda.sim import view
from coda.sim.compile import CompiledScene
from coda.sim.media import labelled_sheet

SHEET_FRAMES = 8  # keyframes on a sheet
SHEET_SIZE = 224  # px per view on a sheet


def phase_label(phase_names: Sequence[str], phase_index: Sequence[int], t: int) -> str:
    """'chunk t · <phase being worked on>' ('all phases done' once every phase completed); t=0
    is the start, t=k the state after chunk k."""
    k = int(phase_index[t])
    where = "all phases done" if k >= len(phase_names) else str(phase_names[k])
    return f"chunk {t} · {where}"


def sheet_indices(
    phase_index: Sequence[int], max_frames: int = SHEET_FRAMES, must: Sequence[int] = ()
) -> list[int]:
    """Keyframes across an episode: the start, the last endpoint, every endpoint where a phase
    completed (and `must`), then evenly spread endpoints up to `max_frames`; when those are
    already more, the ends and an even spread of the rest."""
    idx = np.asarray(phase_index)
    last = len(idx) - 1
    changes = [int(t) for t in np.nonzero(np.diff(idx) > 0)[0] + 1]
    keep = sorted({0, last, *changes, *(int(t) for t in must if 0 <= t <= last)})
    if len(keep) > max_frames:  # many phase changes: keep the ends, spread the rest
        inner = keep[1:-1]
        n = max(max_frames - 2, 0)
        pick = np.linspace(0, len(inner) - 1, n + 2)[1:-1].round().astype(int)
        return sorted({0, last, *(inner[i] for i in pick)})
    for t in np.linspace(0, last, max_frames).round().astype(int):
        if len(keep) >= max_frames:
            break
        keep = sorted({*keep, int(t)})
    return keep


def episode_views(
    ep: Episode, indices: Sequence[int], size: int = 224
) -> tuple[np.ndarray, np.ndarray]:  # ([K, S, S, 3], [K, S, S, 3]) uint8
    """(workspace, wrist) frames of the episode at the given chunk endpoints."""
    return view.render_views(
        ep.compiled, ep.qpos[np.asarray(indices, int)], size, frame_qpos=ep.qpos
    )


def readable_keyframes(
    ep: Episode, indices: Sequence[int], size: int = 224
) -> np.ndarray:  # [K, S, 2S + 4, 3] uint8
    """One image per keyframe: the framed workspace view (left) beside the wrist view (right)."""
    return view.side_by_side(*episode_views(ep, indices, size))


def diagnosis_title(instruction: str, diagnosis: Mapping[str, Any] | None = None) -> str:
    """'"<instruction>"  diagnosis: factor / phase / cause (critic) - cause text' for a sheet's
    top (plain ASCII punctuation: the sheet's default font has no Greek or typographic quotes)."""
    out = f'"{instruction}"' if instruction else ""
    if diagnosis:
        psi = " / ".join(str(diagnosis.get(k, "?")) for k in ("factor", "phase", "cause"))
        who = f" ({diagnosis['critic']})" if diagnosis.get("critic") else ""
        text = f" - {diagnosis['cause_text']}" if diagnosis.get("cause_text") else ""
        out += f"   diagnosis: {psi}{who}{text}"
    return out + "   [top: workspace camera · bottom: wrist camera]"


def trace_sheet(
    compiled: CompiledScene,
    qpos: np.ndarray,  # [T, nq]: the state at t=0 and every chunk endpoint
    phase_names: Sequence[str] = (),
    phase_index: Sequence[int] | None = None,  # [T]; None: no phases known (labels: chunks)
    *,
    title: str = "",
    indices: Sequence[int] | None = None,
    size: int = SHEET_SIZE,
    max_frames: int = SHEET_FRAMES,
) -> np.ndarray:  # [H, W, 3] uint8
    """The keyframe sheet of a recorded trace (no `Episode` needed: the report's saved
    failures). Columns are keyframes, workspace view above wrist view."""
    qpos = np.asarray(qpos)
    known = phase_index is not None and len(phase_index) == len(qpos)
    steps = np.asarray(phase_index if known else np.arange(len(qpos)))
    idx = list(indices) if indices is not None else sheet_indices(steps, max_frames)
    if known:
        labels = [phase_label(phase_names, steps, t) for t in idx]
    else:
        labels = [f"chunk {t}" for t in idx]
    agent, wrist = view.render_views(compiled, qpos[idx], size, frame_qpos=qpos)
    return labelled_sheet([agent, wrist], labels, title=title, cols=min(len(idx), 4))


def keyframe_sheet(
    ep: Episode,
    diagnosis: Mapping[str, Any] | None = None,
    *,
    indices: Sequence[int] | None = None,
    size: int = SHEET_SIZE,
    max_frames: int = SHEET_FRAMES,
) -> np.ndarray:  # [H, W, 3] uint8
    """One diagnosis's sheet: keyframes across the episode (the critic's keyframes and the
    evidence's chunks among them when a diagnosis names them), labelled with chunk and phase."""
    if indices is None:
        extra = list((diagnosis or {}).get("evidence", {}).get("chunks", []))
        must = keyframe_indices(ep, extra, max_frames)
        indices = sheet_indices(ep.phase_index, max_frames, must=must)
    return trace_sheet(
        ep.compiled,
        ep.qpos,
        ep.phase_names,
        ep.phase_index,
        title=diagnosis_title(ep.instruction, diagnosis),
        indices=indices,
        size=size,
    )

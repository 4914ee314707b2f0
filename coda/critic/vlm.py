"""The VLM critic: keyframes + a state summary + the scene's factors -> ψ through `coda.llm`.

The prompt (OpenAI chat format) carries the instruction, the family's ordered phase names and
where progress stopped, the scene's factors τ, σ, α, a per-endpoint state summary (tcp gap,
contacts, opening, heights, distances), the cause vocabulary, and one PNG keyframe per chosen
chunk endpoint as base64 `image_url` content parts (`coda.llm.message`): the workspace view
framed on the task's objects beside the wrist view (`coda.critic.keyframes`). The reply is
requested as JSON under `DIAGNOSIS_SCHEMA`; the client validates it and repairs a violation
once, and records every exchange (record/replay in the run folder, as configured on the client).
`validate_diagnosis` then checks the phase against the family's phases: a reply naming a phase
the family does not have is rejected (kept on the `Critique` and in `rejections`, logged to
`log_dir/critic_rejected.jsonl` when given) and never stored in memory.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from coda.critic.base import Critique, record
from coda.critic.episode import Episode, keyframe_indices, keyframe_label
from coda.critic.keyframes import readable_keyframes
from coda.critic.types import (
    CAUSES,
    DIAGNOSIS_SCHEMA,
    FACTORS,
    DiagnosisError,
    validate_diagnosis,
)
from coda.llm import ChatCall, message

ROLE = "critic"

SYSTEM = """You are the failure critic of a robot-learning data engine. A parallel-jaw gripper \
policy failed a tabletop task in simulation. Diagnose the failure as JSON with:
- factor: which scene factor is responsible. task = the task itself (which object plays which \
role, the goal); layout = object poses; attributes = object sizes, masses, frictions; \
execution = the policy's own control, when no scene factor explains the failure. One of: {factors}.
- phase: the task phase where progress stopped; exactly one of the phase names given for this \
scene.
- cause: one label from this vocabulary, and cause_text: one or two sentences in your words.
{causes}
- evidence: chunks (chunk-endpoint indices that show the cause: 0 is the start, k is after \
chunk k), keyframes (indices of the images you relied on, as chunk-endpoint indices) and \
numbers (name/value pairs from the state summary that support the diagnosis).
Reply with the JSON object only."""


VIEWS = (
    "Each image shows one chunk endpoint twice: left, a workspace camera framed on the task's "
    "objects and the gripper over the whole episode (the same framing in every image); right, "
    "the wrist camera looking down between the jaws (the fingers at the bottom edge)."
)


def _round(x: Any, nd: int = 4) -> Any:
    """Floats rounded (stable prompts hash to the same record)."""
    if isinstance(x, float):
        return round(x, nd)
    if isinstance(x, dict):
        return {k: _round(v, nd) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_round(v, nd) for v in x]
    return x


def state_summary(ep: Episode) -> str:
    """A per-endpoint table of the measured trace features (what the images cannot show)."""
    f = ep.features
    cols = ["t", "phase_done", "tcp_gap_m", "left", "right", "opening_m", "obj_height_m"]
    if "dest_dist" in f:
        cols.append("dest_xy_m")
    if "joint_frac" in f:
        cols.append("joint_frac")
    names = [n for _, n in ep.roles.distractors]
    lines = [" ".join(cols + [f"touch:{n}" for n in names])]
    for t in range(ep.num_endpoints):
        row = [
            str(t),
            str(int(ep.phase_index[t])),
            f"{float(f['tcp_gap'][t]):.3f}",
            str(int(f["left"][t])),
            str(int(f["right"][t])),
            f"{float(f['opening'][t]):.3f}",
            f"{float(f['obj_height'][t]):.3f}",
        ]
        if "dest_dist" in f:
            row.append(f"{float(f['dest_dist'][t]):.3f}")
        if "joint_frac" in f:
            row.append(f"{float(f['joint_frac'][t]):.3f}")
        row += [str(int(f["d_touch"][t, k])) for k in range(len(names))]
        lines.append(" ".join(row))
    return "\n".join(lines)


class VLMCritic:
    """Critic through an `LLMClient`'s critic role (OpenAI or any OpenAI-compatible server).

    Args:
      client: a `coda.llm.LLMClient`; its critic role picks backend, model and record mode.
      memory: a `coda.memory.MemoryStore` for accepted diagnoses (None: not recorded).
      max_keyframes: images per episode; image_size: each view's side in pixels.
      frames: (episode, endpoint indices) -> [K, H, W, 3] uint8 (default: headless rendering
        of `coda.critic.keyframes.readable_keyframes`: the workspace camera framed on the
        task's objects beside the wrist camera, [K, S, 2S + 4, 3]).
      log_dir: where rejected replies are logged (None: kept in `rejections` only).
    """

    name = "vlm"

    def __init__(
        self,
        *,
        client: Any,
        memory: Any = None,
        max_keyframes: int = 6,
        image_size: int = 224,
        frames: Callable[[Episode, Sequence[int]], np.ndarray] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if max_keyframes < 1:
            raise ValueError(f"max_keyframes must be >= 1, got {max_keyframes}")
        self.client = client
        self.memory = memory
        self.max_keyframes = int(max_keyframes)
        self.image_size = int(image_size)
        self.frames = frames or (lambda ep, idx: readable_keyframes(ep, idx, self.image_size))
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self.rejections: list[dict[str, Any]] = []

    def messages(self, ep: Episode) -> list[dict[str, Any]]:
        """The chat messages for one episode (system + user text with the keyframe images)."""
        keys = keyframe_indices(ep, max_frames=self.max_keyframes)
        images = np.asarray(self.frames(ep, keys))
        if images.shape[0] != len(keys):
            raise ValueError(f"frames returned {images.shape[0]} images for {len(keys)} keyframes")
        causes = "\n".join(f"  {k}: {v}" for k, v in CAUSES.items())
        system = SYSTEM.format(factors=", ".join(FACTORS), causes=causes)
        scene = ep.scene
        factors = {
            "task": {k: scene.task[k] for k in ("family", "instruction", "roles", "params")},
            "layout": scene.layout,
            "attributes": {
                n: {k: a[k] for k in ("dims", "mass", "friction")}
                for n, a in scene.attributes.items()
            },
        }
        text = "\n".join(
            [
                f"Instruction: {ep.instruction}",
                f"Family: {ep.family}. Phases, in order: {list(ep.phase_names)}.",
                f"Progress stopped in phase {ep.stopped_phase!r} (phases completed: "
                f"{ep.stopped_at} of {len(ep.phase_names)}; entered at endpoint "
                f"{ep.entered_stopped_phase()}). Episode endpoints: 0..{ep.num_endpoints - 1}.",
                f"The manipulated object is {ep.roles.obj_name!r}.",
                "Scene factors (JSON): " + json.dumps(_round(factors), sort_keys=True),
                "State at every chunk endpoint (phase_done = phases completed in order; "
                "left/right = finger pad touches the object; touch:<name> = a pad touches "
                "that distractor):",
                state_summary(ep),
                "Images, in order: "
                + "; ".join(keyframe_label(ep, t) for t in keys)
                + ". "
                + VIEWS,
            ]
        )
        return [message("system", system), message("user", text, images=list(images))]

    def diagnose(
        self, episodes: Sequence[Episode], key: jax.Array | None = None, *, round: int = 0
    ) -> list[Critique]:
        del key  # the VLM path is deterministic given the client's record / model settings
        t0 = time.perf_counter()
        calls = [
            ChatCall(ROLE, self.messages(ep), DIAGNOSIS_SCHEMA, "diagnosis", round=round)
            for ep in episodes
        ]
        responses = self.client.chat_many(calls)
        per = (time.perf_counter() - t0) / max(len(episodes), 1)
        out = []
        for ep, resp in zip(episodes, responses, strict=True):
            if not resp.ok:
                out.append(self._reject(ep, resp, f"{resp.failure.kind}: {resp.failure.message}"))
                continue
            try:
                diag = validate_diagnosis(
                    resp.parsed,
                    ep.phase_names,
                    num_endpoints=ep.num_endpoints,
                    family=ep.family,
                    critic=self.name,
                    model=resp.model,
                )
            except DiagnosisError as e:
                out.append(self._reject(ep, resp, str(e)))
                continue
            assignment = None
            if self.memory is not None:
                assignment = record(self.memory, ep, diag, round=round)
            out.append(Critique(ep, diag, None, assignment, per))
        return out

    def _reject(self, ep: Episode, resp: Any, why: str) -> Critique:
        entry = {
            "time": time.time(),
            "round": resp.round,
            "model": resp.model,
            "request_hash": resp.request_hash,
            "family": ep.family,
            "instruction": ep.instruction,
            "reason": why,
            "reply": resp.text,
        }
        self.rejections.append(entry)
        if self.log_dir is not None:
            os.makedirs(self.log_dir, exist_ok=True)
            with open(os.path.join(self.log_dir, "critic_rejected.jsonl"), "a") as f:
                f.write(json.dumps(entry) + "\n")
        return Critique(ep, None, why)

"""An openpi pi0.5 LIBERO checkpoint (`pi05_libero`'s layout) acting on LIBERO's Panda as
openpi's LIBERO client drives it (`python -m launch.libero --config.robot=panda
--config.policy=openpi:<dir>`; the protocol is `coda.libero.evaluate_panda`).

The checkpoint directory (nothing is downloaded: the user supplies every file):
  <dir>/params/                                  orbax params (`coda.policy.load_openpi`)
  <dir>/assets/<asset_id>/norm_stats.json        openpi's norm stats (any norm_stats.json under
                                                 assets/, or <dir>/norm_stats.json); pi05_libero:
                                                 assets/physical-intelligence/libero/
  the PaliGemma SentencePiece model              `config.tokenizer`, else
                                                 <dir>/paligemma_tokenizer.model, else
                                                 $CODA_PALIGEMMA_TOKENIZER

The model config is inferred from the params' shapes where they determine it: vocabulary, the
VLM's and the action expert's width / depth / MLP / heads / KV heads / head dim, the SigLIP
tower (patch, width, depth, MLP, heads) and its image resolution (from the position embedding),
the action dimension (`action_in_proj`). What no parameter stores is configured
(`config.openpi`, pi05_libero's values by default): the action horizon (10), whether the state
goes into the prompt (`discrete_state_input`: False), the prompt length (200), the flow
sampling steps (10) and the dtype of params and compute (bfloat16, as openpi serves it).

One inference (openpi's `LiberoInputs` -> `Normalize` -> model -> `Unnormalize` ->
`LiberoOutputs`):
  * images: each LIBERO frame turned by 180 deg (`[::-1, ::-1]`: robosuite gives the bottom row
    first) and resized with zero padding to the model's square resolution (openpi_client's
    `resize_with_pad`, PIL bilinear); `agentview_image` -> `base_0_rgb`,
    `robot0_eye_in_hand_image` -> `left_wrist_0_rgb`, `right_wrist_0_rgb` black with mask False;
  * state: the 8-D `state` (eef position, axis-angle, gripper qpos) quantile-normalised,
    (x - q01) / (q99 - q01 + 1e-6) * 2 - 1; it reaches the model only as prompt text when the
    state is in the prompt (pi05_libero ignores it);
  * prompt: the task's language as LIBERO's benchmark gives it (`prompt_for`), tokenised by
    `coda.policy.tokenizer` (openpi's format: stripped, "_" -> " ", BOS, "\\n"; no lowercasing);
  * actions: one chunk [B, H, action_dim] sampled from N(0, I) noise drawn from an explicit key,
    its first 7 dims un-normalised, x = (y + 1) / 2 * (q99 - q01 + 1e-6) + q01.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax.traverse_util import flatten_dict
from ml_collections import ConfigDict
from PIL import Image

from coda.libero import scene as S
from coda.libero import suites
from coda.policy import get_config, load_norm_stats, load_openpi, make_observation
from coda.policy.checkpoints import NormStats, check_params, to_device, tree_metadata_keys
from coda.policy.pi05 import Pi05Policy
from coda.policy.tokenizer import ENV_PATH, PromptTokenizer, tokenize_for_config

PREFIX = "openpi:"
TOKENIZER_FILE = "paligemma_tokenizer.model"
PI05_LIBERO_ASSET = "physical-intelligence/libero"  # pi05_libero's asset id
ENV_ACTION_DIM = 7  # LIBERO's OSC_POSE delta (6) + gripper (1): openpi's `LiberoOutputs`
NORM_KEYS = ("state", "actions")
CAMERAS = {"agentview_image": "base_0_rgb", "robot0_eye_in_hand_image": "left_wrist_0_rgb"}
ABSENT_CAMERA = "right_wrist_0_rgb"
_P = "PaliGemma"


def checkpoint_dir(policy: Any) -> str | None:
    """The directory of an `openpi:<dir>` policy value; None for any other policy."""
    if isinstance(policy, str) and policy.startswith(PREFIX):
        return policy[len(PREFIX) :]
    return None


class CheckpointError(ValueError):
    """A checkpoint whose files are there but cannot be read as a pi0.5 LIBERO policy (corrupt
    params, another model's params, a file that is not a SentencePiece model): one line."""


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"


@dataclasses.dataclass(frozen=True)
class CheckpointParts:
    root: pathlib.Path
    params: pathlib.Path
    norm_stats: pathlib.Path
    tokenizer: pathlib.Path


def _norm_stats_file(root: pathlib.Path) -> tuple[pathlib.Path | None, str]:
    """(the norm stats file or None, where it looked / why it is ambiguous)."""
    found = sorted((root / "assets").rglob("norm_stats.json")) if (root / "assets").is_dir() else []
    if not found and (root / "norm_stats.json").is_file():
        return root / "norm_stats.json", ""
    if len(found) == 1:
        return found[0], ""
    preferred = root / "assets" / PI05_LIBERO_ASSET / "norm_stats.json"
    if preferred in found:
        return preferred, ""
    if found:
        rel = ", ".join(str(p.relative_to(root)) for p in found)
        return None, f"several norm_stats.json under {root}/assets ({rel}); keep one"
    return None, f"no norm_stats.json under {root}/assets/ nor at {root}/norm_stats.json"


def _tokenizer_file(root: pathlib.Path, tokenizer: str) -> tuple[pathlib.Path | None, str]:
    if tokenizer:
        p = pathlib.Path(tokenizer)
        return (p, "") if p.is_file() else (None, f"tokenizer={tokenizer!r} is not a file")
    looked = [root / TOKENIZER_FILE]
    if os.environ.get(ENV_PATH):
        looked.append(pathlib.Path(os.environ[ENV_PATH]))
    for p in looked:
        if p.is_file():
            return p, ""
    where = f"{looked[0]}" + (f" nor ${ENV_PATH}={looked[1]}" if len(looked) > 1 else "")
    return None, (
        f"no PaliGemma tokenizer ({TOKENIZER_FILE}) at {where}; pass --config.tokenizer=<file> "
        f"or put it in {root}"
    )


def _params_problem(params: pathlib.Path) -> str:
    """Why the orbax params' _METADATA cannot be read as `load_openpi` reads it ("" when it
    can; the arrays are read only when the policy is built)."""
    try:
        tree_metadata_keys(str(params))
    except (ValueError, OSError, KeyError, TypeError, AttributeError) as e:
        return f"orbax params {params}/_METADATA unreadable ({_first_line(e)})"
    return ""


def _tokenizer_problem(path: pathlib.Path) -> str:
    try:
        PromptTokenizer(1, str(path))
    except (RuntimeError, OSError) as e:
        return f"tokenizer {path} is not a SentencePiece model ({_first_line(e)})"
    return ""


def _norm_problems(path: pathlib.Path) -> str:
    try:
        stats = load_norm_stats(str(path))
    except (ValueError, OSError) as e:
        return f"norm stats {path} unreadable: {str(e).splitlines()[0]}"
    missing = [k for k in NORM_KEYS if k not in stats]
    if missing:
        return f"norm stats {path} lack {missing} (have {sorted(stats)})"
    no_q = [k for k in NORM_KEYS if stats[k].q01 is None or stats[k].q99 is None]
    if no_q:
        return f"norm stats {path}: {no_q} lack q01 / q99 (pi0.5 normalises by quantiles)"
    if stats["actions"].q01.shape[-1] < ENV_ACTION_DIM:
        return f"norm stats {path}: actions have {stats['actions'].q01.shape[-1]} dims < 7"
    return ""


def find_parts(policy: str, tokenizer: str = "") -> CheckpointParts:
    """The checkpoint's files for an `openpi:<dir>` policy; ValueError (one line naming every
    missing piece and where it looked) otherwise."""
    d = checkpoint_dir(policy)
    if not d:
        raise ValueError(f"policy={policy!r}: write openpi:<checkpoint dir>")
    root = pathlib.Path(d).expanduser()
    if not root.is_dir():
        raise ValueError(f"policy={policy!r}: no directory {root}")
    problems = []
    params = root / "params"
    if not (params / "_METADATA").is_file():
        problems.append(f"no orbax params at {params}/ (its _METADATA is missing)")
    elif bad := _params_problem(params):
        problems.append(bad)
    stats, why = _norm_stats_file(root)
    if stats is None:
        problems.append(why)
    elif bad := _norm_problems(stats):
        problems.append(bad)
    tok, why = _tokenizer_file(root, tokenizer)
    if tok is None:
        problems.append(why)
    elif bad := _tokenizer_problem(tok):
        problems.append(bad)
    if problems:
        raise ValueError(f"policy={policy!r}: " + "; ".join(problems))
    return CheckpointParts(root, params, stats, tok)


def checkpoint_problems(policy: str, tokenizer: str = "") -> list[str]:
    """`find_parts`'s problems as a list of one line (empty when the checkpoint is complete)."""
    try:
        find_parts(policy, tokenizer)
    except ValueError as e:
        return [str(e)]
    return []


# --- the model config ---------------------------------------------------------------------------


def _expert(shapes: dict, suffix: str) -> dict:
    q = shapes[f"{_P}/llm/layers/attn/q_einsum{suffix}/w"]  # [depth, heads, width, head_dim]
    kv = shapes[f"{_P}/llm/layers/attn/kv_einsum{suffix}/w"]  # [depth, 2, kv_heads, width, hd]
    mlp = shapes[f"{_P}/llm/layers/mlp{suffix}/gating_einsum"]  # [depth, 2, width, mlp_dim]
    return dict(
        width=q[2], depth=q[0], mlp_dim=mlp[3], num_heads=q[1], num_kv_heads=kv[2], head_dim=q[3]
    )


def _siglip(shapes: dict) -> dict:
    img = f"{_P}/img"
    patch = shapes[f"{img}/embedding/kernel"]  # [p, p, 3, width]
    tokens = shapes[f"{img}/pos_embedding"][1]
    side = math.isqrt(tokens)
    if side * side != tokens:
        raise ValueError(f"SigLIP position embedding has {tokens} tokens: not a square grid")
    block = f"{img}/Transformer/encoderblock"
    return dict(
        patch_size=patch[0],
        width=patch[3],
        depth=shapes[f"{block}/LayerNorm_0/scale"][0],
        mlp_dim=shapes[f"{block}/MlpBlock_0/Dense_0/bias"][1],
        num_heads=shapes[f"{block}/MultiHeadDotProductAttention_0/query/kernel"][2],
        image_size=side * patch[0],
    )


def infer_config(shapes: dict[str, tuple[int, ...]], settings: Any) -> ConfigDict:
    """pi0.5's config from a checkpoint's param shapes ({"a/b/c": shape}) and the configured
    fields no parameter stores (`settings`: configs/libero.py's `openpi` section)."""
    try:
        c = get_config("pi05_libero")
        c.name = "openpi_checkpoint"
        c.vocab_size = shapes[f"{_P}/llm/embedder/input_embedding"][0]
        c.vlm = _expert(shapes, "")
        c.expert = _expert(shapes, "_1")
        c.siglip = _siglip(shapes)
        c.action_dim = c.env_action_dim = shapes["action_in_proj/kernel"][0]
    except KeyError as e:
        raise ValueError(f"not a pi0.5 checkpoint: no parameter {e.args[0]}") from None
    c.action_horizon = int(settings.action_horizon)
    c.discrete_state_input = bool(settings.state_in_prompt)
    c.max_token_len = int(settings.max_token_len)
    c.num_sample_steps = int(settings.sample_steps)
    c.dtype = str(settings.dtype)
    return c


# --- observations -------------------------------------------------------------------------------


def libero_language(name: str) -> str:
    """LIBERO's `Task.language` of a task name (its benchmark's `grab_language_from_filename`):
    the file name's words, after the scene prefix of LIBERO-100's (libero_10 / libero_90)."""
    if name[:1].isupper():
        at = name.find("SCENE")
        name = name[at + (8 if "SCENE10" in name else 7) :]
    return " ".join(name.split("_"))


def prompt_for(suite: str, name: str) -> str:
    """The prompt openpi's LIBERO client sends: LIBERO's `task.language` (from the file name).
    A LIBERO-PRO file whose own `(:language ...)` differs from its base suite's (the `lan`
    paraphrases and the `task` suites' new goals) is prompted with that language instead."""
    base = suites.base(suite)
    if suite == base:
        return libero_language(name)
    own = S.load_task(suite, name).problem.language
    if name not in suites.tasks(base) or own != S.load_task(base, name).problem.language:
        return own
    return libero_language(name)


def resize_with_pad(images: np.ndarray, size: int) -> np.ndarray:
    """[B, H, W, 3] uint8 -> [B, size, size, 3]: openpi_client's `resize_with_pad` (aspect kept,
    PIL bilinear, centred on zeros)."""
    images = np.asarray(images)
    b, h, w = images.shape[:3]
    if (h, w) == (size, size):
        return images
    ratio = max(w / size, h / size)
    rh, rw = int(h / ratio), int(w / ratio)
    top, left = max(0, (size - rh) // 2), max(0, (size - rw) // 2)
    out = np.zeros((b, size, size, images.shape[3]), np.uint8)
    for i, im in enumerate(images):
        small = Image.fromarray(np.ascontiguousarray(im)).resize((rw, rh), Image.BILINEAR)
        out[i, top : top + rh, left : left + rw] = np.asarray(small)
    return out


def model_images(obs: dict, size: int) -> tuple[dict, dict]:
    """(images, masks) of openpi's LIBERO inputs from PandaEnv's camera observations."""
    b = obs["agentview_image"].shape[0]
    images = {cam: resize_with_pad(obs[key][:, ::-1, ::-1], size) for key, cam in CAMERAS.items()}
    masks = {cam: np.ones(b, bool) for cam in CAMERAS.values()}
    images[ABSENT_CAMERA] = np.zeros((b, size, size, 3), np.uint8)
    masks[ABSENT_CAMERA] = np.zeros(b, bool)
    return images, masks


class OpenpiLiberoPolicy:
    """A pi0.5 checkpoint behind `infer(obs, prompt, rng) -> actions [B, H, 7]` (LIBERO's
    action space). `last` holds the latest inference's normalised state, tokens, model images,
    raw and un-normalised chunk; `calls` counts inferences."""

    def __init__(self, parts: CheckpointParts, settings: Any):
        dtype = jnp.dtype(str(settings.dtype))
        where = f"policy='{PREFIX}{parts.root}'"
        try:
            params = load_openpi(str(parts.params), dtype=dtype)
        except Exception as e:  # orbax / tensorstore / json: any way the arrays fail to read
            raise CheckpointError(
                f"{where}: params {parts.params} unreadable ({_first_line(e)})"
            ) from None
        shapes = {"/".join(k): tuple(np.shape(v)) for k, v in flatten_dict(params).items()}
        try:
            self.config = infer_config(shapes, settings)
            self.model = Pi05Policy(self.config)
            check_params(params, self.model.param_shapes())
        except ValueError as e:
            msg = str(e).splitlines()[0]
            raise CheckpointError(f"{where}: params {parts.params}: {msg}") from None
        self.params = to_device(params)
        stats = load_norm_stats(str(parts.norm_stats))
        self.state_stats: NormStats = stats["state"]
        self.action_stats: NormStats = stats["actions"]
        self.tokenizer = PromptTokenizer(self.config.max_token_len, str(parts.tokenizer))
        if self.tokenizer.vocab_size > self.config.vocab_size:
            raise CheckpointError(
                f"{where}: tokenizer {parts.tokenizer} has {self.tokenizer.vocab_size} pieces > "
                f"the checkpoint's vocabulary {self.config.vocab_size}"
            )
        self.parts = parts
        self.image_size = int(self.config.siglip.image_size)
        self.horizon = int(self.config.action_horizon)
        self._sample = jax.jit(lambda p, o, k: self.model.sample_chunks(p, o, k)[:, 0])
        self.calls = 0
        self.last: dict[str, np.ndarray] = {}

    def describe(self) -> dict:
        """What was loaded and inferred (for results.json)."""
        c = self.config
        return {
            "dir": str(self.parts.root),
            "norm_stats": str(self.parts.norm_stats),
            "tokenizer": str(self.parts.tokenizer),
            "vocab_size": c.vocab_size,
            "vlm": dict(c.vlm),
            "expert": dict(c.expert),
            "siglip": dict(c.siglip),
            "action_dim": c.action_dim,
            "action_horizon": c.action_horizon,
            "discrete_state_input": c.discrete_state_input,
            "max_token_len": c.max_token_len,
            "num_sample_steps": c.num_sample_steps,
            "dtype": c.dtype,
        }

    def observation(self, obs: dict, prompt: str):
        """(model Observation, normalised state [B, 8]) of a batch of PandaEnv observations."""
        state = self.state_stats.normalize(np.asarray(obs["state"], np.float32))
        b = state.shape[0]
        tokens, mask = tokenize_for_config(self.config, self.tokenizer, [prompt] * b, state)
        images, masks = model_images(obs, self.image_size)
        o = make_observation(tokens, mask, images=images, image_masks=masks)
        self.last = {"state": state, "tokens": tokens, "token_mask": mask, "images": images}
        return o, state

    def infer(self, obs: dict, prompt: str, rng: jax.Array) -> np.ndarray:
        """One chunk [B, H, 7] in LIBERO's action space (un-normalised)."""
        o, _ = self.observation(obs, prompt)
        raw = np.asarray(self._sample(self.params, o, rng), np.float32)  # [B, H, action_dim]
        actions = self.action_stats.unnormalize(raw[..., :ENV_ACTION_DIM])
        self.calls += 1
        self.last.update(raw=raw, actions=actions)
        return actions

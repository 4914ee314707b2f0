"""Prompt tokenizer: SentencePiece with openpi's pi0.5 prompt format.

With a configured path (``config.tokenizer_path`` or ``$CODA_PALIGEMMA_TOKENIZER``) the real
PaliGemma tokenizer is used; otherwise the small offline model shipped in ``assets/`` (trained
by ``python -m coda.policy.make_tokenizer`` from the project's instruction vocabulary). Both use
PaliGemma's special ids (pad 0, eos 1, bos 2).

Formats (openpi ``PaligemmaTokenizer.tokenize``):
* with a state (pi0.5 ``discrete_state_input``):
  ``"Task: {text}, State: {bins};\\nAction: "`` with BOS, where ``bins`` is the state in [-1, 1]
  digitised into 256 bins, space-separated;
* without a state: BOS + ``text`` + ``"\\n"``.
``text = prompt.strip().replace("_", " ").replace("\\n", " ")``. Padded with id 0 / mask False to
``max_len``; longer prompts are truncated.
"""

from __future__ import annotations

import os

import numpy as np
import sentencepiece as spm

DEFAULT_MODEL = os.path.join(os.path.dirname(__file__), "assets", "coda_spm.model")
ENV_PATH = "CODA_PALIGEMMA_TOKENIZER"


def discretize_state(state: np.ndarray) -> np.ndarray:
    """State in [-1, 1] -> ints in [0, 255] (openpi: digitize over linspace(-1, 1, 257)[:-1])."""
    return np.digitize(np.asarray(state), bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1


def clean_text(prompt: str) -> str:
    return prompt.strip().replace("_", " ").replace("\n", " ")


def format_prompt(prompt: str, state: np.ndarray | None) -> str:
    """The pi0.5 text (without BOS) for a prompt and an optional discretised state."""
    text = clean_text(prompt)
    if state is None:
        return text
    bins = " ".join(map(str, discretize_state(state).tolist()))
    return f"Task: {text}, State: {bins};\nAction: "


class PromptTokenizer:
    """Host-side tokenizer (numpy in, numpy out; not jittable by design)."""

    def __init__(self, max_len: int, path: str | None = None):
        path = path or os.environ.get(ENV_PATH) or DEFAULT_MODEL
        if not os.path.exists(path):
            raise FileNotFoundError(f"SentencePiece model not found: {path}")
        self.path = path
        self.max_len = int(max_len)
        self._sp = spm.SentencePieceProcessor(model_file=path)

    @property
    def vocab_size(self) -> int:
        return self._sp.vocab_size()

    def encode(self, prompt: str, state: np.ndarray | None = None) -> list[int]:
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be str, got {type(prompt).__name__}")
        text = format_prompt(prompt, state)
        if state is not None:
            return self._sp.encode(text, add_bos=True)
        return self._sp.encode(text, add_bos=True) + self._sp.encode("\n")

    def decode(self, ids) -> str:
        return self._sp.decode([int(i) for i in ids])

    def tokenize(
        self, prompt: str, state: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """-> tokens [max_len] int32, mask [max_len] bool."""
        ids = self.encode(prompt, state)[: self.max_len]
        n = len(ids)
        tokens = np.zeros((self.max_len,), np.int32)
        tokens[:n] = ids
        mask = np.arange(self.max_len) < n
        return tokens, mask

    def tokenize_batch(
        self, prompts: list[str], states: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """-> tokens [B, max_len] int32, mask [B, max_len] bool."""
        if states is not None and len(states) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(states)} states")
        rows = [
            self.tokenize(p, None if states is None else states[i]) for i, p in enumerate(prompts)
        ]
        return np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])


def tokenizer_for(config) -> PromptTokenizer:
    """The tokenizer a model config asks for; checks that its ids fit the embedding table."""
    tok = PromptTokenizer(config.max_token_len, config.get("tokenizer_path") or None)
    if tok.vocab_size > config.vocab_size:
        raise ValueError(
            f"tokenizer {tok.path} has {tok.vocab_size} pieces > model vocab_size "
            f"{config.vocab_size}"
        )
    return tok


def tokenize_for_config(
    config, tokenizer: PromptTokenizer, prompts: list[str], states: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Tokenise prompts as the config expects: the (normalised, [-1, 1]) state goes into the
    prompt text only when ``config.discrete_state_input`` (openpi pi0.5); otherwise it is dropped
    here (state-only configs feed it to the state encoder through ``Observation.state``).
    """
    use_state = bool(config.discrete_state_input) and states is not None
    return tokenizer.tokenize_batch(prompts, np.asarray(states) if use_state else None)

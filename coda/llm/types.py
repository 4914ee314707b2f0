"""Values exchanged with language-model backends.

Messages are OpenAI-style dicts (``{"role": ..., "content": ...}``) because every backend we use
speaks that format and because they hash and record as plain JSON. Results and failures are
values (``LLMResponse``), so a flaky provider never raises through the loop.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "ROLES",
    "CompletionRequest",
    "LLMFailure",
    "LLMResponse",
    "RawCompletion",
    "ToolCall",
    "TransportError",
    "Usage",
    "image_part",
    "message",
    "png_bytes",
]

# The three roles of the method: engine G, critic C, Text2potential compiler R_hone.
ROLES = ("engine", "critic", "compiler")


def png_bytes(image: bytes | np.ndarray) -> bytes:
    """PNG-encode an ``[H, W, 3|4]`` / ``[H, W]`` uint8 frame (bytes are checked and passed on)."""
    if isinstance(image, (bytes, bytearray)):
        data = bytes(image)
        if not data.startswith(b"\x89PNG\r\n\x1a\n"):
            raise ValueError("image bytes are not a PNG (bad signature)")
        return data
    arr = np.asarray(image)
    if arr.dtype != np.uint8 or arr.ndim not in (2, 3):
        raise ValueError(f"expected a uint8 [H, W(, C)] frame, got {arr.dtype} {arr.shape}")
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def image_part(image: bytes | np.ndarray, detail: str = "auto") -> dict[str, Any]:
    """A content part carrying a PNG frame as a data URL."""
    b64 = base64.b64encode(png_bytes(image)).decode()
    return {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{b64}", "detail": detail},
    }


def message(
    role: str, text: str, images: Sequence[bytes | np.ndarray] = (), detail: str = "auto"
) -> dict[str, Any]:
    """Build a chat message; with images the content becomes a list of parts (text first)."""
    if role not in ("system", "user", "assistant", "developer"):
        raise ValueError(f"unknown message role {role!r}; valid: system user assistant developer")
    if not images:
        return {"role": role, "content": text}
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts += [image_part(im, detail) for im in images]
    return {"role": role, "content": parts}


@dataclass(frozen=True)
class CompletionRequest:
    """One provider call, exactly as sent (and hashed for record/replay)."""

    model: str
    messages: list[dict[str, Any]]
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RawCompletion:
    """What a backend returned, before parsing/validation."""

    text: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""
    model: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RawCompletion:
        return cls(**d)


class TransportError(Exception):
    """A classified provider failure raised by backends and turned into a value by the client."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.retryable = retryable
        self.status = status
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any] | None  # None when the model sent invalid JSON arguments
    raw_arguments: str
    error: str | None = None


@dataclass(frozen=True)
class LLMFailure:
    """Why a call produced no usable output.

    kind: rate_limit | server | timeout | connection | auth | bad_request | bad_response |
    schema | offline_missing | error.
    """

    kind: str
    message: str
    status: int | None = None
    attempts: int = 0


@dataclass(frozen=True)
class LLMResponse:
    """Result of ``LLMClient.chat``: parsed output plus usage, or a failure value."""

    role: str
    backend: str
    model: str
    ok: bool
    text: str = ""
    parsed: Any = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    cost_usd: float | None = 0.0
    attempts: int = 0
    replayed: bool = False
    repaired: bool = False
    request_hash: str = ""
    failure: LLMFailure | None = None
    latency_s: float = 0.0
    round: int | None = None

"""Backends behind the one LLM client interface, chosen by name from a registry.

* ``openai`` — the OpenAI API through the ``openai`` package; the model is configuration.
* ``openai_compatible`` — any server speaking the same API at ``base_url`` (vLLM / SGLang serving
  Qwen3-VL or InternVL3, or another provider's compatible endpoint).
* ``offline`` — deterministic, no network. Role-specific implementations (the offline engine,
  the state-based critic, the template compiler) register themselves with
  ``register_offline_handler(role, handler)``; this module only defines the seam.

Backends raise ``TransportError`` with a classification the client uses to retry or give up;
the provider SDK's own retries are disabled so there is one retry policy, in the client.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any, Protocol

from coda import registries
from coda.llm.types import CompletionRequest, RawCompletion, TransportError

__all__ = [
    "BACKENDS",
    "Backend",
    "OfflineBackend",
    "OfflineHandler",
    "OpenAIBackend",
    "OpenAICompatibleBackend",
    "get_backend",
    "offline_handlers",
    "register_backend",
    "register_offline_handler",
]


class Backend(Protocol):
    name: str
    networked: bool  # networked backends record by default; offline ones need not

    def complete(self, request: CompletionRequest, *, role: str, timeout_s: float) -> RawCompletion:
        """One attempt; raise ``TransportError`` on failure."""


class OpenAIBackend:
    """OpenAI chat-completions API (also the base of the compatible backend)."""

    name = "openai"
    networked = True
    _max_tokens_param = "max_completion_tokens"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        base_url: str | None = None,
        organization: str | None = None,
        default_headers: dict[str, str] | None = None,
    ) -> None:
        self.api_key = api_key
        self.api_key_env = api_key_env
        self.base_url = base_url
        self.organization = organization
        self.default_headers = default_headers
        self._client: Any = None
        self._lock = threading.Lock()

    def _resolve_key(self) -> str | None:
        return self.api_key or os.environ.get(self.api_key_env)

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                key = self._resolve_key()
                if not key:
                    raise TransportError(
                        "auth",
                        f"no API key: set ${self.api_key_env} or pass api_key, or use the "
                        "offline backend",
                        retryable=False,
                    )
                import openai

                self._client = openai.OpenAI(
                    api_key=key,
                    base_url=self.base_url,
                    organization=self.organization,
                    default_headers=self.default_headers,
                    max_retries=0,  # the client owns retries (backoff + jitter, accounting)
                )
            return self._client

    def complete(self, request: CompletionRequest, *, role: str, timeout_s: float) -> RawCompletion:
        import openai

        client = self._get_client()
        kwargs: dict[str, Any] = {
            "model": request.model,
            "messages": request.messages,
            "timeout": timeout_s,
        }
        if request.response_format is not None:
            kwargs["response_format"] = request.response_format
        if request.tools:
            kwargs["tools"] = request.tools
            if request.tool_choice is not None:
                kwargs["tool_choice"] = request.tool_choice
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.max_tokens is not None:
            kwargs[self._max_tokens_param] = request.max_tokens
        if request.seed is not None:
            kwargs["seed"] = request.seed
        if request.extra:
            kwargs["extra_body"] = dict(request.extra)
        try:
            resp = client.chat.completions.create(**kwargs)
        except openai.APITimeoutError as e:
            raise TransportError("timeout", str(e) or "request timed out", retryable=True) from e
        except openai.APIConnectionError as e:
            raise TransportError("connection", str(e), retryable=True) from e
        except openai.APIStatusError as e:
            raise _classify_status(e) from e
        except openai.OpenAIError as e:
            raise TransportError("error", f"{type(e).__name__}: {e}", retryable=False) from e
        return _parse_completion(resp)


def _retry_after(e: Any) -> float | None:
    try:
        value = e.response.headers.get("retry-after")
        return None if value is None else max(float(value), 0.0)
    except (AttributeError, TypeError, ValueError):
        return None


def _classify_status(e: Any) -> TransportError:
    status = int(getattr(e, "status_code", 0) or 0)
    msg = getattr(e, "message", None) or str(e)
    if status == 429:
        return TransportError(
            "rate_limit", msg, retryable=True, status=status, retry_after_s=_retry_after(e)
        )
    if status >= 500 or status in (408, 409):
        return TransportError(
            "server", msg, retryable=True, status=status, retry_after_s=_retry_after(e)
        )
    if status in (401, 403):
        return TransportError("auth", msg, retryable=False, status=status)
    return TransportError("bad_request", msg, retryable=False, status=status)


def _parse_completion(resp: Any) -> RawCompletion:
    choices = getattr(resp, "choices", None) or []
    if not choices:
        raise TransportError("bad_response", "response has no choices", retryable=True)
    msg = choices[0].message
    tool_calls = []
    for tc in getattr(msg, "tool_calls", None) or []:
        fn = getattr(tc, "function", None)
        if fn is None:
            continue
        tool_calls.append({"id": tc.id, "name": fn.name, "arguments": fn.arguments or ""})
    usage = getattr(resp, "usage", None)
    return RawCompletion(
        text=msg.content or "",
        tool_calls=tool_calls,
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        finish_reason=str(choices[0].finish_reason or ""),
        model=str(getattr(resp, "model", "") or ""),
    )


class OpenAICompatibleBackend(OpenAIBackend):
    """Any OpenAI-compatible server at ``base_url`` (vLLM, SGLang, other providers)."""

    name = "openai_compatible"
    _max_tokens_param = "max_tokens"

    def __init__(self, *, base_url: str, api_key: str | None = None, **kwargs: Any) -> None:
        if not base_url:
            raise ValueError("openai_compatible needs base_url, e.g. http://localhost:8000/v1")
        super().__init__(base_url=base_url, api_key=api_key, **kwargs)

    def _resolve_key(self) -> str | None:
        # Local servers usually accept any key; fall back to a placeholder rather than failing.
        return self.api_key or os.environ.get(self.api_key_env) or "EMPTY"


# role -> handler(request, role) -> RawCompletion | str | dict
OfflineHandler = Callable[[CompletionRequest, str], Any]
_OFFLINE_HANDLERS: dict[str, OfflineHandler] = {}
_OFFLINE_LOCK = threading.Lock()


def register_offline_handler(role: str, handler: OfflineHandler, *, replace: bool = False) -> None:
    """Install the deterministic offline implementation of a role (engine / critic / compiler).

    A handler returns a ``RawCompletion``, a string (the reply text) or a JSON-able object (sent
    as JSON text, e.g. a structured diagnosis). It must be deterministic in the request.
    """
    with _OFFLINE_LOCK:
        if role in _OFFLINE_HANDLERS and not replace:
            raise ValueError(f"offline handler for role {role!r} already registered")
        _OFFLINE_HANDLERS[role] = handler


def offline_handlers() -> dict[str, OfflineHandler]:
    with _OFFLINE_LOCK:
        return dict(_OFFLINE_HANDLERS)


class OfflineBackend:
    """Deterministic, network-free backend that dispatches to per-role handlers."""

    name = "offline"
    networked = False

    def __init__(self, *, handlers: dict[str, OfflineHandler] | None = None) -> None:
        self._handlers = dict(handlers or {})

    def complete(self, request: CompletionRequest, *, role: str, timeout_s: float) -> RawCompletion:
        handler = self._handlers.get(role) or offline_handlers().get(role)
        if handler is None:
            known = sorted(set(self._handlers) | set(offline_handlers()))
            raise TransportError(
                "offline_missing",
                f"no offline implementation for role {role!r}; registered: {known}",
                retryable=False,
            )
        try:
            out = handler(request, role)
        except TransportError:
            raise
        except Exception as e:  # noqa: BLE001 - a broken handler is a failure value, not a crash
            raise TransportError("error", f"offline {role} handler: {e!r}", retryable=False) from e
        if isinstance(out, RawCompletion):
            return out
        text = out if isinstance(out, str) else json.dumps(out, sort_keys=True)
        return RawCompletion(text=text, model=request.model or f"offline-{role}")


BACKENDS = registries.LLM_BACKENDS  # name -> backend factory (coda.registries)


def register_backend(name: str, factory: Callable[..., Backend]) -> None:
    """Add a backend kind (e.g. a provider with its own SDK); an error if the name is taken."""
    BACKENDS.register(name, factory)


def get_backend(name: str, **kwargs: Any) -> Backend:
    """Build a backend by name; unknown names fail with the valid ones."""
    if name not in BACKENDS:
        raise ValueError(f"unknown LLM backend {name!r}; valid: {sorted(BACKENDS)}")
    return BACKENDS[name](**kwargs)

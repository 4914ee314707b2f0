"""One client for the three LLM roles: engine G, critic C and the Text2potential compiler R_hone.

The client owns everything that must behave the same whichever provider answers: record/replay
in the run folder, retries with exponential backoff and jitter, bounded concurrency, JSON-schema
validation with one repair round-trip, and token/cost accounting per role and round. Provider
failures come back as ``LLMResponse(ok=False, failure=...)`` and are logged; the only exceptions
are programming errors (unknown role, unserialisable messages) and ``ReplayMissError`` in
``replay`` mode, which signals that a rerun no longer matches its record.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from coda.llm.accounting import DEFAULT_PRICES, CostLedger, Price, estimate_cost
from coda.llm.backends import Backend, get_backend
from coda.llm.jsonschema import parse_json_text, validate_json
from coda.llm.record import RECORD_MODES, RecordStore, ReplayMissError, request_hash
from coda.llm.types import (
    ROLES,
    CompletionRequest,
    LLMFailure,
    LLMResponse,
    RawCompletion,
    ToolCall,
    TransportError,
    Usage,
)

__all__ = ["DEFAULT_CRITIC_MODEL", "ChatCall", "LLMClient", "LLMConfig", "RoleConfig"]

DEFAULT_CRITIC_MODEL = "gpt-5.5"  # the method's default critic when a networked backend is used


@dataclass(frozen=True)
class RoleConfig:
    """Which backend and model serve a role, and how to call them.

    ``backend_kwargs`` go to the backend factory (e.g. ``base_url``, ``api_key_env``);
    ``extra`` goes into the request body (provider-specific fields).
    """

    backend: str = "offline"
    model: str = ""
    backend_kwargs: Mapping[str, Any] = field(default_factory=dict)
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    timeout_s: float = 60.0
    extra: Mapping[str, Any] = field(default_factory=dict)


def _default_roles() -> dict[str, RoleConfig]:
    return {r: RoleConfig() for r in ROLES}


@dataclass(frozen=True)
class LLMConfig:
    """Client configuration (plain keyword args; config files map onto it).

    ``record_mode``: off | record | replay | reuse; ``None`` records networked backends and
    leaves offline ones unrecorded. ``prices``: model -> USD per million tokens.
    """

    roles: Mapping[str, RoleConfig] = field(default_factory=_default_roles)
    record_mode: str | None = None
    max_retries: int = 4
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    max_concurrency: int = 4
    repair: bool = True
    prices: Mapping[str, Price | Mapping[str, float]] = field(
        default_factory=lambda: dict(DEFAULT_PRICES)
    )


@dataclass(frozen=True)
class ChatCall:
    """Arguments of one ``LLMClient.chat`` call, for ``chat_many``."""

    role: str
    messages: Sequence[Mapping[str, Any]]
    schema: Mapping[str, Any] | None = None
    schema_name: str = "output"
    tools: Sequence[Mapping[str, Any]] | None = None
    tool_choice: Any = None
    round: int | None = None


@dataclass
class _Outcome:
    raw: RawCompletion | None
    failure: LLMFailure | None
    attempts: int
    replayed: bool
    key: str
    cost: float | None


@dataclass
class _Reply:
    """A chat call's result so far: the latest raw reply and its parse, summed over round-trips."""

    raw: RawCompletion | None
    failure: LLMFailure | None
    usage: Usage
    attempts: int
    cost: float | None
    replayed: bool
    parsed: Any = None
    repaired: bool = False

    @classmethod
    def first(cls, out: _Outcome) -> _Reply:
        return cls(out.raw, out.failure, _usage(out.raw), out.attempts, out.cost, out.replayed)

    def add(self, out: _Outcome) -> None:
        """Count a repair round-trip: attempts, tokens, cost (unknown if either is), replay."""
        self.attempts += out.attempts
        self.usage = self.usage + _usage(out.raw)
        self.cost = None if self.cost is None or out.cost is None else self.cost + out.cost
        self.replayed = self.replayed and out.replayed


class LLMClient:
    """Chat with the engine, critic and compiler roles through configured backends.

    Args:
      config: roles, record mode, retry/concurrency policy and price table.
      run_dir: run folder; records go to ``run_dir/llm/records``, the usage summary to
        ``run_dir/llm/usage.json`` and failures to ``run_dir/llm/failures.jsonl``.
      backends: optional prebuilt backends by role (tests, custom providers).
      sleep: injectable sleep for backoff (tests pass a recorder).
      seed: seed of the jitter RNG, so backoff schedules are reproducible.
    """

    def __init__(
        self,
        config: LLMConfig | None = None,
        *,
        run_dir: str | os.PathLike[str] | None = None,
        backends: Mapping[str, Backend] | None = None,
        ledger: CostLedger | None = None,
        sleep: Callable[[float], None] = time.sleep,
        seed: int = 0,
    ) -> None:
        self.config = config or LLMConfig()
        if self.config.record_mode is not None and self.config.record_mode not in RECORD_MODES:
            raise ValueError(
                f"unknown record_mode {self.config.record_mode!r}; valid: {list(RECORD_MODES)}"
            )
        if self.config.max_concurrency < 1 or self.config.max_retries < 0:
            raise ValueError("max_concurrency must be >= 1 and max_retries >= 0")
        self.run_dir = None if run_dir is None else os.fspath(run_dir)
        self.ledger = ledger or CostLedger()
        self._sleep = sleep
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._sem = threading.BoundedSemaphore(self.config.max_concurrency)
        self._round: int | None = None
        self._backends: dict[str, Backend] = {}
        self._modes: dict[str, str] = {}
        llm_dir = None if self.run_dir is None else os.path.join(self.run_dir, "llm")
        self.store = None if llm_dir is None else RecordStore(os.path.join(llm_dir, "records"))
        for role, rc in self.config.roles.items():
            backend = (backends or {}).get(role) or get_backend(
                rc.backend, **dict(rc.backend_kwargs)
            )
            self._backends[role] = backend
            mode = self.config.record_mode
            if mode is None:
                mode = "record" if backend.networked and self.store is not None else "off"
            if mode != "off" and self.store is None:
                raise ValueError(f"record_mode {mode!r} needs a run_dir to keep the records in")
            self._modes[role] = mode

    # ---------------------------------------------------------------------------------- public
    def set_round(self, round_idx: int | None) -> None:
        """Round used for accounting when a call does not name one."""
        self._round = None if round_idx is None else int(round_idx)

    def record_mode(self, role: str) -> str:
        self._role(role)
        return self._modes[role]

    def chat(
        self,
        role: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "output",
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: Any = None,
        round: int | None = None,
    ) -> LLMResponse:
        """Send messages (text and PNG images) for a role; return parsed output or a failure.

        With ``schema`` the reply is requested as ``json_schema`` structured output, parsed and
        validated; an invalid reply gets one repair round-trip quoting the errors.
        """
        rc = self._role(role)
        rnd = self._round if round is None else int(round)
        msgs = _serialisable_messages(messages, schema, tools)
        response_format = _response_format(schema, schema_name)

        def request(m: list[dict[str, Any]]) -> CompletionRequest:
            return self._request(rc, m, response_format, tools, tool_choice)

        t0 = time.monotonic()
        req = request(msgs)
        out = self._call(role, rnd, req)
        reply = _Reply.first(out)
        if out.raw is not None and schema is not None:
            self._parse_reply(reply, role, rnd, req, msgs, schema, request)
        raw, failure = reply.raw, reply.failure
        tool_calls = tuple(_tool_calls(raw)) if raw is not None else ()
        return LLMResponse(
            role=role,
            backend=self._backends[role].name,
            model=req.model,
            ok=failure is None,
            text="" if raw is None else raw.text,
            parsed=reply.parsed,
            tool_calls=tool_calls,
            usage=reply.usage,
            cost_usd=reply.cost,
            attempts=reply.attempts,
            replayed=reply.replayed,
            repaired=reply.repaired,
            request_hash=out.key,
            failure=failure,
            latency_s=time.monotonic() - t0,
            round=rnd,
        )

    def _parse_reply(
        self,
        reply: _Reply,
        role: str,
        rnd: int | None,
        req: CompletionRequest,
        msgs: list[dict[str, Any]],
        schema: Mapping[str, Any],
        request: Callable[[list[dict[str, Any]]], CompletionRequest],
    ) -> None:
        """Parse and validate ``reply`` against ``schema``, with one repair round-trip quoting
        the errors (when the config allows it); a reply still invalid becomes a ``schema``
        failure, logged against the first request."""
        assert reply.raw is not None
        reply.parsed, errors = _parse_and_validate(reply.raw.text, schema)
        if errors and self.config.repair:
            repair_msgs = msgs + [
                {"role": "assistant", "content": reply.raw.text},
                {"role": "user", "content": _repair_prompt(errors)},
            ]
            out2 = self._call(role, rnd, request(repair_msgs))
            reply.add(out2)
            if out2.raw is None:
                reply.failure, reply.raw = out2.failure, None
            else:
                reply.raw = out2.raw
                reply.parsed, errors = _parse_and_validate(out2.raw.text, schema)
                reply.repaired = not errors
        if errors:
            reply.failure = LLMFailure(
                "schema",
                "reply does not satisfy the schema: " + "; ".join(errors[:5]),
                attempts=reply.attempts,
            )
            reply.parsed = None
            self._log_failure(role, rnd, req, reply.failure)

    def chat_many(
        self, calls: Sequence[ChatCall], *, max_concurrency: int | None = None
    ) -> list[LLMResponse]:
        """Run calls in parallel (at most ``max_concurrency`` in flight); results keep order."""
        n = min(max_concurrency or self.config.max_concurrency, max(len(calls), 1))
        with ThreadPoolExecutor(max_workers=n) as pool:
            futures = [
                pool.submit(
                    self.chat,
                    c.role,
                    c.messages,
                    schema=c.schema,
                    schema_name=c.schema_name,
                    tools=c.tools,
                    tool_choice=c.tool_choice,
                    round=c.round,
                )
                for c in calls
            ]
            return [f.result() for f in futures]

    def usage_summary(self) -> dict[str, Any]:
        return self.ledger.summary()

    def save_usage(self) -> str | None:
        """Write ``run_dir/llm/usage.json``; return the Markdown table for the run report."""
        if self.run_dir is not None:
            d = os.path.join(self.run_dir, "llm")
            os.makedirs(d, exist_ok=True)
            self.ledger.save(os.path.join(d, "usage.json"))
        return self.ledger.to_markdown()

    # -------------------------------------------------------------------------------- internals
    def _role(self, role: str) -> RoleConfig:
        if role not in self.config.roles:
            raise ValueError(f"unknown LLM role {role!r}; configured: {sorted(self.config.roles)}")
        return self.config.roles[role]

    @staticmethod
    def _request(
        rc: RoleConfig,
        msgs: list[dict[str, Any]],
        response_format: dict[str, Any] | None,
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: Any,
    ) -> CompletionRequest:
        return CompletionRequest(
            model=rc.model,
            messages=msgs,
            response_format=response_format,
            tools=None if tools is None else [dict(t) for t in tools],
            tool_choice=tool_choice,
            temperature=rc.temperature,
            max_tokens=rc.max_tokens,
            seed=rc.seed,
            extra=dict(rc.extra),
        )

    def _call(self, role: str, rnd: int | None, req: CompletionRequest) -> _Outcome:
        backend = self._backends[role]
        mode = self._modes[role]
        key = request_hash(backend.name, req)
        if mode in ("replay", "reuse"):
            assert self.store is not None
            entry = self.store.get(key)
            if entry is not None:
                raw = (
                    None
                    if entry.get("response") is None
                    else RawCompletion.from_json(entry["response"])
                )
                failure = None if entry.get("failure") is None else LLMFailure(**entry["failure"])
                self.ledger.add(
                    role,
                    rnd,
                    prompt_tokens=0 if raw is None else raw.prompt_tokens,
                    completion_tokens=0 if raw is None else raw.completion_tokens,
                    cost_usd=0.0,
                    replayed=True,
                    failure_kind=None if failure is None else failure.kind,
                )
                return _Outcome(raw, failure, int(entry.get("attempts", 1)), True, key, 0.0)
            if mode == "replay":
                raise ReplayMissError(
                    f"replay: no record of this {role} request (hash {key[:16]}) under "
                    f"{self.store.root}; the rerun diverged from the recorded run"
                )
        raw, failure, attempts = self._with_retries(backend, req, role)
        if mode in ("record", "reuse"):
            assert self.store is not None
            self.store.put(
                key,
                {
                    "backend": backend.name,
                    "role": role,
                    "request": req.to_json(),
                    "response": None if raw is None else raw.to_json(),
                    "failure": None if failure is None else asdict(failure),
                    "attempts": attempts,
                },
            )
        cost: float | None = 0.0  # offline backends are free
        if raw is not None and backend.networked:
            cost = estimate_cost(
                req.model, raw.prompt_tokens, raw.completion_tokens, self.config.prices
            )
        self.ledger.add(
            role,
            rnd,
            prompt_tokens=0 if raw is None else raw.prompt_tokens,
            completion_tokens=0 if raw is None else raw.completion_tokens,
            cost_usd=0.0 if raw is None else cost,
            failure_kind=None if failure is None else failure.kind,
        )
        if failure is not None:
            self._log_failure(role, rnd, req, failure)
        return _Outcome(raw, failure, attempts, False, key, 0.0 if raw is None else cost)

    def _backoff(self, attempt: int, retry_after_s: float | None) -> float:
        cap = self.config.backoff_max_s
        d = min(cap, self.config.backoff_base_s * (2 ** (attempt - 1)))
        with self._rng_lock:
            delay = d / 2 + self._rng.uniform(0.0, d / 2)  # "equal jitter": spread, never zero
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, cap))
        return delay

    def _with_retries(
        self, backend: Backend, req: CompletionRequest, role: str
    ) -> tuple[RawCompletion | None, LLMFailure | None, int]:
        timeout = self.config.roles[role].timeout_s
        last: TransportError | None = None
        attempt = 0
        for attempt in range(1, self.config.max_retries + 2):
            try:
                with self._sem:
                    return backend.complete(req, role=role, timeout_s=timeout), None, attempt
            except TransportError as e:
                last = e
            except Exception as e:  # noqa: BLE001 - any backend bug becomes a failure value
                last = TransportError("error", f"{type(e).__name__}: {e}", retryable=False)
            if not last.retryable or attempt > self.config.max_retries:
                break
            self._sleep(self._backoff(attempt, last.retry_after_s))
        assert last is not None
        return None, LLMFailure(last.kind, last.message, last.status, attempt), attempt

    def _log_failure(
        self, role: str, rnd: int | None, req: CompletionRequest, failure: LLMFailure
    ) -> None:
        if self.run_dir is None:
            return
        d = os.path.join(self.run_dir, "llm")
        os.makedirs(d, exist_ok=True)
        rec = {
            "time": time.time(),
            "role": role,
            "round": rnd,
            "model": req.model,
            "failure": asdict(failure),
        }
        with self._log_lock, open(os.path.join(d, "failures.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")


def _usage(raw: RawCompletion | None) -> Usage:
    return Usage() if raw is None else Usage(raw.prompt_tokens, raw.completion_tokens)


def _serialisable_messages(
    messages: Sequence[Mapping[str, Any]],
    schema: Mapping[str, Any] | None,
    tools: Sequence[Mapping[str, Any]] | None,
) -> list[dict[str, Any]]:
    """The messages as plain dicts; a ``ValueError`` unless they, the schema and the tools are
    JSON-serialisable."""
    msgs = [dict(m) for m in messages]
    try:
        json.dumps(msgs)
        json.dumps(schema)
        json.dumps(tools)
    except (TypeError, ValueError) as e:
        raise ValueError(f"messages/schema/tools must be JSON-serialisable: {e}") from None
    return msgs


def _response_format(schema: Mapping[str, Any] | None, schema_name: str) -> dict[str, Any] | None:
    """``json_schema`` structured output for ``schema`` (None: free text)."""
    if schema is None:
        return None
    return {
        "type": "json_schema",
        "json_schema": {"name": schema_name, "schema": dict(schema), "strict": True},
    }


def _parse_and_validate(text: str, schema: Mapping[str, Any]) -> tuple[Any, list[str]]:
    try:
        value = parse_json_text(text)
    except json.JSONDecodeError as e:
        return None, [f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"]
    return value, validate_json(value, dict(schema))


def _repair_prompt(errors: list[str]) -> str:
    listed = "\n".join(f"- {e}" for e in errors[:10])
    return (
        "Your previous reply could not be used:\n"
        f"{listed}\n"
        "Reply again with only the corrected JSON value that satisfies the schema."
    )


def _tool_calls(raw: RawCompletion) -> list[ToolCall]:
    out = []
    for tc in raw.tool_calls:
        args_text = tc.get("arguments") or ""
        try:
            args = json.loads(args_text) if args_text else {}
            err = None if isinstance(args, dict) else "arguments are not a JSON object"
            if err:
                args = None
        except json.JSONDecodeError as e:
            args, err = None, f"arguments are not valid JSON: {e.msg}"
        out.append(ToolCall(str(tc.get("id", "")), str(tc.get("name", "")), args, args_text, err))
    return out

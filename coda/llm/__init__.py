"""LLM clients for the engine, critic and compiler roles (see ``coda.llm.client``)."""

from coda.llm.accounting import DEFAULT_PRICES, CostLedger, Price, estimate_cost
from coda.llm.backends import (
    BACKENDS,
    OfflineBackend,
    OpenAIBackend,
    OpenAICompatibleBackend,
    get_backend,
    offline_handlers,
    register_backend,
    register_offline_handler,
)
from coda.llm.client import DEFAULT_CRITIC_MODEL, ChatCall, LLMClient, LLMConfig, RoleConfig
from coda.llm.jsonschema import parse_json_text, validate_json
from coda.llm.record import RECORD_MODES, RecordStore, ReplayMissError, request_hash
from coda.llm.replies import RecordingBackend, ReplayBackend, ReplyFile, reply_key
from coda.llm.types import (
    ROLES,
    CompletionRequest,
    LLMFailure,
    LLMResponse,
    RawCompletion,
    ToolCall,
    TransportError,
    Usage,
    image_part,
    message,
    png_bytes,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_CRITIC_MODEL",
    "DEFAULT_PRICES",
    "RECORD_MODES",
    "ROLES",
    "ChatCall",
    "CompletionRequest",
    "CostLedger",
    "LLMClient",
    "LLMConfig",
    "LLMFailure",
    "LLMResponse",
    "OfflineBackend",
    "OpenAIBackend",
    "OpenAICompatibleBackend",
    "Price",
    "RawCompletion",
    "RecordStore",
    "RecordingBackend",
    "ReplayBackend",
    "ReplayMissError",
    "ReplyFile",
    "RoleConfig",
    "ToolCall",
    "TransportError",
    "Usage",
    "estimate_cost",
    "get_backend",
    "image_part",
    "message",
    "offline_handlers",
    "parse_json_text",
    "png_bytes",
    "register_backend",
    "register_offline_handler",
    "reply_key",
    "request_hash",
    "validate_json",
]

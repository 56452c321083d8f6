"""idempotent_tool: a client for the idempotent-tool service.

``Client`` (sync) and ``AsyncClient`` (asyncio) call tools through the
service with one key per logical call and safe retries (``retry``); answers
are typed (``models``), refusals are typed errors (``errors``). ``keys``
holds the key rule the adapters (``idempotent_tool.adapters``) derive keys by,
on the service's canonical JSON (``canonical``).
"""

from ._version import __version__
from .aio import AsyncClient
from .canonical import canonical, fingerprint
from .client import Client
from .errors import (
    ApiError,
    AuthenticationError,
    BadRequestError,
    CallSettledError,
    ConflictError,
    DuplicateIntentError,
    IdempotencyConflictError,
    IdempotentToolError,
    NotFoundError,
    PermissionDeniedError,
    RetryExhaustedError,
    UnavailableError,
)
from .keys import new_key, tool_key
from .models import CallPage, ToolCall, ToolError
from .retry import RetryPolicy

__all__ = [
    "__version__",
    "AsyncClient",
    "Client",
    "RetryPolicy",
    "ToolCall",
    "ToolError",
    "CallPage",
    "canonical",
    "fingerprint",
    "new_key",
    "tool_key",
    "IdempotentToolError",
    "ApiError",
    "BadRequestError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "IdempotencyConflictError",
    "DuplicateIntentError",
    "CallSettledError",
    "UnavailableError",
    "RetryExhaustedError",
]

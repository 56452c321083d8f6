"""Typed errors: one class per answer a caller handles differently.

Every refusal the service answers is an ``ApiError`` carrying its HTTP status,
its stable ``code`` (README's error-code table) and, for a ``409``, the
``call_id`` of the call that owns the key. None of these is retried: they
would only repeat themselves. ``RetryExhaustedError`` is what remains when
every retry of a retryable failure failed; it carries the key, so the caller
can persist it and retry the same logical call later.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .models import ToolCall

__all__ = [
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


class IdempotentToolError(Exception):
    """Base class of every error this package raises."""


class ApiError(IdempotentToolError):
    """The service answered with an error body ``{"error": {"code", "message"}}``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        call_id: str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.call_id = call_id
        self.request_id = request_id
        self.retry_after = retry_after
        self.body = body


class BadRequestError(ApiError):
    """``400``: the request is wrong (``bad_request``, ``missing_idempotency_key``)."""


class AuthenticationError(ApiError):
    """``401 unauthorized``: no token, or one that matches no tenant."""


class PermissionDeniedError(ApiError):
    """``403``: ``forbidden``, ``host_not_allowed`` or ``origin_not_allowed``."""


class NotFoundError(ApiError):
    """``404 not_found``: no such call or key in this tenant."""


class ConflictError(ApiError):
    """``409``: the key or the intent already belongs to another call (``call_id``)."""


class IdempotencyConflictError(ConflictError):
    """``409 idempotency_conflict``: the key was used with a different request."""


class DuplicateIntentError(ConflictError):
    """``409 duplicate_intent``: a live call of the tool has the same business key."""


class CallSettledError(ConflictError):
    """``409 call_settled``: a cancel came after the call had settled; ``call`` is it."""

    call: "ToolCall | None" = None


class UnavailableError(ApiError):
    """``503`` (``unavailable``, ``overloaded``), or another retryable status, still
    answered when the retry budget ran out."""


class RetryExhaustedError(IdempotentToolError):
    """No attempt got an answer that settles the call within the retry budget, and
    a look-up by key found nothing. ``key`` is the key every attempt sent: retry
    the logical call later with it, never with a new one."""

    def __init__(self, key: str | None, attempts: int, last_error: BaseException) -> None:
        super().__init__(
            f"no answer after {attempts} attempt(s) (key {key!r}): {last_error}"
        )
        self.key = key
        self.attempts = attempts
        self.last_error = last_error


_BY_CODE: dict[str, type[ApiError]] = {
    "idempotency_conflict": IdempotencyConflictError,
    "duplicate_intent": DuplicateIntentError,
    "call_settled": CallSettledError,
    "unavailable": UnavailableError,
    "overloaded": UnavailableError,
}

_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
}


def error_class(status: int, code: str) -> type[ApiError]:
    """The class an answer with ``status`` and ``code`` is raised as."""
    return _BY_CODE.get(code) or _BY_STATUS.get(status) or (
        UnavailableError if status >= 500 or status in (408, 429) else ApiError
    )

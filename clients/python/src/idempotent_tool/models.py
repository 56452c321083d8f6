"""What the service answers, as typed values: a call, its tool error, a page."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["ToolCall", "ToolError", "CallPage", "TERMINAL_STATUSES"]

#: Statuses that never change again.
TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(frozen=True)
class ToolError:
    """Why a call failed or was cancelled (``code`` from README's tool error codes)."""

    code: str
    message: str
    retryable: bool

    @classmethod
    def from_json(cls, body: Any) -> "ToolError | None":
        if not isinstance(body, Mapping):
            return None
        return cls(
            code=str(body.get("code", "")),
            message=str(body.get("message", "")),
            retryable=bool(body.get("retryable", False)),
        )


@dataclass(frozen=True)
class ToolCall:
    """One call as the service answered it.

    ``replayed`` is true when the answer was the call an earlier request with the
    same key had made (``Idempotent-Replayed: true``). ``args`` and ``result`` are
    ``None`` in list pages (the call's own URL has them).
    """

    call_id: str
    key: str
    tool: str
    status: str
    attempt: int
    args: dict[str, Any] | None = None
    result: Any = None
    error: ToolError | None = None
    effect_id: str | None = None
    replayed: bool = False
    client_id: str | None = None
    seq: int | None = None
    created_at: float | None = None
    updated_at: float | None = None
    expires_at: float | None = None
    next_attempt_at: float | None = None
    cancel_requested_at: float | None = None
    tenant: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_terminal(self) -> bool:
        """Whether the call has settled (succeeded, failed or cancelled)."""
        return self.status in TERMINAL_STATUSES

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    @classmethod
    def from_json(cls, body: Mapping[str, Any], *, replayed: bool = False) -> "ToolCall":
        return cls(
            call_id=str(body["call_id"]),
            key=str(body.get("idem_key", "")),
            tool=str(body.get("tool", "")),
            status=str(body.get("status", "")),
            attempt=int(body.get("attempt") or 0),
            args=body.get("args"),
            result=body.get("result"),
            error=ToolError.from_json(body.get("error")),
            effect_id=body.get("effect_id"),
            replayed=replayed,
            client_id=body.get("client_id"),
            seq=body.get("seq"),
            created_at=body.get("created_at"),
            updated_at=body.get("updated_at"),
            expires_at=body.get("expires_at"),
            next_attempt_at=body.get("next_attempt_at"),
            cancel_requested_at=body.get("cancel_requested_at"),
            tenant=body.get("tenant"),
            raw=dict(body),
        )


@dataclass(frozen=True)
class CallPage:
    """One page of ``GET /v1/tool-calls``: newest first; ``next`` is ``None`` on the last."""

    calls: list[ToolCall]
    next: str | None

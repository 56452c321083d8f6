"""The wire, without I/O: what each request sends and what each answer means.

Both clients build their requests here and read every answer through
``read_call`` / ``raise_for_answer``, so the sync and the async client cannot
drift apart; they only differ in how they send and how they sleep.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping
from urllib.parse import quote

import httpx

from ._version import __version__
from .errors import ApiError, CallSettledError, error_class
from .models import CallPage, ToolCall
from .retry import parse_retry_after, retryable_status

__all__ = ["Request", "user_agent", "tool_call_request", "read_call", "read_page"]

#: The longest ``?wait=`` the service holds an answer for.
MAX_SERVER_WAIT = 30.0

CALLS_PATH = "/v1/tool-calls"


def user_agent() -> str:
    """``idempotent-tool-python/<version>`` with the Python and httpx versions."""
    return (
        f"idempotent-tool-python/{__version__} "
        f"(python {platform.python_version()}; httpx {httpx.__version__})"
    )


@dataclass
class Request:
    """One HTTP request to the service; ``hold`` is the ``?wait=`` it asks for."""

    method: str
    path: str
    params: list[tuple[str, str]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    hold: float = 0.0


def wait_value(seconds: float) -> str:
    """``?wait=`` as the service reads it: 0 to 30 seconds."""
    seconds = max(0.0, min(MAX_SERVER_WAIT, seconds))
    text = f"{seconds:.3f}".rstrip("0").rstrip(".")
    return text or "0"


def tool_call_request(
    tool: str,
    args: Mapping[str, Any] | None,
    key: str,
    *,
    hold: float | None,
    client_id: str | None,
    seq: int | None,
) -> Request:
    body: dict[str, Any] = {"tool": tool, "args": dict(args or {})}
    if client_id is not None:
        body["client_id"] = client_id
    if seq is not None:
        body["seq"] = seq
    params = [] if hold is None else [("wait", wait_value(hold))]
    return Request(
        "POST",
        CALLS_PATH,
        params,
        {"Idempotency-Key": key, "Content-Type": "application/json"},
        json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode(),
        hold=min(hold or 0.0, MAX_SERVER_WAIT),
    )


def get_request(call_id: str, hold: float | None) -> Request:
    params = [] if hold is None else [("wait", wait_value(hold))]
    return Request("GET", f"{CALLS_PATH}/{segment(call_id)}", params, hold=min(hold or 0, 30))


def by_key_request(key: str, hold: float | None) -> Request:
    params = [] if hold is None else [("wait", wait_value(hold))]
    return Request("GET", f"{CALLS_PATH}/by-key/{segment(key)}", params, hold=min(hold or 0, 30))


def cancel_request(call_id: str, reason: str | None, hold: float | None) -> Request:
    params = [] if hold is None else [("wait", wait_value(hold))]
    body = json.dumps({"reason": reason}).encode() if reason is not None else None
    headers = {"Content-Type": "application/json"} if body is not None else {}
    return Request(
        "POST",
        f"{CALLS_PATH}/{segment(call_id)}/cancel",
        params,
        headers,
        body,
        hold=min(hold or 2.0, MAX_SERVER_WAIT),
    )


def list_request(filters: Mapping[str, Any]) -> Request:
    params: list[tuple[str, str]] = []
    for name, value in filters.items():
        if value is None:
            continue
        if name == "status" and not isinstance(value, str):
            params.extend(("status", str(item)) for item in _iterable(value))
        elif name == "business_key" and not isinstance(value, str):
            params.append((name, json.dumps(list(value), ensure_ascii=False, separators=(",", ":"))))
        else:
            params.append((name, str(value)))
    return Request("GET", CALLS_PATH, params)


def _iterable(value: Any) -> Iterable[Any]:
    return value if isinstance(value, Iterable) else [value]


def segment(text: str) -> str:
    """``text`` as one path segment, percent-encoded."""
    return quote(text, safe="")


def raise_for_answer(response: httpx.Response) -> None:
    """Raise the typed error of a non-2xx answer."""
    if response.status_code < 300:
        return
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    code = str(error.get("code") or f"http_{response.status_code}")
    cls = error_class(response.status_code, code)
    exc: ApiError = cls(
        response.status_code,
        code,
        str(error.get("message") or response.reason_phrase),
        call_id=error.get("call_id"),
        request_id=response.headers.get("x-request-id"),
        retry_after=parse_retry_after(response.headers.get("retry-after")),
        body=body,
    )
    if isinstance(exc, CallSettledError) and isinstance(body, dict) and isinstance(body.get("call"), dict):
        exc.call = ToolCall.from_json(body["call"])
    raise exc


def is_retryable(response: httpx.Response) -> bool:
    return response.status_code >= 300 and retryable_status(response.status_code)


def read_call(response: httpx.Response) -> ToolCall:
    """The call a ``200``/``202`` carries (raises the typed error otherwise)."""
    raise_for_answer(response)
    replayed = response.headers.get("idempotent-replayed", "").lower() == "true"
    return ToolCall.from_json(response.json(), replayed=replayed)


def read_page(response: httpx.Response) -> CallPage:
    raise_for_answer(response)
    body = response.json()
    return CallPage([ToolCall.from_json(c) for c in body.get("calls", [])], body.get("next"))


def read_json(response: httpx.Response) -> Any:
    raise_for_answer(response)
    return response.json()


def retryable_transport_error(error: Exception) -> bool:
    """A transport failure worth retrying: not a bad URL or an unknown scheme."""
    return isinstance(error, httpx.TransportError) and not isinstance(
        error, httpx.UnsupportedProtocol
    )

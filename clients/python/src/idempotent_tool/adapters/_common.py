"""What both Python adapters share: running a call with either client, and
the text the model reads back."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Mapping, Union

from ..aio import AsyncClient
from ..client import Client
from ..errors import ApiError
from ..keys import tool_key
from ..models import ToolCall

AnyClient = Union[Client, AsyncClient]

__all__ = ["AnyClient", "call_async", "call_sync", "answer_text", "scope_from"]


async def call_async(
    client: AnyClient, tool: str, args: Mapping[str, Any], scope: str, occurrence: int, wait: float
) -> str:
    """The service call of one tool call, awaited; the model's answer text."""
    key = tool_key(scope, tool, args, occurrence)
    try:
        if isinstance(client, AsyncClient):
            call = await client.call(tool, args, key=key, wait=wait)
        else:
            call = await asyncio.to_thread(client.call, tool, args, key=key, wait=wait)
    except ApiError as error:
        return error_text(error)
    return answer_text(call)


def call_sync(
    client: AnyClient, tool: str, args: Mapping[str, Any], scope: str, occurrence: int, wait: float
) -> str:
    """The service call of one tool call, from synchronous code."""
    if not isinstance(client, Client):
        raise TypeError("a synchronous run needs an idempotent_tool.Client, not an AsyncClient")
    key = tool_key(scope, tool, args, occurrence)
    try:
        return answer_text(client.call(tool, args, key=key, wait=wait))
    except ApiError as error:
        return error_text(error)


def answer_text(call: ToolCall) -> str:
    """What the model reads: the outcome, or the call still running with its id."""
    answer: dict[str, Any] = {"status": call.status, "call_id": call.call_id}
    if call.status == "succeeded":
        answer["result"] = call.result
    elif call.error is not None:
        answer["error"] = {"code": call.error.code, "message": call.error.message}
    return json.dumps(answer, ensure_ascii=False)


def error_text(error: ApiError) -> str:
    return json.dumps({"error": {"code": error.code, "message": error.message}}, ensure_ascii=False)


def scope_from(source: Any, names: tuple[str, ...]) -> str | None:
    """The first of ``names`` that ``source`` holds as a key or an attribute."""
    for name in names:
        value = source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)
        if value:
            return str(value)
    return None

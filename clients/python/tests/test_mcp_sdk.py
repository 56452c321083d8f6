"""The service's ``POST /mcp`` under the official MCP Python SDK (``mcp``,
pinned in requirements-test.txt) as a real client would use it: the SDK's
streamable HTTP transport negotiates the revision it speaks, lists the
tools, and a ``tools/call`` re-sent with the same idempotency key in
``_meta`` is the same call with one effect, while a call without a key is
deduplicated by content (the tools' default ``keyless`` policy)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from service import Service

KEY_META = "dev.idempotent-tool/idempotency-key"


async def _session_run(url: str, steps: Callable[[ClientSession], Any]) -> Any:
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await steps(session)


def _run(service: Service, steps: Callable[[ClientSession], Any]) -> Any:
    return asyncio.run(_session_run(f"{service.base_url}/mcp", steps))


def test_the_official_sdk_lists_tools_and_a_keyed_retry_is_one_call(
    start_service: Callable[..., Service],
) -> None:
    service = start_service()

    async def steps(session: ClientSession) -> Any:
        tools = await session.list_tools()
        meta = {KEY_META: "py-sdk-1"}
        first = await session.call_tool("charge", {"amount": 7}, meta=meta)
        again = await session.call_tool("charge", {"amount": 7}, meta=meta)
        return tools, first, again

    tools, first, again = _run(service, steps)
    assert "charge" in {tool.name for tool in tools.tools}
    assert not first.is_error and not again.is_error
    assert first.structured_content["call_id"] == again.structured_content["call_id"]
    assert first.structured_content["result"] == again.structured_content["result"]
    assert len(service.calls_of("charge")) == 1
    assert service.effects() == 1


def test_the_official_sdk_without_a_key_is_deduplicated_by_content(
    start_service: Callable[..., Service],
) -> None:
    service = start_service()

    async def steps(session: ClientSession) -> Any:
        first = await session.call_tool("charge", {"amount": 3})
        again = await session.call_tool("charge", {"amount": 3})
        other = await session.call_tool("charge", {"amount": 4})
        return first, again, other

    first, again, other = _run(service, steps)
    assert first.structured_content["call_id"] == again.structured_content["call_id"]
    assert other.structured_content["call_id"] != first.structured_content["call_id"]
    assert len(service.calls_of("charge")) == 2
    assert service.effects() == 2


def test_the_official_sdk_sees_bad_arguments_as_an_error(
    start_service: Callable[..., Service],
) -> None:
    service = start_service()

    async def steps(session: ClientSession) -> Any:
        try:
            result = await session.call_tool("charge", {"amount": "seven"})
        except Exception as error:  # the SDK raises JSON-RPC errors
            return error
        return result

    outcome = _run(service, steps)
    refused = isinstance(outcome, Exception) or outcome.is_error
    assert refused, outcome
    assert service.calls_of("charge") == []
    assert service.effects() == 0

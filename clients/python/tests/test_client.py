"""The client's API against the real service: the typed call, get, by key,
list with its cursor, cancel, wait, typed errors, the token and user agent."""

from __future__ import annotations

import asyncio
from typing import Callable

import httpx
import pytest

import idempotent_tool
from idempotent_tool import (
    AsyncClient,
    BadRequestError,
    CallSettledError,
    Client,
    IdempotencyConflictError,
    NotFoundError,
    RetryExhaustedError,
    RetryPolicy,
)
from service import Service, auth_file


def test_a_call_is_typed_and_replayed_with_its_key(start_service: Callable[..., Service]) -> None:
    service = start_service()
    with Client(service.base_url) as client:
        first = client.call("charge", {"amount": 7}, wait=5)
        assert (first.status, first.attempt, first.replayed) == ("succeeded", 1, False)
        assert first.result == {"charged": 7, "effect_id": first.effect_id}
        assert first.effect_id and first.effect_id.startswith("eff_")
        again = client.call("charge", {"amount": 7.0}, key=first.key, wait=5)
        assert (again.call_id, again.replayed) == (first.call_id, True)
        assert client.get(first.call_id) == client.get_by_key(first.key)
        with pytest.raises(IdempotencyConflictError) as conflict:
            client.call("charge", {"amount": 8}, key=first.key)
        assert conflict.value.call_id == first.call_id and conflict.value.status == 409
    assert service.effects() == 1


def test_errors_are_typed_and_not_retried(start_service: Callable[..., Service]) -> None:
    service = start_service()
    with Client(service.base_url) as client:
        with pytest.raises(BadRequestError) as bad:
            client.call("charge", {"amount": -1})
        assert bad.value.code == "bad_request"
        with pytest.raises(NotFoundError):
            client.get("c_0000000000000000")
        failed = client.call("fail", {"retryable": False}, wait=5)
        assert failed.status == "failed" and failed.error and failed.error.code == "tool_failed"
        assert failed.error.retryable is False


def test_list_pages_follow_next_and_filters(start_service: Callable[..., Service]) -> None:
    service = start_service()
    with Client(service.base_url) as client:
        made = [client.call("charge", {"amount": n}, key=f"list-{n}", wait=5) for n in range(1, 6)]
        client.call("send_email", {"to": "a@example.com"}, key="other", wait=5)
        page = client.list(tool="charge", limit=2)
        assert len(page.calls) == 2 and page.next
        seen = [c.call_id for c in client.iter_calls(tool="charge", limit=2)]
        assert seen == [c.call_id for c in reversed(made)]
        assert [c.key for c in client.list(key_prefix="list-", status=["succeeded"]).calls][-1] == "list-1"
        assert client.list(effect_id=made[0].effect_id).calls[0].call_id == made[0].call_id


def test_cancel_and_wait(start_service: Callable[..., Service]) -> None:
    service = start_service()
    with Client(service.base_url) as client:
        running = client.call("sleep", {"seconds": 10}, wait=0)
        cancelled = client.cancel(running.call_id, reason="not needed")
        assert cancelled.status == "cancelled" and cancelled.error
        assert cancelled.error.message == "not needed"
        done = client.call("charge", {"amount": 3}, wait=0)
        assert client.wait(done.call_id, 5).status == "succeeded"
        with pytest.raises(CallSettledError) as settled:
            client.cancel(done.call_id)
        assert settled.value.call and settled.value.call.status == "succeeded"


def test_token_and_user_agent_are_sent(start_service: Callable[..., Service], tmp_path) -> None:
    seen: list[httpx.Request] = []
    service = start_service("--auth-file", str(auth_file(tmp_path, "acme", "acme-token")))
    http = httpx.Client(event_hooks={"request": [seen.append]})
    with http, Client(service.base_url, token="acme-token", http_client=http) as client:
        assert client.call("charge", {"amount": 1}, wait=5).status == "succeeded"
        assert client.stats()["effects"] == 1
    agent = seen[0].headers["user-agent"]
    assert agent.startswith(f"idempotent-tool-python/{idempotent_tool.__version__} ")
    assert seen[0].headers["authorization"] == "Bearer acme-token"


def test_no_server_exhausts_the_budget_with_the_key() -> None:
    policy = RetryPolicy(max_elapsed=0.5, initial_backoff=0.05)
    with Client("http://127.0.0.1:9", retry=policy) as client:
        with pytest.raises(RetryExhaustedError) as exhausted:
            client.call("charge", {"amount": 1}, key="kept-key")
    assert exhausted.value.key == "kept-key" and exhausted.value.attempts >= 2


def test_the_async_client_has_the_same_api(start_service: Callable[..., Service]) -> None:
    service = start_service()

    async def run() -> None:
        async with AsyncClient(service.base_url) as client:
            call = await client.call("charge", {"amount": 5}, wait=5)
            assert call.status == "succeeded"
            assert (await client.get_by_key(call.key)).call_id == call.call_id
            assert [c.call_id async for c in client.iter_calls(tool="charge")] == [call.call_id]
            with pytest.raises(IdempotencyConflictError):
                await client.call("charge", {"amount": 6}, key=call.key)

    asyncio.run(run())

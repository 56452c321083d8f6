"""The asynchronous client: ``AsyncClient``, the same API as ``Client`` awaited.

It mirrors ``client.py`` line for line (the requests and the reading of every
answer are shared in ``_protocol``); only sending and sleeping are awaited.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, AsyncIterator, Mapping

import httpx

from . import _protocol as wire
from .errors import NotFoundError, RetryExhaustedError
from .keys import new_key
from .models import CallPage, ToolCall
from .retry import RetryPolicy, parse_retry_after

__all__ = ["AsyncClient"]


class AsyncClient:
    """An asyncio client of one idempotent-tool service (see ``Client``).

    ``base_url`` may be ``https://``; ``verify`` is httpx's (``False``, a CA
    bundle path or an ``ssl.SSLContext``). ``token`` is sent as a bearer token
    (its tenant owns the keys). ``timeout`` bounds each request, plus whatever
    ``?wait=`` it asks the server to hold it. Pass ``http_client`` to bring your
    own ``httpx.AsyncClient`` (proxies, event hooks); it is then not closed here.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8081",
        *,
        token: str | None = None,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        user_agent: str | None = None,
        verify: Any = True,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._timeout = timeout
        self._headers = {"User-Agent": user_agent or wire.user_agent(), "Accept": "application/json"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(verify=verify)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def call(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        wait: float | None = None,
        client_id: str | None = None,
        seq: int | None = None,
    ) -> ToolCall:
        """Create-or-get the call of ``key`` (a new random key if none is given;
        it is ``ToolCall.key``). With ``wait``, wait up to that many seconds for
        the call to settle; the answer may still be in flight (``is_terminal``)."""
        key = key or new_key()
        deadline = None if wait is None else time.monotonic() + wait
        request = wire.tool_call_request(
            tool, args, key, hold=wait, client_id=client_id, seq=seq
        )
        try:
            call = wire.read_call(await self._send(request))
        except RetryExhaustedError as exhausted:
            call = await self._look_up(key, exhausted)
        if deadline is not None and not call.is_terminal:
            settled = await self._wait_until(call.call_id, deadline)
            call = dataclasses.replace(settled, replayed=call.replayed)
        return call

    async def get(self, call_id: str, *, wait: float | None = None) -> ToolCall:
        """The call; with ``wait``, held until it settles or the time is up."""
        return wire.read_call(await self._send(wire.get_request(call_id, wait)))

    async def get_by_key(self, key: str, *, wait: float | None = None) -> ToolCall:
        """The call of ``key`` (for a caller whose first answer was lost)."""
        return wire.read_call(await self._send(wire.by_key_request(key, wait)))

    async def wait(self, call_id: str, timeout: float) -> ToolCall:
        """Wait up to ``timeout`` seconds for the call to settle; the last state seen."""
        return await self._wait_until(call_id, time.monotonic() + timeout)

    async def cancel(
        self, call_id: str, *, reason: str | None = None, wait: float | None = None
    ) -> ToolCall:
        """Cancel the call; ``CallSettledError`` if it had already settled."""
        return wire.read_call(await self._send(wire.cancel_request(call_id, reason, wait)))

    async def list(
        self,
        *,
        status: str | list[str] | None = None,
        tool: str | None = None,
        key: str | None = None,
        key_prefix: str | None = None,
        business_key: str | list[Any] | None = None,
        effect_id: str | None = None,
        created_after: str | None = None,
        created_before: str | None = None,
        limit: int | None = None,
        next: str | None = None,
        tenant: str | None = None,
    ) -> CallPage:
        """One page of the caller's calls, newest first; pass ``page.next`` for the next."""
        filters = dict(locals())
        filters.pop("self")
        return wire.read_page(await self._send(wire.list_request(filters)))

    async def iter_calls(self, **filters: Any) -> AsyncIterator[ToolCall]:
        """Every call ``list`` finds, following ``next`` page after page."""
        cursor = None
        while True:
            page = await self.list(**filters, next=cursor)
            for call in page.calls:
                yield call
            if page.next is None:
                return
            cursor = page.next

    async def tools(self) -> list[dict[str, Any]]:
        """The tools the server runs, with their argument schemas."""
        body = wire.read_json(await self._send(wire.Request("GET", "/v1/tools")))
        return list(body.get("tools", []))

    async def stats(self) -> dict[str, Any]:
        """``GET /stats``: the caller's calls by status and attempt, effects."""
        return dict(wire.read_json(await self._send(wire.Request("GET", "/stats"))))

    async def _wait_until(self, call_id: str, deadline: float) -> ToolCall:
        call = await self.get(call_id)
        while not call.is_terminal:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            call = await self.get(call_id, wait=remaining)
        return call

    async def _look_up(self, key: str, exhausted: RetryExhaustedError) -> ToolCall:
        """After the last retry: the call may exist though no answer said so."""
        try:
            return await self.get_by_key(key)
        except (NotFoundError, RetryExhaustedError):
            raise RetryExhaustedError(key, exhausted.attempts, exhausted.last_error) from None

    async def _send(self, request: wire.Request) -> httpx.Response:
        """Send ``request``, retrying what may be retried, within the budget."""
        started = time.monotonic()
        attempts = 0
        while True:
            attempts += 1
            retry_after = None
            try:
                response = await self._http.request(
                    request.method,
                    self.base_url + request.path,
                    params=request.params,
                    headers={**self._headers, **request.headers},
                    content=request.body,
                    timeout=self._timeout + request.hold,
                )
            except Exception as error:  # noqa: BLE001 - sorted just below
                if not wire.retryable_transport_error(error):
                    raise
                failure: BaseException = error
            else:
                if not wire.is_retryable(response):
                    return response
                retry_after = parse_retry_after(response.headers.get("retry-after"))
                failure = _answer_error(response)
            pause = self.retry.pause(attempts - 1, retry_after)
            if not self.retry.allows(started, pause):
                raise RetryExhaustedError(request.headers.get("Idempotency-Key"), attempts, failure)
            await asyncio.sleep(pause)


def _answer_error(response: httpx.Response) -> BaseException:
    try:
        wire.raise_for_answer(response)
    except Exception as error:  # noqa: BLE001 - always the typed ApiError
        return error
    raise AssertionError("a retryable answer is an error")

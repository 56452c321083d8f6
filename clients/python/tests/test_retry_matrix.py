"""The shared retry matrix (clients/retry-matrix.json) through the Python
client, sync and async, against the real service: each fault is made for real
(the chaos proxy, a full queue, a stalled worker, a wrong token, SIGKILL and a
restart) and each case must end as the file says, as it must in the Rust and
TypeScript clients."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx
import pytest

from idempotent_tool import ApiError, AsyncClient, Client, RetryPolicy, ToolCall
from service import MATRIX, Service, auth_file, eventually

TOOL = MATRIX["tool"]
WAIT = float(MATRIX["wait_s"])
CASES = {case["name"]: case for case in MATRIX["cases"]}
RIGHT_TOKEN = "matrix-tenant-token"


@dataclass
class Wire:
    """What the client sent and got, seen through httpx's event hooks."""

    events: list[tuple[str, float, Any]] = field(default_factory=list)

    def on_request(self, request: httpx.Request) -> None:
        if request.method == "POST" and request.url.path == "/v1/tool-calls":
            self.events.append(("post", time.monotonic(), None))

    def on_response(self, response: httpx.Response) -> None:
        request = response.request
        if request.method == "POST" and request.url.path == "/v1/tool-calls":
            self.events.append(("answer", time.monotonic(), response))

    async def aon_request(self, request: httpx.Request) -> None:
        self.on_request(request)

    async def aon_response(self, response: httpx.Response) -> None:
        self.on_response(response)

    def posts(self) -> int:
        return sum(1 for kind, _, _ in self.events if kind == "post")


@dataclass
class Step:
    token: str | None
    args: dict[str, Any]
    key: str | None


def run_step(kind: str, base_url: str, step: Step, wire: Wire) -> ToolCall | ApiError:
    """One logical call with a fresh client of ``kind`` (``sync`` or ``async``)."""
    policy = RetryPolicy(max_elapsed=30.0)
    if kind == "sync":
        http = httpx.Client(event_hooks={"request": [wire.on_request], "response": [wire.on_response]})
        with http, Client(base_url, token=step.token, retry=policy, http_client=http) as client:
            try:
                return client.call(TOOL, step.args, key=step.key, wait=WAIT)
            except ApiError as error:
                return error

    async def run() -> ToolCall | ApiError:
        hooks = {"request": [wire.aon_request], "response": [wire.aon_response]}
        async with httpx.AsyncClient(event_hooks=hooks) as http:
            client = AsyncClient(base_url, token=step.token, retry=policy, http_client=http)
            try:
                return await client.call(TOOL, step.args, key=step.key, wait=WAIT)
            except ApiError as error:
                return error

    return asyncio.run(run())


def check_step(expect: dict[str, Any], outcome: ToolCall | ApiError, wire: Wire) -> None:
    low, high = expect["posts"]
    assert low <= wire.posts() <= high, f"posts {wire.posts()} not in {expect['posts']}"
    if expect["outcome"] == "error":
        assert isinstance(outcome, ApiError), f"expected {expect['error']}, got {outcome}"
        assert outcome.code == expect["error"] and outcome.status == expect["http"]
        return
    assert isinstance(outcome, ToolCall), f"expected a call, got {outcome!r}"
    assert outcome.status == expect["outcome"], outcome
    assert outcome.replayed is expect["replayed"], outcome
    assert outcome.attempt == expect["attempt"], outcome
    answers = [event[2] for event in wire.events if event[0] == "answer"]
    if "first_status" in expect:
        assert answers[0].status_code == expect["first_status"]
    if expect.get("honours_retry_after"):
        check_retry_after_honoured(wire)


def check_retry_after_honoured(wire: Wire) -> None:
    """Each POST after a refusal with ``Retry-After: N`` waited N seconds."""
    checked = 0
    for index, (kind, at, response) in enumerate(wire.events):
        if kind == "answer" and "retry-after" in response.headers and response.status_code == 503:
            later = [when for what, when, _ in wire.events[index + 1 :] if what == "post"]
            assert later, "a retry followed the refusal"
            assert later[0] - at >= float(response.headers["retry-after"]) - 0.01
            checked += 1
    assert checked >= 1, "a Retry-After was seen"


def fault_setup(case: dict[str, Any], start: Callable[..., Service], tmp: Any) -> tuple[Service, str]:
    """Make the case's fault; the service and the base URL the client talks to."""
    fault = case["fault"]
    if fault == "drop_first_response":
        service = start()
        return service, service.proxy("drop-response", "--times", "1")
    if fault == "overloaded":
        service = start("--workers", "1", "--max-pending", "1")
        for n in (1, 2):
            seconds = case["filler_sleep_s"]
            assert service.post(f"filler-{n}", "sleep", {"seconds": seconds}).status_code == 202
        eventually("a call queued for the one worker", lambda: service.queued() >= 1)
        return service, service.base_url
    if fault == "wrong_token":
        path = auth_file(tmp, "matrix", RIGHT_TOKEN)
        service = start("--auth-file", str(path))
        service.token = RIGHT_TOKEN
        return service, service.base_url
    if fault in ("same_key_in_flight", "same_key_other_args", "kill_and_restart"):
        service = start("--chaos")
        return service, service.base_url
    raise AssertionError(f"unknown fault {fault}")


def prepare_key(case: dict[str, Any], service: Service, key: str) -> None:
    """The runner's own request before the client's, for the faults that need one."""
    if case["fault"] == "same_key_in_flight":
        args = case["steps"][0]["args"]
        assert service.post(key, TOOL, args).status_code == 202
        eventually("the call running", lambda: service.calls_of(TOOL)[0]["status"] == "running")
    if case["fault"] == "same_key_other_args":
        answer = service.post(key, TOOL, case["setup_args"], wait=10)
        assert answer.json()["status"] == "succeeded"


def run_with_restart(kind: str, service: Service, base_url: str, step: Step, wire: Wire) -> Any:
    """Run the step in a thread; kill and restart the server while it waits."""
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(run_step(kind, base_url, step, wire)))
    worker.start()
    try:
        eventually("the call running", lambda: any(
            c["status"] == "running" for c in service.calls_of(TOOL)))
        service.kill_and_restart()
    finally:
        worker.join(timeout=90)
    assert result, "the client returned"
    return result[0]


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("name", list(CASES))
def test_retry_matrix(name: str, kind: str, start_service: Callable[..., Service], tmp_path: Any) -> None:
    case = CASES[name]
    service, base_url = fault_setup(case, start_service, tmp_path)
    key = None if case["key"] == "generated" else f"matrix-{name}-{kind}"
    if key:
        prepare_key(case, service, key)
    for raw in case["steps"]:
        token = {"wrong": "not-a-token", "right": RIGHT_TOKEN}.get(raw.get("token", ""))
        step, wire = Step(token, raw["args"], key), Wire()
        if case["fault"] == "kill_and_restart":
            outcome = run_with_restart(kind, service, base_url, step, wire)
        else:
            outcome = run_step(kind, base_url, step, wire)
        check_step(raw["expect"], outcome, wire)
        if isinstance(outcome, ToolCall) and key is None:
            assert outcome.key.startswith("py-"), "the key the client made is returned"
    calls = service.calls_of(TOOL)
    assert len(calls) == case["final"]["calls"], calls
    assert service.effects() == case["final"]["effects"]

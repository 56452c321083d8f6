"""The OpenAI Agents SDK adapter, driven by the SDK's own scripted model
(``agents.testing.ScriptedModel``) against the real service: a re-plan that
repeats a charge under a new ``call_id`` gets the same call and one effect; a
charge of another amount is another call."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

import pytest
from agents import Agent, RunConfig, Runner
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

from idempotent_tool import AsyncClient, Client
from idempotent_tool.adapters.openai_agents import function_tool
from service import Service

CHARGE_SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1}},
    "required": ["amount"],
    "additionalProperties": False,
}


def scripted_replan() -> ScriptedModel:
    """call_1 charges 100; the model re-plans and asks again as call_3; then 250."""
    return ScriptedModel([
        [function_call("charge", {"amount": 100}, call_id="call_1")],
        [function_call("charge", {"amount": 100.0}, call_id="call_3")],
        [function_call("charge", {"amount": 250}, call_id="call_5")],
        [assistant_message("paid")],
    ])


def outputs(result: Any) -> dict[str, dict[str, Any]]:
    """Each tool call's answer, by the model's call id."""
    return {
        item.raw_item["call_id"]: json.loads(item.output)
        for item in result.new_items
        if isinstance(item, ToolCallOutputItem)
    }


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_replan_repeats_no_charge(kind: str, start_service: Callable[..., Service]) -> None:
    service = start_service()
    client: Any = Client(service.base_url) if kind == "sync" else AsyncClient(service.base_url)
    charge = function_tool(client, "charge", schema=CHARGE_SCHEMA, description="Charge the card")

    async def run(thread: str) -> Any:
        agent = Agent(name="payer", model=scripted_replan(), tools=[charge])
        return await Runner.run(
            agent, "pay the invoice", context={"thread_id": thread},
            run_config=RunConfig(tracing_disabled=True),
        )

    async def replan_then_resume() -> tuple[Any, Any]:
        # One event loop for both runs: an AsyncClient's connections belong to one.
        return await run("thread-1"), await run("thread-1")

    first, resumed = asyncio.run(replan_then_resume())
    answers = outputs(first)
    assert set(answers) == {"call_1", "call_3", "call_5"}
    assert answers["call_1"]["call_id"] == answers["call_3"]["call_id"]
    assert answers["call_1"]["status"] == answers["call_3"]["status"] == "succeeded"
    assert answers["call_5"]["call_id"] != answers["call_1"]["call_id"]
    assert len(service.calls_of("charge")) == 2 and service.effects() == 2

    # The run resumed from scratch in the same thread asks for nothing new.
    again = outputs(resumed)
    assert again["call_1"]["call_id"] == answers["call_1"]["call_id"]
    assert len(service.calls_of("charge")) == 2 and service.effects() == 2


def test_without_a_scope_the_tool_refuses_to_guess(start_service: Callable[..., Service]) -> None:
    service = start_service()
    charge = function_tool(Client(service.base_url), "charge", schema=CHARGE_SCHEMA)
    agent = Agent(name="payer", model=scripted_replan(), tools=[charge])
    with pytest.raises(Exception, match="no scope for the idempotency key"):
        asyncio.run(Runner.run(agent, "pay", run_config=RunConfig(tracing_disabled=True)))
    assert service.calls_of("charge") == []

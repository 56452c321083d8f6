"""The LangChain/LangGraph adapter in a small LangGraph agent (model node,
``ToolNode``, checkpointer, ``thread_id``) driven by LangChain's fake chat
model with scripted tool calls, against the real service: a re-plan that
repeats a charge under a new ``tool_call_id`` gets the same call and one
effect; a charge of another amount is another call."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from idempotent_tool import AsyncClient, Client
from idempotent_tool.adapters.langchain import langchain_tool
from service import Service

CHARGE_SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1}},
    "required": ["amount"],
}


def charge_call(amount: Any, call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "charge", "args": {"amount": amount}, "id": call_id}])


def graph(tool: Any) -> Any:
    """An agent: the fake model, then the tools while it asks for any."""
    model = FakeMessagesListChatModel(responses=[
        charge_call(100, "call_1"),
        charge_call(100.0, "call_3"),  # the re-plan: the same charge, a new id
        charge_call(250, "call_5"),
        AIMessage(content="paid"),
    ])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([tool]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver())


def answers(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        m.tool_call_id: json.loads(m.content)
        for m in state["messages"]
        if isinstance(m, ToolMessage)
    }


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_replan_repeats_no_charge(kind: str, start_service: Callable[..., Service]) -> None:
    service = start_service()
    client: Any = Client(service.base_url) if kind == "sync" else AsyncClient(service.base_url)
    tool = langchain_tool(client, "charge", schema=CHARGE_SCHEMA, description="Charge the card")
    config = {"configurable": {"thread_id": "thread-7"}}
    start = {"messages": [HumanMessage("pay the invoice")]}
    other_config = {"configurable": {"thread_id": "thread-8"}}
    if kind == "sync":
        state, other = graph(tool).invoke(start, config), graph(tool).invoke(start, other_config)
    else:

        async def both() -> tuple[Any, Any]:
            # One event loop for both runs: an AsyncClient's connections belong to one.
            return await graph(tool).ainvoke(start, config), await graph(tool).ainvoke(start, other_config)

        state, other = asyncio.run(both())
    got = answers(state)
    assert set(got) == {"call_1", "call_3", "call_5"}
    assert got["call_1"]["call_id"] == got["call_3"]["call_id"]
    assert got["call_3"]["status"] == "succeeded"
    assert got["call_5"]["call_id"] != got["call_1"]["call_id"]
    assert answers(other)["call_1"]["call_id"] != got["call_1"]["call_id"], "another thread, another call"
    assert len(service.calls_of("charge")) == 4 and service.effects() == 4, "two in each thread"


def test_without_a_thread_id_the_tool_refuses_to_guess(start_service: Callable[..., Service]) -> None:
    service = start_service()
    tool = langchain_tool(Client(service.base_url), "charge", schema=CHARGE_SCHEMA, description="Charge")
    with pytest.raises(ValueError, match="no scope for the idempotency key"):
        tool.invoke({"amount": 1})
    assert service.calls_of("charge") == []

"""The OpenAI Agents SDK adapter: a ``FunctionTool`` whose every invocation is a
service call with a stable key.

The model names a new ``call_id`` whenever it re-plans; the key here comes from
the application's scope, the tool and the canonical arguments (the rule in
docs/clients.md), so the same charge in the same conversation is one call however
often the model asks for it. The scope is ``scope(ctx)`` when given, else the
run context's ``thread_id``, ``conversation_id`` or ``run_id`` (an attribute or a
key), else the run's ``RunConfig.group_id``; with none of them the tool refuses
to guess. Needs ``openai-agents`` (``pip install idempotent-tool[openai-agents]``).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from agents import FunctionTool
from agents.tool_context import ToolContext

from ._common import AnyClient, call_async, scope_from

__all__ = ["function_tool", "default_scope"]

ScopeFn = Callable[[ToolContext[Any]], str]
OccurrenceFn = Callable[[ToolContext[Any], dict[str, Any]], int]

SCOPE_NAMES = ("thread_id", "conversation_id", "run_id")


def default_scope(ctx: ToolContext[Any]) -> str:
    """The run context's ``thread_id``/``conversation_id``/``run_id``, else ``group_id``."""
    scope = scope_from(ctx.context, SCOPE_NAMES)
    if scope is None and ctx.run_config is not None and ctx.run_config.group_id:
        scope = ctx.run_config.group_id
    if scope is None:
        raise ValueError(
            "no scope for the idempotency key: give the run context a thread_id, "
            "conversation_id or run_id, set RunConfig.group_id, or pass scope="
        )
    return scope


def function_tool(
    client: AnyClient,
    tool: str,
    *,
    schema: dict[str, Any],
    description: str = "",
    name: str | None = None,
    scope: ScopeFn | None = None,
    occurrence: OccurrenceFn | None = None,
    wait: float = 30.0,
) -> FunctionTool:
    """A tool the agent calls as ``name`` (default ``tool``), run by the service.

    ``schema`` is the JSON Schema of its arguments (``GET /v1/tools`` gives the
    service's). ``occurrence(ctx, args)`` returns 2, 3, ... for a call meant
    again in the same scope (default 1). ``wait`` is how long one invocation
    waits for the call to settle; one still running is answered with its
    status and ``call_id``, and asking again gets the same call.
    """
    resolve = scope or default_scope

    async def invoke(ctx: ToolContext[Any], input_json: str) -> str:
        args = json.loads(input_json or "{}")
        count = occurrence(ctx, args) if occurrence else 1
        return await call_async(client, tool, args, resolve(ctx), count, wait)

    return FunctionTool(
        name=name or tool,
        description=description,
        params_json_schema=schema,
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )

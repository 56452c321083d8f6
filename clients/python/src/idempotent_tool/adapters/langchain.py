"""The LangChain / LangGraph adapter: a ``BaseTool`` whose every run is a service
call with a stable key.

A graph that re-plans, or a thread resumed from its checkpoint, asks for the
same tool call under a new ``tool_call_id``; the key here comes from the scope,
the tool and the canonical arguments (the rule in docs/clients.md). The scope is
``scope(config)`` when given, else LangGraph's ``thread_id`` (``config
["configurable"]["thread_id"]``), else ``run_id``-style names there; with none
the tool refuses to guess. Works with ``Client`` (``invoke``) and ``AsyncClient``
(``ainvoke``). Needs ``langchain-core`` (``pip install idempotent-tool[langchain]``).
"""

from __future__ import annotations

from typing import Any, Callable

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import ConfigDict

from ._common import AnyClient, call_async, call_sync, scope_from

__all__ = ["ServiceTool", "langchain_tool", "default_scope"]

ScopeFn = Callable[[RunnableConfig], str]
OccurrenceFn = Callable[[RunnableConfig, dict[str, Any]], int]

SCOPE_NAMES = ("thread_id", "conversation_id", "run_id")


def default_scope(config: RunnableConfig) -> str:
    """``configurable.thread_id`` (or ``conversation_id``, ``run_id``) of the run."""
    scope = scope_from(config.get("configurable") or {}, SCOPE_NAMES)
    if scope is None:
        raise ValueError(
            "no scope for the idempotency key: run the graph with "
            "config={'configurable': {'thread_id': ...}} or pass scope="
        )
    return scope


class ServiceTool(BaseTool):
    """A tool run by the service under a key derived from the run's scope."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: Any
    tool: str
    scope: Any = None
    occurrence: Any = None
    wait: float = 30.0

    def _key_parts(self, config: RunnableConfig, args: dict[str, Any]) -> tuple[str, int]:
        scope = (self.scope or default_scope)(config)
        return scope, (self.occurrence(config, args) if self.occurrence else 1)

    def _run(
        self,
        config: RunnableConfig,
        run_manager: CallbackManagerForToolRun | None = None,
        **args: Any,
    ) -> str:
        scope, count = self._key_parts(config, args)
        return call_sync(self.client, self.tool, args, scope, count, self.wait)

    async def _arun(
        self,
        config: RunnableConfig,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
        **args: Any,
    ) -> str:
        scope, count = self._key_parts(config, args)
        return await call_async(self.client, self.tool, args, scope, count, self.wait)


def langchain_tool(
    client: AnyClient,
    tool: str,
    *,
    schema: dict[str, Any],
    description: str,
    name: str | None = None,
    scope: ScopeFn | None = None,
    occurrence: OccurrenceFn | None = None,
    wait: float = 30.0,
) -> ServiceTool:
    """A LangChain tool named ``name`` (default ``tool``) run by the service.

    ``schema`` is the JSON Schema of its arguments (``GET /v1/tools``);
    ``occurrence(config, args)`` returns 2, 3, ... for a call meant again in the
    same scope (default 1); ``wait`` as for ``Client.call``.
    """
    return ServiceTool(
        name=name or tool,
        description=description,
        args_schema=schema,
        client=client,
        tool=tool,
        scope=scope,
        occurrence=occurrence,
        wait=wait,
    )

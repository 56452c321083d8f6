"""Adapters that turn an agent framework's tool call into a service call with a
stable key (``idempotent_tool.keys.tool_key``): ``openai_agents`` for the OpenAI
Agents SDK, ``langchain`` for LangChain and LangGraph. Each imports its
framework only when imported itself, so the package needs neither."""

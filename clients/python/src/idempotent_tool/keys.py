"""Idempotency keys: a random one per logical call, or one derived for adapters.

A client call without a key gets a random key, made once before the first
attempt and reused by every retry (``new_key``). An agent framework cannot use
that: the model mints a new ``tool_call_id`` each time it re-plans, and a
resumed run forgets the keys it made. So the adapters derive the key from what
the application controls (``tool_key``, the rule written once in
docs/clients.md and checked against ``clients/key-vectors.json`` by the Python,
TypeScript and Rust tests):

    "tk1-" + hex(SHA-256(canonical({"args": args, "occurrence": occurrence,
                                    "scope": scope, "tool": tool})))

``canonical`` is the service's own fingerprint JSON, so two spellings the
service treats as one request (``1`` and ``1.0``, a ``null`` member, NFC) give
one key. ``occurrence`` (1 by default) is for the rare call that is meant twice
in one scope: the application passes 2 for the second one.
"""

from __future__ import annotations

import uuid
from typing import Any, Mapping

from .canonical import canonical, sha256_hex

__all__ = ["KEY_RULE_PREFIX", "new_key", "tool_key"]

#: The version of the derivation rule; a new rule gets a new prefix.
KEY_RULE_PREFIX = "tk1-"


def new_key() -> str:
    """A fresh random key for one logical call (``py-`` and 32 hex digits)."""
    return f"py-{uuid.uuid4().hex}"


def tool_key(scope: str, tool: str, args: Mapping[str, Any] | None, occurrence: int = 1) -> str:
    """The key an adapter sends for ``tool`` with ``args`` in ``scope``.

    ``scope`` names the application's unit of work (a thread, run or
    conversation id); ``occurrence`` counts calls meant twice within it.
    """
    if not isinstance(scope, str) or not scope:
        raise ValueError("scope must be a non-empty string (a thread, run or conversation id)")
    if not isinstance(tool, str) or not tool:
        raise ValueError("tool must be a non-empty string")
    if isinstance(occurrence, bool) or not isinstance(occurrence, int) or occurrence < 1:
        raise ValueError("occurrence must be an integer from 1")
    payload = {"args": dict(args or {}), "occurrence": occurrence, "scope": scope, "tool": tool}
    return KEY_RULE_PREFIX + sha256_hex(canonical(payload))

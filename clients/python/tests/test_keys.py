"""The key rule and the canonical JSON against the shared vectors
(clients/key-vectors.json), which the TypeScript and Rust tests check too."""

from __future__ import annotations

import itertools
import json

import pytest

from idempotent_tool import canonical, new_key, tool_key
from service import VECTORS


@pytest.mark.parametrize("vector", VECTORS["canonical"], ids=lambda v: v["name"])
def test_canonical_json_matches_the_vectors(vector: dict) -> None:
    assert canonical(json.loads(vector["json"])) == vector["canonical"]


@pytest.mark.parametrize("vector", VECTORS["keys"], ids=lambda v: v["name"])
def test_tool_key_matches_the_vectors(vector: dict) -> None:
    args = json.loads(vector["args_json"])
    assert tool_key(vector["scope"], vector["tool"], args, vector["occurrence"]) == vector["key"]


def test_only_the_named_groups_share_a_key() -> None:
    group_of = {name: i for i, group in enumerate(VECTORS["same_key"]) for name in group}
    for a, b in itertools.combinations(VECTORS["keys"], 2):
        same = a["name"] in group_of and group_of.get(a["name"]) == group_of.get(b["name"])
        assert (a["key"] == b["key"]) is same, (a["name"], b["name"])


def test_keys_are_valid_idempotency_keys() -> None:
    for key in [v["key"] for v in VECTORS["keys"]] + [new_key()]:
        assert 1 <= len(key) <= 255 and all(33 <= ord(c) <= 126 for c in key)
    assert new_key() != new_key()


@pytest.mark.parametrize("scope, occurrence", [("", 1), ("t", 0), ("t", True)])
def test_a_missing_scope_or_a_bad_occurrence_is_refused(scope: str, occurrence: int) -> None:
    with pytest.raises(ValueError):
        tool_key(scope, "charge", {"amount": 1}, occurrence)

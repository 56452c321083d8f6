"""The service's canonical JSON, reproduced byte for byte.

The service fingerprints a request as the SHA-256 of the canonical JSON of
``{"args": args, "tool": tool}`` (``src/fingerprint.rs``; the contract is in
docs/api.md). The adapters derive keys from the same text, so a re-planned tool
call whose arguments differ only in spelling (``1.0`` for ``1``, a decomposed
``é``, a ``null`` member) still gets the same key. The rules:

- object members sorted by key in code-point order, compact separators;
- members whose value is ``None`` dropped; ``None`` inside lists kept;
- integers printed as integers; a float with an integral value of magnitude at
  most 2**53 printed as that integer (``1.0`` is ``1``, ``-0.0`` is ``0``);
  any other float in the shortest form that round-trips, with the service's
  layout (fixed notation for decimal exponents -5 to 15, else ``1.5e+300``);
- strings and keys NFC-normalized, non-ASCII kept as UTF-8, escaped as
  ``json.dumps(..., ensure_ascii=False)`` escapes.

This module only computes; it never does I/O.
"""

from __future__ import annotations

import decimal
import hashlib
import json
import math
import unicodedata
from typing import Any

__all__ = ["canonical", "sha256_hex", "fingerprint"]

#: Above this magnitude not every integer is an exact float (2**53).
_EXACT_LIMIT = 9_007_199_254_740_992
#: Integers the service parses as i64 or u64; beyond, it reads a float.
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
#: Decimal exponents printed in fixed notation (the service's float printer).
_FIXED_EXPONENTS = range(-5, 16)


def canonical(value: Any) -> str:
    """The canonical JSON text of ``value`` (dicts, lists, str, int, float, bool, None)."""
    out: list[str] = []
    _write(out, value)
    return "".join(out)


def sha256_hex(text: str) -> str:
    """Lower-case hex SHA-256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprint(tool: str, args: dict[str, Any]) -> str:
    """The fingerprint the service stores for ``tool`` and ``args``."""
    return sha256_hex(canonical({"args": args, "tool": tool}))


def _write(out: list[str], value: Any) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(_integer(value))
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, dict):
        _write_object(out, value)
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(out, item)
        out.append("]")
    else:
        raise TypeError(f"not JSON: {type(value).__name__}")


def _write_object(out: list[str], mapping: dict[Any, Any]) -> None:
    members = []
    for key, item in mapping.items():
        if not isinstance(key, str):
            raise TypeError(f"object keys must be strings, not {type(key).__name__}")
        if item is not None:
            members.append((unicodedata.normalize("NFC", key), item))
    # Two keys can be equal after NFC; ordering those by value keeps the text
    # the same whatever order they came in (as the service does).
    members.sort(key=lambda member: (member[0], canonical(member[1])))
    out.append("{")
    for index, (key, item) in enumerate(members):
        if index:
            out.append(",")
        out.append(_string(key))
        out.append(":")
        _write(out, item)
    out.append("}")


def _string(text: str) -> str:
    return json.dumps(unicodedata.normalize("NFC", text), ensure_ascii=False)


def _integer(number: int) -> str:
    if _INT_MIN <= number <= _INT_MAX:
        return str(number)
    # The service reads an integer past 64 bits as a float.
    return _float(float(number))


def _float(number: float) -> str:
    if not math.isfinite(number):
        raise ValueError("JSON has no NaN or infinity")
    if number.is_integer() and abs(number) <= _EXACT_LIMIT:
        return str(int(number))
    sign, digits, exponent = decimal.Decimal(repr(number)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    scientific = len(text) - 1 + exponent
    minus = "-" if sign else ""
    if scientific in _FIXED_EXPONENTS:
        return minus + _fixed(text, scientific)
    mantissa = text if len(text) == 1 else f"{text[0]}.{text[1:]}"
    return f"{minus}{mantissa}e{'+' if scientific >= 0 else '-'}{abs(scientific)}"


def _fixed(digits: str, scientific: int) -> str:
    """``digits`` (shortest, no trailing zeros) times 10**``scientific``, fixed."""
    if len(digits) - 1 <= scientific:
        return digits + "0" * (scientific + 1 - len(digits)) + ".0"
    if scientific >= 0:
        return f"{digits[: scientific + 1]}.{digits[scientific + 1 :]}"
    return "0." + "0" * (-scientific - 1) + digits

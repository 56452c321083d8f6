"""The retry rules, shared by the sync and the async client (docs/clients.md).

One logical call has one key; every retry sends it. What is retried:
a transport failure (no connection, a reset, a timeout: the request may or may
not have been executed, and the key makes asking again safe), ``408``,
``429`` and every ``5xx`` but ``501`` and ``505`` (``503 unavailable`` and
``503 overloaded`` say "not now"; a ``500`` with the same key finds the call if
it was made). What never is: any other ``4xx`` — a ``409`` conflict, a ``400``,
``401``, ``403``, ``404`` would only repeat themselves. The pause before retry
``n`` is the server's ``Retry-After`` when it sent one, else a jittered
exponential backoff; all retries of one call fit in ``max_elapsed`` seconds.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass

__all__ = ["RetryPolicy", "retryable_status", "parse_retry_after"]

#: Server errors that say the request itself cannot work here, not "not now".
_PERMANENT_5XX = frozenset({501, 505})


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one logical call tries.

    ``max_elapsed`` caps the time from the first attempt to the start of the
    last; ``initial_backoff`` doubles per retry up to ``max_backoff``, each pause
    drawn between half and all of it (jitter, so clients that failed together
    do not retry together); a ``Retry-After`` is honoured up to
    ``max_retry_after``.
    """

    max_elapsed: float = 30.0
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    max_retry_after: float = 30.0

    def backoff(self, retry: int) -> float:
        """The pause before retry number ``retry`` (0-based) without a ``Retry-After``."""
        ceiling = min(self.max_backoff, self.initial_backoff * (2**min(retry, 30)))
        return random.uniform(ceiling / 2, ceiling)

    def pause(self, retry: int, retry_after: float | None) -> float:
        """The pause before retry ``retry``: the server's ``Retry-After`` if any."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        return self.backoff(retry)

    def allows(self, started: float, pause: float) -> bool:
        """Whether a retry after ``pause`` still starts within the budget."""
        return time.monotonic() + pause - started <= self.max_elapsed


def retryable_status(status: int) -> bool:
    """Whether an error status may be retried with the same key."""
    return status in (408, 429) or (status >= 500 and status not in _PERMANENT_5XX)


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: delta seconds or an HTTP date; ``None`` if absent or bad."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = moment.timestamp() - time.time()
    if seconds != seconds or seconds < 0:  # NaN or in the past
        return 0.0 if seconds < 0 else None
    return seconds

"""Commits under the REST spec's ``Idempotency-Key``, for servers that advertise it.

A server that lists ``idempotency-key-lifetime`` in ``/v1/config`` (an ISO-8601 duration,
e.g. ``PT30M``) promises that requests carrying the same key are applied at most once,
and that a repeat gets the first answer. calving then sends every commit and
transaction with a fresh key (a UUIDv7, as the spec asks) and, when the outcome is
unknown (timeout, dropped connection, 5xx), sends the same request with the same key
again, a few times within the key's lifetime: the server answers what happened, so
the commit is not read back. A repeat answered 409 is not trusted as "not committed"
(a server that lost its keys, e.g. restarted, checks the requirements against a table
the first try may have moved): it is an unknown outcome, resolved by reading back as
with servers that do not advertise the header.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from calving.commit.errors import (
    CatalogUnavailableError,
    CommitStateUnknownError,
    CommitSwapLostError,
)

HEADER = "Idempotency-Key"
#: Pauses before each repeat of a commit whose outcome is unknown.
REPEAT_DELAYS_S = (0.2, 1.0, 3.0)
_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def parse_lifetime(value: Any) -> float | None:
    """Seconds of an ISO-8601 duration such as ``PT30M`` or ``P1D``; None when absent
    or not a positive duration (the server then does not support idempotency)."""
    if not isinstance(value, str):
        return None
    match = _DURATION.match(value.strip().upper())
    if match is None or value.strip().upper() in ("P", "PT"):
        return None
    parts = {k: float(v) for k, v in match.groupdict().items() if v}
    seconds = (
        parts.get("d", 0) * 86400 + parts.get("h", 0) * 3600 + parts.get("m", 0) * 60
    ) + parts.get("s", 0)
    return seconds if seconds > 0 else None


def uuid7() -> str:
    """A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76 | (rand >> 68 & 0xFFF) << 64
    value |= 0b10 << 62 | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


def send_commit(
    send: Callable[[dict[str, str]], Any],
    lifetime_s: float | None,
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """``send(headers)`` once (no lifetime: the server does not support keys), or under
    one key, repeated while the outcome is unknown and the key is young enough."""
    if lifetime_s is None:
        return send({})
    headers = {HEADER: uuid7()}
    started = time.monotonic()
    try:
        return send(headers)
    except CommitStateUnknownError as first:
        unknown = first
    for delay in REPEAT_DELAYS_S:
        if time.monotonic() - started + delay >= lifetime_s:
            break
        sleep(delay)
        try:
            return send(headers)
        except CommitStateUnknownError as again:
            unknown = again
        except CatalogUnavailableError:
            continue  # the repeat was never sent; the first try is still unknown
        except CommitSwapLostError as lost:
            raise CommitStateUnknownError(
                f"{lost}; after a lost reply the repeat of the same commit was refused, "
                "so the first try may have landed"
            ) from None
    raise unknown

"""``Idempotency-Key`` for the server's mutations, as the REST spec describes it.

A mutation carrying the header is applied at most once per key within ``lifetime_s``
(advertised in ``/v1/config`` as ``idempotency-key-lifetime``): the first request's final
answer (2xx, or a 4xx that would be the same again) is kept, and a repeat of the key gets
that answer without the request being applied again. A 5xx is not kept (a repeat runs
the request). A repeat that arrives while the first is still running waits for it. A
key reused for a different request (method, path or body) is a 422.

Kept in memory, at most ``max_entries`` answers (the oldest go first): the promise holds
for the server process's life; a restarted server has forgotten its keys (calving's
client then falls back to reading the table back).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from calving.ingest.serve.errors import RestError, bad_request

HEADER = "idempotency-key"
DEFAULT_LIFETIME_S = 1800.0
_KEY = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class _Entry:
    fingerprint: str
    expires: float
    done: asyncio.Event = field(default_factory=asyncio.Event)
    answer: Answer | None = None


def iso_duration(seconds: float) -> str:
    """``seconds`` as an ISO-8601 duration (``PT1800S``)."""
    return f"PT{int(seconds)}S"


def fingerprint(method: str, path: str, body: bytes) -> str:
    return hashlib.sha256(method.encode() + b" " + path.encode() + b"\n" + body).hexdigest()


def check_key(key: str) -> str:
    if not _KEY.match(key):
        raise bad_request("Idempotency-Key must be a UUID (36 characters, e.g. a UUIDv7)")
    return key.lower()


class IdempotencyStore:
    def __init__(
        self,
        lifetime_s: float = DEFAULT_LIFETIME_S,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lifetime_s = lifetime_s
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        #: Answers given from the store (tests and logs).
        self.replayed = 0

    def _prune(self, now: float) -> None:
        for key in [k for k, e in self._entries.items() if e.expires <= now and e.done.is_set()]:
            del self._entries[key]
        while len(self._entries) > self.max_entries:
            key, entry = next(iter(self._entries.items()))
            if not entry.done.is_set():
                break  # never forget a request still running
            del self._entries[key]

    async def run(
        self, key: str, print_: str, apply: Callable[[], Awaitable[Answer]]
    ) -> tuple[Answer, bool]:
        """The answer for ``key`` (``apply()``'s, run at most once); True when replayed.
        Runs on the event loop thread only, so the entries need no lock."""
        now = self._clock()
        self._prune(now)
        entry = self._entries.get(key)
        if entry is not None:
            if entry.fingerprint != print_:
                raise RestError(
                    422,
                    "UnprocessableEntityException",
                    "Idempotency-Key was already used for a different request",
                )
            await entry.done.wait()
            if entry.answer is not None:
                self.replayed += 1
                return entry.answer, True
        entry = _Entry(print_, now + self.lifetime_s)
        self._entries[key] = entry
        try:
            answer = await apply()
        except BaseException:
            del self._entries[key]
            entry.done.set()
            raise
        if answer.status >= 500:
            del self._entries[key]  # not final: a repeat runs again
        else:
            entry.answer = answer
        entry.done.set()
        return answer, False

"""The stats of a stream's recent batches: the last ``keep`` of them, and how many there
have been. A stream runs for weeks; keeping every batch's stats grew the driver by each
batch's (a many-table batch's hold every table's) until it ran out of memory."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

#: Batches kept: enough for a minute or more of any trigger, a few MB at most.
KEEP = 1000


class BatchHistory(Generic[T]):
    def __init__(self, keep: int = KEEP) -> None:
        self._kept: deque[T] = deque(maxlen=keep)
        #: Batches recorded so far (kept or not).
        self.total = 0

    def append(self, stats: T) -> None:
        self._kept.append(stats)
        self.total += 1

    def since(self, total: int) -> list[T]:
        """The kept batches recorded after the first ``total`` (oldest first)."""
        new = min(self.total - total, len(self._kept))
        return list(self._kept)[len(self._kept) - new :] if new > 0 else []

    def __iter__(self) -> Iterator[T]:
        return iter(self._kept)

    def __len__(self) -> int:
        return len(self._kept)

    def __getitem__(self, i: int) -> T:
        return self._kept[i]


__all__ = ["KEEP", "BatchHistory"]

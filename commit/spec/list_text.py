"""The JSON text of the table metadata's append-only lists, encoded once.

Every commit writes the whole table metadata again, and three of its lists only grow at
the end (and lose entries at the start when snapshots expire or old metadata files fall
out of the log): ``snapshots``, ``snapshot-log`` and ``metadata-log``. Their entries are
immutable objects that the next metadata reuses, so the text of a list is kept with the
entries it was made from: the next list that starts with some suffix of those same
objects (compared by identity) reuses that part of the text and encodes only its new
entries. The result is always exactly the text of encoding every entry.

The text is kept as UTF-8 segments of at most ``SEGMENT_ENTRIES`` entries, and handed
out as the pieces to join: a new entry copies only the last segment, and the metadata
file is assembled with one copy of its bytes. (Joining one ever-growing string per
list cost about eight copies of the whole history per commit: 1.2 ms at 1,000
snapshots, most of what the commit grew by.)

Pure: no I/O. One ``ListTexts`` per process (``LIST_TEXTS``) holds the last list of
each kind per table, for a bounded number of tables.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: Tables whose last lists are kept (least recently used ones are dropped).
MAX_TABLES = 256
#: Entries per segment: a commit copies at most this many entries' text.
SEGMENT_ENTRIES = 64

#: A piece of a list's text and whether it is settled (``ListTexts.parts``).
Part = tuple[bytes, bool]


@dataclass(frozen=True)
class _Segment:
    #: Where each entry's text starts in ``data``.
    starts: tuple[int, ...]
    #: The entries' UTF-8 texts joined by commas.
    data: bytes

    def without_first(self, n: int) -> _Segment:
        cut = self.starts[n]
        return _Segment(tuple(s - cut for s in self.starts[n:]), self.data[cut:])


def _segment(texts: Sequence[bytes], after: _Segment | None = None) -> _Segment:
    """``texts`` as one segment, following the entries of ``after`` if given."""
    starts = list(after.starts) if after else []
    at = len(after.data) + 1 if after else 0
    for text in texts:
        starts.append(at)
        at += len(text) + 1
    head = [after.data] if after else []
    return _Segment(tuple(starts), b",".join([*head, *texts]))


@dataclass(frozen=True)
class _Encoded:
    items: tuple[Any, ...]
    segments: tuple[_Segment, ...]

    def dropped(self, n: int) -> tuple[_Segment, ...]:
        """The segments without the first ``n`` entries."""
        out = list(self.segments)
        while n and out:
            first = len(out[0].starts)
            if n >= first:
                out.pop(0)
                n -= first
            else:
                out[0] = out[0].without_first(n)
                n = 0
        return tuple(out)


def _append(segments: tuple[_Segment, ...], texts: list[bytes]) -> tuple[_Segment, ...]:
    out = list(segments)
    if out and len(out[-1].starts) < SEGMENT_ENTRIES and texts:
        room = SEGMENT_ENTRIES - len(out[-1].starts)
        out[-1] = _segment(texts[:room], out[-1])
        texts = texts[room:]
    for start in range(0, len(texts), SEGMENT_ENTRIES):
        out.append(_segment(texts[start : start + SEGMENT_ENTRIES]))
    return tuple(out)


def _texts(items: Sequence[Any], encode: Callable[[Any], str]) -> list[bytes]:
    return [encode(item).encode("utf-8") for item in items]


def _position(items: tuple[Any, ...], item: Any) -> int | None:
    """Index of ``item`` (the object itself) in ``items``: the entries a new list no
    longer has come first, and they are few (expired snapshots, trimmed log)."""
    for i, candidate in enumerate(items):
        if candidate is item:
            return i
    return None


def list_text(
    previous: _Encoded | None, items: Sequence[Any], encode: Callable[[Any], str]
) -> _Encoded:
    """The encoding of ``items``, reusing ``previous`` where ``items`` continues it."""
    items = tuple(items)
    drop = None
    if previous is not None and items and previous.items:
        drop = _position(previous.items, items[0])
    if previous is None or drop is None:
        return _Encoded(items, _append((), _texts(items, encode)))
    kept = len(previous.items) - drop
    if kept > len(items) or not all(map(operator.is_, items[:kept], previous.items[drop:])):
        return _Encoded(items, _append((), _texts(items, encode)))
    if kept == len(items) and drop == 0:
        return previous
    return _Encoded(items, _append(previous.dropped(drop), _texts(items[kept:], encode)))


class ListTexts:
    """The last encoded list per (table, list name), for ``MAX_TABLES`` tables.

    Shared by threads without a lock: every step on the ``OrderedDict`` (keys are tuples
    of strings, so no Python code runs inside one) is atomic under the GIL, and the text
    does not depend on which earlier list is found (``list_text`` compares entries by
    identity), so two threads racing on one table only cost each other a cache hit."""

    def __init__(self, max_tables: int = MAX_TABLES) -> None:
        self._max = max_tables
        self._last: OrderedDict[tuple[str, str], _Encoded] = OrderedDict()

    def pieces(
        self, table: str, name: str, items: Sequence[Any], encode: Callable[[Any], str]
    ) -> list[bytes]:
        """The UTF-8 of ``"[" + ",".join(encode(i) for i in items) + "]"`` in pieces
        to join, from the table's last list of this name where the two share entries."""
        return [piece for piece, _ in self.parts(table, name, items, encode)]

    def parts(
        self, table: str, name: str, items: Sequence[Any], encode: Callable[[Any], str]
    ) -> list[Part]:
        """``pieces``, each with whether it is *settled*: a segment that later lists of
        this table keep as the same bytes object while they hold its entries (every
        segment but a last one that is not full, which the next entry replaces). What
        is made from a settled piece (its compressed form) can be kept with it."""
        key = (table, name)
        encoded = list_text(self._last.get(key), items, encode)
        self._last[key] = encoded
        try:
            self._last.move_to_end(key)
            while len(self._last) > self._max * 3:
                self._last.popitem(last=False)
        except KeyError:  # another thread dropped the key or emptied the cache meanwhile
            pass
        out: list[Part] = [(b"[", False)]
        last = len(encoded.segments) - 1
        for i, segment in enumerate(encoded.segments):
            if i:
                out.append((b",", False))
            out.append((segment.data, i < last or len(segment.starts) == SEGMENT_ENTRIES))
        out.append((b"]", False))
        return out

    def clear(self) -> None:
        self._last.clear()


LIST_TEXTS = ListTexts()

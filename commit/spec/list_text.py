"""The JSON text of the table metadata's append-only lists, encoded once.

Every commit writes the whole table metadata again, and three of its lists only grow at
the end (and lose entries at the start when snapshots expire or old metadata files fall
out of the log): ``snapshots``, ``snapshot-log`` and ``metadata-log``. Their entries are
immutable objects that the next metadata reuses, so the text of a list is kept with the
entries it was made from: the next list that starts with some suffix of those same
objects (compared by identity) reuses that part of the text and encodes only its new
entries. The result is always exactly the text of encoding every entry.

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


@dataclass(frozen=True)
class _Encoded:
    items: tuple[Any, ...]
    #: Where each item's text starts in ``body`` (the entries joined by commas).
    starts: list[int]
    body: str


def _encode(items: tuple[Any, ...], encode: Callable[[Any], str]) -> _Encoded:
    texts = [encode(item) for item in items]
    return _extend(_Encoded((), [], ""), 0, items, texts)


def _extend(base: _Encoded, drop: int, items: tuple[Any, ...], new_texts: list[str]) -> _Encoded:
    """``base`` without its first ``drop`` items, then ``new_texts`` (of the last items
    of ``items``)."""
    kept = len(base.items) - drop
    offset = base.starts[drop] if kept else 0
    body = base.body[offset:] if kept else ""
    if not kept:
        starts: list[int] = []
    elif drop:
        starts = [s - offset for s in base.starts[drop:]]
    else:
        starts = base.starts.copy()
    parts = [body] if kept else []
    at = len(body) + (1 if kept else 0)
    for text in new_texts:
        starts.append(at)
        parts.append(text)
        at += len(text) + 1
    return _Encoded(items, starts, ",".join(parts))


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
    if previous is None or not items or not previous.items:
        return _encode(items, encode)
    drop = _position(previous.items, items[0])
    if drop is None:
        return _encode(items, encode)
    kept = len(previous.items) - drop
    if kept > len(items) or not all(map(operator.is_, items[:kept], previous.items[drop:])):
        return _encode(items, encode)
    if kept == len(items) and drop == 0:
        return previous
    return _extend(previous, drop, items, [encode(item) for item in items[kept:]])


class ListTexts:
    """The last encoded list per (table, list name), for ``MAX_TABLES`` tables.

    Shared by threads without a lock: every step on the ``OrderedDict`` (keys are tuples
    of strings, so no Python code runs inside one) is atomic under the GIL, and the text
    does not depend on which earlier list is found (``list_text`` compares entries by
    identity), so two threads racing on one table only cost each other a cache hit."""

    def __init__(self, max_tables: int = MAX_TABLES) -> None:
        self._max = max_tables
        self._last: OrderedDict[tuple[str, str], _Encoded] = OrderedDict()

    def text(
        self, table: str, name: str, items: Sequence[Any], encode: Callable[[Any], str]
    ) -> str:
        """``"[" + ",".join(encode(i) for i in items) + "]"``, from the table's last
        list of this name where the two share entries."""
        key = (table, name)
        encoded = list_text(self._last.get(key), items, encode)
        self._last[key] = encoded
        try:
            self._last.move_to_end(key)
            while len(self._last) > self._max * 3:
                self._last.popitem(last=False)
        except KeyError:  # another thread dropped the key or emptied the cache meanwhile
            pass
        return "[" + encoded.body + "]"

    def clear(self) -> None:
        self._last.clear()


LIST_TEXTS = ListTexts()

"""The metadata's history lists encoded once (``calving.commit.spec.list_text``): over
random histories of commits that append, expire from the start, trim the metadata log,
rebuild entries from parsed JSON and interleave tables, ``serialize_metadata`` is byte
for byte ``json.dumps`` of ``metadata_to_json`` (the reference encoding, no cache)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.spec import list_text
from calving.commit.spec.list_text import LIST_TEXTS, ListTexts
from calving.commit.spec.metadata import (
    TableMetadata,
    metadata_to_json,
    parse_metadata,
    serialize_metadata,
)
from calving.commit.spec.partition import PartitionSpec
from calving.commit.spec.schema import Schema
from calving.commit.spec.snapshot import MetadataLogEntry, Snapshot, SnapshotLogEntry
from calving.commit.spec.types import LONG, STRING, NestedField
from calving.commit.table.table import new_table_metadata

SCHEMA = Schema((NestedField(1, "id", LONG, required=True), NestedField(2, "name", STRING)))


def reference(m: TableMetadata) -> bytes:
    obj = metadata_to_json(m)
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def commit(m: TableMetadata, n: int, note: str) -> TableMetadata:
    """``m`` plus one snapshot (its log entries too), reusing ``m``'s entry objects."""
    sid = 1000 + n
    snap = Snapshot(
        sid, m.current_snapshot_id, n, 1_700_000_000_000 + n,
        f"file:///w/t/metadata/snap-{sid}-é.avro", {"operation": "append", "note": note},
        0, n * 10, 10,
    )  # fmt: skip
    return m.with_changes(
        snapshots=(*m.snapshots, snap),
        current_snapshot_id=sid,
        snapshot_log=(*m.snapshot_log, SnapshotLogEntry(snap.timestamp_ms, sid)),
        metadata_log=(*m.metadata_log, MetadataLogEntry(snap.timestamp_ms, f"file:///w/m{n}.json")),
    )


OPS = st.lists(
    st.tuples(
        st.sampled_from(["commit", "commit", "commit", "expire", "trim", "reparse", "other"]),
        st.integers(1, 4),
        st.text(max_size=6),
    ),
    max_size=40,
)


@pytest.mark.parametrize("segment", [1, 3, list_text.SEGMENT_ENTRIES])
def test_serialize_equals_the_reference_over_random_histories(segment):
    """Small segments put the segment boundaries (a full last segment, an expiry that
    cuts into or drops whole segments) inside the histories hypothesis draws."""
    LIST_TEXTS.clear()
    with mock.patch.object(list_text, "SEGMENT_ENTRIES", segment):
        _serialize_equals_the_reference()


@settings(max_examples=150, deadline=None)
@given(OPS)
def _serialize_equals_the_reference(ops):
    for m in history_states(ops, serialize_metadata):
        assert serialize_metadata(m) == reference(m)


def history_states(
    ops: list[tuple[str, int, str]], file_bytes: Callable[[TableMetadata], bytes]
) -> Iterator[TableMetadata]:
    """Each state of two tables' metadata under ``ops`` (commit, expire, trim, re-parse
    from ``file_bytes``, switch table), then each table's last state again."""
    tables = [new_table_metadata(SCHEMA, f"file:///w/t{i}", PartitionSpec(0)) for i in range(2)]
    n, current = 0, 0
    for op, k, note in ops:
        m = tables[current]
        if op == "commit":
            n += 1
            m = commit(m, n, note)
        elif op == "expire":  # the oldest k snapshots and their log entries go
            m = m.with_changes(snapshots=m.snapshots[k:], snapshot_log=m.snapshot_log[k:])
        elif op == "trim":  # the metadata log keeps its newest entries
            m = m.with_changes(metadata_log=m.metadata_log[-k:] if k < 4 else ())
        elif op == "reparse":  # equal entries, new objects (another process's commit)
            m = parse_metadata(file_bytes(m), "m.json")
        else:
            current = 1 - current
            continue
        tables[current] = m
        yield m
    yield from tables


def test_an_older_state_after_a_newer_one_is_encoded_whole():
    m = new_table_metadata(SCHEMA, "file:///w/t", PartitionSpec(0))
    states = [m]
    for n in range(1, 6):
        states.append(commit(states[-1], n, "x"))
    for state in [states[5], states[2], states[4], states[0], states[5]]:
        assert serialize_metadata(state) == reference(state)


def test_new_entries_only_are_encoded():
    """The point of it: a commit encodes its new entries, not the history again."""
    texts = ListTexts()
    calls: list[int] = []

    def encode(item: int) -> str:
        calls.append(item)
        return str(item)

    items = tuple(object() for _ in range(100))
    numbers = {id(o): i for i, o in enumerate(items)}

    def enc(o: object) -> str:
        return encode(numbers[id(o)])

    def text(some: tuple[object, ...]) -> str:
        return b"".join(texts.pieces("t", "snapshots", some, enc)).decode()

    assert text(items[:99]) == "[" + ",".join(map(str, range(99))) + "]"
    calls.clear()
    assert text(items) == "[" + ",".join(map(str, range(100))) + "]"
    assert calls == [99]
    calls.clear()
    assert text(items[3:]) == "[" + ",".join(map(str, range(3, 100))) + "]"
    assert calls == []
    assert text(()) == "[]"


def test_a_new_entry_copies_only_the_last_segment():
    """The text is kept in segments: appending to a long list leaves every full
    segment's bytes as they were (the same objects), so a commit does not copy its
    history to add one snapshot."""
    texts = ListTexts()
    items = tuple(object() for _ in range(3 * list_text.SEGMENT_ENTRIES + 5))
    before = texts.pieces("t", "snapshots", items[:-1], lambda o: "{}")
    after = texts.pieces("t", "snapshots", items, lambda o: "{}")
    full = [p for p in before if len(p) > 1][:3]
    assert len(full) == 3 and all(any(p is q for q in after) for p in full)
    assert b"".join(after) == ("[" + ",".join(["{}"] * len(items)) + "]").encode()


def test_the_process_cache_is_bounded():
    LIST_TEXTS.clear()
    for i in range(300):
        m = commit(new_table_metadata(SCHEMA, "file:///w/t", PartitionSpec(0)), 1, "")
        serialize_metadata(m)
    assert len(LIST_TEXTS._last) <= 3 * 256


@pytest.mark.parametrize("segment", [1, 2, 3, 4])
def test_expiring_repeatedly_into_a_segment(segment):
    """A long history losing a few entries at a time from the start: each cut falls at
    another place in the first segment, and the next cut must start from where the
    last one left its offsets."""
    LIST_TEXTS.clear()
    with mock.patch.object(list_text, "SEGMENT_ENTRIES", segment):
        m = new_table_metadata(SCHEMA, "file:///w/t", PartitionSpec(0))
        for n in range(1, 60):
            m = commit(m, n, "é" * (n % 3))
            if n % 3 == 0:
                m = m.with_changes(snapshots=m.snapshots[1:], snapshot_log=m.snapshot_log[1:])
            if n % 5 == 0:
                m = m.with_changes(snapshots=m.snapshots[2:], snapshot_log=m.snapshot_log[2:])
            if n % 7 == 0:
                m = m.with_changes(metadata_log=m.metadata_log[-3:])
            assert serialize_metadata(m) == reference(m)

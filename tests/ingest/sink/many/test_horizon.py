"""The pure parts of source-transaction boundaries: transaction ids read from event
bytes, END markers, where a task stops, and the horizon a batch may commit."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.sink.many.tasks import SchemaSniffer
from calving.ingest.sink.many.transactions import (
    EndMarker,
    RunBuilder,
    TransactionScope,
    bounded,
    collection_names,
    end_marker,
    horizon,
    possible,
    transaction_ids,
)

EVENT = (
    b'{"schema":{"type":"struct","fields":[{"field":"transaction","name":"event.block"}]},'
    b'"payload":{"op":"c","after":{"id":1},"transaction":{"id":"571:5342\\"x","total_order":1,'
    b'"data_collection_order":1}}}'
)


def test_transaction_ids_from_bytes_with_fallbacks():
    spaced = json.dumps({"payload": {"op": "u", "transaction": {"id": "9:1"}}}).encode()
    plain = b'{"op":"c","transaction":null}'
    assert transaction_ids([EVENT, None, plain, spaced, b"{}"]) == [
        '571:5342"x',
        None,
        None,
        "9:1",
        None,
    ]


def test_end_markers_with_or_without_the_schema_wrapper():
    end = {"status": "END", "id": "7:1", "event_count": 3,
           "data_collections": [{"data_collection": "s.a", "event_count": 2},
                                {"data_collection": "s.b", "event_count": 1}]}  # fmt: skip
    assert end_marker(4, json.dumps(end).encode()) == EndMarker("7:1", 4, {"s.a": 2, "s.b": 1})
    wrapped = json.dumps({"schema": {}, "payload": end}).encode()
    assert end_marker(5, wrapped) == EndMarker("7:1", 5, {"s.a": 2, "s.b": 1})
    assert end_marker(6, b'{"status":"BEGIN","id":"8:1"}') is None
    assert end_marker(7, b"not json") is None and end_marker(8, None) is None


def test_a_task_stops_at_the_first_event_of_an_unended_transaction():
    scope = TransactionScope(ended=frozenset({"a", "b"}))
    assert scope.cut(("t", 0), [10, 11, 12, 13], ["a", None, "c", "b"]) == 2
    assert TransactionScope(everything=True).cut(("t", 0), [1, 2], ["x", "y"]) == 2
    cuts = TransactionScope(cuts={("t", 0): 12})
    assert cuts.cut(("t", 0), [10, 11, 12], ["a", "a", "b"]) == 2
    assert cuts.cut(("u", 0), [10], ["a"]) == 0


def _runs(*records: tuple[str, int, int, str | None]):
    b = RunBuilder()
    for topic, partition, offset, txid in records:
        b.add((topic, partition), [offset], [txid])
    return b.message().runs


def test_the_horizon_is_the_longest_prefix_of_complete_transactions():
    pending = [
        EndMarker("t1", 0, {"shop.orders": 1, "shop.lines": 2}),
        EndMarker("t2", 1, {"shop.orders": 1, "shop.lines": 1}),
        EndMarker("t3", 2, {"shop.orders": 1}),
    ]
    runs = _runs(
        ("p.shop.orders", 0, 0, "t1"),
        ("p.shop.lines", 0, 0, "t1"),
        ("p.shop.lines", 1, 0, "t1"),
        ("p.shop.orders", 0, 1, "t2"),  # t2's line has not been read yet
        ("p.shop.orders", 0, 2, "t3"),
        ("p.shop.lines", 0, 1, None),  # a snapshot read after t1: committed with it
    )

    def topic(name: str) -> str:
        return f"p.{name}"

    starts = {("p.shop.orders", 0): 0, ("p.shop.lines", 0): 0, ("p.shop.lines", 1): 0}
    h = horizon(pending, runs, starts, topic)
    assert h.included == {"t1"} and h.last == pending[0] and h.blocked_by == "t2"
    assert h.cuts == {("p.shop.orders", 0): 1, ("p.shop.lines", 0): 2, ("p.shop.lines", 1): 1}
    # Tables the pipeline does not replicate are not waited for.
    h = horizon(pending, runs, starts, lambda name: None if name == "shop.lines" else topic(name))
    assert h.included == {"t1", "t2", "t3"} and h.cuts[("p.shop.orders", 0)] == 3


def test_runs_merge_consecutive_events_of_one_transaction():
    b = RunBuilder()
    b.add(("t", 0), [5, 6, 7, 9], ["a", "a", None, None])
    assert b.message().runs == (("t", 0, "a", 5, 6, 2), ("t", 0, None, 7, 9, 2))


def test_the_sniffer_reports_each_schema_once_and_avro_ids():
    sniffer = SchemaSniffer()
    other = EVENT.replace(b'"type":"struct"', b'"type":"struct","optional":false')
    sniffer.add([EVENT, EVENT, None, other, b"\x00\x00\x00\x00\x07rest"])
    texts = [m.schema for m in sniffer.messages()]
    assert len(texts) == 3 and "avro-schema-id:7" in texts


def _sniffed(values: list[bytes | None], vectorized: bool) -> tuple[list[str], set[bytes]]:
    sniffer = SchemaSniffer()
    if vectorized:
        sniffer.add_values(pa.chunked_array([values[:7], values[7:]], pa.binary()))
    else:
        sniffer.add(values)
    return [m.schema for m in sniffer.messages()], sniffer.prefixes


@pytest.mark.parametrize("seed", range(40))
def test_the_vectorized_sniffer_finds_what_the_per_record_one_finds(seed: int) -> None:
    """Over random mixes of schemas (more than its vectorized rounds; one whose text
    starts with another's), nulls, Avro ids, unwrapped JSON, a schema with a field
    named ``payload``, a head that is not UTF-8 and truncated events, ``add_values`` reports the schemas (and keeps the prefixes)
    ``add`` does record by record."""
    rng = random.Random(seed)
    schemas = [
        EVENT.replace(b'"type":"struct"', b'"type":"struct","version":%d' % i) for i in range(6)
    ]
    pool: list[bytes | None] = [
        *schemas,
        None,
        b"\x00\x00\x00\x00\x07rest",
        b"\x00\x00\x00\x01\x00more",
        b'{"op":"c","after":{"id":1}}',
        EVENT.replace(b'"field":"transaction"', b'"field":"payload"'),
        EVENT.replace(b'"payload"', b'"extra":1,"payload"', 1),  # a longer schema text
        b'{"schema":{"x":"\xff"},"payload":{}}',
        EVENT[:40],
    ]
    values = [rng.choice(pool) for _ in range(rng.randint(1, 60))]
    assert _sniffed(values, vectorized=True) == _sniffed(values, vectorized=False)


def test_ranges_are_packed_into_few_tasks_keeping_groups_whole():
    from calving.ingest.sink.many.sink import pack

    groups = [[("a", 0, 0, 100)], [("b", 0, 0, 10)], [("c", 0, 0, 60), ("c", 1, 0, 50)],
              [("d", 0, 0, 30)], [("e", 0, 5, 5)]]  # fmt: skip
    packed = pack(groups, 2)
    assert len(packed) == 2
    assert sorted(r for g in packed for r in g) == sorted(r for g in groups for r in g)
    assert sorted(sum(r[3] - r[2] for r in g) for g in packed) == [120, 130]
    assert any(("c", 0, 0, 60) in g and ("c", 1, 0, 50) in g for g in packed)
    assert pack(groups[:2], 4) == groups[:2]


@pytest.mark.parametrize(
    ("source", "names"),
    [
        ({"connector": "postgresql", "db": "shop", "schema": "public", "table": "orders"},
         ["public.orders", "shop.orders", "shop.public.orders"]),
        ({"connector": "mysql", "db": "inventory", "table": "customers"}, ["inventory.customers"]),
        ({"connector": "mongodb", "db": "inv", "collection": "items"}, ["inv.items"]),
        ({"connector": "mysql", "db": "inventory"}, []),
        (None, []),
    ],
)  # fmt: skip
def test_a_source_block_names_its_data_collection(source, names):
    assert collection_names(source) == names


def test_a_batch_is_bounded_keeping_each_partitions_first_offsets():
    spans = {
        "a": [OffsetRange("a", 0, 100, 700), OffsetRange("a", 1, 0, 300)],
        "b": [OffsetRange("b", 0, 50, 150)],
    }
    out = bounded(spans, 500)
    assert sum(r.end - r.start for rs in out.values() for r in rs) == 500
    assert out == {
        "a": [OffsetRange("a", 0, 100, 400), OffsetRange("a", 1, 0, 150)],
        "b": [OffsetRange("b", 0, 50, 100)],
    }
    assert bounded(spans, 1000) == spans
    tiny = bounded(spans, 2)  # the largest remainders get the records left
    assert sum(r.end - r.start for rs in tiny.values() for r in rs) == 2


def test_only_transactions_whose_events_fit_are_written():
    pending = [
        EndMarker("t1", 1, {"s.a": 3, "s.b": 1}),
        EndMarker("t2", 2, {"s.a": 5}),
        EndMarker("t3", 3, {"s.b": 1, "s.skipped": 100}),
    ]
    topic = {"s.a": "p.s.a", "s.b": "p.s.b"}.get
    assert possible(pending, {"p.s.a": 8, "p.s.b": 2}, topic) == {"t1", "t2", "t3"}
    assert possible(pending, {"p.s.a": 7, "p.s.b": 2}, topic) == {"t1"}  # t2 needs 8
    assert possible(pending, {"p.s.a": 3}, topic) == frozenset()  # no p.s.b records

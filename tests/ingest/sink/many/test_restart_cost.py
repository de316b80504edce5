"""What a many-table pipeline's restart costs per table: new topics routed from first
events fetched together on one consumer (not a consumer and a fetch each), a table
loaded with one catalog read, a settled schema record planned without the catalog, and every
table's index saved at stop in one catalog transaction. Against the embedded broker
and a SQLite catalog, the batches' tasks in process."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from calving.commit.catalog.sql import SqlCatalog
from calving.commit.index.store import INDEX_LOCATION_PROPERTY
from calving.commit.table.table import Table, create_table
from calving.ingest.config.table_names import parse_template
from calving.ingest.demo.database import SourceDatabase, plain_table
from calving.ingest.kafka import range_reader
from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.kafka.producer import produce
from calving.ingest.pipeline import build_many_sink
from calving.ingest.sink.many.discover import PROBE_OFFSETS, first_event, first_events
from calving.ingest.sink.many.runner import InProcessRunner
from tests.ingest.conftest import unique_name
from tests.support.database import create_topics, many_config, produce_pending
from tests.support.oracles import pyiceberg_rows
from tests.support.tables import EVENTS

pytestmark = pytest.mark.integration


def _database(tables: int) -> SourceDatabase:
    db = SourceDatabase(prefix=unique_name("rc"), transaction_metadata=False)
    for i in range(tables):
        db.add_table(plain_table(f"t{i:02d}"))
    return db


def _touch(db: SourceDatabase, keys: range) -> None:
    for name in db.tables:
        txn = db.begin()
        for i in keys:
            txn.upsert(name, {"id": i, "code": f"{name}-{i}", "amount": i, "active": True})
        db.commit(txn)


def _ranges(ends: dict[str, dict[int, int]], since: dict[str, dict[int, int]] | None = None):
    since = since or {}
    return [
        (topic, p, since.get(topic, {}).get(p, 0), end)
        for topic, parts in ends.items()
        for p, end in parts.items()
        if end > since.get(topic, {}).get(p, 0)
    ]


class _Calls:
    calls = 0


def _count(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> _Calls:
    """Counts the calls of ``owner.name`` while the test runs."""
    counter = _Calls()
    real = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        counter.calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return counter


def _consumers(monkeypatch: pytest.MonkeyPatch) -> _Calls:
    """Counts the Kafka consumers created from now on (no idle one to take over)."""
    range_reader.close_idle_consumers()
    return _count(monkeypatch, range_reader, "_new_consumer")


def _first_batch(
    broker: Any, tmp_path: Path, tables: int, keys: range
) -> tuple[SourceDatabase, Any, dict[str, dict[int, int]], Any]:
    """``tables`` plain tables with ``keys`` upserted, produced and written by one
    in-process batch: (database, config, end offsets, sink)."""
    db = _database(tables)
    create_topics(broker, db)
    _touch(db, keys)
    ends = produce_pending(broker.bootstrap_servers, db)
    config = many_config(db, broker.bootstrap_servers, f"sqlite:///{tmp_path}/c.db", tmp_path / "w")
    sink = build_many_sink(config)
    sink.run_batch(InProcessRunner(parallelism=1), _ranges(ends), 0)
    return db, config, ends, sink


def test_first_events_of_many_topics_come_from_one_consumer_and_match_one_by_one(
    broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _database(6)
    create_topics(broker, db)
    _touch(db, range(3))
    ends = produce_pending(broker.bootstrap_servers, db)
    config = many_config(db, broker.bootstrap_servers, f"sqlite:///{tmp_path}/c.db", tmp_path / "w")
    options = build_many_sink(config).source_options
    # A topic whose first change event comes after more tombstones than the probe
    # reads, and one of tombstones only (no event yet: it waits).
    late, empty = f"{db.prefix}.late", f"{db.prefix}.empty"
    for topic in (late, empty):
        broker.create_topic(topic, 1)
    donor = next(iter(ends))
    tombstone = (0, b'{"id": 1}', None, None)
    produce(broker.bootstrap_servers, late, [tombstone] * (PROBE_OFFSETS + 4))
    produce(broker.bootstrap_servers, late, _records(options, donor, ends[donor][0])[:1])
    produce(broker.bootstrap_servers, empty, [tombstone] * 3)
    spans = {t: [OffsetRange(t, 0, 0, parts[0])] for t, parts in ends.items()}
    spans[late] = [OffsetRange(late, 0, 0, PROBE_OFFSETS + 5)]
    spans[empty] = [OffsetRange(empty, 0, 0, 3)]

    consumers = _consumers(monkeypatch)
    together = first_events(options, spans)
    assert consumers.calls == 1, "every topic's probe on one consumer"

    assert sorted(together) == sorted(spans)
    assert together[empty] is None
    for topic, ranges in spans.items():
        alone = first_event(options, ranges)  # the oracle: a topic on its own consumer
        got = together[topic]
        if alone is None:
            assert got is None, topic
            continue
        assert got is not None, topic
        assert (got.value_schema, got.key_schema, got.source) == (
            alone.value_schema,
            alone.key_schema,
            alone.source,
        ), topic
        assert got.value_schema is not None, topic
    late_event = together[late]
    assert late_event is not None and late_event.sample.num_rows == PROBE_OFFSETS + 5


def _records(options: Any, topic: str, end: int) -> list[tuple[int, bytes, bytes, None]]:
    from calving.ingest.kafka.source import kafka_arrow_schema

    out = []
    for rb in range_reader.read_range(options, OffsetRange(topic, 0, 0, end), kafka_arrow_schema()):
        for key, value in zip(rb.column("key").to_pylist(), rb.column("value").to_pylist()):
            out.append((0, key, value, None))
    return out


def test_a_restart_routes_loads_and_saves_every_table_at_the_cost_of_a_few(
    broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, config, first, sink = _first_batch(broker, tmp_path, 12, range(4))
    sink.close()

    # The restart: a new sink over the same tables.
    _touch(db, range(2, 5))  # updates of keys 2 and 3, an insert of 4
    second = produce_pending(broker.bootstrap_servers, db)
    again = build_many_sink(config)
    consumers = _consumers(monkeypatch)
    catalog = again.catalog
    assert isinstance(catalog, SqlCatalog)
    reads = _count(monkeypatch, catalog, "load_metadata_location")
    again.run_batch(InProcessRunner(parallelism=1), _ranges(second, first), 1)
    assert consumers.calls <= 2, "the route stage's probes share one consumer (the task one)"
    # Per table: its load (one read) and its commit's (two reads each, and a schema
    # record already the table's read the catalog for nothing: 37 reads here before).
    assert reads.calls <= 2 * len(db.tables) + 2, reads.calls

    saved_before = {
        n: r.table.metadata.properties.get(INDEX_LOCATION_PROPERTY) for n, r in again.tables.items()
    }
    transactions = _count(monkeypatch, catalog, "commit_many")
    again.close()
    assert transactions.calls == 1, "every table's index named in one catalog transaction"
    for name, routed in again.tables.items():
        table = Table.load(catalog, routed.table.ident, routed.table.io)
        location = table.metadata.properties[INDEX_LOCATION_PROPERTY]
        assert location != saved_before[name] and table.io.exists(location), name
        assert not table.io.exists(saved_before[name]), f"{name}: the old index file goes"
        short = name.split(".")[-1]
        columns = db.tables[short].column_names
        assert pyiceberg_rows(table.metadata_location, columns) == db.expected(short)


def test_a_restart_opens_existing_tables_without_reading_their_topics_first(
    broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from calving.ingest.sink.many import route

    db, config, first, sink = _first_batch(broker, tmp_path, 5, range(3))
    sink.close()
    db.add_table(plain_table("fresh"))  # a table the source gains while the writer is down
    create_topics(broker, db, ["fresh"])
    _touch(db, range(2, 4))
    second = produce_pending(broker.bootstrap_servers, db)

    again = build_many_sink(config)
    probed: list[str] = []
    real = route.first_events

    def counted(options: Any, spans: Any, *args: Any) -> Any:
        probed.extend(spans)
        return real(options, spans, *args)

    monkeypatch.setattr(route, "first_events", counted)
    again.run_batch(InProcessRunner(parallelism=1), _ranges(second, first), 1)
    # Only the new table's topic is read before its table is made; the five that have
    # a table are routed by name and opened from the catalog.
    assert probed == [db.topic("fresh")]
    assert sorted(again.tables) == sorted([*sink.tables, "inventory.fresh"])
    # The data collections END markers name map to the same topics as from the events.
    assert {c: t for c, t in again.collections.items() if t != db.topic("fresh")} == (
        sink.collections
    )
    assert "inventory.fresh" in again.collections
    for name, routed in again.tables.items():
        short = name.split(".")[-1]
        columns = db.tables[short].column_names
        rows = pyiceberg_rows(routed.table.metadata_location, columns)
        assert rows == db.expected(short), name


def test_a_changed_name_template_routes_a_restart_as_the_events_would(
    broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from calving.ingest.sink.many import route

    db, config, first, sink = _first_batch(broker, tmp_path, 3, range(2))
    sink.close()
    _touch(db, range(1, 3))
    second = produce_pending(broker.bootstrap_servers, db)
    assert config.router is not None
    renamed = replace(
        config,
        router=replace(
            config.router, template=parse_template("table.name", "cdc_{schema}.{table}")
        ),
    )
    again = build_many_sink(renamed)
    probed: list[str] = []
    real = route.first_events
    monkeypatch.setattr(
        route, "first_events", lambda o, spans, *a: probed.extend(spans) or real(o, spans, *a)
    )
    again.run_batch(InProcessRunner(parallelism=1), _ranges(second, first), 1)
    # The recorded fields render to tables that do not exist yet: made from the events.
    assert sorted(probed) == sorted(db.topic(n) for n in db.tables)
    assert sorted(again.tables) == sorted(f"cdc_inventory.{n}" for n in db.tables)


def test_table_load_reads_the_catalog_once(sqlite_catalog, monkeypatch) -> None:
    create_table(sqlite_catalog, ("db", "t"), EVENTS)
    reads = _count(monkeypatch, sqlite_catalog, "load_metadata_location")
    table = Table.load(sqlite_catalog, ("db", "t"))
    assert reads.calls == 1
    assert table.metadata.schema.fields == EVENTS.fields


def test_a_stop_whose_index_write_fails_leaves_no_unnamed_index_file(
    broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from calving.commit import index as pk
    from calving.commit.errors import FileIOError

    _, _, _, sink = _first_batch(broker, tmp_path, 4, range(3))
    real = pk.save
    written: list[str] = []

    def third_fails(io: Any, index: Any, location: str) -> str:
        if len(written) == 2:
            raise FileIOError("disk full (injected)")
        written.append(real(io, index, location))
        return written[-1]

    monkeypatch.setattr(pk, "save", third_fails)
    with pytest.raises(FileIOError, match="injected"):
        sink.close()
    assert len(written) == 2
    io = next(iter(sink.tables.values())).table.io
    for location in written:
        assert not io.exists(location), "an index file no table names is deleted"
    for routed in sink.tables.values():
        assert (
            INDEX_LOCATION_PROPERTY
            not in Table.load(catalog_of(sink), routed.table.ident).metadata.properties
        )


def catalog_of(sink: Any) -> Any:
    return sink.catalog

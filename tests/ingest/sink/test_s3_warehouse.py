"""A table on an S3-compatible store (a moto server on loopback): the driver's FileIO
properties (endpoint, credentials) reach the executors, which write the data files
there; pyiceberg reads the table back through the same endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from calving.commit.io import FileIO
from calving.commit.table.table import Table, create_table
from calving.ingest.decode import JsonValueDecoder
from calving.ingest.kafka.producer import produce
from calving.ingest.sink.foreach_batch import CalvingSink
from tests.ingest.sink.test_append_stream import COLUMNS, SCHEMA
from tests.support.s3 import moto_bucket
from tests.support.streams import drain

pytestmark = pytest.mark.integration

BUCKET = "lake"


@pytest.fixture(scope="module")
def s3_properties() -> Iterator[dict[str, str]]:
    """A moto S3 server on loopback with an empty bucket: FileIO properties."""
    with moto_bucket(BUCKET) as props:
        yield props


def test_executors_write_to_the_tables_endpoint(spark, broker, make_topic, tmp_path, s3_properties):
    from calving.commit.catalog.sql import SqlCatalog

    io = FileIO(s3_properties)
    catalog = SqlCatalog("s3test", f"sqlite:///{tmp_path}/catalog.db", f"s3://{BUCKET}/wh", io=io)
    catalog.create_namespace(("db",))
    table = create_table(catalog, ("db", "events"), SCHEMA, io=io)
    assert table.metadata.location.startswith(f"s3://{BUCKET}/wh/")

    topic = make_topic(partitions=2)
    n = 2_000
    records = [
        (i % 2, None, json.dumps({"id": i, "name": f"n{i}", "amount": i / 2}).encode(), None)
        for i in range(n)
    ]
    produce(broker.bootstrap_servers, topic, records)
    sink = CalvingSink(table, JsonValueDecoder, "s3-writer")
    drain(spark, broker.bootstrap_servers, topic, sink, str(tmp_path / "ckpt"),
          max_offsets_per_trigger=700)  # fmt: skip

    table = Table.load(catalog, ("db", "events"), io)
    live = table.live_files()
    assert live.data and all(p.startswith(f"s3://{BUCKET}/wh/") for p in live.data)
    for path in live.data:  # really in the bucket, not on a local disk or at AWS
        assert io.exists(path)

    from pyiceberg.table import StaticTable

    theirs = StaticTable.from_metadata(table.metadata_location, properties=s3_properties)
    got = theirs.scan().to_arrow().select(COLUMNS)
    rows = sorted(zip(*(got.column(c).to_pylist() for c in COLUMNS)))
    assert rows == sorted((i, f"n{i}", i / 2) for i in range(n))


def test_row_delta_on_s3_writes_each_dv_and_manifest_there(tmp_path, s3_properties):
    """A commit with several DVs on object storage (the batched, concurrent writes of
    Puffin files and manifests go through S3 puts, not the local fsync path)."""
    import pyarrow as pa
    from pyroaring import BitMap64

    from calving.commit.catalog.sql import SqlCatalog
    from calving.commit.table.actions.fast_append import FastAppend
    from calving.commit.table.actions.row_delta import RowDelta
    from calving.ingest.write.parquet_writer import write_data_file

    io = FileIO(s3_properties)
    catalog = SqlCatalog("s3dv", f"sqlite:///{tmp_path}/catalog.db", f"s3://{BUCKET}/dv", io=io)
    catalog.create_namespace(("db",))
    table = create_table(catalog, ("db", "keyed"), SCHEMA, io=io)
    files = []
    for n in range(3):
        rows = pa.table(
            {
                "id": pa.array(range(n * 10, n * 10 + 10), pa.int64()),
                "name": [f"n{i}" for i in range(10)],
                "amount": [float(i) for i in range(10)],
                "src_partition": pa.array([n] * 10, pa.int32()),
                "src_offset": pa.array(range(10), pa.int64()),
            }
        )
        location = f"{table.metadata.location}/data/f{n}.parquet"
        files.append(write_data_file(io, location, rows, table.metadata.schema))
    table.commit_or_raise(FastAppend(tuple(files)))
    table.commit_or_raise(RowDelta(deletes={f.file_path: BitMap64([0, 9]) for f in files}))

    live = table.live_files()
    puffins = {e.data_file.file_path for e in live.dvs.values()}
    assert len(puffins) == 3 and all(p.startswith(f"s3://{BUCKET}/dv/") for p in puffins)
    assert all(io.exists(p) for p in puffins)

    from pyiceberg.table import StaticTable

    theirs = StaticTable.from_metadata(table.metadata_location, properties=s3_properties)
    ids = sorted(theirs.scan().to_arrow().column("id").to_pylist())
    assert ids == [i for i in range(30) if i % 10 not in (0, 9)]

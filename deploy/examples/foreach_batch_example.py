"""calving as a foreachBatch sink in your own PySpark job (the foreachBatch guide's
example of decoded rows).

A file stream of decoded order events (JSON lines with an ``op`` column) is upserted
and deleted into an Iceberg v3 table keyed by ``id``, exactly once per Spark batch id.
Then the table is read back with pyiceberg (the ``demo`` extra) and compared with the
expected rows. No environment variable is needed: ``calving.sink()`` makes Spark's
Python workers run this interpreter unless ``PYSPARK_PYTHON`` says otherwise.

    .venv/bin/python deploy/examples/foreach_batch_example.py [WORKDIR]
"""

import json
import os
import sys
import tempfile

from pyspark.sql import SparkSession

import calving

work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="calving-example-")
inbox = os.path.join(work, "inbox")
os.makedirs(inbox, exist_ok=True)

# Three files, one Spark batch each (maxFilesPerTrigger=1); seq orders a key's events.
events = [
    [(1, "alice", 10.0, "c", 1), (2, "bob", 20.0, "c", 2), (3, "carol", 30.0, "c", 3)],
    [(1, "alice", 11.0, "u", 4), (2, None, None, "d", 5), (4, "dave", 40.0, "c", 6)],
    [(4, "dave", 41.0, "u", 7), (4, "dave", 42.0, "u", 8), (5, "erin", 50.0, "c", 9)],
]
for i, batch in enumerate(events):
    path = os.path.join(inbox, f"part-{i}.json")
    with open(path, "w") as f:
        for id_, name, amount, op, seq in batch:
            row = {"id": id_, "name": name, "amount": amount, "op": op, "seq": seq}
            f.write(json.dumps(row) + "\n")
    os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # the file source's order

spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.driver.host", "127.0.0.1")  # a job on one machine: loopback only
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
orders = (
    spark.readStream.schema("id BIGINT, name STRING, amount DOUBLE, op STRING, seq BIGINT")
    .option("maxFilesPerTrigger", 1)
    .json(inbox)
)

sink = calving.sink(
    catalog=f"sqlite:///{work}/catalog.db",
    warehouse=f"{work}/warehouse",
    table="shop.orders",
    writer_id="orders-job",
    columns=[
        {"name": "id", "type": "long", "required": True},
        {"name": "name", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
    identifier_fields=["id"],
    op_column="op",  # upsert: upsert/insert/update/c/u/r (null too); delete: delete/d
    order_column="seq",  # a key's last event in a batch wins by seq
)
with sink:
    query = (
        orders.writeStream.foreachBatch(sink)
        .option("checkpointLocation", f"{work}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

# Read the table back with another Iceberg reader (calving's SQL catalog is named
# "calving" unless catalog_name says otherwise) and check it.
from pyiceberg.catalog.sql import SqlCatalog

catalog = SqlCatalog("calving", uri=f"sqlite:///{work}/catalog.db", warehouse=f"{work}/warehouse")
rows = catalog.load_table("shop.orders").scan().to_arrow().sort_by("id").to_pylist()
got = [(r["id"], r["name"], r["amount"]) for r in rows]
expected = [(1, "alice", 11.0), (3, "carol", 30.0), (4, "dave", 42.0), (5, "erin", 50.0)]
print("rows:", got)
if got != expected:
    sys.exit(f"unexpected rows: {got} != {expected}")
# The writer's ledger holds the last committed Spark batch id: a replayed batch is skipped.
if sink.last_batch_id() != 2:
    sys.exit(f"expected batches 0..2 committed, the ledger says {sink.last_batch_id()}")
print("ok: batches 0..2 committed exactly once")
spark.stop()

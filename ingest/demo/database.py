"""A seeded source database and the Debezium change events of its transactions.

``SourceDatabase`` keeps tables (columns with Kafka Connect types, a primary key) and
their rows; every change made through a ``Transaction`` becomes a Debezium envelope as
the Kafka Connect JSON converter writes it (``{"schema": ..., "payload": ...}``, key and
value), on the table's topic ``<prefix>.<schema>.<table>``, with the ``transaction``
block, and each committed transaction adds ``BEGIN`` / ``END`` records to
``<prefix>.transaction`` (``provide.transaction.metadata``). Deletes are followed by a
tombstone. Schema changes (``add_column``, ``change_type``) change the schema the next
events carry. ``snapshot`` loads rows into tables as Debezium's initial snapshot emits
them (``op`` r, no transaction block, ``source.snapshot`` marking the first and last
rows). ``expected(table)`` is what a replica must hold.

``ShopWorkload`` drives it: customers, orders and order lines changed in multi-table
transactions (an order and its lines are created, changed and deleted together, and
each order's ``total`` is the sum of its lines' ``qty * price``), plus any number of
plain tables, so a reader can check the replica's cross-table consistency.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

KafkaRecord = tuple[int, bytes | None, bytes | None, None]

_EPOCH = dt.datetime(2026, 1, 1)
_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_MICRO_TS = "io.debezium.time.MicroTimestamp"


@dataclass(frozen=True)
class Column:
    name: str
    #: Kafka Connect type: int32, int64, string, boolean, float32, float64, decimal,
    #: timestamp, or struct (of ``fields``).
    type: str
    optional: bool = True
    scale: int = 2
    precision: int = 12
    fields: tuple[Column, ...] = ()

    def schema(self) -> dict[str, Any]:
        if self.type == "struct":
            return {"type": "struct", "optional": self.optional, "name": f"demo.{self.name}",
                    "fields": [f.schema() for f in self.fields], "field": self.name}  # fmt: skip
        if self.type == "decimal":
            params = {"scale": str(self.scale), "connect.decimal.precision": str(self.precision)}
            return {
                "type": "bytes",
                "optional": self.optional,
                "name": _DECIMAL,
                "version": 1,
                "parameters": params,
                "field": self.name,
            }
        if self.type == "timestamp":
            return {"type": "int64", "optional": self.optional, "name": _MICRO_TS, "version": 1,
                    "field": self.name}  # fmt: skip
        return {"type": self.type, "optional": self.optional, "field": self.name}

    def avro_type(self) -> Any:
        """The column's Avro type as Debezium's Avro converter writes it."""
        t: Any
        if self.type == "decimal":
            params = {"scale": str(self.scale), "connect.decimal.precision": str(self.precision)}
            t = {"type": "bytes", "logicalType": "decimal", "precision": self.precision,
                 "scale": self.scale, "connect.version": 1, "connect.parameters": params,
                 "connect.name": _DECIMAL}  # fmt: skip
        elif self.type == "timestamp":
            t = {"type": "long", "connect.version": 1, "connect.name": _MICRO_TS}
        elif self.type == "struct":
            t = {"type": "record", "name": f"{self.name}_struct", "connect.name": f"demo.{self.name}",
                 "fields": [{"name": f.name, "type": f.avro_type(),
                             **({"default": None} if f.optional else {})} for f in self.fields]}  # fmt: skip
        else:
            t = _AVRO_PRIMITIVES[self.type]
        return ["null", t] if self.optional else t

    def avro_value(self, value: Any) -> Any:
        """A Python value -> what fastavro writes for ``avro_type``."""
        if value is not None and self.type == "struct":
            return {f.name: f.avro_value(value.get(f.name)) for f in self.fields}
        if value is None or self.type != "timestamp":
            return Decimal(value) if self.type == "decimal" and value is not None else value
        return self.encode(value)

    def encode(self, value: Any) -> Any:
        """A Python value -> the JSON converter's payload value."""
        if value is None:
            return None
        if self.type == "struct":
            return {f.name: f.encode(value.get(f.name)) for f in self.fields}
        if self.type == "decimal":
            unscaled = int((Decimal(value) * (10**self.scale)).to_integral_value())
            size = max(1, (unscaled.bit_length() + 8) // 8)
            return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()
        if self.type == "timestamp":
            return (value - _EPOCH) // dt.timedelta(microseconds=1) + _EPOCH_MICROS
        return value


#: ``source.snapshot`` as Debezium 2.x declares it (JSON converter, Avro converter).
_SNAPSHOT_VALUES = (
    "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
)
_SNAPSHOT_FIELD = {"type": "string", "optional": True, "name": "io.debezium.data.Enum",
                   "version": 1, "parameters": {"allowed": _SNAPSHOT_VALUES},
                   "default": "false", "field": "snapshot"}  # fmt: skip
_SNAPSHOT_AVRO_FIELD = {"name": "snapshot", "default": "false", "type": [
    {"type": "string", "connect.version": 1, "connect.parameters": {"allowed": _SNAPSHOT_VALUES},
     "connect.default": "false", "connect.name": "io.debezium.data.Enum"}, "null"]}  # fmt: skip

_AVRO_PRIMITIVES = {"int32": "int", "int64": "long", "string": "string", "boolean": "boolean",
                    "float32": "float", "float64": "double"}  # fmt: skip
_EPOCH_MICROS = int(_EPOCH.replace(tzinfo=dt.timezone.utc).timestamp()) * 1_000_000


@dataclass
class SourceTable:
    schema: str
    name: str
    columns: list[Column]
    key: tuple[str, ...] = ("id",)
    partitions: int = 1
    rows: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def value_schema(self, prefix: str) -> dict[str, Any]:
        base = f"{prefix}.{self.schema}.{self.name}"
        row = {"type": "struct", "optional": True, "name": f"{base}.Value",
               "fields": [c.schema() for c in self.columns]}  # fmt: skip
        source = {
            "type": "struct",
            "optional": False,
            "name": "io.debezium.connector.postgresql.Source",
            "field": "source",
            "fields": [
                {"type": "string", "optional": False, "field": "connector"},
                {"type": "string", "optional": False, "field": "name"},
                {"type": "string", "optional": False, "field": "db"},
                {"type": "string", "optional": False, "field": "schema"},
                {"type": "string", "optional": False, "field": "table"},
                {"type": "int64", "optional": True, "field": "lsn"},
                _SNAPSHOT_FIELD,
            ],
        }
        txn = {
            "type": "struct",
            "optional": True,
            "name": "event.block",
            "field": "transaction",
            "fields": [
                {"type": "string", "optional": False, "field": "id"},
                {"type": "int64", "optional": False, "field": "total_order"},
                {"type": "int64", "optional": False, "field": "data_collection_order"},
            ],
        }
        return {
            "type": "struct",
            "optional": False,
            "name": f"{base}.Envelope",
            "fields": [
                {**row, "field": "before"},
                {**row, "field": "after"},
                source,
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
                txn,
            ],
        }

    def key_schema(self, prefix: str) -> dict[str, Any]:
        fields = [c.schema() | {"optional": False} for c in self.columns if c.name in self.key]
        return {"type": "struct", "optional": False,
                "name": f"{prefix}.{self.schema}.{self.name}.Key", "fields": fields}  # fmt: skip

    def value_avro_schema(self, prefix: str) -> dict[str, Any]:
        """The envelope's Avro writer schema (``after`` names ``before``'s record)."""
        base = f"{prefix}.{self.schema}.{self.name}"
        fields = [
            {"name": c.name, "type": c.avro_type(), **({"default": None} if c.optional else {})}
            for c in self.columns
        ]
        row = {"type": "record", "name": "Value", "namespace": base, "fields": fields,
               "connect.name": f"{base}.Value"}  # fmt: skip
        strings = ("connector", "name", "db", "schema", "table")
        source = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                  "fields": [{"name": n, "type": "string"} for n in strings]
                  + [{"name": "lsn", "type": ["null", "long"], "default": None},
                     _SNAPSHOT_AVRO_FIELD],
                  "connect.name": "io.debezium.connector.postgresql.Source"}  # fmt: skip
        block = {"type": "record", "name": "block", "namespace": "event",
                 "fields": [{"name": "id", "type": "string"},
                            {"name": "total_order", "type": "long"},
                            {"name": "data_collection_order", "type": "long"}],
                 "connect.name": "event.block"}  # fmt: skip
        return {
            "type": "record",
            "name": "Envelope",
            "namespace": base,
            "connect.name": f"{base}.Envelope",
            "fields": [
                {"name": "before", "type": ["null", row], "default": None},
                {"name": "after", "type": ["null", f"{base}.Value"], "default": None},
                {"name": "source", "type": source},
                {"name": "op", "type": "string"},
                {"name": "ts_ms", "type": ["null", "long"], "default": None},
                {"name": "transaction", "type": ["null", block], "default": None},
            ],
        }

    def key_avro_schema(self, prefix: str) -> dict[str, Any]:
        base = f"{prefix}.{self.schema}.{self.name}"
        fields = [
            {"name": c.name, "type": c.avro_type()} for c in self.columns if c.name in self.key
        ]
        for f in fields:
            f["type"] = f["type"][1] if isinstance(f["type"], list) else f["type"]
        return {"type": "record", "name": "Key", "namespace": base, "fields": fields,
                "connect.name": f"{base}.Key"}  # fmt: skip

    def avro_row(self, row: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        return {c.name: c.avro_value(row.get(c.name)) for c in self.columns}

    def payload(self, row: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        return {c.name: c.encode(row.get(c.name)) for c in self.columns}

    def partition(self, key: tuple[Any, ...]) -> int:
        return hash(key) % self.partitions if self.partitions > 1 else 0


class Transaction:
    """Changes made together; ``SourceDatabase.commit`` turns them into events."""

    def __init__(self, db: SourceDatabase, txid: str) -> None:
        self.db = db
        self.id = txid
        self.events: list[
            tuple[SourceTable, str, dict[str, Any] | None, dict[str, Any] | None]
        ] = []

    def upsert(self, table: str, row: Mapping[str, Any]) -> None:
        t = self.db.tables[table]
        key = tuple(row[k] for k in t.key)
        before = t.rows.get(key)
        after = {c: row.get(c) for c in t.column_names}
        t.rows[key] = after
        self.events.append((t, "u" if before is not None else "c", before, after))

    def delete(self, table: str, key: tuple[Any, ...]) -> None:
        t = self.db.tables[table]
        before = t.rows.pop(key)
        self.events.append((t, "d", before, None))


@dataclass
class SourceDatabase:
    prefix: str = "dbserver1"
    db: str = "shop"
    tables: dict[str, SourceTable] = field(default_factory=dict)
    #: Records not yet taken (``take_records``), by topic.
    pending: dict[str, list[KafkaRecord]] = field(default_factory=dict)
    lsn: int = 1000
    transactions: int = 0
    #: With ``provide.transaction.metadata``: events carry a transaction block and the
    #: transaction topic gets BEGIN / END records.
    transaction_metadata: bool = True
    #: Confluent Avro values and keys (writer schemas as ``<id>.avsc`` files in
    #: ``schema_dir``) instead of the JSON converter's.
    schema_dir: Path | None = None
    schema_ids: dict[str, int] = field(default_factory=dict)
    #: Keep every table's expected rows after each transaction (``history[txid]``).
    keep_history: bool = False
    history: dict[str, dict[str, list[tuple[Any, ...]]]] = field(default_factory=dict)

    @property
    def transaction_topic(self) -> str:
        return f"{self.prefix}.transaction"

    def topic(self, table: str) -> str:
        t = self.tables[table]
        return f"{self.prefix}.{t.schema}.{t.name}"

    def add_table(self, table: SourceTable) -> None:
        self.tables[table.name] = table

    def add_column(self, table: str, column: Column) -> None:
        self.tables[table].columns.append(column)

    def add_nested_field(self, table: str, column: str, added: Column) -> None:
        """A field added inside struct ``column``; rows so far have no value for it."""
        t = self.tables[table]
        t.columns = [
            replace(c, fields=(*c.fields, added)) if c.name == column else c for c in t.columns
        ]
        for row in t.rows.values():
            if row.get(column) is not None:
                row[column] = {**row[column], added.name: None}

    def drop_column(self, table: str, name: str) -> None:
        """The source drops a column (its events stop carrying it)."""
        t = self.tables[table]
        t.columns = [c for c in t.columns if c.name != name]
        for row in t.rows.values():
            row.pop(name, None)

    def change_type(self, table: str, name: str, new_type: str) -> None:
        t = self.tables[table]
        t.columns = [
            Column(c.name, new_type, c.optional) if c.name == name else c for c in t.columns
        ]

    def snapshot(self, rows: Mapping[str, Iterable[Mapping[str, Any]]]) -> int:
        """Load ``rows`` (by table name) into tables that hold none yet and emit them as
        Debezium's initial snapshot does: one ``op`` r event per row (``before`` null,
        no transaction block, no transaction markers), all at the snapshot's position,
        ``source.snapshot`` "first" on the snapshot's first row, "last" on its last,
        "first_in_data_collection" / "last_in_data_collection" on each table's first and
        last, "true" on the others. Returns the number of events."""
        loaded: list[tuple[SourceTable, dict[str, Any]]] = []
        for name, table_rows in rows.items():
            t = self.tables[name]
            if t.rows:
                raise ValueError(f"table {name} already has rows; a snapshot starts a table")
            for row in table_rows:
                after = {c: row.get(c) for c in t.column_names}
                key = tuple(after[k] for k in t.key)
                if key in t.rows:
                    raise ValueError(f"table {name}: key {key} twice in the snapshot")
                t.rows[key] = after
                loaded.append((t, after))
        for i, (t, after) in enumerate(loaded):
            if i == len(loaded) - 1:
                marker = "last"
            elif i == 0:
                marker = "first"
            elif loaded[i + 1][0] is not t:
                marker = "last_in_data_collection"
            elif loaded[i - 1][0] is not t:
                marker = "first_in_data_collection"
            else:
                marker = "true"
            self._event(t, "r", None, after, None, snapshot=marker)
        return len(loaded)

    def begin(self) -> Transaction:
        self.transactions += 1
        return Transaction(self, f"{self.transactions}:{self.lsn}")

    def commit(self, txn: Transaction) -> None:
        if not txn.events:
            return
        counts: dict[str, int] = {}
        for order, (t, op, before, after) in enumerate(txn.events, start=1):
            self.lsn += 1
            collection = f"{t.schema}.{t.name}"  # Debezium names a data collection so
            counts[collection] = counts.get(collection, 0) + 1
            block = {"id": txn.id, "total_order": order,
                     "data_collection_order": counts[collection]}  # fmt: skip
            self._event(t, op, before, after, block if self.transaction_metadata else None)
        if self.transaction_metadata:
            self._markers(txn, counts)
        if self.keep_history:
            self.history[txn.id] = {name: self.expected(name) for name in self.tables}

    def _event(
        self,
        t: SourceTable,
        op: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        block: dict[str, Any] | None,
        snapshot: str = "false",
    ) -> None:
        row = after if after is not None else before
        assert row is not None
        key = tuple(row[k] for k in t.key)
        source = {"connector": "postgresql", "name": self.prefix, "db": self.db,
                  "schema": t.schema, "table": t.name, "lsn": self.lsn,
                  "snapshot": snapshot}  # fmt: skip
        payload = {"before": t.payload(before), "after": t.payload(after), "source": source,
                   "op": op, "ts_ms": self.lsn, "transaction": block}  # fmt: skip
        if self.schema_dir is not None:
            raw_value, raw_key = self._avro(t, payload, before, after, row)
        else:
            value = {"schema": t.value_schema(self.prefix), "payload": payload}
            key_payload = {c.name: c.encode(row.get(c.name)) for c in t.columns if c.name in t.key}
            key_doc = {"schema": t.key_schema(self.prefix), "payload": key_payload}
            raw_key, raw_value = _dumps(key_doc), _dumps(value)
        topic = self.topic(t.name)
        part = t.partition(key)
        self.pending.setdefault(topic, []).append((part, raw_key, raw_value, None))
        if op == "d":
            self.pending[topic].append((part, raw_key, None, None))

    def _avro(
        self,
        t: SourceTable,
        payload: dict[str, Any],
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        row: dict[str, Any],
    ) -> tuple[bytes, bytes]:
        record = {**payload, "before": t.avro_row(before), "after": t.avro_row(after)}
        key = {c.name: row.get(c.name) for c in t.columns if c.name in t.key}
        return (
            self._framed(t.value_avro_schema(self.prefix), record),
            self._framed(t.key_avro_schema(self.prefix), key),
        )

    def _framed(self, schema: dict[str, Any], obj: dict[str, Any]) -> bytes:
        import io as _io

        import fastavro

        assert self.schema_dir is not None
        text = json.dumps(schema, sort_keys=True)
        schema_id = self.schema_ids.get(text)
        if schema_id is None:
            schema_id = self.schema_ids[text] = len(self.schema_ids) + 1
            self.schema_dir.mkdir(parents=True, exist_ok=True)
            (self.schema_dir / f"{schema_id}.avsc").write_text(text)
        out = _io.BytesIO()
        out.write(b"\x00" + schema_id.to_bytes(4, "big"))
        fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(text)), obj)
        return out.getvalue()

    def _markers(self, txn: Transaction, counts: Mapping[str, int]) -> None:
        topic = self.transaction_topic
        key = _dumps({"id": txn.id})
        begin = {"status": "BEGIN", "id": txn.id, "event_count": None, "data_collections": None}
        collections = [{"data_collection": t, "event_count": n} for t, n in counts.items()]
        end = {"status": "END", "id": txn.id, "event_count": sum(counts.values()),
               "data_collections": collections}  # fmt: skip
        records = self.pending.setdefault(topic, [])
        if self.schema_dir is not None:  # Debezium's Avro converter writes them in Avro
            key = self._framed(_TXN_KEY_AVRO, {"id": txn.id})
            for doc in (begin, end):
                records.append(
                    (0, key, self._framed(_TXN_VALUE_AVRO, {**doc, "ts_ms": self.lsn}), None)
                )
            return
        records.append((0, key, _dumps(begin), None))
        records.append((0, key, _dumps(end), None))

    def take_records(self) -> dict[str, list[KafkaRecord]]:
        out, self.pending = self.pending, {}
        return out

    def expected(self, table: str, columns: tuple[str, ...] | None = None) -> list[tuple[Any, ...]]:
        """The table's rows as sorted tuples of ``columns`` (default: its columns)."""
        t = self.tables[table]
        names = columns or t.column_names
        return sorted(tuple(row.get(c) for c in names) for row in t.rows.values())


#: Debezium's transaction topic schemas as its Avro converter registers them.
_TXN_KEY_AVRO = {"type": "record", "name": "TransactionMetadataKey",
                 "namespace": "io.debezium.connector.common",
                 "fields": [{"name": "id", "type": "string"}]}  # fmt: skip
_TXN_VALUE_AVRO = {
    "type": "record", "name": "TransactionMetadataValue",
    "namespace": "io.debezium.connector.common",
    "fields": [
        {"name": "status", "type": "string"},
        {"name": "id", "type": "string"},
        {"name": "event_count", "type": ["null", "long"], "default": None},
        {"name": "data_collections", "default": None, "type": ["null", {
            "type": "array", "items": {
                "type": "record", "name": "ConnectDefault", "namespace": "io.confluent.connect.avro",
                "fields": [{"name": "data_collection", "type": "string"},
                           {"name": "event_count", "type": "long"}]}}]},
        {"name": "ts_ms", "type": "long"},
    ],
}  # fmt: skip


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


# ---------------------------------------------------------------- the shop workload

SHOP_TABLES = ("customers", "orders", "order_lines")


def shop_tables(partitions: int = 2) -> list[SourceTable]:
    return [
        SourceTable("shop", "customers", [
            Column("id", "int32", optional=False), Column("name", "string"),
            Column("balance", "decimal"),
        ], partitions=partitions),
        SourceTable("shop", "orders", [
            Column("id", "int32", optional=False), Column("customer_id", "int32"),
            Column("status", "string"), Column("total", "decimal"),
            Column("created_at", "timestamp"),
        ], partitions=partitions),
        SourceTable("shop", "order_lines", [
            Column("id", "int32", optional=False), Column("order_id", "int32"),
            Column("sku", "string"), Column("qty", "int32"), Column("price", "decimal"),
        ], partitions=partitions),
    ]  # fmt: skip


def plain_table(name: str, partitions: int = 1, amount: str = "int64") -> SourceTable:
    return SourceTable("inventory", name, [
        Column("id", "int32", optional=False), Column("code", "string"),
        Column("amount", amount), Column("active", "boolean"),
    ], partitions=partitions)  # fmt: skip


@dataclass
class ShopWorkload:
    db: SourceDatabase
    seed: int = 7
    customers: int = 50
    plain: tuple[str, ...] = ()
    rng: random.Random = field(init=False)
    next_id: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _id(self, table: str) -> int:
        self.next_id[table] = self.next_id.get(table, 0) + 1
        return self.next_id[table]

    def step(self) -> None:
        """One source transaction of a random kind."""
        r = self.rng.random()
        orders = self.db.tables["orders"].rows
        if r < 0.15 or not self.db.tables["customers"].rows:
            self.new_customer()
        elif r < 0.55 or not orders:
            self.new_order()
        elif r < 0.8:
            self.change_order(self.rng.choice(sorted(orders))[0])
        elif r < 0.9:
            self.cancel_order(self.rng.choice(sorted(orders))[0])
        elif self.plain:
            self.touch_plain(self.rng.choice(self.plain))
        else:
            self.new_customer()

    def new_customer(self) -> None:
        txn = self.db.begin()
        cid = self._id("customers")
        txn.upsert("customers", {"id": cid, "name": f"customer {cid}", "balance": Decimal("0.00")})
        self.db.commit(txn)

    def new_order(self) -> None:
        txn = self.db.begin()
        customers = self.db.tables["customers"].rows
        cid = self.rng.choice(sorted(customers))[0]
        oid = self._id("orders")
        lines = [self._line(oid) for _ in range(self.rng.randint(1, 4))]
        total = sum((ln["qty"] * ln["price"] for ln in lines), Decimal("0.00"))
        created = _EPOCH + dt.timedelta(seconds=self.db.lsn)
        txn.upsert("orders", {"id": oid, "customer_id": cid, "status": "new", "total": total,
                              "created_at": created})  # fmt: skip
        for ln in lines:
            txn.upsert("order_lines", ln)
        customer = dict(customers[(cid,)])
        customer["balance"] = customer["balance"] + total
        txn.upsert("customers", customer)
        self.db.commit(txn)

    def _line(self, oid: int) -> dict[str, Any]:
        price = Decimal(self.rng.randint(100, 9999)) / 100
        return {"id": self._id("order_lines"), "order_id": oid,
                "sku": f"sku-{self.rng.randint(1, 500)}", "qty": self.rng.randint(1, 5),
                "price": price}  # fmt: skip

    def _lines_of(self, oid: int) -> list[dict[str, Any]]:
        rows = self.db.tables["order_lines"].rows.values()
        return [dict(r) for r in rows if r["order_id"] == oid]

    def change_order(self, oid: int) -> None:
        """Change one line's quantity (or add a line) and the order's total with it."""
        txn = self.db.begin()
        lines = self._lines_of(oid)
        if lines and self.rng.random() < 0.7:
            line = self.rng.choice(lines)
            line["qty"] = self.rng.randint(1, 9)
            txn.upsert("order_lines", line)
        else:
            line = self._line(oid)
            txn.upsert("order_lines", line)
            lines.append(line)
        lines = self._lines_of(oid)
        order = dict(self.db.tables["orders"].rows[(oid,)])
        order["total"] = sum((ln["qty"] * ln["price"] for ln in lines), Decimal("0.00"))
        order["status"] = self.rng.choice(["paid", "packed", "shipped"])
        txn.upsert("orders", order)
        self.db.commit(txn)

    def cancel_order(self, oid: int) -> None:
        txn = self.db.begin()
        for line in self._lines_of(oid):
            txn.delete("order_lines", (line["id"],))
        txn.delete("orders", (oid,))
        self.db.commit(txn)

    def touch_plain(self, table: str) -> None:
        txn = self.db.begin()
        rows = self.db.tables[table].rows
        if rows and self.rng.random() < 0.2:
            txn.delete(table, self.rng.choice(sorted(rows)))
        else:
            key = self.rng.randint(1, 40)
            txn.upsert(table, self.plain_row(table, key))
        self.db.commit(txn)

    def plain_row(self, table: str, key: int) -> dict[str, Any]:
        t = self.db.tables[table]
        row: dict[str, Any] = {"id": key}
        for c in t.columns[1:]:
            row[c.name] = self._value(c)
        return row

    def _value(self, c: Column) -> Any:
        if c.type == "string":
            return f"v{self.rng.randint(0, 999)}"
        if c.type == "int32":
            return self.rng.randint(0, 10_000)
        if c.type == "int64":
            return self.rng.randint(0, 10_000) * 1_000_000
        if c.type == "boolean":
            return self.rng.random() < 0.5
        if c.type == "decimal":
            return Decimal(self.rng.randint(0, 99999)) / 100
        if c.type == "struct":
            return {f.name: self._value(f) for f in c.fields}
        return None

    def steps(self, n: int) -> Iterator[None]:
        for _ in range(n):
            self.step()
            yield None


def consistency_problems(
    customers: list[dict[str, Any]], orders: list[dict[str, Any]], lines: list[dict[str, Any]]
) -> list[str]:
    """What is wrong across the three shop tables as a reader sees them: a line whose
    order is missing, an order whose customer is missing, an order whose total is not
    the sum of its lines' ``qty * price``."""
    problems = []
    order_ids = {o["id"] for o in orders}
    customer_ids = {c["id"] for c in customers}
    sums: dict[int, Decimal] = {}
    for ln in lines:
        if ln["order_id"] not in order_ids:
            problems.append(f"order line {ln['id']} has no order {ln['order_id']}")
        sums[ln["order_id"]] = sums.get(ln["order_id"], Decimal(0)) + ln["qty"] * ln["price"]
    for o in orders:
        if o["customer_id"] not in customer_ids:
            problems.append(f"order {o['id']} has no customer {o['customer_id']}")
        if sums.get(o["id"], Decimal(0)) != o["total"]:
            problems.append(f"order {o['id']} total {o['total']} != its lines {sums.get(o['id'])}")
    return problems

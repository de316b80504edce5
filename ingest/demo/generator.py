"""A seeded Debezium-style change stream of an ``orders`` table, with its final state.

Events are creates, updates and deletes (each delete followed by a Kafka tombstone, as
Debezium's connectors emit them), plus optional poison records (undecodable values) that
must end in the dead-letter table. A key always goes to the same partition, so Kafka
order is change order.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

#: The demo table's columns, as ``[[table.columns]]`` entries of a pipeline config.
COLUMNS = (
    {"name": "id", "type": "long", "required": True, "doc": "order id (primary key)"},
    {"name": "customer", "type": "string"},
    {"name": "status", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "version", "type": "long", "doc": "the change event's sequence in the demo"},
    {"name": "updated_at", "type": "timestamptz"},
)
COLUMN_NAMES: tuple[str, ...] = tuple(str(c["name"]) for c in COLUMNS)
STATUSES = ("new", "paid", "packed", "shipped", "delivered", "returned")
_EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

Row = tuple[int, str, str, float, int, dt.datetime]
KafkaRecord = tuple[int, bytes | None, bytes | None, None]


@dataclass
class ChangeStream:
    """What the generator produced and what the table must hold afterwards."""

    final: dict[int, Row] = field(default_factory=dict)
    events: int = 0
    creates: int = 0
    updates: int = 0
    deletes: int = 0
    tombstones: int = 0
    poison: int = 0

    @property
    def records(self) -> int:
        """Kafka records produced (events, tombstones and poison records)."""
        return self.events + self.tombstones + self.poison

    def expected_rows(self) -> list[Row]:
        return sorted(self.final.values())


class CdcGenerator:
    """``events`` change events over about ``keys`` order ids on ``partitions``
    partitions, in chunks (``chunks()``), with ``poison`` undecodable records spread
    through the stream. ``delete_ratio`` is the chance an event deletes a live key."""

    def __init__(
        self,
        events: int,
        keys: int,
        partitions: int,
        *,
        poison: int = 0,
        delete_ratio: float = 0.2,
        seed: int = 2026,
    ) -> None:
        if events < 1 or keys < 1 or partitions < 1:
            raise ValueError("events, keys and partitions must be at least 1")
        self.events = events
        self.keys = keys
        self.partitions = partitions
        self.delete_ratio = delete_ratio
        self._rng = random.Random(seed)
        self._poison_at = set(self._rng.sample(range(events), min(poison, events)))
        self.stream = ChangeStream()

    def chunks(self, size: int) -> Iterator[list[KafkaRecord]]:
        """The records in chunks of about ``size`` events; ``stream`` is up to date
        with everything yielded so far."""
        chunk: list[KafkaRecord] = []
        for n in range(self.events):
            chunk.extend(self._event(n))
            if len(chunk) >= size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def _event(self, n: int) -> list[KafkaRecord]:
        rng, s = self._rng, self.stream
        k = rng.randrange(self.keys)
        key = json.dumps({"id": k}).encode()
        part = k % self.partitions
        out: list[KafkaRecord] = []
        if n in self._poison_at:
            s.poison += 1
            out.append((part, key, b'{"op": "u", "after": {"id": ' + str(k).encode() + b", ", None))
        live = s.final.get(k)
        s.events += 1
        if live is not None and rng.random() < self.delete_ratio:
            del s.final[k]
            s.deletes += 1
            s.tombstones += 1
            value = {"before": _json_row(live), "after": None, "op": "d", "ts_ms": n,
                     "source": _source(n)}  # fmt: skip
            out.append((part, key, json.dumps(value).encode(), None))
            out.append((part, key, None, None))  # the tombstone after a delete
            return out
        row: Row = (
            k,
            live[1] if live else f"customer-{rng.randrange(max(1, self.keys // 4)):05d}",
            rng.choice(STATUSES),
            round(rng.uniform(1, 500), 2),
            n,
            _EPOCH + dt.timedelta(milliseconds=n * 37),
        )
        op = "u" if live else "c"
        if live:
            s.updates += 1
        else:
            s.creates += 1
        value = {"before": _json_row(live) if live else None, "after": _json_row(row), "op": op,
                 "ts_ms": n, "source": _source(n)}  # fmt: skip
        out.append((part, key, json.dumps(value).encode(), None))
        s.final[k] = row
        return out


def _json_row(row: Row) -> dict[str, object]:
    return {
        "id": row[0],
        "customer": row[1],
        "status": row[2],
        "amount": row[3],
        "version": row[4],
        "updated_at": row[5].isoformat().replace("+00:00", "Z"),
    }


def _source(n: int) -> dict[str, object]:
    return {"connector": "calving-demo", "db": "shop", "table": "orders", "lsn": n}

"""A seeded Debezium-JSON change stream for tests, with its expected final state."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from calving.commit.spec.schema import Schema
from calving.commit.spec.types import NestedField, PrimitiveType

SCHEMA = Schema(
    (
        NestedField(1, "id", PrimitiveType("long"), True),
        NestedField(2, "status", PrimitiveType("string"), False),
        NestedField(3, "version", PrimitiveType("long"), False),
    ),
    identifier_field_ids=(1,),
)
COLUMNS = ["id", "status", "version"]

Record = tuple[int, bytes | None, bytes | None, None]


@dataclass
class CdcStream:
    records: list[Record] = field(default_factory=list)
    final: dict[int, tuple[int, str, int]] = field(default_factory=dict)
    updates: int = 0
    deletes: int = 0

    @property
    def expected(self) -> list[tuple[int, str, int]]:
        return sorted(self.final.values())


def cdc_events(keys: int, events: int, partitions: int, seed: int = 7) -> CdcStream:
    """``events`` change events over ``keys`` keys (each delete also followed by a
    tombstone record). A key stays on one partition so its events keep their order."""
    rng = random.Random(seed)
    out = CdcStream()
    for n in range(events):
        k = rng.randrange(keys)
        key = json.dumps({"id": k}).encode()
        part = k % partitions
        if k in out.final and rng.random() < 0.25:
            _, status, version = out.final.pop(k)
            before = {"id": k, "status": status, "version": version}
            value = {"before": before, "after": None, "op": "d", "ts_ms": n}
            out.records.append((part, key, json.dumps(value).encode(), None))
            out.records.append((part, key, None, None))  # tombstone
            out.deletes += 1
            continue
        row = {"id": k, "status": rng.choice(["new", "paid", "sent"]), "version": n}
        op = "u" if k in out.final else "c"
        out.updates += op == "u"
        value = {"before": None, "after": row, "op": op, "ts_ms": n}
        out.records.append((part, key, json.dumps(value).encode(), None))
        out.final[k] = (k, row["status"], n)
    return out

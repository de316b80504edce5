"""The synthetic stream the fault writers consume, and what the table must hold after it.

A writer ``w`` owns Kafka partition ``w`` of topic ``TOPIC``. Its record at offset ``o`` is

* a *delete* when ``o % 7 == 6``: of its own insert at ``o - 3`` when ``(o // 7)`` is
  even, else of a row of the shared seed file (partition ``SEED_PARTITION``), so that
  every writer's deletion vectors land on that one data file;
* otherwise an *insert* of the row ``(TOPIC, w, o, payload)``.

Deletes of a row inserted in the same batch go into the DV of the file that batch adds.
All of it is a pure function of the offsets, so the expected table content follows from
the writers' ledgers alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from calving.commit.spec.partition import PartitionSpecBuilder
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import INT, LONG, STRING, NestedField

TOPIC = "events"
SEED_TOPIC = "seed"
SEED_PARTITION = -1
SEED_ROWS = 64
DELETE_EVERY = 7
COLUMNS = ("topic", "partition", "offset")

SCHEMA = Schema(
    (
        NestedField(1, "topic", STRING, required=True),
        NestedField(2, "partition", INT, required=True),
        NestedField(3, "offset", LONG, required=True),
        NestedField(4, "payload", STRING),
    )
)
SPEC = PartitionSpecBuilder(SCHEMA).identity("partition").build()

Row = tuple[str, int, int]


def writer_id(w: int) -> str:
    return f"writer-{w}"


def is_delete(offset: int) -> bool:
    return offset % DELETE_EVERY == DELETE_EVERY - 1


def delete_target(w: int, offset: int) -> Row:
    """The row the delete record at ``offset`` removes."""
    if (offset // DELETE_EVERY) % 2 == 0:
        return (TOPIC, w, offset - 3)
    return (SEED_TOPIC, SEED_PARTITION, (w * 8 + (offset // (2 * DELETE_EVERY)) % 8) % SEED_ROWS)


def payload(w: int, offset: int) -> str:
    return f"w{w}-o{offset}"


def seed_rows() -> list[Row]:
    return [(SEED_TOPIC, SEED_PARTITION, i) for i in range(SEED_ROWS)]


def batch(w: int, start: int, end: int) -> tuple[list[Row], list[Row]]:
    """(rows inserted, rows deleted) by the records ``[start, end)`` of writer ``w``."""
    inserts: list[Row] = []
    deletes: list[Row] = []
    for o in range(start, end):
        if is_delete(o):
            deletes.append(delete_target(w, o))
        else:
            inserts.append((TOPIC, w, o))
    return inserts, deletes


def expected_rows(ledgers: Mapping[int, int], seed: bool = True) -> Counter[Row]:
    """The rows the table must hold once writer ``w`` has committed ``[0, ledgers[w])``."""
    rows: Counter[Row] = Counter(seed_rows() if seed else [])
    deleted: set[Row] = set()
    for w, end in ledgers.items():
        inserts, deletes = batch(w, 0, end)
        rows.update(inserts)
        deleted.update(deletes)
    for r in deleted:
        rows.pop(r, None)
    return rows


def deleted_rows(ledgers: Mapping[int, int]) -> set[Row]:
    out: set[Row] = set()
    for w, end in ledgers.items():
        out.update(batch(w, 0, end)[1])
    return out


def produced_records(ledgers: Mapping[int, int]) -> int:
    return sum(ledgers.values())


def count_rows(rows: Iterable[tuple[object, ...]]) -> Counter[Row]:
    return Counter((str(t), int(p), int(o)) for t, p, o in rows)  # type: ignore[call-overload]  # rows come from the readers as untyped objects; int() checks them

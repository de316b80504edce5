"""Random CDC histories through calving's real commit path, and the model they must match.

``History`` drives one keyed table the way a pipeline does, without Spark: each batch's
decoded change rows go through the executor's collapse-and-write
(``write_last_events``: last event per key in Kafka order, Parquet written by the task
writer) and the driver's ``Coordinator`` (primary-key index lookup, deletion vectors,
ledger claim, commit). Between batches it compacts the table, and it runs two kinds of
conflict: a batch whose commit finds a compaction landed after it was planned (the
coordinator re-resolves its deletes), and a compaction whose rewrite sees a batch land
before it commits (the rewrite carries the batch's deletes).

``Model`` is the spec's intended lineage, from the issue's rules alone: an insert (a key
not live, or live but deleted earlier in the same batch) mints an identity; an update of
a live key keeps it when ``updates_keep_identity`` (v3 row lineage through updates,
which calving keeps); a delete ends it; compaction changes
nothing. A key written by a batch was last updated by that commit's sequence number.
It also yields the changes each commit makes, in the change-feed's vocabulary.
"""

from __future__ import annotations

import itertools
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import strategies as st
from pyroaring import BitMap64

from calving.commit.catalog import SqlCatalog
from calving.commit.index.shard_lookup import LocalResolver, tidy_in_background
from calving.commit.index.sharded import ShardedIndex
from calving.commit.maintenance.compaction import compact
from calving.commit.maintenance.compaction_plan import CompactionPolicy, RewriteGroup
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata, serialize_metadata
from calving.commit.spec.partition import UNPARTITIONED, spec_builder
from calving.commit.spec.schema import Schema
from calving.commit.spec.transforms import bucket
from calving.commit.spec.types import LONG, STRING, NestedField
from calving.commit.table.ledger import OffsetRange
from calving.commit.table.table import Table, create_table
from calving.ingest.decode.batch import OP_DELETE, OP_UPSERT
from calving.ingest.sink.coordinator import Coordinator, ParsedMessages
from calving.ingest.sink.executor import TaskPlan, read_ahead, shard_steps, write_last_events
from calving.ingest.sink.messages import Message
from calving.ingest.write.rewrite import local_rewrite
from tests.support import lineage as ref

SCHEMA = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "v", LONG, required=True),
        NestedField(3, "note", STRING),
    ),
    identifier_field_ids=(1,),
)
COLUMNS = ("id", "v", "note")
#: The one switch for lineage through updates (issue 23, part 1): calving's updates keep
#: their ``_row_id``, so the model's updates keep their identity.
UPDATES_KEEP_ROW_ID = True
POLICY = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2, max_group_bytes=1 << 24)
TOPIC = "cdc"

#: One change event: ("u", key) upserts the key with a fresh value, ("d", key) deletes it.
Event = tuple[str, int]


@dataclass(frozen=True)
class Step:
    """``batch``: one batch of events. ``compact``: a compaction pass. ``batch+compact``:
    the batch is planned, a compaction lands, then the batch commits. ``compact+batch``:
    a compaction rewrites, the batch lands, then the compaction commits."""

    kind: str
    events: tuple[Event, ...] = ()


STEP_KINDS = ("batch", "compact", "batch+compact", "compact+batch")


def steps_strategy(keys: int, max_steps: int = 7) -> st.SearchStrategy[list[Step]]:
    """Random steps over ``keys`` keys: batches (upserts three times as likely as
    deletes) twice as likely as each other kind."""
    events = st.lists(
        st.tuples(st.sampled_from(["u", "u", "u", "d"]), st.integers(0, keys - 1)),
        min_size=1,
        max_size=10,
    ).map(tuple)
    return st.lists(
        st.one_of(
            events.map(lambda e: Step("batch", e)),
            events.map(lambda e: Step("batch", e)),
            st.just(Step("compact")),
            events.map(lambda e: Step("batch+compact", e)),
            events.map(lambda e: Step("compact+batch", e)),
        ),
        min_size=1,
        max_size=max_steps,
    )


# ---------------------------------------------------------------- the model


@dataclass
class KeyState:
    values: dict[str, Any]
    identity: int
    last_updated: int


@dataclass(frozen=True)
class Change:
    """One expected change row: what the change feed must report for a commit."""

    change_type: str  # INSERT | DELETE | UPDATE_BEFORE | UPDATE_AFTER
    snapshot_id: int
    identity: int
    values: tuple[Any, ...]


@dataclass
class Model:
    updates_keep_identity: bool
    live: dict[int, KeyState] = field(default_factory=dict)
    identities: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    changes: list[list[Change]] = field(default_factory=list)  # per data commit

    def apply(
        self, events: Sequence[tuple[str, int, dict[str, Any]]], snapshot_id: int, seq: int
    ) -> None:
        """A committed batch: ``events`` in Kafka order, (op, key, values)."""
        final: dict[int, tuple[str, dict[str, Any]]] = {}
        deleted_in_batch: set[int] = set()
        for op, key, values in events:
            final[key] = (op, values)
            if op == "d":
                deleted_in_batch.add(key)
        out: list[Change] = []
        for key, (op, values) in sorted(final.items()):
            before = self.live.get(key)
            if op == "d":
                if before is not None:
                    out.append(Change("DELETE", snapshot_id, before.identity, _row(before)))
                    del self.live[key]
                continue
            keeps = (
                before is not None and self.updates_keep_identity and key not in deleted_in_batch
            )
            identity = before.identity if keeps and before else next(self.identities)
            after = KeyState(dict(values), identity, seq)
            if before is not None and keeps:
                out.append(Change("UPDATE_BEFORE", snapshot_id, identity, _row(before)))
                out.append(Change("UPDATE_AFTER", snapshot_id, identity, _row(after)))
            else:
                if before is not None:
                    out.append(Change("DELETE", snapshot_id, before.identity, _row(before)))
                out.append(Change("INSERT", snapshot_id, identity, _row(after)))
            self.live[key] = after
        self.changes.append(out)


def _row(state: KeyState) -> tuple[Any, ...]:
    return tuple(state.values[c] for c in COLUMNS)


# ---------------------------------------------------------------- the driver


@contextmanager
def sqlite_catalog() -> Iterator[SqlCatalog]:
    with tempfile.TemporaryDirectory(prefix="calving-history-") as tmp:
        catalog = SqlCatalog("history", f"sqlite:///{tmp}/catalog.db", f"{tmp}/warehouse")
        catalog.create_namespace(("db",))
        yield catalog


@contextmanager
def postgres_catalog(url: str) -> Iterator[SqlCatalog]:
    with tempfile.TemporaryDirectory(prefix="calving-history-") as tmp:
        catalog = SqlCatalog(f"h_{uuid.uuid4().hex[:10]}", url, f"{tmp}/warehouse")
        catalog.create_namespace(("db",))
        yield catalog


@dataclass(frozen=True)
class Commit:
    """One snapshot the history made: its id, sequence number and kind."""

    snapshot_id: int
    sequence_number: int
    kind: str  # data | compaction


class History:
    """One keyed table, its writer, and every snapshot the steps made."""

    def __init__(
        self,
        catalog: SqlCatalog,
        *,
        partitioned: bool,
        model: Model,
        sharded: bool = False,
        tasks: int = 1,
    ) -> None:
        spec = spec_builder(SCHEMA, fields=[("id", bucket(2))]) if partitioned else UNPARTITIONED
        name = f"h_{uuid.uuid4().hex[:8]}"
        properties = {"commit.manifest.min-count-to-merge": "3"}
        if tasks > 1:  # every batch's keys resolved by its write tasks
            properties["calving.index.driver-step-keys"] = "0"
        self.table = create_table(catalog, ("db", name), SCHEMA, spec=spec, properties=properties)
        #: Write tasks a batch's keys are split over (by key); sharded mode then steps
        #: the index shards in them (``shard_steps``).
        self.tasks = tasks
        self.model = model
        self.coordinator = Coordinator(self.table, "history", index_save_every=3)
        if sharded:  # stage 2 in this process, over 4 shards
            self.coordinator.sharded = ShardedIndex(self.table.io, LocalResolver(), shard_count=4)
        self.commits: list[Commit] = []
        self.offset = 0
        self.counter = 0
        self.batches = 0
        #: Conflicts that happened: batches whose commit lost the swap to a compaction
        #: (and re-aimed their deletes at its files), and deletes a compaction carried
        #: onto its new files.
        self.retried_batches = 0
        self.carried_deletes = 0

    # ------------------------------------------------------------ steps

    def run(self, step: Step, after: Callable[[History], None] | None = None) -> None:
        if step.kind == "batch":
            self.batch(step.events)
        elif step.kind == "compact":
            self.compact()
        elif step.kind == "batch+compact":
            self.batch(step.events, before_commit=self.compact)
        elif step.kind == "compact+batch":
            self.compact(during=lambda: self.batch(step.events))
        else:
            raise ValueError(step.kind)
        if after is not None:
            after(self)

    def batch(
        self, events: Sequence[Event], before_commit: Callable[[], None] | None = None
    ) -> None:
        if not events:
            return
        valued, parsed = self.written(events)
        self.batches += 1
        prepared = self.coordinator.prepare(self.batches, parsed)
        assert prepared.action is not None
        if before_commit is not None:
            before_commit()  # lands first: the batch's commit must see through it
        outcome = self.table.commit(prepared.action, from_cache=True)
        stats = self.coordinator.finish(prepared, outcome)
        assert stats.outcome == "committed", stats
        self.retried_batches += stats.commit_attempts > 1
        snap = self._current()
        self.commits.append(Commit(snap["snapshot-id"], snap["sequence-number"], "data"))
        self.model.apply(valued, snap["snapshot-id"], snap["sequence-number"])

    def written(self, events: Sequence[Event]) -> tuple[list[Any], ParsedMessages]:
        """The batch of ``events`` as a task writes it (each key's last event), at the
        next offsets of the topic: its valued events and its commit messages."""
        valued = [(op, key, self._values(key)) for op, key in events]
        plan, rows = self._plan(), self._rows(valued)
        messages: list[Message] = []
        for task in range(self.tasks):  # as a write task: read ahead, write, step, tidy
            read_ahead(plan)
            mine = rows.filter(pc.equal(pc.bit_wise_and(rows["id"], self.tasks - 1), task))
            written = write_last_events(plan, mine) if mine.num_rows else []
            messages += written + shard_steps(plan, written)
            tidy_in_background()
        parsed = ParsedMessages.of(messages)
        parsed.ranges[(TOPIC, 0)] = OffsetRange(self.offset, self.offset + len(events))
        self.offset += len(events)
        return valued, parsed

    def compact(self, during: Callable[[], None] | None = None) -> None:
        other = Table.load(self.table.catalog, self.table.ident, self.table.io)
        rewrite = local_rewrite(other.io, POLICY.target_file_bytes)
        ran = False

        def rewrite_then_let_the_batch_land(
            metadata: TableMetadata,
            group: RewriteGroup,
            inputs: Sequence[tuple[DataFile, BitMap64]],
        ) -> Any:
            nonlocal ran
            out = rewrite(metadata, group, inputs)
            if during is not None and not ran:
                ran = True
                during()
            return out

        before = self._current()
        report = compact(other, POLICY, rewrite_then_let_the_batch_land)
        if during is not None and not ran:
            during()  # nothing to compact: the batch still happens
        assert report.groups_failed == [], report.groups_failed
        self.carried_deletes += report.deletes_carried
        for snap in self._snapshots_after(before):
            if snap["summary"]["operation"] == "replace":
                self.commits.append(
                    Commit(snap["snapshot-id"], snap["sequence-number"], "compaction")
                )

    # ------------------------------------------------------------ pieces

    def _values(self, key: int) -> dict[str, Any]:
        self.counter += 1
        note = None if self.counter % 4 == 0 else f"n{self.counter}"
        return {"id": key, "v": self.counter, "note": note}

    def _plan(self) -> TaskPlan:
        return TaskPlan(
            metadata_json=serialize_metadata(self.table.metadata),
            metadata_location=self.table.metadata_location,
            decoder=None,
            file_prefix=f"history-b{self.batches}",
            io_properties=self.table.io.properties,
            shard_job=self.coordinator.shard_job(),
        )

    def _rows(self, valued: Sequence[tuple[str, int, dict[str, Any]]]) -> pa.Table:
        n = len(valued)
        return pa.table(
            {
                "id": pa.array([k for _, k, _ in valued], pa.int64()),
                "v": pa.array([None if op == "d" else v["v"] for op, _, v in valued], pa.int64()),
                "note": pa.array(
                    [None if op == "d" else v["note"] for op, _, v in valued], pa.string()
                ),
                "_op": pa.array(
                    [OP_DELETE if op == "d" else OP_UPSERT for op, _, _ in valued], pa.int8()
                ),
                "_partition": pa.array([0] * n, pa.int32()),
                "_offset": pa.array(range(self.offset, self.offset + n), pa.int64()),
                "_topic": pa.array([TOPIC] * n, pa.string()),
            }
        )

    def _current(self) -> dict[str, Any]:
        snap = ref.snapshot_of(ref.read_metadata(self.metadata_location()))
        assert snap is not None
        return snap

    def _snapshots_after(self, before: dict[str, Any]) -> list[dict[str, Any]]:
        metadata = ref.read_metadata(self.metadata_location())
        snaps = [
            s for s in metadata["snapshots"] if s["sequence-number"] > before["sequence-number"]
        ]
        return sorted(snaps, key=lambda s: s["sequence-number"])

    def metadata_location(self) -> str:
        """The table's current metadata, read from the catalog (the writer's own table
        object keeps its cached state, as a running pipeline's does)."""
        return self.table.catalog.load_metadata_location(self.table.ident)


# ---------------------------------------------------------------- the checks


@dataclass
class IdentityBook:
    """Model identity <-> ``_row_id``, over the whole history: the same identity always
    has the same id, and an id never belongs to two identities (ids are never reused)."""

    by_identity: dict[int, int] = field(default_factory=dict)
    by_row_id: dict[int, int] = field(default_factory=dict)

    def see(self, identity: int, row_id: int, where: str) -> None:
        known = self.by_identity.setdefault(identity, row_id)
        assert known == row_id, f"{where}: identity {identity} was _row_id {known}, now {row_id}"
        owner = self.by_row_id.setdefault(row_id, identity)
        assert owner == identity, (
            f"{where}: _row_id {row_id} reused (identities {owner}, {identity})"
        )


def check_lineage(history: History, book: IdentityBook) -> None:
    """The table's current snapshot, read by the reference reader, against the model:
    the same keys and values, ids present and unique, each key's ``_row_id`` that of its
    model identity and its ``_last_updated_sequence_number`` its last write's."""
    rows = ref.snapshot_rows(history.metadata_location())
    where = f"after {len(history.commits)} commits"
    got = {r.values["id"]: r for r in rows}
    assert len(got) == len(rows), f"{where}: a key is live twice"
    model = history.model.live
    assert {k: _values(r) for k, r in got.items()} == {k: _row(s) for k, s in model.items()}, where
    ids = [r.row_id for r in rows]
    assert None not in ids, f"{where}: a live row has no _row_id"
    assert len(set(ids)) == len(ids), f"{where}: duplicate _row_id"
    for key, r in got.items():
        state = model[key]
        assert r.last_updated == state.last_updated, (
            f"{where}: key {key} last updated by {r.last_updated}, model {state.last_updated}"
        )
        assert r.row_id is not None
        book.see(state.identity, r.row_id, f"{where}, key {key}")


def _values(r: ref.RefRow) -> tuple[Any, ...]:
    return tuple(r.values[c] for c in COLUMNS)


def run_history(
    catalog: SqlCatalog,
    steps: Sequence[Step],
    *,
    partitioned: bool,
    keep: bool,
    keys: int = 10,
    sharded: bool = False,
    tasks: int = 1,
) -> tuple[History, IdentityBook]:
    """A first batch writing keys ``0..keys-1``, then ``steps``, the lineage checked
    after each (``keep``: the model's ``updates_keep_identity``; ``sharded``: the
    coordinator's index in sharded mode; ``tasks``, a power of two: write tasks a
    batch's keys are split over, whose shard steps resolve them)."""
    first = Step("batch", tuple(("u", k) for k in range(keys)))
    history = History(
        catalog,
        partitioned=partitioned,
        model=Model(updates_keep_identity=keep),
        sharded=sharded,
        tasks=tasks,
    )
    book = IdentityBook()
    for step in [first, *steps]:
        history.run(step, after=lambda h: check_lineage(h, book))
    return history, book

"""Per-batch figures of a ``CalvingSink``: Prometheus families and one JSON log line.

``SinkMetrics`` is handed to the sink (``CalvingSink(metrics=...)``); after each batch's
commit the sink calls ``batch_done`` (or ``batch_failed`` when the commit raised). The
same numbers go to the registry (served by ``MetricsServer`` when enabled) and, as one
JSON object per batch, to the ``calving.metrics`` logger at INFO. ``METRICS`` and
``LOG_FIELDS`` document every name.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from calving.commit.errors import CommitConflictError, RetriesExhaustedError, StaleWriterError
from calving.commit.index import full_rebuilds
from calving.commit.table.ledger import read_ledger
from calving.commit.table.summary import live_rows
from calving.ingest.kafka.offsets import TopicPartition
from calving.ingest.metrics.exposition import Counter, Gauge, Histogram, Registry
from calving.ingest.metrics.lag import LagProbe
from calving.ingest.metrics.server import MetricsServer

if TYPE_CHECKING:
    from calving.commit.table.table import Table
    from calving.ingest.sink.coordinator import BatchStats, Coordinator, ParsedMessages


class MeasuredSink(Protocol):
    """What the figures read of a sink after a batch: its table (as committed), writer
    id and coordinator (the primary-key index). A ``CalvingSink`` is one; a many-table
    pipeline hands one per table."""

    @property
    def table(self) -> Table: ...

    @property
    def writer_id(self) -> str: ...

    @property
    def coordinator(self) -> Coordinator: ...


log = logging.getLogger("calving.metrics")

COMMIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
FRESHNESS_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

_BASE = ("table", "writer_id")

#: name -> (type, extra labels beyond table and writer_id, help). Rendered in this order.
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "calving_batches_total": (
        "counter",
        ("outcome",),
        (
            "Micro-batches handled, by outcome: committed (a snapshot), skipped (the ledger "
            "already held the offsets), empty (no records), failed (the commit raised)."
        ),
    ),
    "calving_records_total": (
        "counter",
        (),
        "Kafka records a batch read past the ledger (rows and dead letters).",
    ),
    "calving_dead_letters_total": ("counter", (), "Records sent to the dead-letter destination."),
    "calving_rows_written_total": ("counter", (), "Rows in the data files the batches added."),
    "calving_rows_deleted_total": (
        "counter",
        (),
        "Earlier rows the batches deleted with deletion vectors (keyed tables).",
    ),
    "calving_commits_total": ("counter", (), "Snapshots the batches added to the table."),
    "calving_commit_retries_total": (
        "counter",
        (),
        "Commit attempts beyond the first (each after losing the catalog swap).",
    ),
    "calving_commit_swaps_lost_to_maintenance_total": (
        "counter",
        (),
        (
            "Of the retries, swaps lost to maintenance commits (replace snapshots, metadata "
            "changes): rebased and retried without counting against "
            "commit.retry.num-retries."
        ),
    ),
    "calving_commit_conflicts_total": (
        "counter",
        (),
        (
            "Commit attempts that lost to a concurrent commit: swaps lost and retried, plus "
            "one per batch that failed on a conflict or ran out of retries."
        ),
    ),
    "calving_commit_duration_seconds": (
        "histogram",
        (),
        (
            "Driver commit stage of a batch (index lookup, dead-letter append, the snapshot "
            "commit with its retries)."
        ),
    ),
    "calving_batch_duration_seconds": (
        "histogram",
        (),
        "Whole micro-batch in the sink: plan, decode and write on executors, commit.",
    ),
    "calving_freshness_seconds": (
        "histogram",
        (),
        "Per committed batch: commit visible minus the oldest Kafka record timestamp in it.",
    ),
    "calving_freshness_oldest_seconds": (
        "gauge",
        (),
        "Last committed batch: commit visible minus its oldest Kafka record timestamp.",
    ),
    "calving_freshness_newest_seconds": (
        "gauge",
        (),
        "Last committed batch: commit visible minus its newest Kafka record timestamp.",
    ),
    "calving_last_commit_timestamp_seconds": (
        "gauge",
        (),
        "Unix time at which the last batch's snapshot became visible.",
    ),
    "calving_kafka_lag_records": (
        "gauge",
        ("topic", "partition"),
        "Latest offset of the partition minus the next offset the table's ledger holds.",
    ),
    "calving_index_keys": (
        "gauge",
        (),
        "Keys in the primary-key index (keyed tables): the live rows of the committed snapshot.",
    ),
    "calving_index_bytes": ("gauge", (), "Resident bytes of the primary-key index."),
    "calving_index_shard_steps_total": (
        "counter",
        (),
        "Sharded index: shard steps of the committed batches (a task's lookups in one shard).",
    ),
    "calving_index_shards_read_total": (
        "counter",
        (),
        (
            "Sharded index: shard steps that read their shard from storage, no state of it "
            "cached in their Python worker (a first step, a worker's cache outgrown: "
            "calving.index.worker-cache-bytes)."
        ),
    ),
    "calving_index_rebuilds_total": (
        "counter",
        (),
        (
            "Full rebuilds of the primary-key index from the data files in this process (an "
            "unusable or missing index of a table with snapshots, a catch-up that could not "
            "apply the changes, a rebase by key after a rewrite); an empty table's first "
            "index is not one."
        ),
    ),
}

#: Fields of the JSON log line (one per batch on ``calving.metrics``).
LOG_FIELDS: dict[str, str] = {
    "event": '"batch"',
    "table": "table name",
    "writer_id": "the sink's writer id",
    "batch_id": "Spark's micro-batch id",
    "outcome": "committed | skipped | empty | failed",
    "records": "Kafka records read past the ledger",
    "dead_letters": "records sent to the dead-letter destination",
    "rows_written": "rows in the added data files",
    "rows_deleted": "earlier rows deleted with deletion vectors",
    "data_files": "data files added",
    "dv_files": "deletion vectors written",
    "snapshot_id": "the new snapshot (null unless committed)",
    "commit_attempts": "attempts the snapshot commit took (0 unless committed)",
    "retries": "commit_attempts - 1 (not below 0)",
    "swaps_lost_to_maintenance": "of the retries, swaps lost to maintenance (not counted)",
    "conflicts": "lost swaps, plus 1 if the commit failed on a conflict",
    "commit_seconds": "driver commit stage",
    "commit_phases": (
        "seconds of the commit stage's phases that ran: lookup (the primary-key index), "
        "lineage (updated rows' _row_id), commit (deletion vectors, manifests, metadata, "
        "catalog swap, retries), finish (the index moved on, saved every 20 commits)"
    ),
    "batch_seconds": "whole batch in the sink",
    "committed_at": "Unix time (s) the commit returned",
    "timestamp_min_ms": "oldest Kafka record timestamp of the batch (null if none)",
    "timestamp_max_ms": "newest Kafka record timestamp of the batch (null if none)",
    "freshness_oldest_seconds": "committed_at minus timestamp_min_ms (null unless committed)",
    "freshness_newest_seconds": "committed_at minus timestamp_max_ms (null unless committed)",
    "ranges": "[{topic, partition, start, end}] offsets the batch covered, end exclusive",
    "lag": "[{topic, partition, records}] after the commit (null if not measured)",
    "lag_records": "sum of lag (null if not measured)",
    "index_keys": "keys in the primary-key index (null for append tables)",
    "index_bytes": "resident bytes of the index (null for append tables)",
    "index_rebuilds": "full index rebuilds in this process so far (calving_index_rebuilds_total)",
    "index_shard_steps": "sharded index: the batch's shard steps (null in driver mode)",
    "index_shards_read": (
        "sharded index: shard steps that read their shard from storage, not from their "
        "worker's cache (null in driver mode)"
    ),
    "arrow_bytes": "bytes allocated from Arrow's default memory pool in the driver process",
    "error": "the commit's error, type and message (failed batches only)",
}

_CONFLICTS = (CommitConflictError, RetriesExhaustedError, StaleWriterError)


def batch_families(registry: Registry) -> dict[str, Any]:
    """Every family of ``METRICS``, registered in ``registry`` (once per registry: the
    sinks of several tables share them, told apart by their labels)."""
    buckets = {
        "calving_commit_duration_seconds": COMMIT_BUCKETS,
        "calving_batch_duration_seconds": BATCH_BUCKETS,
        "calving_freshness_seconds": FRESHNESS_BUCKETS,
    }
    families: dict[str, Any] = {}
    for name, (kind, extra, help_text) in METRICS.items():
        labels = _BASE + extra
        family: Counter | Gauge | Histogram
        if kind == "counter":
            family = Counter(name, help_text, labels)
        elif kind == "gauge":
            family = Gauge(name, help_text, labels)
        else:
            family = Histogram(name, help_text, labels, buckets[name])
        families[name] = registry.register(family)
    return families


class SinkMetrics:
    """Figures of one sink (one table, one writer id). ``lag``: a ``LagProbe`` for the
    source's partitions (None: no lag figures). ``log_batches``: emit the JSON line.
    ``families``: those of another table's ``SinkMetrics`` on the same registry."""

    def __init__(
        self,
        table: str,
        writer_id: str,
        *,
        registry: Registry | None = None,
        lag: LagProbe | None = None,
        log_batches: bool = True,
        families: dict[str, Any] | None = None,
    ) -> None:
        self.registry = registry or Registry()
        self.labels = {"table": table, "writer_id": writer_id}
        self.lag = lag
        self.log_batches = log_batches
        self.families = families if families is not None else batch_families(self.registry)
        for name, (kind, extra, _) in METRICS.items():
            if kind == "counter" and not extra:
                self.families[name].touch(**self.labels)
        self._lagging: set[tuple[str, str]] = set()
        self._rebuilds_counted = full_rebuilds()
        self.server: MetricsServer | None = None

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> MetricsServer:
        """Start the ``/metrics`` endpoint for this registry (once)."""
        if self.server is None:
            self.server = MetricsServer(self.registry, host, port)
        return self.server

    def close(self) -> None:
        """Stop the endpoint, if started, and drop the broker client."""
        self.lag = None
        if self.server is not None:
            self.server.close()
            self.server = None

    # ------------------------------------------------------------ hooks

    def commit_starting(self) -> None:
        """The batch's commit stage starts: the lag probe reads the broker meanwhile."""
        if self.lag is not None:
            self.lag.ask()

    def batch_done(
        self,
        sink: MeasuredSink,
        parsed: ParsedMessages,
        stats: BatchStats,
        started: float,
        commit_started: float,
        lag: Mapping[TopicPartition, int] | None = None,
    ) -> dict[str, Any]:
        """After ``commit_batch`` returned; ``started`` / ``commit_started`` are
        ``time.monotonic()`` readings; ``lag`` measured by the caller (else the
        ``LagProbe``'s, if any). Returns the logged record."""
        now, committed_at = time.monotonic(), time.time()
        attempts = stats.commit_attempts
        record = self._base_record(stats.batch_id, stats.outcome, now - started)
        record.update(
            records=stats.records,
            dead_letters=stats.dead_letters,
            rows_written=stats.added_rows,
            rows_deleted=stats.deleted_rows,
            data_files=stats.added_files,
            dv_files=stats.dv_files,
            snapshot_id=stats.snapshot_id,
            commit_attempts=attempts,
            retries=max(0, attempts - 1),
            swaps_lost_to_maintenance=stats.swaps_yielded,
            conflicts=max(0, attempts - 1),
            commit_seconds=now - commit_started,
            commit_phases={k: round(v, 6) for k, v in stats.phases.items()} or None,
            index_shard_steps=stats.shard_steps,
            index_shards_read=stats.shards_read,
            committed_at=committed_at,
            timestamp_min_ms=parsed.timestamp_min_ms,
            timestamp_max_ms=parsed.timestamp_max_ms,
            ranges=[
                {"topic": t, "partition": p, "start": r.start, "end": r.end}
                for (t, p), r in sorted(stats.ranges.items())
            ],
        )
        if stats.outcome == "committed":
            for bound in ("min", "max"):
                ts = record[f"timestamp_{bound}_ms"]
                age = None if ts is None else committed_at - ts / 1000
                record[
                    "freshness_oldest_seconds" if bound == "min" else "freshness_newest_seconds"
                ] = age
        self._measure_table(sink, record, lag)
        self._update(record)
        self._emit(record)
        return record

    def batch_failed(
        self, sink: object, batch_id: int, error: BaseException, started: float
    ) -> dict[str, Any]:
        """The commit of ``batch_id`` raised ``error`` (the sink re-raises it)."""
        record = self._base_record(batch_id, "failed", time.monotonic() - started)
        record["conflicts"] = 1 if isinstance(error, _CONFLICTS) else 0
        record["error"] = f"{type(error).__name__}: {error}"
        self._update(record)
        self._emit(record)
        return record

    # ------------------------------------------------------------ stages

    def _base_record(self, batch_id: int, outcome: str, seconds: float) -> dict[str, Any]:
        record: dict[str, Any] = {"event": "batch", **self.labels}
        record.update(batch_id=batch_id, outcome=outcome, batch_seconds=seconds)
        for name in LOG_FIELDS:
            record.setdefault(name, None)
        for name in (
            "records",
            "dead_letters",
            "rows_written",
            "rows_deleted",
            "retries",
            "swaps_lost_to_maintenance",
        ):
            record[name] = 0
        for name in ("data_files", "dv_files", "commit_attempts", "conflicts"):
            record[name] = 0
        record["ranges"] = []
        record["index_rebuilds"] = full_rebuilds()
        record["arrow_bytes"] = pa.total_allocated_bytes()
        return record

    def _measure_table(
        self,
        sink: MeasuredSink,
        record: dict[str, Any],
        lag: Mapping[TopicPartition, int] | None,
    ) -> None:
        """Lag from the ledger the table now holds; index size of keyed tables."""
        metadata = sink.table.metadata
        if lag is None and self.lag is not None:
            lag = self.lag.lag(read_ledger(metadata, sink.writer_id))
        if lag is not None:
            record["lag"] = [
                {"topic": t, "partition": p, "records": n} for (t, p), n in sorted(lag.items())
            ]
            record["lag_records"] = sum(lag.values())
        index = sink.coordinator.index
        if index is not None:
            record["index_bytes"] = index.nbytes
            record["index_keys"] = live_rows(metadata.current_snapshot)

    def _update(self, record: Mapping[str, Any]) -> None:
        f, labels = self.families, self.labels
        f["calving_batches_total"].inc(1, outcome=record["outcome"], **labels)
        counted = {
            "calving_records_total": "records",
            "calving_dead_letters_total": "dead_letters",
            "calving_rows_written_total": "rows_written",
            "calving_rows_deleted_total": "rows_deleted",
            "calving_commit_retries_total": "retries",
            "calving_commit_swaps_lost_to_maintenance_total": "swaps_lost_to_maintenance",
            "calving_commit_conflicts_total": "conflicts",
        }
        for name, field_name in counted.items():
            f[name].inc(record[field_name], **labels)
        rebuilds = record["index_rebuilds"] - self._rebuilds_counted
        self._rebuilds_counted = record["index_rebuilds"]
        f["calving_index_rebuilds_total"].inc(max(0, rebuilds), **labels)
        if record["outcome"] == "committed" and record["index_shard_steps"] is not None:
            f["calving_index_shard_steps_total"].inc(record["index_shard_steps"], **labels)
            f["calving_index_shards_read_total"].inc(record["index_shards_read"], **labels)
        f["calving_batch_duration_seconds"].observe(record["batch_seconds"], **labels)
        if record["outcome"] == "failed":
            return
        f["calving_commit_duration_seconds"].observe(record["commit_seconds"], **labels)
        if record["outcome"] == "committed":
            f["calving_commits_total"].inc(1, **labels)
            f["calving_last_commit_timestamp_seconds"].set(record["committed_at"], **labels)
            if record["freshness_oldest_seconds"] is not None:
                f["calving_freshness_seconds"].observe(record["freshness_oldest_seconds"], **labels)
                f["calving_freshness_oldest_seconds"].set(
                    record["freshness_oldest_seconds"], **labels
                )
                f["calving_freshness_newest_seconds"].set(
                    record["freshness_newest_seconds"], **labels
                )
        self._update_gauges(record)

    def _update_gauges(self, record: Mapping[str, Any]) -> None:
        f, labels = self.families, self.labels
        if record["lag"] is not None:
            lagging = set()
            for entry in record["lag"]:
                tp = (entry["topic"], str(entry["partition"]))
                lagging.add(tp)
                f["calving_kafka_lag_records"].set(
                    entry["records"], topic=tp[0], partition=tp[1], **labels
                )
            for topic, partition in self._lagging - lagging:  # partitions gone
                f["calving_kafka_lag_records"].remove(topic=topic, partition=partition, **labels)
            self._lagging = lagging
        if record["index_keys"] is not None:
            f["calving_index_keys"].set(record["index_keys"], **labels)
        if record["index_bytes"] is not None:
            f["calving_index_bytes"].set(record["index_bytes"], **labels)

    def _emit(self, record: Mapping[str, Any]) -> None:
        if self.log_batches and log.isEnabledFor(logging.INFO):
            log.info("%s", json.dumps(record, separators=(",", ":")))


__all__ = [
    "BATCH_BUCKETS",
    "COMMIT_BUCKETS",
    "FRESHNESS_BUCKETS",
    "LOG_FIELDS",
    "METRICS",
    "SinkMetrics",
]

"""Bulk-produce records for demos, tests and benchmarks.

Fast (large batches with a short linger) and made for the embedded Tansu broker: Tansu's
high watermark is the base offset of the last record batch plus one, so the tail of a
multi-record batch stays invisible to ``latestOffset`` until another batch lands. Each
partition's last record is therefore held back and sent alone, after everything else is
flushed, which makes the watermark cover every record produced. On real Kafka this costs
one extra small request per partition and changes nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

_MSG_SIZE_TOO_LARGE = 10  # confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE

from calving.commit.errors import Transient

Header = tuple[str, str | bytes | None]
#: (partition, key, value, headers)
Record = tuple[int, bytes | None, bytes | None, list[Header] | None]


class ProduceError(Transient):
    """The broker did not acknowledge every record; names the first failure."""


_FAST_CONFIG: dict[str, Any] = {
    "linger.ms": 20,
    "batch.num.messages": 10_000,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "compression.type": "none",
    "acks": "all",
    # One request in flight keeps per-partition order through retries. (Idempotence would
    # too, but costs ~0.5 s of producer-id setup per call on Tansu; one in flight is no
    # slower against a single local broker.)
    "enable.idempotence": False,
    "max.in.flight.requests.per.connection": 1,
}


class _Deliveries:
    """Delivery-report bookkeeping: highest acknowledged offset per partition."""

    def __init__(self, too_large: list[Record] | None = None) -> None:
        self.high: dict[int, int] = {}
        self.failures: list[str] = []
        self.too_large = too_large

    def __call__(self, error: Any, message: Any, record: Record | None = None) -> None:
        if error is not None:
            if self.too_large is not None and record is not None and _is_too_large(error):
                self.too_large.append(record)
                return
            self.failures.append(
                f"{message.topic()}/{message.partition()}: {error.str() if error else error}"
            )
            return
        partition, offset = message.partition(), message.offset()
        if offset > self.high.get(partition, -1):
            self.high[partition] = offset


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    *,
    config: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
    too_large: list[Record] | None = None,
) -> dict[int, int]:
    """Produce ``records`` to ``topic``; return each partition's end offset (last + 1).

    ``records`` are ``(partition, key, value, headers)`` with ``headers`` a list of
    ``(str, bytes | None)`` or ``None``. Order within a partition is kept. Raises
    ``ProduceError`` if any record was not acknowledged within ``timeout`` seconds.
    With ``too_large`` (a list), records refused for their size (``message.max.bytes``
    of the producer, or the broker's limit) are appended to it instead of failing.
    """
    from confluent_kafka import KafkaException, Producer

    from calving.ingest.kafka.client_log import with_client_log

    producer = Producer(
        with_client_log({**_FAST_CONFIG, **(config or {}), "bootstrap.servers": bootstrap})
    )
    deliveries = _Deliveries(too_large)
    held_last: dict[int, Record] = {}

    def send(record: Record) -> None:
        partition, key, value, headers = record
        while True:
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    headers=headers,
                    on_delivery=lambda err, msg: deliveries(err, msg, record),
                )
                return
            except KafkaException as err:
                if too_large is None or not _is_too_large(err.args[0]):
                    raise
                too_large.append(record)
                return
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain it

    for record in records:
        previous = held_last.get(record[0])
        if previous is not None:
            send(previous)
        held_last[record[0]] = record
    _flush(producer, timeout)
    # Each partition's final record goes out alone, so it forms a batch of its own.
    for record in held_last.values():
        send(record)
    _flush(producer, timeout)
    if deliveries.failures:
        raise ProduceError(
            f"{len(deliveries.failures)} record(s) not acknowledged, first: "
            f"{deliveries.failures[0]}"
        )
    return {partition: offset + 1 for partition, offset in sorted(deliveries.high.items())}


def _is_too_large(error: Any) -> bool:
    return bool(getattr(error, "code", lambda: None)() == _MSG_SIZE_TOO_LARGE)


def _flush(producer: Any, timeout: float) -> None:
    remaining = producer.flush(timeout)
    if remaining:
        raise ProduceError(f"{remaining} record(s) still unacknowledged after {timeout:.0f}s")

"""``shard_stage``: the executors ``owners()`` saw for a batch are the ones its stage
pins to, so Spark is asked once a batch (its scheduler calls are about ten py4j round
trips), and asked again when that answer is stale or was used; where a rebuild of the
shards runs (``rebuild_in_driver``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from calving.commit.spec.properties import TableProperties
from calving.ingest.sink import shard_stage
from calving.ingest.sink.shard_stage import SparkShardResolver, rebuild_in_driver


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Calls of ``shard_stage.executors`` (two executors, then three after a change)."""
    calls: list[int] = []

    def executors(spark: Any) -> list[str]:
        calls.append(1)
        count = 2 if len(calls) < 3 else 3
        return [f"executor_127.0.0.1_{i}" for i in range(count)]

    monkeypatch.setattr(shard_stage, "executors", executors)
    return calls


def test_the_stage_pins_to_the_executors_owners_saw(asked: list[int]) -> None:
    resolver = SparkShardResolver(spark=None)
    assert resolver.owners() == 2 and len(asked) == 1
    assert len(resolver._places()) == 2 and len(asked) == 1  # this batch's answer
    # Used once: the next batch without owners() (write tasks, say) asks again.
    assert len(resolver._places()) == 2 and len(asked) == 2
    assert len(resolver._places()) == 3 and len(asked) == 3


def test_a_stale_answer_is_not_used(asked: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    resolver = SparkShardResolver(spark=None)
    assert resolver.owners() == 2
    monkeypatch.setattr(shard_stage, "PLACES_FRESH_S", -1.0)  # any age is too old
    resolver._places()
    assert len(asked) == 2


def _metadata(summary: dict[str, str] | None, **properties: str) -> Any:
    """A table's metadata as ``rebuild_in_driver`` reads it: snapshot 7 with ``summary``
    (None: no such snapshot) and the table properties."""
    snapshots = {} if summary is None else {7: SimpleNamespace(summary=summary)}
    return SimpleNamespace(snapshot_by_id=snapshots.get, properties=properties)


@pytest.mark.parametrize(
    ("summary", "properties", "expected"),
    [
        ({"total-records": "2000000"}, {}, 2_000_000),  # below the 10M default
        ({"total-records": "12000000", "total-position-deletes": "3000000"}, {}, 9_000_000),
        ({"total-records": "10000000"}, {}, None),  # at the threshold: executors
        ({"total-records": "5"}, {"calving.index.executor-rebuild-rows": "0"}, None),
        ({"total-records": "5"}, {"calving.index.shard-steps": "owners"}, None),
        ({"total-records": "5"}, {"calving.index.shard-steps": "write-tasks"}, 5),
        ({"operation": "append"}, {}, None),  # no totals: a table of unknown size
    ],
)
def test_where_the_shards_are_rebuilt(
    summary: dict[str, str], properties: dict[str, str], expected: int | None
) -> None:
    assert TableProperties({}).index_executor_rebuild_rows == 10_000_000
    assert rebuild_in_driver(_metadata(summary, **properties), 7) == expected


def test_no_snapshot_is_an_empty_table_built_in_the_driver() -> None:
    assert rebuild_in_driver(_metadata(None), None) == 0

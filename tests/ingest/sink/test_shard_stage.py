"""``shard_stage.SparkShardResolver``: the executors ``owners()`` saw for a batch are the
ones its stage pins to, so Spark is asked once a batch (its scheduler calls are about
ten py4j round trips), and asked again when that answer is stale or was used."""

from __future__ import annotations

from typing import Any

import pytest

from calving.ingest.sink import shard_stage
from calving.ingest.sink.shard_stage import SparkShardResolver


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

"""Fixtures for ingest tests: one SparkSession per test session (slow to start), and
unique names so tests never share a topic; the session's embedded Kafka broker
(``broker``) is in tests/conftest.py."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from calving.ingest.kafka.broker import EmbeddedBroker
    from calving.ingest.kafka.options import KafkaSourceOptions

REPO_ROOT = Path(__file__).resolve().parents[2]


def unique_name(prefix: str = "t") -> str:
    """A topic (or table, query) name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_topic(broker: EmbeddedBroker) -> Callable[..., str]:
    """``make_topic(partitions=1, prefix="t")`` creates a fresh topic, returns its name."""

    def make(partitions: int = 1, prefix: str = "t") -> str:
        name = unique_name(prefix)
        broker.create_topic(name, partitions)
        return name

    return make


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] SparkSession for every test (a cold start costs several seconds)."""
    from tests.support.spark import local_session

    session = local_session("calving-tests")
    yield session
    session.stop()


@pytest.fixture
def counted_consumers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every Kafka consumer a range reader creates, from no idle one."""
    from calving.ingest.kafka import range_reader

    range_reader.close_idle_consumers()
    made: list[Any] = []
    new = range_reader._new_consumer

    def counted(options: KafkaSourceOptions) -> Any:
        made.append(new(options))
        return made[-1]

    monkeypatch.setattr(range_reader, "_new_consumer", counted)
    yield made
    range_reader.close_idle_consumers()

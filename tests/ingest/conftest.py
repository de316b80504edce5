"""Fixtures for ingest tests: one embedded Kafka broker and one SparkSession per test
session (both are slow to start), and unique names so tests never share a topic."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.kafka.broker import EmbeddedBroker

REPO_ROOT = Path(__file__).resolve().parents[2]


def unique_name(prefix: str = "t") -> str:
    """A topic (or table, query) name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """The embedded Tansu broker, shared by the whole session; its log is in the
    session's temp folder."""
    from ingest.kafka.broker import EmbeddedBroker

    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    with EmbeddedBroker(log_path=log) as running:
        yield running


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
    # Python workers must run this interpreter (it has the dependencies) and import the
    # project even when it is not installed into the environment.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Bind only to loopback (the machine's other interfaces are off limits for tests).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    path = os.environ.get("PYTHONPATH", "")
    if str(REPO_ROOT) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), path) if p)

    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("calving-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()

"""The consumer-lag probe against the embedded broker: asked as a commit starts, its
broker read runs in the background and the lag after the commit uses that reply (the
latest offsets of the moment it was asked); without an ask, the offsets are read then."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from calving.ingest.kafka.broker import EmbeddedBroker
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.kafka.producer import produce
from calving.ingest.metrics.lag import LagProbe

pytestmark = pytest.mark.integration


def _produce(broker: EmbeddedBroker, topic: str, n: int) -> None:
    # One record a call: Tansu's high watermark is the last batch's base offset + 1.
    for i in range(n):
        produce(broker.bootstrap_servers, topic, [(0, None, b"v%d" % i, None)])


def test_an_asked_reply_is_the_lag_of_that_moment_and_is_used_once(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=1)
    options = KafkaSourceOptions.parse(
        {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic}
    )
    probe = LagProbe(options)
    _produce(broker, topic, 3)
    probe.ask()
    probe.ask()  # one read at a time: the second ask joins the first
    assert probe._asked is not None
    probe._asked.result(30)  # the reply is in before more records arrive
    _produce(broker, topic, 2)
    ledger = {(topic, 0): 1}
    assert probe.lag(ledger) == {(topic, 0): 2}, "offsets of the ask: 3, ledger at 1"
    assert probe.lag(ledger) == {(topic, 0): 4}, "no ask: read now (5)"
    probe.ask()
    by_table = probe.lag_of_tables({"a": ({(topic, 0): 5}, [topic]), "b": ({}, None)})
    assert by_table == {"a": {(topic, 0): 0}, "b": {(topic, 0): 5}}  # b never committed

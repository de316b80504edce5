"""Parsing of the calving-kafka source options (no broker, no Spark)."""

from __future__ import annotations

import pytest

from calving.commit.errors import ConfigError
from calving.ingest.kafka.options import KafkaSourceOptions, Subscription
from calving.ingest.kafka.range_reader import consumer_config

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def parse(**options: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse({**BASE, **options})


def test_defaults_mirror_spark() -> None:
    opts = parse(subscribe="orders, payments,")
    assert opts.subscription == Subscription("subscribe", topics=("orders", "payments"))
    assert opts.starting_offsets == "latest"
    assert opts.fail_on_data_loss is True
    assert opts.include_headers is False
    assert opts.max_offsets_per_trigger is None
    assert opts.min_partitions is None
    assert opts.starting_ledger == {}
    assert opts.client_config == {"bootstrap.servers": "127.0.0.1:9092"}


def test_option_names_are_case_insensitive_and_values_typed() -> None:
    opts = KafkaSourceOptions.parse(
        {
            **BASE,
            "SUBSCRIBEPATTERN": "orders\\..*",
            "startingoffsets": "EARLIEST",
            "maxOffsetsPerTrigger": "500",
            "FailOnDataLoss": "False",
            "includeHeaders": "true",
            "minPartitions": "8",
            "calving.startingLedger": '{"orders.eu": {"0": 40}}',
            "kafka.isolation.level": "read_committed",
            "kafkaConsumer.pollTimeoutMs": "2500",
        }
    )
    assert opts.subscription == Subscription("subscribePattern", pattern="orders\\..*")
    assert opts.starting_offsets == "earliest"
    assert opts.max_offsets_per_trigger == 500
    assert opts.fail_on_data_loss is False
    assert opts.include_headers is True
    assert opts.min_partitions == 8
    assert opts.starting_ledger == {("orders.eu", 0): 40}
    assert opts.read_committed
    assert opts.poll_timeout_s == 2.5


@pytest.mark.parametrize(
    "chosen",
    [{}, {"subscribe": "a", "assign": '{"a": [0]}'}, {"subscribe": "a", "subscribePattern": "a"}],
)
def test_exactly_one_subscription_option(chosen: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="exactly one of the options 'subscribe'"):
        parse(**chosen)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"subscribe": "a", "startingOffset": "earliest"}, "'startingoffset' is not supported"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
        ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit"),
        ({"subscribe": " , "}, "'subscribe' names no topic"),
        ({"subscribePattern": "(unclosed"}, "'subscribePattern': invalid regex"),
        ({"assign": "[0]"}, "assign"),
        (
            {"subscribe": "a", "maxOffsetsPerTrigger": "0"},
            "'maxOffsetsPerTrigger' must be positive",
        ),
        ({"subscribe": "a", "minPartitions": "x"}, "'minPartitions' must be an integer"),
        ({"subscribe": "a", "failOnDataLoss": "yes"}, "'failOnDataLoss' must be true or false"),
        ({"subscribe": "a", "startingOffsets": "newest"}, "startingOffsets: not valid JSON"),
        ({"subscribe": "a", "calving.startingLedger": '{"a": {"0": -1}}'}, "startingLedger"),
        ({"subscribe": "a", "calving.rangeTasks": "2"}, "'calving.rangeTasks' applies only"),
        (
            {"subscribe": "a", "calving.emit": "ranges", "calving.rangeTasks": "0"},
            "'calving.rangeTasks' must be positive",
        ),
        (
            {"subscribe": "a", "calving.emit": "ranges", "calving.taskRecords": "0"},
            "'calving.taskRecords' must be positive",
        ),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace("(", "\\(")):
        parse(**options)


def test_bootstrap_servers_is_required() -> None:
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        KafkaSourceOptions.parse({"subscribe": "a"})


def test_subscription_selects_existing_partitions() -> None:
    counts = {"orders": 2, "orders.eu": 1, "payments": 3, "__consumer_offsets": 50}
    assert Subscription("subscribe", topics=("orders", "missing")).select(counts) == [
        ("orders", 0),
        ("orders", 1),
    ]
    # Patterns match whole names, like Java's Matcher.matches(); internal topics never.
    assert Subscription("subscribePattern", pattern="orders.*").select(counts) == [
        ("orders", 0),
        ("orders", 1),
        ("orders.eu", 0),
    ]
    assert Subscription("subscribePattern", pattern="rders").select(counts) == []
    assert Subscription("subscribePattern", pattern=".*").select(counts)[-1] == ("payments", 2)
    assigned = Subscription("assign", assigned=(("payments", 2), ("payments", 7), ("x", 0)))
    assert assigned.select(counts) == [("payments", 2)]


def test_consumer_config_owns_commit_and_reset_settings() -> None:
    config = consumer_config(parse(subscribe="a", **{"kafka.fetch.min.bytes": "1"}))
    assert config["enable.auto.commit"] is False
    assert config["auto.offset.reset"] == "error"
    assert config["isolation.level"] == "read_uncommitted"
    assert config["fetch.min.bytes"] == "1"
    assert config["group.id"].startswith("calving-kafka-source-")
    named = consumer_config(parse(subscribe="a", **{"kafka.group.id": "mine"}))
    assert named["group.id"] == "mine"
    # Ranges are planned below the end: no fetch long-polls for new records.
    assert config["fetch.wait.max.ms"] == 10
    mine = consumer_config(parse(subscribe="a", **{"kafka.fetch.wait.max.ms": "200"}))
    assert mine["fetch.wait.max.ms"] == "200"
    # Nor does a full fetch queue hold the range's tail back for librdkafka's 1 s.
    assert config["fetch.queue.backoff.ms"] == 10
    theirs = consumer_config(parse(subscribe="a", **{"kafka.fetch.queue.backoff.ms": "500"}))
    assert theirs["fetch.queue.backoff.ms"] == "500"

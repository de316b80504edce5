"""The Prometheus text format calving renders, the /metrics endpoint and ``[metrics]``."""

from __future__ import annotations

import math
import urllib.error
import urllib.request

import pytest

from calving.commit.errors import ConfigError
from calving.ingest.config.loader import parse_config
from calving.ingest.metrics import METRICS, Counter, Gauge, Histogram, MetricsServer, Registry
from calving.ingest.metrics.batch import SinkMetrics
from tests.ingest.metrics.promtext import FormatError, parse

NASTY = 'a\\b "quoted"\nnext line'


def test_label_values_and_help_are_escaped():
    registry = Registry()
    counter = registry.register(Counter("calving_x_total", 'Help with \\ and\nnewline "q"', ["t"]))
    counter.inc(3, t=NASTY)
    text = registry.render()
    assert text.splitlines() == [
        '# HELP calving_x_total Help with \\\\ and\\nnewline "q"',
        "# TYPE calving_x_total counter",
        'calving_x_total{t="a\\\\b \\"quoted\\"\\nnext line"} 3.0',
    ]
    family = parse(text)["calving_x_total"]
    assert family.type == "counter"
    assert family.help == 'Help with \\ and\nnewline "q"'
    assert family.value(t=NASTY) == 3


def test_histogram_buckets_are_cumulative_with_sum_and_count():
    registry = Registry()
    hist = registry.register(Histogram("calving_h_seconds", "h", ["t"], buckets=(0.1, 1, 10)))
    for v in (0.05, 0.1, 0.5, 2, 20, 20):
        hist.observe(v, t="x")
    family = parse(registry.render())["calving_h_seconds"]
    buckets = {dict(k)["le"]: v for k, v in family.series("calving_h_seconds_bucket").items()}
    assert buckets == {"0.1": 2, "1.0": 3, "10.0": 4, "+Inf": 6}
    assert family.value("calving_h_seconds_count", t="x") == 6
    assert family.value("calving_h_seconds_sum", t="x") == pytest.approx(42.65)


def test_gauge_values_and_special_floats():
    registry = Registry()
    gauge = registry.register(Gauge("calving_g", "g", ["k"]))
    gauge.set(1.5, k="a")
    gauge.set(math.inf, k="b")
    gauge.set(-math.inf, k="c")
    gauge.set(12345678901, k="d")
    gauge.set(float("nan"), k="e")
    gauge.remove(k="a")
    text = registry.render()
    assert 'calving_g{k="b"} +Inf' in text and 'calving_g{k="c"} -Inf' in text
    assert 'calving_g{k="d"} 1.2345678901e+10' in text and 'calving_g{k="e"} NaN' in text
    family = parse(text)["calving_g"]
    assert {dict(k)["k"] for k in family.series()} == {"b", "c", "d", "e"}


def test_families_refuse_misuse():
    with pytest.raises(ValueError, match="_total"):
        Counter("calving_bad", "x")
    counter = Counter("calving_c_total", "x", ["a"])
    with pytest.raises(ValueError, match="cannot go down"):
        counter.inc(-1, a="1")
    with pytest.raises(ValueError, match="labels"):
        counter.inc(1, b="1")
    registry = Registry()
    registry.register(counter)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Counter("calving_c_total", "y"))


def test_the_parser_rejects_malformed_text():
    """The test's parser is strict (so the checks above mean something)."""
    with pytest.raises(FormatError):
        parse('# TYPE m counter\nm{a="\\x"} 1\n')  # unknown escape
    with pytest.raises(FormatError):
        parse("m_total 1\n")  # no TYPE
    with pytest.raises(FormatError):
        parse("# TYPE m gauge\nm 1\nm 2\n")  # duplicate series
    with pytest.raises(FormatError):
        parse('# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_count 1\nh_sum 1\n')


def test_every_documented_metric_is_rendered_once_with_help_and_type():
    metrics = SinkMetrics("db.t", "w")
    families = parse(metrics.registry.render())
    assert set(families) == set(METRICS)
    for name, (kind, _, help_text) in METRICS.items():
        assert families[name].type == kind and families[name].help == help_text
    # Counters without extra labels start at 0, so a rate() works from the first scrape.
    assert families["calving_records_total"].value(table="db.t", writer_id="w") == 0


def test_the_endpoint_serves_the_registry():
    registry = Registry()
    registry.register(Counter("calving_served_total", "s")).inc(7)
    server = MetricsServer(registry, "127.0.0.1", 0)
    try:
        with urllib.request.urlopen(server.url, timeout=5) as reply:
            assert reply.headers["Content-Type"].startswith("text/plain; version=")
            body = reply.read().decode()
        assert parse(body)["calving_served_total"].value() == 7
        with pytest.raises(ConfigError, match=f"127.0.0.1:{server.port}"):
            MetricsServer(registry, "127.0.0.1", server.port)  # taken
    finally:
        server.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url, timeout=2)


def _config(metrics: dict | None) -> dict:
    doc = {
        "source": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["t"]},
        "format": {"type": "json"},
        "table": {"catalog": "sqlite:///c.db", "warehouse": "w", "name": "db.t",
                  "columns": [{"name": "id", "type": "long"}]},
        "sink": {"writer_id": "w", "checkpoint": "ck"},
    }  # fmt: skip
    if metrics is not None:
        doc["metrics"] = metrics
    return doc


def test_metrics_config():
    off = parse_config(_config(None)).metrics
    assert (off.enabled, off.host, off.port, off.log_batches, off.lag) == (
        False, "127.0.0.1", 9464, True, True)  # fmt: skip
    assert parse_config(_config({"port": 9100})).metrics.enabled  # a port turns it on
    on = parse_config(_config({"enabled": True, "host": "0.0.0.0"})).metrics
    assert (on.enabled, on.host, on.port) == (True, "0.0.0.0", 9464)
    assert not parse_config(_config({"port": 9100, "enabled": False})).metrics.enabled
    with pytest.raises(ConfigError, match=r"metrics\.port: must be at most 65535"):
        parse_config(_config({"port": 70000}))
    with pytest.raises(ConfigError, match=r"metrics\.prot: unknown key.*'port'"):
        parse_config(_config({"prot": 1}))
    with pytest.raises(ConfigError, match=r"metrics\.enabled: expected true or false"):
        parse_config(_config({"enabled": "yes"}))

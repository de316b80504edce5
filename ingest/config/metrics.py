"""``[metrics]``: the Prometheus endpoint and the per-batch JSON log line."""

from __future__ import annotations

from dataclasses import dataclass

from calving.ingest.config.reader import Section

METRICS_KEYS = ("enabled", "host", "port", "log_batches", "lag")

#: The endpoint's port when ``enabled = true`` names none.
DEFAULT_PORT = 9464


@dataclass(frozen=True)
class MetricsConfig:
    #: Serve ``http://host:port/metrics`` (Prometheus text format). Off by default;
    #: ``enabled = true`` or a ``port`` turns it on.
    enabled: bool = False
    host: str = "127.0.0.1"
    #: 0 takes a free port (the endpoint's ``port`` then tells which).
    port: int = DEFAULT_PORT
    #: One JSON line per batch on the ``calving.metrics`` logger (INFO).
    log_batches: bool = True
    #: Ask the broker for the latest offsets after every batch (consumer lag).
    lag: bool = True


def parse_metrics(s: Section | None) -> MetricsConfig:
    if s is None:
        return MetricsConfig()
    port = s.integer("port", minimum=0)
    if port is not None and port > 65535:
        s.fail("port", f"must be at most 65535, got {s.shown(s.key('port'), port)}")
    config = MetricsConfig(
        enabled=s.boolean("enabled", port is not None),
        host=s.string("host", "127.0.0.1", what="an address to listen on") or "127.0.0.1",
        port=DEFAULT_PORT if port is None else port,
        log_batches=s.boolean("log_batches", True),
        lag=s.boolean("lag", True),
    )
    s.finish()
    return config


__all__ = ["DEFAULT_PORT", "METRICS_KEYS", "MetricsConfig", "parse_metrics"]

"""Pipeline metrics: a Prometheus text endpoint (``[metrics]``, off by default) and one
JSON log line per batch on the ``calving.metrics`` logger.

* ``exposition``: counters, gauges and histograms on ``prometheus-client``;
* ``server``: ``MetricsServer``, ``prometheus-client``'s ``/metrics`` endpoint;
* ``lag``: ``LagProbe``, the broker's latest offsets against the table's ledger;
* ``batch``: ``SinkMetrics``, what a ``CalvingSink`` records per batch (``METRICS`` and
  ``LOG_FIELDS`` list every name);
* ``many``: ``ManyMetrics``, the same figures per table of a many-table pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from calving.ingest.metrics.batch import LOG_FIELDS, METRICS, SinkMetrics
from calving.ingest.metrics.exposition import CONTENT_TYPE, Counter, Gauge, Histogram, Registry
from calving.ingest.metrics.lag import LagProbe
from calving.ingest.metrics.many import ManyMetrics
from calving.ingest.metrics.server import MetricsServer

if TYPE_CHECKING:
    from calving.ingest.config.loader import CalvingConfig


def metrics_for(config: CalvingConfig) -> SinkMetrics:
    """The sink's metrics for a pipeline config; the endpoint is started when
    ``[metrics]`` enables it (``SinkMetrics.close()`` stops it)."""
    cfg = config.metrics
    lag = LagProbe(config.source.source_options()) if cfg.lag else None
    metrics = SinkMetrics(
        config.table.name, config.sink.writer_id, lag=lag, log_batches=cfg.log_batches
    )
    if cfg.enabled:
        metrics.serve(cfg.host, cfg.port)
    return metrics


def many_metrics_for(config: CalvingConfig) -> ManyMetrics:
    """The per-table metrics of a many-table pipeline's config (as ``metrics_for``)."""
    cfg = config.metrics
    lag = LagProbe(config.source.source_options()) if cfg.lag else None
    metrics = ManyMetrics(config.sink.writer_id, lag=lag, log_batches=cfg.log_batches)
    if cfg.enabled:
        metrics.serve(cfg.host, cfg.port)
    return metrics


__all__ = [
    "CONTENT_TYPE",
    "LOG_FIELDS",
    "METRICS",
    "Counter",
    "Gauge",
    "Histogram",
    "LagProbe",
    "ManyMetrics",
    "MetricsServer",
    "Registry",
    "SinkMetrics",
    "many_metrics_for",
    "metrics_for",
]

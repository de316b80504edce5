"""Metric families on ``prometheus-client``, the Prometheus project's Python client.

The sink declares each family once (name, help, label names, histogram buckets) and
updates it with keyword labels (``counter.inc(2, table="db.t", writer_id="w")``);
``prometheus-client`` keeps the values and renders the text exposition format (escaping
of label values and help, ``+Inf`` / ``NaN``, cumulative buckets). Each family lives in
its own ``CollectorRegistry`` so its values can be read back (``value``, ``count``)
whether or not it is served; a ``Registry`` serves the families registered with it in
registration order. Counters without ``_created`` series (off process-wide), as before.
Every method is thread-safe: the sink updates families in the driver while the HTTP
thread renders them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import prometheus_client as pc
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

pc.disable_created_metrics()

#: The ``Content-Type`` of a rendered registry (text format 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricFamily:
    """One metric name with its help, type and label names."""

    kind = "untyped"

    def __init__(self, name: str, help_text: str, label_names: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help_text
        self.label_names = tuple(label_names)
        self._own = CollectorRegistry(auto_describe=True)
        self._metric: Any = None

    def _adopt(self, metric: Any) -> None:
        self._metric = metric
        self._own.register(metric)

    def _check(self, labels: Mapping[str, str]) -> dict[str, str]:
        if set(labels) != set(self.label_names):
            raise ValueError(
                f"{self.name}: labels {sorted(labels)} differ from {list(self.label_names)}"
            )
        return {n: str(labels[n]) for n in self.label_names}

    def _child(self, labels: Mapping[str, str]) -> Any:
        checked = self._check(labels)
        return self._metric.labels(**checked) if self.label_names else self._metric

    def _sample(self, sample_name: str, labels: Mapping[str, str]) -> float | None:
        value = self._own.get_sample_value(sample_name, self._check(labels))
        return None if value is None else float(value)

    def collect(self) -> Iterable[Metric]:
        # _metric is the prometheus_client metric _adopt took (Any: its kinds differ).
        metrics: Iterable[Metric] = self._metric.collect()
        return metrics


class Counter(MetricFamily):
    """Only goes up. Names end in ``_total``."""

    kind = "counter"

    def __init__(self, name: str, help_text: str, label_names: Sequence[str] = ()) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"counter {name} must end in _total")
        super().__init__(name, help_text, label_names)
        self._adopt(pc.Counter(name, help_text, self.label_names, registry=None))

    def inc(self, amount: float = 1, **labels: str) -> None:
        if amount < 0:
            raise ValueError(f"{self.name}: a counter cannot go down ({amount})")
        self._child(labels).inc(amount)

    def touch(self, **labels: str) -> None:
        """Make the series visible at 0 before it is first incremented."""
        self._child(labels)

    def value(self, **labels: str) -> float:
        return self._sample(self.name, labels) or 0


class Gauge(MetricFamily):
    """A value that is set (the latest reading)."""

    kind = "gauge"

    def __init__(self, name: str, help_text: str, label_names: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, label_names)
        self._adopt(pc.Gauge(name, help_text, self.label_names, registry=None))

    def set(self, value: float, **labels: str) -> None:
        self._child(labels).set(value)

    def remove(self, **labels: str) -> None:
        checked = self._check(labels)
        try:
            self._metric.remove(*checked.values())
        except KeyError:
            pass

    def value(self, **labels: str) -> float:
        return self._sample(self.name, labels) or 0


class Histogram(MetricFamily):
    """Observations counted into cumulative ``le`` buckets, with ``_sum`` and ``_count``."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: Sequence[str] = (),
        buckets: Iterable[float] = (),
    ) -> None:
        if "le" in label_names:
            raise ValueError(f"{name}: 'le' is reserved for histogram buckets")
        super().__init__(name, help_text, label_names)
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.buckets = tuple(bounds)
        self._adopt(
            pc.Histogram(name, help_text, self.label_names, registry=None, buckets=self.buckets)
        )

    def observe(self, value: float, **labels: str) -> None:
        self._child(labels).observe(value)

    def count(self, **labels: str) -> int:
        return int(self._sample(f"{self.name}_count", labels) or 0)


class Registry(Collector):
    """The families one endpoint serves, in registration order."""

    def __init__(self) -> None:
        self._families: dict[str, MetricFamily] = {}
        self._lock = threading.Lock()
        #: What ``prometheus-client`` serves and renders: this registry's families.
        self.collector_registry = CollectorRegistry(auto_describe=False)
        self.collector_registry.register(self)

    def register(self, family: MetricFamily) -> MetricFamily:
        with self._lock:
            if family.name in self._families:
                raise ValueError(f"metric {family.name} is already registered")
            self._families[family.name] = family
        return family

    def families(self) -> list[MetricFamily]:
        with self._lock:
            return list(self._families.values())

    def collect(self) -> Iterator[Metric]:
        for family in self.families():
            yield from family.collect()

    def render(self) -> str:
        return pc.generate_latest(self.collector_registry).decode("utf-8")


__all__ = ["CONTENT_TYPE", "Counter", "Gauge", "Histogram", "MetricFamily", "Registry"]

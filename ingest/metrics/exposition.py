"""Metric families and the Prometheus text exposition format (version 0.0.4).

A small, dependency-free registry: counters, gauges and histograms with fixed label
names, rendered as ``# HELP`` / ``# TYPE`` lines followed by one sample per line. Label
values and help texts are escaped as the format requires (backslash, double quote and
newline in label values; backslash and newline in help). Every method is thread-safe:
the sink updates the families in the driver while the HTTP thread renders them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence

#: The ``Content-Type`` of a rendered registry.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LabelValues = tuple[str, ...]


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value as the format spells it: ``+Inf``, ``-Inf``, ``NaN``, integers
    without a fraction, other floats in Python's shortest round-trip form."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _labels(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    inner = ",".join(f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values))
    return "{" + inner + "}"


class MetricFamily:
    """One metric name with its help, type and label names."""

    kind = "untyped"

    def __init__(self, name: str, help_text: str, label_names: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help_text
        self.label_names = tuple(label_names)
        self._lock = threading.Lock()

    def _key(self, labels: Mapping[str, str]) -> LabelValues:
        if set(labels) != set(self.label_names):
            raise ValueError(
                f"{self.name}: labels {sorted(labels)} differ from {list(self.label_names)}"
            )
        return tuple(str(labels[n]) for n in self.label_names)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]

    def samples(self) -> list[str]:
        raise NotImplementedError

    def render(self) -> list[str]:
        return self.header() + self.samples()


class _Scalar(MetricFamily):
    def __init__(self, name: str, help_text: str, label_names: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, label_names)
        self._values: dict[LabelValues, float] = {}

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0)

    def samples(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        return [f"{self.name}{_labels(self.label_names, k)} {format_value(v)}" for k, v in items]


class Counter(_Scalar):
    """Only goes up. Names end in ``_total``."""

    kind = "counter"

    def __init__(self, name: str, help_text: str, label_names: Sequence[str] = ()) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"counter {name} must end in _total")
        super().__init__(name, help_text, label_names)

    def inc(self, amount: float = 1, **labels: str) -> None:
        if amount < 0:
            raise ValueError(f"{self.name}: a counter cannot go down ({amount})")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount

    def touch(self, **labels: str) -> None:
        """Make the series visible at 0 before it is first incremented."""
        key = self._key(labels)
        with self._lock:
            self._values.setdefault(key, 0)


class Gauge(_Scalar):
    """A value that is set (the latest reading)."""

    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = value

    def remove(self, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values.pop(key, None)


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
        self._series: dict[LabelValues, tuple[list[int], list[float]]] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            counts, total = self._series.setdefault(key, ([0] * len(self.buckets), [0.0]))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    counts[i] += 1
                    break
            total[0] += value

    def count(self, **labels: str) -> int:
        with self._lock:
            series = self._series.get(self._key(labels))
            return sum(series[0]) if series else 0

    def samples(self) -> list[str]:
        with self._lock:
            items = sorted((k, (list(c), t[0])) for k, (c, t) in self._series.items())
        lines = []
        for key, (counts, total) in items:
            cumulative = 0
            for bound, n in zip(self.buckets, counts):
                cumulative += n
                labels = _labels((*self.label_names, "le"), (*key, format_value(bound)))
                lines.append(f"{self.name}_bucket{labels} {cumulative}")
            labels = _labels(self.label_names, key)
            lines.append(f"{self.name}_sum{labels} {format_value(total)}")
            lines.append(f"{self.name}_count{labels} {cumulative}")
        return lines


class Registry:
    """The families one endpoint serves, in registration order."""

    def __init__(self) -> None:
        self._families: dict[str, MetricFamily] = {}
        self._lock = threading.Lock()

    def register(self, family: MetricFamily) -> MetricFamily:
        with self._lock:
            if family.name in self._families:
                raise ValueError(f"metric {family.name} is already registered")
            self._families[family.name] = family
        return family

    def families(self) -> list[MetricFamily]:
        with self._lock:
            return list(self._families.values())

    def render(self) -> str:
        lines: list[str] = []
        for family in self.families():
            lines += family.render()
        return "\n".join(lines) + "\n"


__all__ = [
    "CONTENT_TYPE",
    "Counter",
    "Gauge",
    "Histogram",
    "MetricFamily",
    "Registry",
    "escape_help",
    "escape_label_value",
    "format_value",
]

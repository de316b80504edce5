"""Kafka Connect's JSON converter, the names every reader of it shares: the envelope test
and the logical types two decoders look for. No imports of calving: any layer may use it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

#: Kafka Connect's logical decimal, and Debezium's decimal of a per-value scale.
CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"


def is_connect_envelope(doc: object) -> TypeGuard[Mapping[str, Any]]:
    """A JSON converter record with schemas enabled: ``{"schema": ..., "payload": ...}``.
    The one test for it; every reader of Connect JSON asks here."""
    return isinstance(doc, Mapping) and "schema" in doc and "payload" in doc

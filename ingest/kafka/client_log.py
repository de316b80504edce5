"""librdkafka's log lines, routed into Python logging at DEBUG.

By default librdkafka prints every connection failure to stderr (``%3|...|FAIL|...``),
once a second for as long as a broker is unreachable. Every client calving creates gets
``with_client_log(config)``: its lines go to the ``calving.ingest.kafka.librdkafka``
logger at DEBUG (shown with ``calving -v``); the failure itself surfaces as one typed
error naming the bootstrap servers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

LOGGER_NAME = "calving.ingest.kafka.librdkafka"


class _DebugLog:
    """What confluent-kafka's ``logger`` setting needs: an object with ``log(level,
    fmt, *args)``. Every line is logged at DEBUG, whatever librdkafka's severity."""

    def __init__(self, name: str = LOGGER_NAME) -> None:
        self._logger = logging.getLogger(name)

    def log(self, level: int, fmt: str, *args: Any) -> None:
        self._logger.debug(fmt, *args)


def with_client_log(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` plus the ``logger`` setting (a user-supplied one is kept)."""
    out = dict(config)
    out.setdefault("logger", _DebugLog())
    return out

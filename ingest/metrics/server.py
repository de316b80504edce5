"""The ``/metrics`` endpoint: ``prometheus-client``'s own HTTP server on a daemon thread
(text format negotiated from the scraper's ``Accept`` header, OpenMetrics included)."""

from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer

import prometheus_client as pc

from calving.commit.errors import ConfigError
from calving.ingest.metrics.exposition import Registry

log = logging.getLogger("calving.metrics")


class MetricsServer:
    """Serves ``registry`` at ``http://host:port/metrics`` until ``close()``.
    ``port=0`` takes a free port; ``port`` then tells which."""

    def __init__(self, registry: Registry, host: str = "127.0.0.1", port: int = 0) -> None:
        self.registry = registry
        try:
            server, thread = pc.start_http_server(port, host, registry.collector_registry)
        except OSError as err:
            raise ConfigError(
                f"metrics: cannot listen on {host}:{port} ({err.strerror or err})"
            ) from None
        self._httpd: WSGIServer = server
        self._thread: threading.Thread = thread
        log.info("metrics at http://%s:%d/metrics", host, self.port)

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


__all__ = ["MetricsServer"]

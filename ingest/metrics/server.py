"""The ``/metrics`` endpoint: a stdlib HTTP server on a daemon thread."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from calving.commit.errors import ConfigError
from calving.ingest.metrics.exposition import CONTENT_TYPE, Registry

log = logging.getLogger("calving.metrics")


class MetricsServer:
    """Serves ``registry`` at ``http://host:port/metrics`` (``/`` answers the same) until
    ``close()``. ``port=0`` takes a free port; ``port`` then tells which."""

    def __init__(self, registry: Registry, host: str = "127.0.0.1", port: int = 0) -> None:
        self.registry = registry
        handler = _handler(registry)
        try:
            self._httpd = ThreadingHTTPServer((host, port), handler)
        except OSError as err:
            raise ConfigError(
                f"metrics: cannot listen on {host}:{port} ({err.strerror or err})"
            ) from None
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name=f"calving-metrics-{port}", daemon=True
        )
        self._thread.start()
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


def _handler(registry: Registry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics is served")
                return
            body = registry.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics request: " + format, *args)

    return Handler


__all__ = ["MetricsServer"]

"""uvicorn's HTTP/1.1 protocol (h11) with what a server facing a network still needs.

uvicorn parses requests with h11 (``Content-Length`` and chunked bodies, keep-alive,
pipelining, a cap on the size of the request line and headers) and refuses a request
it cannot parse with a 400. This subclass adds:

* a header timeout: a connection that has not sent a whole request head within
  ``header_timeout_s`` of connecting (or of its previous answer) is closed, so
  half-sent requests cannot hold connections;
* a bound on open connections: past ``max_connections`` a new connection is closed at
  once (uvicorn's own ``limit_concurrency`` answers 503 to requests beyond it);
* the 400 for an unparsable request in the Iceberg error model instead of plain text.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

BAD_REQUEST_BODY = json.dumps(
    {
        "error": {
            "message": "malformed HTTP request",
            "type": "BadRequestException",
            "code": 400,
        }
    }
).encode()


class GuardedH11Protocol(H11Protocol):
    header_timeout_s = 10.0
    max_connections = 256

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        if len(self.connections) > self.max_connections:
            self.logger.warning("connection refused: %d connections open", len(self.connections))
            self.transport.close()
            return
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        waiting = self.cycle is None or self.cycle.response_complete
        if waiting and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before:
            self._disarm()  # a whole request head arrived

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(BAD_REQUEST_BODY)).encode()),
            (b"connection", b"close"),
        ]
        try:
            self.transport.write(self.conn.send(h11.Response(status_code=400, headers=headers)))
            self.transport.write(self.conn.send(h11.Data(data=BAD_REQUEST_BODY)))
            self.transport.write(self.conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError:
            pass  # an answer was already started: just close
        self.transport.close()

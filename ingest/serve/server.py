"""``RestCatalogServer``: the ASGI application served by uvicorn on one socket.

    RestCatalogServer(service, "127.0.0.1", 0, token=...).start()   # a daemon thread
    ...; server.stop()

The socket is bound in the constructor (``port=0`` takes a free port; ``url`` tells
which), so a caller can print where it listens before serving. uvicorn runs with the
guarded h11 protocol (``protocol``), its keep-alive timeout, ``limit_concurrency`` (503
beyond it) and a graceful shutdown of at most 5 s; its own logging and access log are
off (the application logs each request without headers).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass

import uvicorn

from calving.ingest.serve.app import Auth, Limits, build_app
from calving.ingest.serve.idempotency import DEFAULT_LIFETIME_S, IdempotencyStore
from calving.ingest.serve.protocol import GuardedH11Protocol
from calving.ingest.serve.service import CatalogService
from calving.ingest.serve.tokens import TokenIssuer


@dataclass(frozen=True)
class ServerLimits:
    """Connection-level limits (``Limits`` holds the per-request ones)."""

    max_connections: int = 200
    header_timeout_s: float = 10.0
    keep_alive_s: int = 5


class RestCatalogServer:
    def __init__(
        self,
        service: CatalogService,
        host: str = "127.0.0.1",
        port: int = 8181,
        *,
        token: str | None = None,
        issuer: TokenIssuer | None = None,
        insecure: bool = False,
        prefix: str | None = None,
        limits: Limits | None = None,
        server_limits: ServerLimits | None = None,
        idempotency_lifetime_s: float | None = DEFAULT_LIFETIME_S,
    ) -> None:
        self.service = service
        self.auth = Auth(token=token, issuer=issuer, insecure=insecure)
        #: None: ``Idempotency-Key`` is neither honoured nor advertised.
        self.idempotency = (
            None if idempotency_lifetime_s is None else IdempotencyStore(idempotency_lifetime_s)
        )
        app = build_app(
            service, self.auth, prefix=prefix, limits=limits, idempotency=self.idempotency
        )
        conn = server_limits or ServerLimits()
        protocol = type(
            "ServeProtocol",
            (GuardedH11Protocol,),
            {
                "header_timeout_s": conn.header_timeout_s,
                "max_connections": conn.max_connections + 16,
            },
        )
        config = uvicorn.Config(
            app,
            http=protocol,
            loop="asyncio",
            lifespan="off",
            log_config=None,
            access_log=False,
            server_header=False,
            timeout_keep_alive=conn.keep_alive_s,
            limit_concurrency=conn.max_connections,
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
        except OSError:
            self._socket.close()
            raise
        self._socket.listen(2048)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._socket.getsockname()[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def _run(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._socket]))

    def start(self) -> RestCatalogServer:
        """Serve in a daemon thread; ``stop`` ends it."""
        self._thread = threading.Thread(target=self._run, name="calving-rest", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        self._socket.close()

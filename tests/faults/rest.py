"""The fault suite through the REST path: writers commit with ``RestCatalog`` to a
``calving catalog serve`` process over SQLite or PostgreSQL (kinds ``rest-sqlite`` and
``rest-postgres``), and lost replies are real network failures made by a lossy proxy
between a writer and the server.

``LossyProxy`` forwards every request; on every ``every``-th commit (``POST`` of a table
or of ``transactions/commit``) it either forwards it and then drops the connection
without the answer (``applied``: the commit landed, the writer never hears) or drops the
connection without forwarding (``not-applied``). The writer's ``RestCatalog`` sees a dropped
connection after sending: an unknown outcome that calving must resolve by reading back.
"""

from __future__ import annotations

import http.client
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SERVE_START_S = 60.0
_servers: dict[Path, subprocess.Popen[str]] = {}


def start_serve(sql_uri: str, name: str, warehouse: str, workdir: Path) -> str:
    """``calving catalog serve`` over ``sql_uri`` for the scenario in ``workdir`` (its
    log ``rest-server.log`` there); its URL. ``stop_serve(workdir)`` ends it."""
    log = open(workdir / "rest-server.log", "w")  # noqa: SIM115 - the process keeps it
    cmd = [sys.executable, "-m", "calving.ingest.cli", "catalog", "serve", "--catalog", sql_uri,
           "--catalog-name", name, "--warehouse", warehouse, "--port", "0", "--insecure"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    _servers[workdir] = proc
    line = _first_line(proc)
    if not line.startswith("calving catalog serve: listening on "):
        stop_serve(workdir)
        raise RuntimeError(f"calving catalog serve did not start: {line!r}; see {log.name}")
    return line.rsplit(" ", 1)[-1].strip()


def _first_line(proc: subprocess.Popen[str]) -> str:
    got: list[str] = []
    reader = threading.Thread(
        target=lambda: got.append(proc.stdout.readline() if proc.stdout else "")
    )
    reader.start()
    reader.join(SERVE_START_S)
    return got[0] if got else ""


def stop_serve(workdir: Path) -> None:
    proc = _servers.pop(workdir, None)
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()  # only the server this harness started
        proc.wait()


def _is_commit(method: str, path: str) -> bool:
    parts = urllib.parse.urlsplit(path).path.strip("/").split("/")
    table_commit = len(parts) >= 5 and parts[-2] == "tables" and parts[-4] == "namespaces"
    return method == "POST" and (table_commit or parts[-2:] == ["transactions", "commit"])


class LossyProxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, target: str, mode: str, every: int) -> None:
        if mode not in ("applied", "not-applied"):
            raise ValueError(mode)
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.target = urllib.parse.urlsplit(target)
        self.mode = mode
        self.every = every
        self.commits = 0
        self.injected = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> LossyProxy:
        threading.Thread(target=self.serve_forever, name="lossy-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def lose(self, method: str, path: str) -> bool:
        if not _is_commit(method, path):
            return False
        with self.lock:
            self.commits += 1
            lost = self.commits % self.every == 0
            self.injected += lost
        return lost


class _ProxyHandler(BaseHTTPRequestHandler):
    server: LossyProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._relay("GET")

    def do_POST(self) -> None:
        self._relay("POST")

    def do_DELETE(self) -> None:
        self._relay("DELETE")

    def do_HEAD(self) -> None:
        self._relay("HEAD")

    def _relay(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        lose = self.server.lose(method, self.path)
        if lose and self.server.mode == "not-applied":
            self._drop()
            return
        status, headers, data = self._forward(method, body)
        if lose:  # applied: the server answered, the writer never hears it
            self._drop()
            return
        self.send_response(status)
        for key, value in headers:
            if key.lower() not in ("transfer-encoding", "connection"):
                self.send_header(key, value)
        self.end_headers()
        if data and method != "HEAD":
            self.wfile.write(data)

    def _forward(self, method: str, body: bytes | None) -> tuple[int, list[tuple[str, str]], bytes]:
        target = self.server.target
        conn = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            conn.request(method, self.path, body=body, headers=headers)
            reply = conn.getresponse()
            return reply.status, reply.getheaders(), reply.read()
        finally:
            conn.close()

    def _drop(self) -> None:
        self.close_connection = True
        self.connection.shutdown(2)  # socket.SHUT_RDWR


def with_proxies(
    target: str, modes: list[tuple[str, int]], run: Callable[[list[LossyProxy]], None]
) -> int:
    """Run ``run`` with a proxy per (mode, every); the faults they injected."""
    proxies = [LossyProxy(target, mode, every).start() for mode, every in modes]
    try:
        run(proxies)
    finally:
        for p in proxies:
            p.stop()
    return sum(p.injected for p in proxies)

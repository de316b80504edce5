"""A running ``calving catalog serve`` process for the hostile-client suite, and raw
HTTP helpers (sockets and ``http.client``) that send exactly the bytes a test names.

Only the standard library talks to the server here, so the suite can be pointed at any
build of the command (it passes only flags every build takes, plus the limits flags when
``--help`` lists them).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TOKEN = "hostile-suite-token-5f1c2d"
CLIENT_ID = "duck"
CLIENT_SECRET = "client-secret-9e4b"
HEADER_TIMEOUT_S = 2
BODY_TIMEOUT_S = 2


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str
    root: Path  # everything the test made; the warehouse is root / "warehouse"
    warehouse: Path

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return int(urllib.parse.urlsplit(self.url).port or 0)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/task"))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = TOKEN,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
        timeout: float = 20.0,
        source: str = "127.0.0.1",
    ) -> tuple[int, dict[str, str], Any]:
        """(status, headers, JSON body or text) of one request on a fresh connection
        from loopback address ``source``."""
        conn = http.client.HTTPConnection(
            self.host, self.port, timeout=timeout, source_address=(source, 0)
        )
        sent = dict(headers or {})
        data = raw
        if data is None and body is not None:
            data = json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        if token is not None:
            sent.setdefault("Authorization", f"Bearer {token}")
        try:
            conn.request(method, path, body=data, headers=sent)
            reply = conn.getresponse()
            text = reply.read()
        finally:
            conn.close()
        try:
            parsed: Any = json.loads(text) if text else None
        except ValueError:
            parsed = text.decode("utf-8", "replace")
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, parsed

    def files_outside_warehouse(self) -> list[str]:
        """Metadata files under ``root`` but outside the warehouse."""
        out = []
        for dirpath, _, names in os.walk(self.root):
            for name in names:
                path = Path(dirpath) / name
                if self.warehouse in path.parents or path.name.startswith("catalog.db"):
                    continue
                if path.name.endswith(".metadata.json"):
                    out.append(str(path))
        return out


def _help_text() -> str:
    cmd = [sys.executable, "-m", "calving.ingest.cli", "catalog", "serve", "--help"]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60).stdout


def _listening(proc: subprocess.Popen[str], timeout: float = 60.0) -> str:
    selector = selectors.DefaultSelector()
    assert proc.stdout is not None
    selector.register(proc.stdout, selectors.EVENT_READ)
    if not selector.select(timeout):
        raise AssertionError("calving catalog serve printed nothing")
    line = proc.stdout.readline()
    if "listening on" not in line:
        raise AssertionError(f"calving catalog serve did not start: {line!r}")
    return line.rsplit(" ", 1)[-1].strip()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server for a test module: token and OAuth2 client credentials, a SQLite
    catalog, the warehouse two levels below the temporary root (so an escape by
    ``..`` lands in a directory the test watches)."""
    root = tmp_path_factory.mktemp("hostile") / "a" / "b"
    warehouse = root / "warehouse"
    warehouse.mkdir(parents=True)
    cmd = [sys.executable, "-m", "calving.ingest.cli", "catalog", "serve",
           "--catalog", f"sqlite:///{root}/catalog.db", "--warehouse", str(warehouse),
           "--port", "0", "--token-env", "HOSTILE_TOKEN",
           "--client-credential-env", "HOSTILE_CREDENTIAL"]  # fmt: skip
    if "--header-timeout" in _help_text():
        cmd += ["--header-timeout", str(HEADER_TIMEOUT_S), "--body-timeout", str(BODY_TIMEOUT_S)]
    env = {
        **os.environ,
        "HOSTILE_TOKEN": TOKEN,
        "HOSTILE_CREDENTIAL": f"{CLIENT_ID}:{CLIENT_SECRET}",
    }
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        s = Served(proc, _listening(proc), root.parent.parent, warehouse)
        status, _, _ = s.request("POST", "/v1/namespaces", {"namespace": ["db"]})
        assert status == 200
        yield s
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()  # only the server this fixture started
            proc.communicate()


def raw_exchange(served: Served, data: bytes, *, read_s: float = 5.0) -> bytes:
    """Send ``data`` on a new connection and read until the server closes it or
    ``read_s`` passes; everything read."""
    sock = socket.create_connection((served.host, served.port), timeout=read_s)
    try:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        sock.close()


def basic(client_id: str, secret: str) -> str:
    pair = f"{urllib.parse.quote_plus(client_id)}:{urllib.parse.quote_plus(secret)}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


def table_body(name: str, **extra: Any) -> dict[str, Any]:
    """A createTable request for a one-column table."""
    schema = {
        "type": "struct",
        "schema-id": 0,
        "fields": [{"id": 1, "name": "id", "required": False, "type": "long"}],
    }
    return {"name": name, "schema": schema, **extra}

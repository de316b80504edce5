"""``calving run`` as a person meets it when something goes wrong, run as a subprocess
against the embedded broker and real Spark: one line naming the root cause (traceback
only with ``-v``), a bounded wait on an unreachable broker without librdkafka's spam,
SIGTERM stopping between batches (exit 0), Ctrl-C exiting 130, no Python process of
the run outliving its driver, a missing optional extra named, and a catalog URL with an
unencoded ``@`` in its password refused without showing it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calving.commit.catalog.sql import SqlCatalog
from calving.commit.errors import CatalogUnavailableError, NoSuchNamespaceError, NoSuchTableError
from calving.commit.table.table import Table
from calving.ingest.cli import main
from calving.ingest.kafka.producer import produce
from tests.ingest.conftest import REPO_ROOT, unique_name

CONFIG = """
[source]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
connect_timeout_ms = 2000
{source_extra}

[format]
type = "json"

[table]
catalog = "{catalog}"
warehouse = "{tmp}/warehouse"
name = "{table}"
columns = [ {{ name = "id", type = "long" }}, {{ name = "note", type = "string" }} ]
{table_extra}

[sink]
writer_id = "w"
checkpoint = "{tmp}/checkpoints"
trigger_interval = "1 second"

[spark]
master = "local[1]"
{spark_extra}
"""


def write_config(tmp: Path, **fields: str) -> Path:
    values = {
        "source_extra": "",
        "table_extra": "",
        "spark_extra": "",
        "catalog": f"sqlite:///{tmp}/catalog.db",
        "table": f"db.{unique_name('t')}",
        "tmp": str(tmp),
        **fields,
    }
    path = tmp / "pipeline.toml"
    path.write_text(CONFIG.format(**values))
    return path


def cli_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO_ROOT), env.get("PYTHONPATH"))))
    env.update(extra)
    return env


def run_cli(args: list[str], tmp: Path, timeout: float = 400, **env: str) -> tuple[int, str]:
    """``calving ARGS`` in a fresh process: exit status and everything it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "calving.ingest.cli", *args],
        check=False, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=timeout, env=cli_env(**env), cwd=tmp,
    )  # fmt: skip
    return done.returncode, done.stdout


def start_cli(args: list[str], tmp: Path, **env: str) -> subprocess.Popen[str]:
    log = open(tmp / "cli.out", "w")  # noqa: SIM115 -- the process writes it; closed by GC
    return subprocess.Popen(
        [sys.executable, "-m", "calving.ingest.cli", *args],
        stdout=log, stderr=subprocess.STDOUT, text=True, env=cli_env(**env), cwd=tmp,
    )  # fmt: skip


def json_records(n: int, start: int = 0) -> list[tuple[int, bytes, bytes, list]]:
    return [
        (0, str(i).encode(), json.dumps({"id": i, "note": f"n{i}"}).encode(), [])
        for i in range(start, start + n)
    ]


def last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------ processes (/proc)


def _parents() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            out[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def descendants(pid: int) -> set[int]:
    parents = _parents()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    still = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            still.add(pid)
    return still


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def wait_for_ledger(config: Path, tmp: Path, table: str, proc: subprocess.Popen, limit=300):
    """Wait until the running pipeline has committed a batch (the table's ledger)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp / "cli.out").read_text()[-3000:]
        catalog = SqlCatalog("calving", f"sqlite:///{tmp}/catalog.db", str(tmp))
        with contextlib.suppress(NoSuchTableError, NoSuchNamespaceError, CatalogUnavailableError):
            if Table.load(catalog, tuple(table.split("."))).ledger("w"):
                return
        time.sleep(0.5)
    raise AssertionError("no batch committed in time: " + (tmp / "cli.out").read_text()[-3000:])


# ------------------------------------------------------------------ no Spark needed


def test_catalog_password_with_unencoded_at_is_a_config_error_without_it(tmp_path, capsys):
    secret = "pa@ss-Zq81"
    config = write_config(
        tmp_path, bootstrap="127.0.0.1:1", topic="t",
        catalog=f"postgresql+psycopg://calving:{secret}@127.0.0.1:5432/postgres",
    )  # fmt: skip
    assert main(["run", str(config)]) == 2
    err = capsys.readouterr().err
    assert "table.catalog" in err and "%40" in err
    assert "Zq81" not in err and secret not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_missing_postgres_driver_names_the_extra(tmp_path):
    config = write_config(
        tmp_path, bootstrap="127.0.0.1:1", topic="t",
        catalog="postgresql+psycopg://calving:s3cr3t-Kp2@127.0.0.1:5432/postgres",
    )  # fmt: skip
    # psycopg is installed here: block its import, as if the extra were missing.
    code = (
        "import sys; sys.modules['psycopg'] = None; sys.modules['psycopg2'] = None\n"
        "from calving.ingest.cli import main\n"
        f"sys.exit(main(['run', {str(config)!r}]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True,
        env=cli_env(), timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    line = last_line(done.stderr)
    assert "table.catalog" in line and "install calving[postgres]" in line, done.stderr
    assert "s3cr3t-Kp2" not in done.stderr + done.stdout


# ------------------------------------------------------------------ real runs


@pytest.mark.integration
def test_unreachable_broker_fails_in_bounded_time_with_one_line(tmp_path):
    port = free_port()
    config = write_config(tmp_path, bootstrap=f"127.0.0.1:{port}", topic="t")
    started = time.monotonic()
    status, out = run_cli(["run", str(config), "--available-now"], tmp_path, timeout=300)
    assert status == 1, out[-3000:]
    line = last_line(out)
    assert line.startswith("calving: error: KafkaUnavailableError: "), out[-3000:]
    assert f"127.0.0.1:{port}" in line and "source.connect_timeout_ms" in line
    waited = float(re.search(r"attempt\(s\) in ([\d.]+)s", line).group(1))
    assert waited < 2.0 + 1.5  # connect_timeout_ms = 2000 bounds the whole wait
    assert "%3|" not in out and "rdkafka" not in out, "librdkafka printed to the terminal"
    assert "Traceback" not in out and "\tat org.apache" not in out, "traceback without -v"
    assert time.monotonic() - started < 300


@pytest.mark.integration
def test_os_error_in_a_batch_is_one_line_naming_the_file(broker, make_topic, tmp_path):
    from calving.ingest.catalogs import ensure_table, file_io, open_catalog
    from calving.ingest.config.loader import load_config

    topic = make_topic()
    produce(broker.bootstrap_servers, topic, json_records(20))
    config = write_config(tmp_path, bootstrap=broker.bootstrap_servers, topic=topic)
    table_cfg = load_config(config).table
    io = file_io(table_cfg)
    table = ensure_table(open_catalog(table_cfg, io), io, table_cfg)
    data_dir = Path(table.metadata.location.removeprefix("file://")) / "data"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    data_dir.write_text("a file where the data directory should be")

    status, out = run_cli(["run", str(config), "--available-now"], tmp_path)
    assert status == 1, out[-3000:]
    line = last_line(out)
    assert line.startswith("calving: error: "), out[-3000:]
    assert str(data_dir) in line, line
    assert "Traceback" not in out and "\tat org.apache" not in out, out[-3000:]


def _signal_a_running_pipeline(broker, make_topic, tmp_path, sig):
    """Run a pipeline until its first batch is in the ledger, send ``sig`` to the CLI
    process, and return (exit status, its output, the processes it had started)."""
    topic = make_topic()
    produce(broker.bootstrap_servers, topic, json_records(30))
    table = f"db.{unique_name('t')}"
    config = write_config(tmp_path, bootstrap=broker.bootstrap_servers, topic=topic, table=table)
    proc = start_cli(["run", str(config)], tmp_path)
    try:
        wait_for_ledger(config, tmp_path, table, proc)
        children = descendants(proc.pid)
        assert any("python" in cmdline(p) for p in children), "no Python worker seen"
        proc.send_signal(sig)
        status = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return status, (tmp_path / "cli.out").read_text(), children


def _assert_all_gone(children):
    deadline = time.monotonic() + 60
    while alive(children) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive(children), [cmdline(p) for p in alive(children)]


@pytest.mark.integration
@pytest.mark.slow
def test_sigterm_stops_between_batches_and_leaves_no_process(broker, make_topic, tmp_path):
    status, out, children = _signal_a_running_pipeline(broker, make_topic, tmp_path, signal.SIGTERM)
    assert status == 0, out[-3000:]
    assert re.search(r"^calving: stopped on SIGTERM after batch \d+$", out, re.MULTILINE), out[
        -3000:
    ]
    _assert_all_gone(children)


@pytest.mark.integration
@pytest.mark.slow
def test_sigkilled_driver_leaves_no_python_process(broker, make_topic, tmp_path):
    _, _, children = _signal_a_running_pipeline(broker, make_topic, tmp_path, signal.SIGKILL)
    _assert_all_gone(children)


@pytest.mark.integration
@pytest.mark.slow
def test_ctrl_c_exits_130(broker, make_topic, tmp_path):
    status, out, _ = _signal_a_running_pipeline(broker, make_topic, tmp_path, signal.SIGINT)
    assert status == 130, out[-3000:]
    assert last_line(out) == "calving: interrupted", out[-3000:]
    # pyspark's own SIGINT handler raised inside a py4j read and logged tracebacks
    assert "Traceback" not in out, out[-3000:]


def test_root_cause_of_chained_and_embedded_errors(tmp_path):
    """The one-line cause: a chained OSError names its file; a calving error inside the
    text of a Spark-style exception (a Python traceback embedded in the message) wins
    over the wrappers around it."""
    import traceback

    from calving.ingest.errors import root_cause
    from calving.ingest.kafka.source import KafkaUnavailableError
    from calving.ingest.pipeline import StreamFailedError

    missing = tmp_path / "gone.parquet"
    try:
        try:
            missing.open("rb")
        except OSError as err:
            raise StreamFailedError("stream into db.t failed") from err
    except StreamFailedError as exc:
        assert root_cause(exc) == (
            "FileNotFoundError",
            f"No such file or directory: {missing} [errno 2]",
        )

    try:
        raise KafkaUnavailableError("orders/0: offsets 5..9 are gone")
    except KafkaUnavailableError:
        embedded = traceback.format_exc()
    spark_text = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
        "org.apache.spark.SparkException: Job aborted: "
        f"Traceback (most recent call last):\n{embedded}\n"
        "RuntimeError: the task failed SQLSTATE: 39000\n"
        "\tat org.apache.spark.api.python.BasePythonRunner.run(PythonRunner.scala:1)"
    )
    try:
        raise StreamFailedError(spark_text) from RuntimeError(spark_text)
    except StreamFailedError as exc:
        assert root_cause(exc) == ("KafkaUnavailableError", "orders/0: offsets 5..9 are gone")

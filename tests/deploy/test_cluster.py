"""The standalone recipe on a real cluster: deploy/standalone/start-master.sh and two
start-worker.sh workers (pip's pyspark, 1 core each, 127.0.0.1), with spark.authenticate
on; deploy/spark-submit.sh runs a Debezium CDC pipeline into a keyed table in a PostgreSQL
catalog with an s3:// warehouse on a loopback S3 server (moto); one worker is SIGKILLed
mid-stream, Spark carries on with the other, and pyiceberg reads back exactly the
generator's final state.

Along the way it checks what the recipes promise: every web UI (master, workers, driver)
listens on 127.0.0.1 only, the master's REST submission server is off, the shared secret is
on no command line and in no log, the zip is built outside the checkout, and the driver's
log has no progress bars and no INFO lines from Spark.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.checks import DEPLOY
from tests.deploy.cluster import (
    LOOPBACK,
    StandaloneCluster,
    alive,
    cmdline,
    descendants,
    free_port,
    kill,
    listening_addresses,
    standalone_cluster,
    start_time,
)
from tests.support.cdc import COLUMNS, CdcStream, cdc_events
from tests.support.s3 import moto_bucket

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)"),
]

BUCKET = "cluster-lake"
KEYS, EVENTS, PARTITIONS = 300, 3_000, 2
MAX_OFFSETS = 500  # per micro-batch: seven or eight batches; the kill follows the first
BATCH = re.compile(r"INFO calving\.sink: batch (\d+): (\w+)")


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """A moto S3 server on loopback with an empty bucket: FileIO properties."""
    with moto_bucket(BUCKET) as props:
        yield props


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from calving.ingest.kafka.broker import EmbeddedBroker

    log = tmp_path_factory.mktemp("cluster-broker") / "tansu.log"
    with EmbeddedBroker(log_path=log) as running:
        yield running


def base_env(home: Path) -> dict[str, str]:
    """This process's environment without Spark/PySpark settings, with a private HOME (so
    the default build directory, ~/.cache/calving, is the test's)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPARK_", "PYSPARK_", "CALVING_", "_SPARK_", "XDG_"))
        and k not in ("PYTHONPATH", "HOME", "USER")
    }
    home.mkdir(parents=True, exist_ok=True)
    return {**env, "HOME": str(home), "USER": "calvingtest", "PYTHON": sys.executable}


def pipeline_toml(
    path: Path,
    bootstrap: str,
    topic: str,
    pg_url: str,
    s3: dict[str, str],
    catalog: str,
    index_mode: str = "driver",
) -> None:
    """``index_mode``: ``driver``, ``sharded`` (the write tasks step the shards) or
    ``sharded-owners`` (the shards step on their owner executors)."""
    mode, _, steps = index_mode.partition("-")
    io = "\n".join(f'"{k}" = "{v}"' for k, v in s3.items())
    path.write_text(
        f"""
[source]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
starting_offsets = "earliest"
max_offsets_per_trigger = {MAX_OFFSETS}

[format]
type = "debezium-json"
key_format = "json"

[table]
catalog = "{pg_url}"
catalog_name = "{catalog}"
warehouse = "s3://{BUCKET}/wh"
name = "shop.orders"
identifier_fields = ["id"]
partition = ["bucket(4, id)"]
infer_schema = false

[table.io]
{io}

[table.properties]
"calving.index.mode" = "{mode}"
"calving.index.shard-steps" = "{steps or "write-tasks"}"
"calving.index.shards" = "4"
"calving.index.driver-step-keys" = "0"
"calving.index.executor-rebuild-rows" = "0"

[[table.columns]]
name = "id"
type = "long"

[[table.columns]]
name = "status"
type = "string"

[[table.columns]]
name = "version"
type = "long"

[sink]
writer_id = "cluster-cdc"
checkpoint = "{path.parent / "checkpoint"}"
trigger_interval = "1 second"
key_partitions = 2
index_save_every = 3

[spark]
master = "local[1]"   # ignored under spark-submit: the --master given there wins
app_name = "calving-cluster-test"

[spark.conf]
"spark.authenticate" = "true"
"spark.authenticate.secret" = "${{env:CALVING_SPARK_AUTH_SECRET}}"
"spark.sql.shuffle.partitions" = "2"
"spark.task.maxFailures" = "8"
"""
    )


@pytest.mark.parametrize("index_mode", ["driver", "sharded", "sharded-owners"])
def test_cdc_pipeline_survives_a_killed_worker(
    tmp_path: Path, pg_url: str, s3: dict[str, str], kafka: object, index_mode: str
) -> None:
    """In sharded mode the index's shard steps run in the executors' tasks too: the
    killed worker's tasks (stage 1 or the shard steps) run again elsewhere; with the
    steps on their owners, the killed worker's shards move to the one left."""
    from calving.ingest.kafka.broker import EmbeddedBroker
    from calving.ingest.kafka.producer import produce

    assert isinstance(kafka, EmbeddedBroker)
    stream = cdc_events(KEYS, EVENTS, PARTITIONS, seed=11)
    topic = f"cluster_{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, PARTITIONS)
    produce(kafka.bootstrap_servers, topic, stream.records)

    secret = secrets.token_hex(16)
    env = {**base_env(tmp_path / "home"), "CALVING_SPARK_AUTH_SECRET": secret}
    config = tmp_path / "pipeline" / "orders.toml"
    config.parent.mkdir()
    catalog = f"cluster_{uuid.uuid4().hex[:8]}"
    pipeline_toml(config, kafka.bootstrap_servers, topic, pg_url, s3, catalog, index_mode)

    with standalone_cluster(env, tmp_path / "spark") as cluster:
        check_daemons(cluster, secret)
        driver_log = run_and_kill_a_worker(cluster, env, config, tmp_path)

    check_driver_log(driver_log, secret, tmp_path)
    if index_mode == "sharded-owners":  # the steps ran on both workers' executors
        assert "shard steps: pinned to 2 owner executor(s)" in driver_log
    check_table(stream, pg_url, s3, catalog, index_mode)


def check_daemons(cluster: StandaloneCluster, secret: str) -> None:
    """UIs on loopback, no REST server, the secret on no command line."""
    for port in (cluster.master_ui_port, *cluster.worker_ui_ports):
        bound = listening_addresses(port)
        assert bound and bound <= LOOPBACK, f"web UI port {port} listens on {bound}"
    rpc = listening_addresses(cluster.master_port)
    assert rpc and rpc <= LOOPBACK, f"master RPC listens on {rpc}"
    assert listening_addresses(cluster.rest_port) == set(), "the REST submission server is on"
    for pid in cluster.daemon_pids():
        assert secret not in cmdline(pid)


def run_and_kill_a_worker(
    cluster: StandaloneCluster, env: dict[str, str], config: Path, tmp_path: Path
) -> str:
    """Run the pipeline with deploy/spark-submit.sh --available-now; after its first
    committed batch, once both workers run an executor, SIGKILL worker 2. Returns the
    driver's stderr."""
    ui_port = free_port()
    stderr_path = tmp_path / "driver.err"
    command = [
        "bash", str(DEPLOY / "spark-submit.sh"),
        "--master", cluster.url,
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", f"spark.ui.port={ui_port}",
        "--conf", "spark.executor.memory=512m",
        "--conf", "spark.executor.cores=1",
        "--conf", "spark.cores.max=2",
        "--driver-memory", "768m",
        "--", str(config), "--available-now",
    ]  # fmt: skip
    with stderr_path.open("w") as err:
        driver = subprocess.Popen(
            command,
            env=env,
            # spark-submit's PythonRunner sends the Python driver's stderr to its stdout.
            stdout=err,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            start_new_session=True,
        )
    driver_started = start_time(driver.pid)
    try:
        killed, mark = kill_worker_after_first_batch(
            cluster, driver, stderr_path, ui_port, env["CALVING_SPARK_AUTH_SECRET"]
        )
        try:
            driver.wait(timeout=240)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the driver did not finish: {stderr_path.read_text()[-4000:]}")
        log = stderr_path.read_text()
        assert driver.returncode == 0, log[-4000:]
        # The killed worker's executor went with it, and batches committed afterwards.
        for pid, started in killed.items():
            assert not alive(pid, started), f"executor {pid} outlived its worker"
        after_kill = stderr_path.read_bytes()[mark:].decode(errors="replace")
        assert BATCH.search(after_kill), "no batch committed after the worker was killed"
        assert "Lost executor" in after_kill, "the driver did not notice the lost executor"
        return log
    finally:
        if driver.poll() is None and alive(driver.pid, driver_started):
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=30)


def kill_worker_after_first_batch(
    cluster: StandaloneCluster,
    driver: subprocess.Popen[bytes],
    stderr_path: Path,
    ui_port: int,
    secret: str,
) -> tuple[dict[int, str], int]:
    """Wait for a committed batch and an executor on each worker, check the driver's UI is
    on loopback, then SIGKILL worker 2. Returns the pids (and start times) of the killed
    worker's executor processes, and the length of the driver's log at the kill."""
    deadline = time.monotonic() + 180
    victim = cluster.worker_pids()[1]
    while True:
        if driver.poll() is not None:
            pytest.fail(f"the driver ended before the kill: {stderr_path.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no batch with two executors in time: {stderr_path.read_text()[-4000:]}")
        cluster.remember()
        executors = [cluster.executors_of(w) for w in cluster.worker_pids()]
        if BATCH.search(stderr_path.read_text()) and all(executors):
            break
        time.sleep(0.5)
    for pid in (p for pids in executors for p in pids):
        assert secret not in cmdline(pid), "the secret is on an executor's command line"
    bound = listening_addresses(ui_port)
    assert bound and bound <= LOOPBACK, f"driver web UI listens on {bound}"
    doomed = {pid: started for pid in descendants(victim) if (started := start_time(pid))}
    executors_of_victim = {p: doomed[p] for p in cluster.executors_of(victim) if p in doomed}
    assert executors_of_victim
    mark = stderr_path.stat().st_size
    kill(victim, start_time(victim), signal.SIGKILL)
    return executors_of_victim, mark


def check_driver_log(log: str, secret: str, tmp_path: Path) -> None:
    assert "[Stage " not in log, "a console progress bar in the driver's log"
    noise = [
        line
        for line in log.splitlines()
        if re.search(r"\bINFO\b", line) and " calving." not in line
    ]
    assert not noise, f"INFO lines other than calving's in the driver log: {noise[:5]}"
    assert secret not in log
    for path in (tmp_path / "spark" / "logs").glob("*"):
        assert secret not in path.read_text(errors="replace"), path
    # The zip is under the test's ~/.cache, not in the checkout.
    built = list((tmp_path / "home" / ".cache" / "calving" / "deploy").glob("calving-*.zip"))
    assert len(built) == 1, log[-2000:]
    assert str(built[0]) in log


def check_table(
    stream: CdcStream, pg_url: str, s3: dict[str, str], catalog: str, index_mode: str
) -> None:
    from pyiceberg.catalog.sql import SqlCatalog as PyIcebergSqlCatalog

    theirs = PyIcebergSqlCatalog(catalog, uri=pg_url, **s3)
    table = theirs.load_table("shop.orders")
    assert table.metadata.format_version == 3
    assert table.location().startswith(f"s3://{BUCKET}/wh/")
    got = table.scan().to_arrow().select(COLUMNS)
    rows = sorted(zip(*(got.column(c).to_pylist() for c in COLUMNS)))
    assert rows == stream.expected
    assert stream.deletes > 0 and stream.updates > 0
    named = table.metadata.properties.get("calving.index.location", "")
    assert named.endswith(".calvshards") == index_mode.startswith("sharded"), named

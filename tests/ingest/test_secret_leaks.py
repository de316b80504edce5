"""No secret in anything ``calving -v run`` prints or writes, end to end.

Distinctive secrets are planted through ``${env:...}``: the Kafka SASL password in
``[source.kafka]``, the PostgreSQL catalog URL's password, the S3 secret key in
``[table.io]`` and a secret Spark setting. A successful verbose run and several failing
verbose runs (unreachable broker, unreachable catalog, a password with an unencoded
``@``, a table config the existing table contradicts) must show none of them in their
stdout/stderr, nor in any file they leave under the run's directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calving.ingest.kafka.producer import produce
from tests.ingest.conftest import unique_name
from tests.ingest.test_cli_errors import free_port, last_line, run_cli

SECRETS = {
    "CALVING_T_SASL": "saslpw-Xq7Lw9",
    "CALVING_T_PG": "pgpw-Rt5Kd2",
    "CALVING_T_S3": "s3key-Vb8Nm4",
    "CALVING_T_SPARK": "sparkconf-Hy3Pz6",
}

CONFIG = """
[source]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
connect_timeout_ms = 2000

[source.kafka]
"sasl.username" = "calving"
"sasl.password" = "${{env:CALVING_T_SASL}}"

[format]
type = "json"

[table]
catalog = "postgresql+psycopg://postgres:${{env:{pg_var}}}@127.0.0.1:{pg_port}/postgres"
warehouse = "{tmp}/warehouse"
name = "{table}"
columns = [ {{ name = "id", type = "{id_type}" }}, {{ name = "note", type = "string" }} ]

[table.io]
"s3.secret-access-key" = "${{env:CALVING_T_S3}}"

[sink]
writer_id = "w"
checkpoint = "{tmp}/checkpoints"

[spark]
master = "local[1]"

[spark.conf]
"spark.hadoop.fs.s3a.secret.key" = "${{env:CALVING_T_SPARK}}"
"""


def leaks(output: str, root: Path, secrets: dict[str, str]) -> list[str]:
    """Where any planted secret shows: in the output, or in a file under ``root``."""
    found = [f"output: {name}" for name, value in secrets.items() if value in output]
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [
                f"{path}: {name}" for name, value in secrets.items() if value.encode() in data
            ]
    return found


@pytest.mark.integration
@pytest.mark.postgres
def test_verbose_and_failing_runs_show_no_planted_secret(broker, make_topic, tmp_path):
    topic = make_topic()
    produce(
        broker.bootstrap_servers,
        topic,
        [(0, None, json.dumps({"id": i, "note": "x"}).encode(), []) for i in range(50)],
    )
    table = f"db.{unique_name('leak')}"
    fields = {
        "bootstrap": broker.bootstrap_servers, "topic": topic, "tmp": tmp_path,
        "table": table, "pg_var": "CALVING_T_PG", "pg_port": 5432, "id_type": "long",
    }  # fmt: skip
    config = tmp_path / "pipeline.toml"

    def run(secrets: dict[str, str] = SECRETS, **changes: object) -> tuple[int, str]:
        config.write_text(CONFIG.format(**{**fields, **changes}))
        status, out = run_cli(["-v", "run", str(config), "--available-now"], tmp_path, **secrets)
        found = leaks(out, tmp_path, secrets)
        assert not found, f"secrets shown: {found}\n{out[-4000:]}"
        return status, out

    # (a) A successful verbose run: calving's loggers log, py4j's not at DEBUG (it would
    # print every gateway command, the Spark settings among them).
    status, out = run()
    assert status == 0, out[-4000:]
    assert " INFO calving.sink: batch 0: committed" in out, out[-4000:]
    assert " DEBUG py4j" not in out and " DEBUG pyspark" not in out, out[-4000:]

    # (b) Failing verbose runs, each ending in one line naming the cause.
    status, out = run(bootstrap=f"127.0.0.1:{free_port()}")
    assert status == 1 and "KafkaUnavailableError" in last_line(out), out[-4000:]

    status, out = run(pg_port=free_port())
    assert status != 0 and last_line(out).startswith("calving: "), out[-4000:]

    at_secret = {**SECRETS, "CALVING_T_PG2": "pw@Zm4Qs8"}
    status, out = run(at_secret, pg_var="CALVING_T_PG2")
    assert status == 2 and "table.catalog" in last_line(out), out[-4000:]
    assert "Zm4Qs8" not in out

    status, out = run(id_type="string")
    assert status != 0 and "table.columns[0]" in last_line(out), out[-4000:]

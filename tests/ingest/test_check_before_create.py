"""Check before create: everything ``calving run`` can fail on (the broker, the topics,
the metrics port, the locations it writes) is checked before the catalog, table or
checkpoint exists, and commands that read a table never create a catalog. Each case
looks at the disk afterwards: nothing was created. (Issue 20: a missing topic ran to
exit 0 after creating table, catalog and checkpoint; a broker that was down and a metrics
port in use failed only after; ``calving table show`` created a catalog database.)"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from calving.ingest.cli import main
from calving.ingest.config.loader import load_config
from calving.ingest.config.source_check import MissingTopicError, check_source
from tests.ingest.test_cli_errors import write_config


def _created(tmp: Path) -> list[str]:
    names = ("catalog.db", "checkpoints", "warehouse")
    return [n for n in names if (tmp / n).exists()]


def _one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.integration
def test_a_missing_topic_is_one_line_naming_it_and_creates_nothing(tmp_path, broker, capsys):
    config = write_config(tmp_path, bootstrap=broker.bootstrap_servers, topic="no_such_topic_x1")
    assert main(["run", str(config), "--available-now"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "configuration error: source.topics" in line
    assert "'no_such_topic_x1'" in line and "wait_for_topics" in line
    assert _created(tmp_path) == []


@pytest.mark.integration
def test_a_metrics_port_in_use_fails_before_anything_is_created(
    tmp_path, broker, make_topic, capsys
):
    topic = make_topic(partitions=1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = write_config(tmp_path, bootstrap=broker.bootstrap_servers, topic=topic)
        config.write_text(config.read_text() + f"\n[metrics]\nport = {port}\n")
        assert main(["run", str(config), "--available-now"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "metrics.port" in line and str(port) in line
    assert _created(tmp_path) == []


def test_an_unreachable_broker_fails_before_anything_is_created(tmp_path, capsys):
    config = write_config(tmp_path, bootstrap="127.0.0.1:1", topic="t")
    assert main(["run", str(config), "--available-now"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "KafkaUnavailableError" in line and "127.0.0.1:1" in line
    assert _created(tmp_path) == []


class _View:
    """A broker whose topic appears on the third look."""

    def __init__(self) -> None:
        self.looks = 0

    def topic_partition_counts(self) -> dict[str, int]:
        self.looks += 1
        return {"other": 1, **({"late": 2} if self.looks >= 3 else {})}


def test_wait_for_topics_waits_until_the_topic_exists(tmp_path):
    waiting = write_config(
        tmp_path, bootstrap="127.0.0.1:1", topic="late", source_extra="wait_for_topics = true"
    )
    view, naps = _View(), []
    check_source(load_config(waiting).source, view=view, sleep=naps.append)  # type: ignore[arg-type]  # reason: _View is a stand-in for BrokerView
    assert view.looks == 3 and len(naps) == 2

    refusing = write_config(tmp_path, bootstrap="127.0.0.1:1", topic="late")
    with pytest.raises(MissingTopicError, match="source.topics: topic 'late' does not exist"):
        check_source(load_config(refusing).source, view=_View(), sleep=naps.append)  # type: ignore[arg-type]  # reason: _View is a stand-in for BrokerView


def test_a_topic_pattern_needs_no_topic_yet(tmp_path):
    config = write_config(tmp_path, bootstrap="127.0.0.1:1", topic="x")
    text = config.read_text().replace('topics = ["x"]', 'topic_pattern = "la.*"')
    config.write_text(text)
    view = _View()
    check_source(load_config(config).source, view=view, sleep=lambda _s: None)  # type: ignore[arg-type]  # reason: _View is a stand-in for BrokerView
    assert view.looks == 1


@pytest.mark.parametrize(
    "command",
    [
        ["table", "show", "db.t"],
        ["table", "set-property", "db.t", "commit.retry.num-retries", "3"],
        ["changes", "db.t", "--from", "earliest"],
    ],
)
@pytest.mark.parametrize("kind", ["sqlite", "filesystem"])
def test_commands_on_a_missing_catalog_create_nothing(tmp_path, capsys, command, kind):
    where = tmp_path / "no" / "such" / "dir"
    uri = f"sqlite:///{where}/catalog.db" if kind == "sqlite" else f"file://{where}"
    assert main([*command, "--catalog", uri]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--catalog" in line and "no catalog at" in line
    assert not (tmp_path / "no").exists()


def test_table_show_with_a_config_whose_catalog_is_missing_creates_nothing(tmp_path, capsys):
    config = write_config(tmp_path, bootstrap="127.0.0.1:1", topic="t")
    assert main(["table", "show", "db.t", "--config", str(config)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "table.catalog" in line and "no catalog at" in line
    assert _created(tmp_path) == []

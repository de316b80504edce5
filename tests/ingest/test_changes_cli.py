"""``calving changes`` and ``calving.changes`` on a real SQLite catalog: JSON lines and
Parquet carry the same rows as the library's feed, the Python API takes names, tables,
ids and times, and bad input ends in one line with exit status 2 (usage) or 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import calving
from calving.commit.catalog import SqlCatalog
from calving.commit.changelog import read_changes
from calving.commit.table.actions.expire_snapshots import ExpireSnapshots
from calving.commit.table.table import Table
from calving.ingest.cli import main
from tests.support.cdc_history import History, Model, Step


@pytest.fixture
def history(tmp_path: Path) -> tuple[History, str]:
    uri = f"sqlite:///{tmp_path}/catalog.db"
    catalog = SqlCatalog("calving", uri, str(tmp_path / "warehouse"))
    catalog.create_namespace(("db",))
    # Updates keep their row's identity (the table default): the feed pairs them.
    h = History(catalog, partitioned=False, model=Model(updates_keep_identity=True))
    h.run(Step("batch", tuple(("u", k) for k in range(5))))
    h.run(Step("batch", (("u", 1), ("d", 2))))
    h.run(Step("compact"))
    h.run(Step("batch", (("u", 3), ("u", 7))))
    return h, uri


def _name(h: History) -> str:
    return ".".join(h.table.ident)


def _expected(h: History, start: int | None, **kw: Any) -> list[dict[str, Any]]:
    table = Table.load(h.table.catalog, h.table.ident)
    return read_changes(table.io, table.metadata, start, **kw).to_pylist()


def test_jsonl_to_stdout_and_parquet_to_a_file(history: Any, tmp_path: Path, capsys: Any) -> None:
    h, uri = history
    first = h.commits[0].snapshot_id
    assert main(["changes", _name(h), "--from", str(first), "--catalog", uri]) == 0
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines == _expected(h, first)
    # u1 and u3 update live keys, d2 deletes one, u7 is new.
    kinds = [x["_change_type"] for x in lines]
    assert [kinds.count(k) for k in ("INSERT", "DELETE", "UPDATE_BEFORE", "UPDATE_AFTER")] == [
        1,
        1,
        2,
        2,
    ]
    assert (
        err.strip()
        == "changes: 6 rows (1 INSERT, 1 DELETE, 2 UPDATE_BEFORE, 2 UPDATE_AFTER) from 2 snapshot(s)"
    )

    target = tmp_path / "changes.parquet"
    args = ["changes", _name(h), "--from", "earliest", "--catalog", uri, "--net"]
    assert main([*args, "--format", "parquet", "--output", str(target)]) == 0
    assert pq.read_table(target).to_pylist() == _expected(h, None, net=True)


def test_python_api_takes_names_tables_ids_and_times(history: Any) -> None:
    h, uri = history
    first = h.commits[0]
    table = Table.load(h.table.catalog, h.table.ident)
    by_name = calving.changes(_name(h), first.snapshot_id, catalog=uri)
    assert by_name.to_pylist() == _expected(h, first.snapshot_id)
    snap = table.metadata.snapshot_by_id(first.snapshot_id)
    assert snap is not None
    import datetime as dt

    when = dt.datetime.fromtimestamp(snap.timestamp_ms / 1000, dt.timezone.utc)
    assert calving.changes(table, when).equals(by_name)
    assert calving.changes(table, when.isoformat()).equals(by_name)
    assert calving.changes(table, str(first.snapshot_id), h.commits[1].snapshot_id).num_rows == 3
    with pytest.raises(calving.ConfigError, match="a range end is a snapshot id"):
        calving.changes(table, 1.5)  # type: ignore[arg-type]  # a float bound on purpose: the call must refuse it


def test_errors_are_one_line(history: Any, tmp_path: Path, capsys: Any) -> None:
    h, uri = history
    name = _name(h)
    assert main(["changes", name, "--from", "yesterday", "--catalog", uri]) == 2
    assert capsys.readouterr().err.strip() == (
        "calving: configuration error: --from: 'yesterday' is neither a snapshot id nor an "
        "ISO-8601 time such as 2026-11-23T10:45:00Z"
    )
    assert (
        main(["changes", name, "--from", "earliest", "--catalog", uri, "--format", "parquet"]) == 2
    )
    assert "--output: Parquet output needs a file" in capsys.readouterr().err
    table = Table.load(h.table.catalog, h.table.ident)
    table.commit_or_raise(ExpireSnapshots(retain_last=1, delete_files=False))
    assert main(["changes", name, "--from", "earliest", "--catalog", uri]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        "calving: error: ChangeFeedError: the range from the table's first snapshot to now crosses"
    )
    assert "which was expired: its changes can no longer be read" in line


@pytest.mark.integration
def test_the_installed_command(history: Any) -> None:
    h, uri = history
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "calving"),
            "changes",
            _name(h),
            "--from",
            "earliest",
            "--catalog",
            uri,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(x) for x in done.stdout.splitlines()] == _expected(h, None)


def test_json_lines_of_every_kind_of_value() -> None:
    import datetime as dt
    import decimal
    import io

    import pyarrow as pa

    from calving.ingest.cli.changes import write_jsonl

    t = pa.table(
        {
            "ts": pa.array([1_700_000_000_123_456], pa.timestamp("us", tz="UTC")),
            "ns": pa.array([1_700_000_000_123_456_789], pa.timestamp("ns")),
            "d": pa.array([dt.date(2026, 1, 2)]),
            "t": pa.array([dt.time(1, 2, 3, 4)]),
            "dec": pa.array([decimal.Decimal("12.30")], pa.decimal128(5, 2)),
            "b": pa.array([b"\x00\xff"], pa.large_binary()),
            "u": pa.array([b"\x12" * 16], pa.binary(16)),
            "s": pa.array([{"x": 1}]),
        }
    )
    sink = io.StringIO()
    write_jsonl(t, sink)
    assert json.loads(sink.getvalue()) == {
        "ts": "2023-11-14T22:13:20.123456+00:00",
        "ns": "2023-11-14T22:13:20.123456789",
        "d": "2026-01-02",
        "t": "01:02:03.000004",
        "dec": "12.30",
        "b": "00ff",
        "u": "12" * 16,
        "s": {"x": 1},
    }


def test_json_lines_stay_strict_json_with_nan_and_infinities() -> None:
    """Avro keeps NaN and infinities in double columns; Python's json would write them
    as bare ``NaN`` / ``Infinity``, which strict parsers refuse."""
    import io
    import math

    import pyarrow as pa

    from calving.ingest.cli.changes import write_jsonl

    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    inf = math.inf
    t = pa.table(
        {
            "x": pa.array([math.nan, inf, -inf, 1.5], pa.float64()),
            "f": pa.array([1.0, None, 2.0, -inf], pa.float32()),
            "l": pa.array([[math.nan, 1.0], [], None, [inf]], pa.list_(pa.float64())),
            "s": pa.array([{"y": -inf}, {"y": 0.5}, None, {"y": None}]),
        }
    )
    sink = io.StringIO()
    write_jsonl(t, sink)
    rows = [json.loads(line, parse_constant=refuse) for line in sink.getvalue().splitlines()]
    assert rows == [
        {"x": "NaN", "f": 1.0, "l": ["NaN", 1.0], "s": {"y": "-Infinity"}},
        {"x": "Infinity", "f": None, "l": [], "s": {"y": 0.5}},
        {"x": "-Infinity", "f": 2.0, "l": None, "s": None},
        {"x": 1.5, "f": "-Infinity", "l": ["Infinity"], "s": {"y": None}},
    ]

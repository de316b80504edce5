"""``spark_daemon``: Spark's Python workers import the installed pyspark (not Spark's
zip, compiled from source in every process) when it is the zip's version, and start
with the worker module imported, from a daemon that never runs a second thread; their
allocator (``WORKER_MALLOC``) keeps numpy's arrays, a background thread's too, in one
heap."""

from __future__ import annotations

import json
import os
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from calving.ingest.sink.spark_tasks import map_in_arrow
from calving.ingest.spark_daemon import DAEMON_MODULE, installed_first, warm_up
from tests.ingest.test_allocator import allocator


def _spark_zips(tmp: Path, pyspark: str, py4j: str) -> tuple[str, str]:
    spark_zip = tmp / "lib" / "pyspark.zip"
    spark_zip.parent.mkdir()
    with zipfile.ZipFile(spark_zip, "w") as archive:
        archive.writestr("pyspark/version.py", f'__version__: str = "{pyspark}"\n')
    py4j_zip = tmp / "lib" / f"py4j-{py4j}-src.zip"
    with zipfile.ZipFile(py4j_zip, "w") as archive:
        archive.writestr("py4j/version.py", f'__version__ = "{py4j}"\n')
    return str(spark_zip), str(py4j_zip)


def _installed(tmp: Path, pyspark: str | None, py4j: str | None) -> str:
    site = tmp / "site-packages"
    for name, version in (("pyspark", pyspark), ("py4j", py4j)):
        if version is not None:
            (site / name).mkdir(parents=True)
            (site / name / "version.py").write_text(f'__version__ = "{version}"\n')
    site.mkdir(exist_ok=True)
    return str(site)


@pytest.mark.parametrize(
    ("installed", "moved"),
    [
        (("4.3.0", "0.10.9.9"), True),
        (("4.2.1", "0.10.9.9"), False),  # another pyspark: the JVM's protocol may differ
        (("4.3.0", "0.10.9.7"), False),
        ((None, "0.10.9.9"), False),  # pyspark only in Spark's zip
        (("4.3.0", None), False),
    ],
)
def test_spark_zips_go_last_only_for_the_same_versions(
    tmp_path: Path, installed: tuple[str | None, str | None], moved: bool
) -> None:
    spark_zip, py4j_zip = _spark_zips(tmp_path, "4.3.0", "0.10.9.9")
    site = _installed(tmp_path, *installed)
    path = ["/work", spark_zip, py4j_zip, "/usr/lib/python3.11", site]
    expected = ["/work", "/usr/lib/python3.11", site, spark_zip, py4j_zip] if moved else path
    assert installed_first(path) == expected


def test_a_path_without_spark_zips_is_left_alone(tmp_path: Path) -> None:
    path = ["", str(tmp_path), "/usr/lib/python3.11"]
    assert installed_first(path) == path
    broken = tmp_path / "pyspark.zip"
    broken.write_bytes(b"not a zip")
    assert installed_first([str(broken), str(tmp_path)]) == [str(broken), str(tmp_path)]


def test_only_pyspark_worker_is_imported_ahead(capsys: pytest.CaptureFixture[str]) -> None:
    assert warm_up(["daemon"]) == ["pyspark.worker"]
    assert warm_up(["daemon", "pyspark.worker"]) == ["pyspark.worker"]
    # Other worker modules may start threads when imported: left to the workers.
    assert warm_up(["daemon", "pyspark.sql.worker.plan_data_source_read"]) == []


def test_a_worker_module_that_fails_is_left_to_the_worker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark.worker", None)  # import raises ImportError
    assert warm_up(["daemon"]) == []
    assert "pyspark.worker not imported ahead" in capsys.readouterr().err


def _where(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    import pyspark

    from tests.deploy.cluster import cmdline

    command = cmdline(os.getppid())
    threads = len(os.listdir(f"/proc/{os.getppid()}/task"))
    yield pa.RecordBatch.from_pylist(
        [
            {
                "daemon": command,
                "pyspark": pyspark.__file__,
                "daemon_threads": threads,
                "allocator": json.dumps(allocator()),
            }
        ]
    )


@pytest.mark.integration
def test_the_sessions_workers_run_calvings_daemon_warm(spark: Any) -> None:
    """The tests' session (as ``calving run``'s) names the daemon; the workers of both
    pools (calving's and any other function's) import pip's pyspark, not Spark's zip,
    and fork from a daemon with one thread (pyspark's rule: no fork beside a thread)."""
    assert spark.sparkContext.getConf().get("spark.python.daemon.module") == DAEMON_MODULE
    frame = spark.range(0, 2, 1, 2)
    schema = "daemon string, pyspark string, daemon_threads long, allocator string"
    ours = map_in_arrow(frame, _where, schema).collect()
    plain = frame.mapInArrow(_where, schema).collect()  # the other pool
    for row in ours + plain:
        assert f"-m {DAEMON_MODULE}" in row["daemon"]
        assert ".zip" not in row["pyspark"], row["pyspark"]
        assert row["daemon_threads"] == 1
        # The daemon set the allocator before it forked them.
        assert json.loads(row["allocator"]) == {"mapped_mib": 0, "arenas": 1}

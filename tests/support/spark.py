"""The local[2] Spark session tests and benchmarks run on: loopback only, Python workers
on this interpreter with the checkout importable, quiet logs."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def local_session(
    app_name: str, master: str = "local[2]", conf: Mapping[str, str] | None = None
) -> Any:
    """The session on ``master`` (``local[2]`` unless a benchmark asks for another, e.g.
    ``local[1]`` or a standalone cluster's ``spark://`` URL), with ``conf`` added."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Bind only to loopback (the machine's other interfaces are off limits for tests).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    path = os.environ.get("PYTHONPATH", "")
    if str(REPO_ROOT) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), path) if p)
    from pyspark.sql import SparkSession

    from calving.ingest.spark_daemon import DAEMON_MODULE

    # Python workers start warm, as in the sessions ``calving run`` starts.
    builder = SparkSession.builder.master(master).config(
        "spark.python.daemon.module", DAEMON_MODULE
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = (
        builder.appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from calving.ingest.pipeline import use_fast_checkpoint_manager

    use_fast_checkpoint_manager(session)  # as ``calving run`` does
    return session

"""Spark's Python worker daemon, started warm (``spark.python.daemon.module``).

Spark starts the Python workers of each pool from a daemon, ``python -m pyspark.daemon``,
with Spark's own ``pyspark.zip`` and py4j zip first on ``sys.path``. Python compiles a
module it imports from a zip from source every time (it caches no bytecode there), and
a worker the daemon forks imports ``pyspark.worker`` after the fork: importing it took
1.38-1.43 s from the zip against 0.17-0.29 s from the installed package, in each daemon
and again in each worker.

This module is the daemon calving's sessions name (``DAEMON_MODULE``). Where the
installed ``pyspark`` (and ``py4j``) are the zips' versions (pip's pyspark, whose
``SPARK_HOME`` holds the zips), it puts Spark's zips after them on ``sys.path`` and
imports ``pyspark.worker`` before forking, so that every worker inherits it; then it
runs pyspark's daemon. Without an installed copy of the zips' version, ``sys.path``
stays as Spark set it. It imports nothing that starts a thread: pyspark forks its
workers from a single-threaded daemon, and importing pyarrow starts two (jemalloc's
background thread and numpy's BLAS pool), so calving's own modules, which import
pyarrow, are left to the workers. ``spark.python.daemon.module`` is read when the
executors start: it is a session setting (``calving run`` sets it for the sessions it
starts; ``config/spark-defaults.conf`` holds it commented out), not a runtime one. The
workers must import this module before any task runs, so calving must be installed in
their interpreter: a copy shipped with ``--py-files`` reaches only the tasks.

Before forking, it also sets the C library's allocator for what the workers do with
numpy (``WORKER_MALLOC``, inherited by every worker: :mod:`calving.ingest.allocator`
says why); a worker whose environment sets glibc's allocator keeps its own settings.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import zipfile
from collections.abc import Sequence

from calving.ingest.allocator import WORKER_MALLOC, tune_malloc

#: The value of ``spark.python.daemon.module`` that selects this daemon.
DAEMON_MODULE = "calving.ingest.spark_daemon"
_PY4J_ZIP = re.compile(r"py4j-(?P<version>[0-9][^/]*?)-src\.zip$")
_VERSION = re.compile(r"""__version__[^=]*=\s*["']([^"']+)["']""")


def _version_in(text: str) -> str | None:
    found = _VERSION.search(text)
    return found.group(1) if found else None


def _zip_version(path: str) -> str | None:
    """The pyspark version in Spark's ``pyspark.zip`` (its ``pyspark/version.py``)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return _version_in(archive.read("pyspark/version.py").decode())
    except (OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError):
        return None


def _installed_version(name: str, path: Sequence[str]) -> str | None:
    """The version of package ``name`` found first on ``path`` outside any zip, read
    from its ``version.py`` without importing it."""
    for entry in path:
        if entry.endswith(".zip"):
            continue
        try:
            with open(os.path.join(entry or ".", name, "version.py"), encoding="utf-8") as f:
                return _version_in(f.read())
        except (OSError, UnicodeDecodeError):
            continue
    return None


def installed_first(path: Sequence[str]) -> list[str]:
    """``path`` with Spark's pyspark and py4j zips moved after every other entry when
    the installed packages are the zips' versions; else ``path`` as it is."""
    spark_zips = []
    for entry in path:
        name = os.path.basename(entry)
        if name == "pyspark.zip":
            wanted = _zip_version(entry)
            package = "pyspark"
        elif (py4j := _PY4J_ZIP.search(name)) is not None:
            wanted, package = py4j.group("version"), "py4j"
        else:
            continue
        if wanted is None or _installed_version(package, path) != wanted:
            return list(path)
        spark_zips.append(entry)
    return [p for p in path if p not in spark_zips] + spark_zips


def warm_up(argv: Sequence[str]) -> list[str]:
    """Import the worker module that the daemon's workers import after forking, when
    it is ``pyspark.worker`` (pyspark's daemon reads ``argv[1]``; other worker modules
    may start threads at import, and are left to the workers). Returns the modules
    imported; one that fails is left to the worker, which reports it as a task
    failure."""
    worker = argv[1] if len(argv) > 1 and argv[1].startswith("pyspark") else "pyspark.worker"
    if worker != "pyspark.worker":
        return []
    try:
        importlib.import_module(worker)
    except Exception as err:  # noqa: BLE001 -- the forked worker raises it again
        print(f"calving daemon: {worker} not imported ahead: {err}", file=sys.stderr)
        return []
    return [worker]


def main() -> None:
    sys.path[:] = installed_first(sys.path)
    tune_malloc(WORKER_MALLOC)
    warm_up(sys.argv)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()

"""Where a rebuild of a keyed table's index runs, one rule for both index modes.

A Spark job costs seconds of scheduling and Python worker start-up that a small table
does not need (2M keys: 0.1-0.5 s in the driver against 1.9-3.3 s as a job while a
stream starts), so a snapshot whose summary shows fewer than
``calving.index.executor-rebuild-rows`` live rows is rebuilt in the driver. A summary
without totals is a table of unknown size, rebuilt on the executors: a wrong guess
there costs the driver the whole table. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from calving.commit.spec.properties import TableProperties
from calving.commit.spec.snapshot import Snapshot
from calving.commit.table.summary import live_rows


def driver_rebuild_rows(properties: Mapping[str, str], snapshot: Snapshot | None) -> int | None:
    """The live rows of ``snapshot`` when its index is rebuilt in the driver, else None
    (on the executors). No snapshot is an empty table: 0."""
    rows = live_rows(snapshot)
    if rows is None:
        return None
    return rows if rows < TableProperties(properties).index_executor_rebuild_rows else None

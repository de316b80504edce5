"""The change feed's columns and change types (Iceberg's reserved metadata columns
``_change_type``, ``_change_ordinal``, ``_commit_snapshot_id``, ``_row_id``), and the
lineage columns its rows carry while they are paired."""

from __future__ import annotations

import pyarrow as pa

CHANGE_TYPE = "_change_type"
CHANGE_ORDINAL = "_change_ordinal"
COMMIT_SNAPSHOT_ID = "_commit_snapshot_id"
ROW_ID = "_row_id"
CHANGE_COLUMNS = (CHANGE_TYPE, CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, ROW_ID)

LAST_UPDATED = "_last_updated_sequence_number"
POSITION = "_pos"
LINEAGE_SCHEMA = pa.schema(
    [
        pa.field(ROW_ID, pa.int64()),
        pa.field(LAST_UPDATED, pa.int64()),
        pa.field(POSITION, pa.int64()),
    ]
)

INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER = "INSERT", "DELETE", "UPDATE_BEFORE", "UPDATE_AFTER"

"""v3 row lineage: the reserved row-id columns and which rows a manifest assigns ids to.

A row's ``_row_id`` is its data file's ``first_row_id`` plus its position, unless the
file stores a non-null ``_row_id`` column (reserved field id 2147483540); its
``_last_updated_sequence_number`` is the stored column (2147483539) or, when null, the
data sequence number of the file's manifest entry. A rewrite stores both columns so the
rows it moves keep their lineage. Readers that project the table's schema by field id
ignore these columns. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from calving.commit.spec.data_file import EntryStatus, FileContent, ManifestEntry
from calving.commit.spec.types import LONG, NestedField

ROW_ID_FIELD_ID = 2147483540
LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID = 2147483539
ROW_ID = NestedField(ROW_ID_FIELD_ID, "_row_id", LONG)
LAST_UPDATED_SEQUENCE_NUMBER = NestedField(
    LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID, "_last_updated_sequence_number", LONG
)
LINEAGE_FIELDS = (ROW_ID, LAST_UPDATED_SEQUENCE_NUMBER)
LINEAGE_FIELD_IDS = frozenset(f.field_id for f in LINEAGE_FIELDS)


def rows_to_assign(entries: Iterable[ManifestEntry]) -> int:
    """Rows of the live data files without a ``first_row_id``: what a manifest's own
    ``first_row_id`` hands ids to on read (spec: first row id inheritance)."""
    return sum(
        e.data_file.record_count
        for e in entries
        if e.status != EntryStatus.DELETED
        and e.data_file.content == FileContent.DATA
        and e.data_file.first_row_id is None
    )

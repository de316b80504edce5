"""What ``calving demo`` reports about row identity, from the change feed, against the
reference lineage reader over every snapshot of a CDC history: row updates that kept
their ``_row_id`` and keys that got a new one."""

from __future__ import annotations

from calving.commit.table.table import Table
from calving.ingest.demo.run import update_identities
from tests.support.cdc_history import UPDATES_KEEP_ROW_ID, Step, run_history, sqlite_catalog
from tests.support.lineage import identity_changes

STEPS = [
    Step("batch", (("u", 1), ("u", 2), ("u", 1))),
    Step("compact"),
    Step("batch", (("u", 3), ("d", 4), ("u", 5))),
    Step("batch", (("u", 3), ("u", 6))),
]


def test_update_identities_match_the_reference_reader() -> None:
    with sqlite_catalog() as catalog:
        history, _ = run_history(catalog, STEPS, partitioned=False, keep=UPDATES_KEEP_ROW_ID)
        table = Table.load(catalog, history.table.ident)
        got = update_identities(table)
        assert got == identity_changes(table.metadata_location, "id")
        assert got[0] + got[1] == 6  # keys 1, 2; 3, 5; 3, 6 were updated
        assert got == ((6, 0) if UPDATES_KEEP_ROW_ID else (0, 6))

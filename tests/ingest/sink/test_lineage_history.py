"""Row lineage over random CDC histories (issue 23, part 2): updates, deletes, re-inserts,
compaction in between and two kinds of commit conflict go through calving's real commit
path (``tests.support.cdc_history``); after every commit the reference reader
(``tests.support.lineage``, written from the spec, no calving code) derives every live
row's ``_row_id`` and ``_last_updated_sequence_number`` and the model says what they
must be: each key keeps its identity exactly as long as the model says, ids are unique
and never reused, and a row was last updated by the commit that last wrote it.

``tests.support.cdc_history.UPDATES_KEEP_ROW_ID`` (True) says updates keep their
``_row_id`` (issue 23 part 1): an update of a live key keeps its identity, a delete then
re-insert of a key in one batch gets a new one.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calving.commit.catalog import SqlCatalog
from calving.commit.spec.properties import ROW_LINEAGE_KEEP_ON_UPDATE
from calving.commit.table.actions.update_properties import UpdateProperties
from tests.support.cdc_history import (
    COLUMNS,
    UPDATES_KEEP_ROW_ID,
    History,
    IdentityBook,
    Model,
    Step,
    check_lineage,
    postgres_catalog,
    run_history,
    sqlite_catalog,
    steps_strategy,
)
from tests.support.lineage import (
    lineage,
    live_files,
    read_metadata,
    snapshot_of,
    snapshot_rows,
)
from tests.support.oracles import ALL_READERS, duckdb_rows

KEYS = 10

_steps = steps_strategy(KEYS)
_SETTINGS = settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def run_and_check(
    catalog: SqlCatalog, steps: Sequence[Step], partitioned: bool, keep: bool
) -> History:
    return run_history(catalog, steps, partitioned=partitioned, keep=keep, keys=KEYS)[0]


@_SETTINGS
@given(steps=_steps, partitioned=st.booleans())
def test_lineage_over_random_histories_sqlite(steps: list[Step], partitioned: bool) -> None:
    with sqlite_catalog() as catalog:
        run_and_check(catalog, steps, partitioned, UPDATES_KEEP_ROW_ID)


@pytest.mark.integration
@pytest.mark.postgres
@_SETTINGS
@given(steps=_steps, partitioned=st.booleans())
def test_lineage_over_random_histories_postgres(
    pg_url: str, steps: list[Step], partitioned: bool
) -> None:
    with postgres_catalog(pg_url) as catalog:
        run_and_check(catalog, steps, partitioned, UPDATES_KEEP_ROW_ID)


# Updates, deletes, a re-insert in the same batch as its delete, compactions and both
# conflicts: a fixed history on which the update-identity assertion is checked.
FIXED = [
    Step("batch", (("u", 1), ("u", 2), ("u", 1))),
    Step("compact"),
    Step("batch", (("d", 3), ("u", 4), ("d", 4), ("u", 4))),
    Step("batch+compact", (("u", 5), ("d", 6))),
    Step("compact+batch", (("u", 7), ("u", 6))),
    Step("batch", (("u", 2),)),
]


def test_the_fixed_history_keeps_update_identities() -> None:
    with sqlite_catalog() as catalog:
        history = run_and_check(catalog, FIXED, partitioned=False, keep=UPDATES_KEEP_ROW_ID)
    kinds = [c.kind for c in history.commits]
    assert kinds.count("compaction") >= 2 and kinds.count("data") == len(FIXED)
    assert history.retried_batches >= 1 and history.carried_deletes >= 1


# Inserts and updates in one file (keys 20, 21 are new; 2 and 5 are updated), a key
# updated again in later batches (its update finds the id stored by the earlier one, then
# the one a compaction stored), a key deleted and re-inserted in one batch.
MIXED = [
    Step("batch", (("u", 20), ("u", 2), ("u", 21), ("u", 5))),
    Step("batch", (("u", 2), ("d", 20), ("u", 20), ("u", 9))),
    Step("compact"),
    Step("batch", (("u", 2), ("u", 21), ("u", 22))),
]


def _stored_row_ids(path: str) -> list[int | None]:
    """The ``_row_id`` column a data file stores (by field id), read by pyarrow."""
    table = pq.read_table(path.removeprefix("file://"))
    for f in table.schema:
        if f.metadata and f.metadata.get(b"PARQUET:field_id") == b"2147483540":
            return table.column(f.name).to_pylist()
    return []


@pytest.mark.parametrize("partitioned", [False, True])
def test_files_storing_row_ids_read_equal_to_the_model(partitioned: bool) -> None:
    """Batch files whose updated rows store their old ``_row_id`` and inserted rows a
    null one read back as the model's rows in pyiceberg, DuckDB and pyiceberg-core, and
    DuckDB's ``_row_id`` / ``_last_updated_sequence_number`` are the reference reader's."""
    with sqlite_catalog() as catalog:
        history = run_and_check(catalog, MIXED, partitioned=partitioned, keep=True)
        location = history.metadata_location()
        want = sorted(tuple(s.values[c] for c in COLUMNS) for s in history.model.live.values())
        for name, read in ALL_READERS.items():
            assert read(location, COLUMNS) == want, name
        ids = duckdb_rows(location, ("id", "_row_id", "_last_updated_sequence_number"))
        assert {k: (r, s) for k, r, s in ids} == lineage(location, "id")
        snapshot = snapshot_of(read_metadata(location))
        stored = [v for f in live_files(snapshot) for v in _stored_row_ids(f.path)]
        assert None in stored and any(v is not None for v in stored), stored


def _row_ids_after(events: tuple[tuple[str, int], ...]) -> dict[int, int | None]:
    with sqlite_catalog() as catalog:
        history, _ = run_history(
            catalog, [Step("batch", events)], partitioned=False, keep=True, keys=4
        )
        return {r.values["id"]: r.row_id for r in snapshot_rows(history.metadata_location())}


def test_an_update_keeps_the_row_id_a_delete_then_insert_does_not() -> None:
    """The first batch gives keys 0..3 ids 0..3. Upserting key 3 twice keeps id 3;
    deleting it and upserting it again in one batch gives it a new id."""
    assert _row_ids_after((("u", 3), ("u", 3))) == {0: 0, 1: 1, 2: 2, 3: 3}
    renewed = _row_ids_after((("u", 3), ("d", 3), ("u", 3)))
    assert {k: renewed[k] for k in (0, 1, 2)} == {0: 0, 1: 1, 2: 2}
    assert renewed[3] is not None and renewed[3] > 3


def test_the_table_property_makes_updates_new_rows() -> None:
    """``calving.row-lineage.keep-on-update = false``: the same checks against the model
    in which every update mints a new identity (the behaviour before lineage through
    updates)."""
    with sqlite_catalog() as catalog:
        history = History(catalog, partitioned=False, model=Model(updates_keep_identity=False))
        history.table.commit_or_raise(UpdateProperties({ROW_LINEAGE_KEEP_ON_UPDATE.name: "false"}))
        book = IdentityBook()
        for step in [Step("batch", tuple(("u", k) for k in range(KEYS))), *FIXED]:
            history.run(step, after=lambda h: check_lineage(h, book))

"""Row lineage over random CDC histories (issue 23, part 2): updates, deletes, re-inserts,
compaction in between and two kinds of commit conflict go through calving's real commit
path (``tests.support.cdc_history``); after every commit the reference reader
(``tests.support.lineage``, written from the spec, no calving code) derives every live
row's ``_row_id`` and ``_last_updated_sequence_number`` and the model says what they
must be: each key keeps its identity exactly as long as the model says, ids are unique
and never reused, and a row was last updated by the commit that last wrote it.

``tests.support.cdc_history.UPDATES_KEEP_ROW_ID`` is the one switch for lineage through
updates (issue 23 part 1): while it is False the model expects what calving does today
(an update mints a new ``_row_id``); the strict xfail below runs the same checks with it
on and starts to XPASS (failing the run) the day calving keeps identities through
updates: then set it True and delete that test.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calving.commit.catalog import SqlCatalog
from tests.support.cdc_history import (
    UPDATES_KEEP_ROW_ID,
    History,
    Step,
    postgres_catalog,
    run_history,
    sqlite_catalog,
    steps_strategy,
)

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


@pytest.mark.xfail(
    strict=True,
    reason="issue 23 part 1: an update keeps its _row_id (not on main yet); when this "
    "XPASSes, set tests.support.cdc_history.UPDATES_KEEP_ROW_ID = True and delete this test",
)
def test_updates_keep_their_row_id() -> None:
    with sqlite_catalog() as catalog:
        run_and_check(catalog, FIXED, partitioned=False, keep=True)


def test_the_fixed_history_passes_with_todays_lineage() -> None:
    with sqlite_catalog() as catalog:
        history = run_and_check(catalog, FIXED, partitioned=False, keep=UPDATES_KEEP_ROW_ID)
    kinds = [c.kind for c in history.commits]
    assert kinds.count("compaction") >= 2 and kinds.count("data") == len(FIXED)
    assert history.retried_batches >= 1 and history.carried_deletes >= 1

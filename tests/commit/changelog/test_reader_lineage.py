"""Which readers show row lineage: DuckDB 1.5.5's ``iceberg_scan`` exposes ``_row_id`` and
``_last_updated_sequence_number`` and they equal the reference reader's after a history
of upserts, deletes, compactions and conflicts (so ``_last_updated_sequence_number > N``
works there); pyiceberg 0.12 and pyiceberg-core 0.11 do not expose them."""

from __future__ import annotations

import pytest

from tests.ingest.sink.test_lineage_history import FIXED
from tests.support.cdc_history import UPDATES_KEEP_ROW_ID, run_history, sqlite_catalog
from tests.support.lineage import lineage
from tests.support.oracles import duckdb_connection


def test_duckdb_shows_the_lineage_the_spec_derives() -> None:
    with sqlite_catalog() as catalog:
        history, _ = run_history(catalog, FIXED, partitioned=True, keep=UPDATES_KEEP_ROW_ID)
        location = history.metadata_location()
        path = location.removeprefix("file://").replace("'", "''")
        con = duckdb_connection()
        try:
            rows = con.execute(
                f"SELECT id, _row_id, _last_updated_sequence_number FROM iceberg_scan('{path}')"
            ).fetchall()
            last = history.commits[-1].sequence_number
            recent = con.execute(
                f"SELECT count(*) FROM iceberg_scan('{path}') "
                f"WHERE _last_updated_sequence_number > {last - 1}"
            ).fetchone()
        finally:
            con.close()
        want = lineage(location, "id")
        assert {k: (r, s) for k, r, s in rows} == want
        assert recent == (sum(1 for _, s in want.values() if s == last),)

        from pyiceberg.table import StaticTable

        with pytest.raises(ValueError, match="_row_id"):
            StaticTable.from_metadata(location).scan(selected_fields=("id", "_row_id")).to_arrow()
        from datafusion import SessionContext
        from pyiceberg_core.datafusion import IcebergDataFusionTable

        ctx = SessionContext()
        provider = IcebergDataFusionTable(
            identifier=["oracle", "t"], metadata_location=location, file_io_properties={}
        )
        ctx.register_table("t", provider)
        with pytest.raises(Exception, match="No field named _row_id"):
            ctx.sql("SELECT _row_id FROM t").collect()

"""Hypothesis fuzz of the request bodies of createTable, updateTable and
transactions/commit against a running ``calving catalog serve``: whatever the body, the
answer is never a 5xx, nothing is written outside the warehouse, the server's memory
stays bounded, and a refused request leaves the table as it was."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ingest.serve.conftest import Served, table_body

pytestmark = pytest.mark.integration

TABLES = "/v1/namespaces/db/tables"
FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from(["..", "/", "../../x", "file:///etc", "main", "\x00", "-1", "3"]),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = ["action", "type", "schema", "spec", "sort-order", "snapshot", "ref-name", "snapshot-id",
        "location", "updates", "removals", "uuid", "format-version", "schema-id", "spec-id",
        "sort-order-id", "snapshot-ids", "statistics", "ref", "current-schema-id"]  # fmt: skip
ACTIONS = ["assign-uuid", "upgrade-format-version", "add-schema", "set-current-schema",
           "add-spec", "set-default-spec", "add-sort-order", "set-default-sort-order",
           "add-snapshot", "set-snapshot-ref", "remove-snapshot-ref", "remove-snapshots",
           "set-location", "set-properties", "remove-properties", "set-statistics",
           "remove-statistics", "bogus"]  # fmt: skip
TYPES = ["assert-create", "assert-table-uuid", "assert-ref-snapshot-id",
         "assert-current-schema-id", "assert-last-assigned-field-id",
         "assert-default-spec-id", "bogus"]  # fmt: skip
updates = st.builds(
    lambda action, rest: {**rest, "action": action},
    st.sampled_from(ACTIONS),
    st.dictionaries(st.sampled_from(KEYS), values, max_size=4),
)
requirements = st.builds(
    lambda kind, rest: {**rest, "type": kind},
    st.sampled_from(TYPES),
    st.dictionaries(st.sampled_from(KEYS), values, max_size=3),
)
commits = (
    st.fixed_dictionaries(
        {
            "requirements": st.lists(requirements, max_size=3),
            "updates": st.lists(updates, max_size=4),
        }
    )
    | values
)


def _check(served: Served, status: int, body: Any) -> None:
    assert status < 500, (status, body)
    assert served.files_outside_warehouse() == []


@pytest.fixture(scope="module")
def fuzzed(served: Served) -> Served:
    assert served.request("POST", TABLES, table_body("fuzzed"))[0] in (200, 409)
    return served


def _location(served: Served) -> str:
    return served.request("GET", f"{TABLES}/fuzzed")[2]["metadata-location"]


@FUZZ
@given(body=st.dictionaries(st.sampled_from(["name", "schema", "location", "partition-spec",
       "write-order", "properties", "stage-create"]), values, max_size=5) | values)  # fmt: skip
def test_create_table_bodies(fuzzed, body):
    status, _, answer = fuzzed.request("POST", TABLES, body)
    _check(fuzzed, status, answer)


@FUZZ
@given(body=commits)
def test_update_table_bodies(fuzzed, body):
    before = _location(fuzzed)
    status, _, answer = fuzzed.request("POST", f"{TABLES}/fuzzed", body)
    _check(fuzzed, status, answer)
    if status >= 400:
        assert _location(fuzzed) == before


@FUZZ
@given(change=commits, name=st.sampled_from(["fuzzed", "missing", "..", ""]))
def test_transaction_bodies(fuzzed, change, name):
    before = _location(fuzzed)
    body = {"table-changes": [{"identifier": {"namespace": ["db"], "name": name}, **(
        change if isinstance(change, dict) else {"updates": change})}]}  # fmt: skip
    status, _, answer = fuzzed.request("POST", "/v1/transactions/commit", body)
    _check(fuzzed, status, answer)
    if status >= 400:
        assert _location(fuzzed) == before


def test_memory_stays_bounded_after_the_fuzz(fuzzed):
    """Runs after the fuzz above (same module): a burst of large refused bodies later,
    the server holds no more than a bounded amount of extra memory."""
    before = fuzzed.rss_kib()
    big = json.dumps({"requirements": [], "updates": [{"action": "x" * 1_000_000}]})
    for _ in range(20):
        status, _, _ = fuzzed.request(
            "POST",
            f"{TABLES}/fuzzed",
            raw=big.encode(),
            headers={"Content-Type": "application/json"},
        )
        assert status == 400
    assert fuzzed.rss_kib() - before < 64 * 1024

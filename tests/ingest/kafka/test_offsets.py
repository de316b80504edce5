"""Offset arithmetic of the Kafka source, without Spark or a broker."""

from __future__ import annotations

import itertools
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from calving.commit.errors import ConfigError
from calving.ingest.kafka.offsets import (
    KafkaDataLossError,
    OffsetRange,
    admit,
    group_small_ranges,
    offsets_from_json,
    offsets_to_json,
    parse_assign_option,
    parse_offsets_option,
    report_vanished_partitions,
    resolve_read_start,
    split_ranges,
)

topic_partitions = st.tuples(st.sampled_from(["a", "b", "orders.v1"]), st.integers(0, 40))


@st.composite
def start_and_latest(draw: st.DrawFn) -> tuple[dict, dict]:
    tps = draw(st.lists(topic_partitions, min_size=0, max_size=12, unique=True))
    start = {tp: draw(st.integers(0, 10_000)) for tp in tps}
    latest = {tp: start[tp] + draw(st.integers(0, 5_000)) for tp in tps}
    return start, latest


# ---------------------------------------------------------------- admission control


@given(start_and_latest())
def test_admit_without_limit_reads_everything(bounds: tuple[dict, dict]) -> None:
    start, latest = bounds
    assert admit(start, latest, None) == latest


@given(start_and_latest(), st.integers(1, 20_000))
def test_admit_respects_the_limit_and_never_starves(
    bounds: tuple[dict, dict], max_rows: int
) -> None:
    start, latest = bounds
    end = admit(start, latest, max_rows)
    assert set(end) == set(latest)
    lagging = [tp for tp in latest if latest[tp] > start[tp]]
    total_lag = sum(latest[tp] - start[tp] for tp in latest)
    admitted = sum(end[tp] - start[tp] for tp in end)
    for tp in end:
        assert start[tp] <= end[tp] <= latest[tp]
    for tp in lagging:
        assert end[tp] > start[tp], "every lagging partition makes progress"
    if total_lag <= max_rows:
        assert end == latest
    else:
        assert admitted == max(max_rows, len(lagging))


@given(start_and_latest(), st.integers(1, 20_000))
def test_admit_is_deterministic(bounds: tuple[dict, dict], max_rows: int) -> None:
    start, latest = bounds
    reordered_start = dict(reversed(list(start.items())))
    reordered_latest = dict(reversed(list(latest.items())))
    assert admit(start, latest, max_rows) == admit(reordered_start, reordered_latest, max_rows)


def test_admit_splits_in_proportion_to_lag() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    latest = {("t", 0): 600, ("t", 1): 400, ("t", 2): 5}
    end = admit(start, latest, 300)
    assert end == {("t", 0): 200, ("t", 1): 200, ("t", 2): 5}


def test_admit_gives_each_lagging_partition_one_record_below_their_count() -> None:
    start = {("t", p): 0 for p in range(4)}
    latest = {("t", p): 10 for p in range(4)}
    assert admit(start, latest, 2) == {("t", p): 1 for p in range(4)}


def test_admit_refuses_start_past_latest() -> None:
    with pytest.raises(ValueError, match="start <= latest"):
        admit({("t", 0): 5}, {("t", 0): 4}, None)


# ---------------------------------------------------------------- JSON forms


@given(st.dictionaries(topic_partitions, st.integers(0, 2**62)))
def test_offsets_json_round_trip_is_canonical(offsets: dict) -> None:
    doc = offsets_to_json(offsets)
    assert offsets_from_json(doc) == offsets
    assert list(doc) == sorted(doc)
    for partitions in doc.values():
        assert [int(p) for p in partitions] == sorted(int(p) for p in partitions)
    reordered = dict(reversed(list(offsets.items())))
    assert offsets_to_json(reordered) == doc
    import json

    assert json.dumps(offsets_to_json(reordered)) == json.dumps(doc)


def test_offsets_option_accepts_markers_only_where_allowed() -> None:
    text = '{"t": {"0": 23, "1": -2, "2": -1}}'
    assert parse_offsets_option(text, "startingOffsets", allow_markers=True) == {
        ("t", 0): 23,
        ("t", 1): -2,
        ("t", 2): -1,
    }
    with pytest.raises(ConfigError, match="calving.startingLedger"):
        parse_offsets_option(text, "calving.startingLedger", allow_markers=False)
    with pytest.raises(ConfigError, match="startingOffsets: offset -3"):
        parse_offsets_option('{"t": {"0": -3}}', "startingOffsets", allow_markers=True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ('["t"]', "expected a JSON object"),
        ('{"t": 5}', "must map partition numbers"),
        ('{"t": {"x": 5}}', "partition 'x'"),
        ('{"t": {"0": "5"}}', "must be an integer"),
        ('{"t": {"0": true}}', "must be an integer"),
    ],
)
def test_offsets_option_errors_name_the_option(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        parse_offsets_option(text, "startingOffsets", allow_markers=True)
    assert "startingOffsets" in str(raised.value)


def test_assign_option() -> None:
    assert parse_assign_option('{"b": [1, 0], "a": [2]}') == [("a", 2), ("b", 0), ("b", 1)]
    for bad in ("{}", '{"a": 1}', '{"a": [-1]}', '{"a": ["0"]}', "[1]", "x"):
        with pytest.raises(ConfigError, match="assign"):
            parse_assign_option(bad)


# ---------------------------------------------------------------- where reads start


def test_read_start_is_lifted_by_the_ledger() -> None:
    assert resolve_read_start(("t", 0), 10, 100, 0, ledger=40, fail_on_data_loss=True) == 40
    assert resolve_read_start(("t", 0), 50, 100, 0, ledger=40, fail_on_data_loss=True) == 50
    assert resolve_read_start(("t", 0), 10, 100, 0, ledger=None, fail_on_data_loss=True) == 10
    # A ledger past the end leaves nothing to read.
    assert resolve_read_start(("t", 0), 10, 100, 0, ledger=150, fail_on_data_loss=True) == 150


def test_read_start_below_earliest_is_data_loss() -> None:
    with pytest.raises(KafkaDataLossError) as raised:
        resolve_read_start(("orders", 3), 10, 100, 25, ledger=None, fail_on_data_loss=True)
    error = raised.value
    assert (error.topic, error.partition) == ("orders", 3)
    assert "orders/3" in str(error) and "10..24" in str(error)
    # The ledger past the deleted records means nothing was lost.
    assert resolve_read_start(("orders", 3), 10, 100, 25, ledger=30, fail_on_data_loss=True) == 30


def test_read_start_skips_ahead_when_data_loss_is_allowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="calving.ingest.kafka"):
        got = resolve_read_start(("t", 1), 10, 100, 25, ledger=None, fail_on_data_loss=False)
    assert got == 25
    assert "t/1" in caplog.text


def test_offsets_going_back_is_data_loss_or_a_restart_from_earliest() -> None:
    with pytest.raises(KafkaDataLossError, match="went back from 500 to 30"):
        resolve_read_start(("t", 0), 500, 30, 0, ledger=None, fail_on_data_loss=True)
    assert resolve_read_start(("t", 0), 500, 30, 0, ledger=None, fail_on_data_loss=False) == 0


def test_vanished_partitions() -> None:
    with pytest.raises(KafkaDataLossError, match="gone/2: partition no longer exists"):
        report_vanished_partitions([("gone", 2)], fail_on_data_loss=True)
    report_vanished_partitions([("gone", 2)], fail_on_data_loss=False)  # only logs


# ---------------------------------------------------------------- Spark tasks


ranges_strategy = st.lists(
    st.builds(
        lambda p, start, size: OffsetRange("t", p, start, start + size),
        st.integers(0, 30),
        st.integers(0, 1_000),
        st.integers(0, 500),
    ),
    max_size=8,
    unique_by=lambda r: r.partition,
)


@given(ranges_strategy, st.one_of(st.none(), st.integers(1, 64)))
def test_split_ranges_covers_every_offset_once(ranges: list, min_partitions: int | None) -> None:
    pieces = split_ranges(ranges, min_partitions)
    non_empty = [r for r in ranges if r.size > 0]
    for original in non_empty:
        mine = sorted(
            (p for p in pieces if p.partition == original.partition), key=lambda p: p.start
        )
        assert mine[0].start == original.start and mine[-1].end == original.end
        for left, right in itertools.pairwise(mine):
            assert left.end == right.start
        assert all(p.size > 0 for p in mine)
    assert sum(p.size for p in pieces) == sum(r.size for r in non_empty)
    total = sum(r.size for r in non_empty)
    if min_partitions is None:
        assert pieces == non_empty
    else:
        assert len(pieces) >= min(min_partitions, total)


def test_split_ranges_splits_big_ranges_more() -> None:
    pieces = split_ranges([OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 0, 100)], 10)
    assert [p.partition for p in pieces].count(0) == 9
    assert [p.partition for p in pieces].count(1) == 1


@given(ranges_strategy, st.integers(1, 3_000))
def test_grouped_ranges_keep_each_range_whole_in_exactly_one_task(
    ranges: list, task_records: int
) -> None:
    ranges = [r for r in ranges if r.size > 0]  # as planned
    tasks = group_small_ranges(ranges, task_records)
    dealt = [r for task in tasks for r in task]
    assert sorted(dealt, key=lambda r: r.partition) == sorted(ranges, key=lambda r: r.partition)
    assert all(tasks)  # no empty task
    total = sum(r.size for r in ranges)
    assert len(tasks) == min(len(ranges), max(1, -(-total // task_records))) or not ranges
    if len(tasks) < len(ranges):  # near-equal: no task is heavier by more than its
        loads = sorted(sum(r.size for r in t) for t in tasks)  # lightest range
        assert loads[-1] - loads[0] <= max(r.size for r in ranges)


def test_small_ranges_share_a_task_and_big_ones_keep_their_own() -> None:
    small = [OffsetRange("t", 0, 0, 20), OffsetRange("t", 1, 5, 25)]
    assert group_small_ranges(small, 10_000) == [(small[0], small[1])]
    big = [OffsetRange("t", 0, 0, 50_000), OffsetRange("t", 1, 0, 50_000)]
    assert group_small_ranges(big, 10_000) == [(big[0],), (big[1],)]
    mixed = [OffsetRange("t", p, 0, n) for p, n in enumerate([9_000, 6_000, 3_000, 2_000])]
    # 20,000 records: two tasks, the largest range first into the lightest task
    assert group_small_ranges(mixed, 10_000) == [
        (mixed[0], mixed[3]),
        (mixed[1], mixed[2]),
    ]
    assert group_small_ranges(small, 1) == [(small[0],), (small[1],)]

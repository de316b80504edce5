"""The commit-message codec: recorded bytes decode to the expected values and encode
back to the same bytes; any messages survive encode -> decode (and the keyed path's
stage-1 JSON ride-along) unchanged; a bad row is a one-line typed error."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.spec.data_file import DataFile, FileContent
from calving.ingest.sink import messages as msg
from calving.ingest.sink.coordinator import ParsedMessages, parse_messages
from tests.ingest.sink.message_examples import VECTOR, examples, ipc_bytes


def _recorded() -> pa.Table:
    return pa.ipc.open_stream(VECTOR.read_bytes()).read_all()


def test_recorded_messages_decode_to_the_expected_values():
    assert msg.decode(_recorded()) == examples()


def test_expected_values_encode_to_the_recorded_bytes():
    assert ipc_bytes(msg.encode(examples())) == VECTOR.read_bytes()


def test_recorded_messages_gather_into_what_the_coordinator_commits():
    parsed = parse_messages(_recorded())
    assert [f.file_path for f, _ in parsed.files] == [
        "s3://b/t/data/p=1/a.parquet",
        "file:///t/data/b.parquet",
    ]
    assert parsed.files[0][1].column("id").to_pylist() == [3, 1, 2]
    assert [k.num_rows for k in parsed.delete_keys] == [1]
    assert {tp: (r.start, r.end) for tp, r in parsed.ranges.items()} == {
        ("orders", 0): (100, 250),
        ("orders", 1): (0, 1),
        ("päyments", 3): (5, 6),
    }
    assert (parsed.timestamp_min_ms, parsed.timestamp_max_ms) == (0, 1_700_000_009_999)
    assert parsed.records == 152
    assert parsed.dead_letters == 2  # the dead-letter table's file rows
    assert parsed.dead_letters_sent == {("orders", 0, 120), ("orders", 1, 0)}
    assert parsed.unknown_fields == {"extra": {"long", "null"}, "a.b": {"string"}}
    assert parsed.rows_seen == 42


def test_without_a_dead_letter_table_the_sent_ones_count():
    parsed = ParsedMessages.of([msg.DeadLettersSent((("t", 0, 1), ("t", 0, 2)))])
    assert parsed.dead_letters == 2


def test_an_unreadable_row_names_its_index_and_kind():
    rows = [msg.encode_row(msg.RowsSeen(1)), {"kind": "nonsense", "payload": "", "count": 0}]
    rows.append({"kind": "range", "payload": "[1, 2", "keys": None, "count": 1})
    with pytest.raises(msg.MessageDecodeError, match=r"row 1 \(kind 'nonsense'\)"):
        msg.decode(msg.message_batch(rows[:2]))
    with pytest.raises(msg.MessageDecodeError, match=r"row 1 \(kind 'range'\): JSONDecodeError"):
        msg.decode(msg.message_batch([rows[0], rows[2]]))


# ---------------------------------------------------------------- round trips

_ints = st.integers(min_value=0, max_value=2**62)
_text = st.text(min_size=1, max_size=12)
_small = st.integers(min_value=0, max_value=2**31 - 1)


@st.composite
def _key_tables(draw: st.DrawFn) -> pa.Table:
    ids = draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=0, max_size=5))
    names = draw(st.lists(st.text(max_size=5) | st.none(), min_size=len(ids), max_size=len(ids)))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array(names, pa.string())})


@st.composite
def _data_files(draw: st.DrawFn) -> DataFile:
    ids = st.integers(min_value=1, max_value=1000)
    counts = st.dictionaries(ids, _ints, max_size=3) | st.none()
    bounds = st.dictionaries(ids, st.binary(max_size=16), max_size=3) | st.none()
    partition_value = (
        st.none()
        | st.integers(-(2**63), 2**63 - 1)
        | st.text(max_size=8)
        | st.binary(max_size=8)
        | st.decimals(allow_nan=False, allow_infinity=False, places=3)
        | st.uuids()
        | st.booleans()
    )
    return DataFile(
        content=draw(st.sampled_from(list(FileContent))),
        file_path=draw(_text),
        file_format=draw(st.sampled_from(["PARQUET", "AVRO", "PUFFIN"])),
        partition=tuple(draw(st.lists(partition_value, max_size=4))),
        record_count=draw(_ints),
        file_size_in_bytes=draw(_ints),
        column_sizes=draw(counts),
        value_counts=draw(counts),
        null_value_counts=draw(counts),
        nan_value_counts=draw(counts),
        lower_bounds=draw(bounds),
        upper_bounds=draw(bounds),
        key_metadata=draw(st.binary(max_size=8) | st.none()),
        split_offsets=draw(st.tuples(_ints) | st.none()),
        equality_ids=draw(st.tuples(ids, ids) | st.none()),
        sort_order_id=draw(st.integers(0, 5) | st.none()),
        first_row_id=draw(_ints | st.none()),
        referenced_data_file=draw(_text | st.none()),
        content_offset=draw(_ints | st.none()),
        content_size_in_bytes=draw(_ints | st.none()),
        spec_id=draw(st.integers(0, 5)),
    )


_stamp = st.integers(min_value=0, max_value=2**50) | st.none()
_messages = st.one_of(
    st.builds(msg.DataFileWritten, _data_files(), _key_tables() | st.none()),
    st.builds(msg.KeysDeleted, _key_tables()),
    st.builds(msg.KeysRenewed, _key_tables()),
    st.builds(msg.RangeSeen, _text, _small, _ints, _ints, _stamp, _stamp),
    st.builds(msg.DeadLetterFileWritten, _data_files()),
    st.builds(msg.DeadLettersSent, st.lists(st.tuples(_text, _small, _ints)).map(tuple)),
    st.builds(
        msg.UnknownFields,
        st.dictionaries(_text, st.frozensets(st.sampled_from(["long", "string", "null"]))),
    ),
    st.builds(msg.RowsSeen, _ints),
    st.builds(msg.SchemaSeen, _text),
    st.builds(
        msg.TransactionRuns,
        st.lists(st.tuples(_text, _small, _text | st.none(), _ints, _ints, _ints)).map(tuple),
    ),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(_messages, max_size=6))
def test_any_messages_survive_encode_then_decode(messages):
    assert msg.decode(msg.encode(messages)) == messages


@settings(max_examples=100, deadline=None)
@given(st.lists(_messages, max_size=4))
def test_any_messages_survive_the_keyed_stage_one_ride_along(messages):
    rows = msg.encode(messages).to_pylist()
    forwarded = [msg.row_from_json(msg.row_to_json(r)) for r in rows]
    assert msg.decode(msg.message_batch(forwarded)) == messages


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(_text, st.lists(_messages, min_size=1, max_size=3), max_size=4))
def test_tagged_messages_survive_encode_then_decode(groups):
    assert msg.decode_tagged(msg.encode_tagged(groups)) == groups


def test_an_untagged_row_is_refused():
    batch = msg.encode_tagged({"t": [msg.RowsSeen(1)]})
    untagged = batch.set_column(4, "tag", pa.array([None], pa.string()))
    with pytest.raises(msg.MessageDecodeError, match="row 0 has no tag"):
        msg.decode_tagged(untagged)


_SEEN_ROWS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.integers(0, 2),
        st.integers(0, 1 << 40),
        st.one_of(st.none(), st.integers(-(1 << 40), 1 << 40)),
    ),
    min_size=1,
    max_size=msg.SMALL_BATCH,
)


@settings(max_examples=200, deadline=None)
@given(_SEEN_ROWS, st.sampled_from(["s", "ms", "us", "ns"]), st.booleans())
def test_a_small_batchs_ranges_equal_the_group_by_ones(rows, unit, stamped):
    columns = {
        "topic": pa.array([r[0] for r in rows]),
        "partition": pa.array([r[1] for r in rows], pa.int32()),
        "offset": pa.array([r[2] for r in rows], pa.int64()),
    }
    if stamped:
        columns["timestamp"] = pa.array([r[3] for r in rows], pa.timestamp(unit, tz="UTC"))
    batch = pa.table(columns)
    small = msg.range_messages(batch)
    # Padded past the threshold with copies of its rows, the batch takes the group-by.
    copies = -(-(msg.SMALL_BATCH + 1) // batch.num_rows)
    big = msg.range_messages(pa.concat_tables([batch] * copies))
    assert batch.num_rows <= msg.SMALL_BATCH < batch.num_rows * copies
    key = lambda m: (m.topic, m.partition)
    assert sorted(small, key=key) == sorted(big, key=key)


@settings(max_examples=200, deadline=None)
@given(_SEEN_ROWS, st.sampled_from(["s", "ms", "us", "ns"]), st.booleans(), st.booleans())
def test_a_batch_of_one_partition_has_the_group_by_ranges(rows, unit, stamped, one):
    """Past the small-batch threshold a batch of one topic-partition is summed up by min
    and max (``_one_partition_messages``), any other by the group-by: both agree."""
    copies = -(-(msg.SMALL_BATCH + 1) // len(rows))
    rows = rows * copies
    columns = {
        "topic": pa.array(["t" if one else r[0] for r in rows]),
        "partition": pa.array([0 if one else r[1] for r in rows], pa.int32()),
        "offset": pa.array([r[2] for r in rows], pa.int64()),
    }
    if stamped:
        columns["timestamp"] = pa.array([r[3] for r in rows], pa.timestamp(unit, tz="UTC"))
    batch = pa.table(columns)
    got = msg.range_messages(batch)
    if stamped:
        batch = batch.append_column("_ts", msg._epoch_ms(batch.column("timestamp")))
    fast = msg._one_partition_messages(batch)
    aggregates = [("offset", "min"), ("offset", "max")]
    aggregates += [("_ts", "min"), ("_ts", "max")] if stamped else []
    grouped = msg._grouped_range_messages(batch, aggregates)
    key = lambda m: (m.topic, m.partition)
    assert sorted(got, key=key) == sorted(grouped, key=key)
    distinct = {
        (t, p) for t, p in zip(columns["topic"].to_pylist(), columns["partition"].to_pylist())
    }
    assert (fast is not None) == (len(distinct) == 1)
    if fast is not None:
        assert fast == grouped

"""The compact-protocol tree codec: hand-derived bytes for each wire type, Parquet
footers written by pyarrow (every column shape it writes) decoded and encoded again byte
for byte, and truncated or trailing bytes refused."""

from __future__ import annotations

import datetime as dt
import decimal
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calving.ingest.write import thrift_compact as tc

# A struct with every wire type, and its bytes worked out by hand from the protocol:
# field header = (id delta << 4) | type; ints are zigzag varints; a field id jump past
# 15 is a type byte then the zigzag id.
RECORDED = bytes.fromhex(
    "15 04"  # field 1, i32: zigzag(2) = 4
    "18 02 6162"  # field 2 (delta 1), binary: length 2, "ab"
    "11"  # field 3, bool true (in the header)
    "12"  # field 4, bool false
    "16 ff01"  # field 5, i64: zigzag(-128) = 255
    "19 25 02 04"  # field 6, list of 2 i32: size 2 << 4 | 5, then 1 and 2
    "1c 15 0e 00"  # field 7, struct {1: i32 7}, stop
    "0c 28 00"  # field 20 (delta 13 > 0 but written long: see below), empty struct
    "00"  # stop
)


def _sample() -> tc.Struct:
    return tc.Struct(
        [
            tc.Field(1, tc.I32, 2),
            tc.Field(2, tc.BINARY, b"ab"),
            tc.Field(3, tc.TRUE, True),
            tc.Field(4, tc.TRUE, False),
            tc.Field(5, tc.I64, -128),
            tc.Field(6, tc.LIST, tc.ListValue(tc.I32, [1, 2])),
            tc.Field(7, tc.STRUCT, tc.Struct([tc.Field(1, tc.I32, 7)])),
            tc.Field(20, tc.STRUCT, tc.Struct()),
        ]
    )


def test_recorded_bytes_decode_and_encode() -> None:
    # Field 20 follows field 7: a delta of 13 fits the short form, which the encoder
    # uses; the recorded bytes use the long form (legal too), so decoding them gives
    # the sample and encoding the sample gives the short form.
    decoded = tc.decode_struct(RECORDED)
    assert decoded == _sample()
    short = tc.encode_struct(_sample())
    assert short == RECORDED[:-4] + bytes.fromhex("dc 00 00")
    assert tc.decode_struct(short) == _sample()


def test_long_lists_maps_doubles_and_bytes_round_trip() -> None:
    s = tc.Struct(
        [
            tc.Field(1, tc.LIST, tc.ListValue(tc.I64, list(range(-20, 20)))),  # size >= 15
            tc.Field(2, tc.DOUBLE, -1.5),
            tc.Field(3, tc.BYTE, -3),
            tc.Field(4, tc.MAP, tc.MapValue(tc.BINARY, tc.I32, [(b"k", 1), (b"l", -2)])),
            tc.Field(5, tc.MAP, tc.MapValue(0, 0, [])),
            tc.Field(6, tc.LIST, tc.ListValue(tc.TRUE, [True, False])),
            tc.Field(300, tc.I16, -300),
        ]
    )
    assert tc.decode_struct(tc.encode_struct(s)) == s


def _footer(table: pa.Table, **kw: object) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **kw)  # type: ignore[arg-type]  # pyarrow's keywords, untyped here
    data = buf.getvalue()
    n = int.from_bytes(data[-8:-4], "little")
    return data[-8 - n : -8]


SHAPES = pa.table(
    {
        "l": pa.array(range(400), pa.int64()),
        "s": [f"s{i}" if i % 5 else None for i in range(400)],
        "ts": pa.array([dt.datetime(2024, 1, 1)] * 400, pa.timestamp("us", "UTC")),
        "ns": pa.array([dt.datetime(2024, 1, 1)] * 400, pa.timestamp("ns")),
        "d": pa.array([decimal.Decimal("1.25")] * 400, pa.decimal128(9, 2)),
        "f": pa.array([float(i) / 3 for i in range(400)], pa.float64()),
        "b": [i % 2 == 0 for i in range(400)],
        "list": [[1, 2, None]] * 400,
        "struct": [{"x": 1.5, "y": "a"}] * 400,
        "map": pa.array([[("k", 1)]] * 400, pa.map_(pa.string(), pa.int32())),
        "date": pa.array([dt.date(2024, 1, 1)] * 400, pa.date32()),
        "bin": pa.array([b"\x00\xff"] * 400, pa.binary()),
    }
)


#: pyarrow writer settings whose footers differ in shape.
WRITER_OPTIONS: list[dict[str, object]] = [
    {},
    {"row_group_size": 150},
    {"write_page_index": True},
    {"use_dictionary": False, "compression": "none"},
    {"write_statistics": False, "data_page_version": "2.0"},
]


@pytest.mark.parametrize("options", WRITER_OPTIONS)
def test_pyarrow_footers_encode_back_byte_for_byte(options: dict[str, object]) -> None:
    raw = _footer(SHAPES, **options)
    assert tc.encode_struct(tc.decode_struct(raw)) == raw


def test_set_keeps_field_id_order() -> None:
    s = tc.Struct([tc.Field(1, tc.I32, 1), tc.Field(5, tc.I32, 5)])
    s.set(3, tc.I64, 3)
    s.set(5, tc.I32, 6)
    assert [(f.id, f.value) for f in s.fields] == [(1, 1), (3, 3), (5, 6)]
    assert s.get(3) == 3 and s.has(5) and not s.has(4) and s.get(4, "none") == "none"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (RECORDED[:5], "2 bytes wanted at byte 4"),
        (RECORDED[:3], "ends early"),
        (RECORDED + b"\x00", "1 bytes after the struct"),
        (bytes.fromhex("18 09 61"), "9 bytes wanted"),
        (bytes.fromhex("1d"), "unknown wire type 13"),
        (bytes.fromhex("15") + b"\xff" * 12, "varint too long"),
    ],
)
def test_malformed_bytes_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(tc.ThriftError, match=message):
        tc.decode_struct(data)


# Kept as bytes: FileMetaData.row_groups (4) -> RowGroup.columns (1), as appending
# columns does.
_CHUNKS_RAW: tc.RawSpec = {4: {1: tc.RAW}}


@pytest.mark.parametrize("options", WRITER_OPTIONS)
def test_structs_kept_raw_are_their_bytes_and_encode_back_byte_for_byte(
    options: dict[str, object],
) -> None:
    """A footer read with its column chunks kept as bytes encodes back to itself; each
    kept chunk is exactly the bytes of the fully decoded chunk, with its field ids, and
    the rest of the footer decodes as without ``raw``."""
    raw = _footer(SHAPES, **options)
    lazy, full = tc.decode_struct(raw, _CHUNKS_RAW), tc.decode_struct(raw)
    assert tc.encode_struct(lazy) == raw
    groups = zip(lazy.get(4).items, full.get(4).items, strict=True)
    chunks = 0
    for lazy_group, full_group in groups:
        assert [f.id for f in lazy_group.fields] == [f.id for f in full_group.fields]
        for kept, decoded in zip(lazy_group.get(1).items, full_group.get(1).items, strict=True):
            assert isinstance(kept, tc.RawStruct)
            assert tc.decode_struct(kept.data) == decoded
            assert kept.ids == {f.id for f in decoded.fields}
            chunks += 1
    assert chunks == 14 * len(full.get(4).items)  # leaves: 9 + list 1 + struct 2 + map 2
    assert lazy.get(2) == full.get(2)  # the schema: decoded all the same


def test_a_kept_struct_with_every_wire_type_is_skipped_exactly() -> None:
    """Skipping (not decoding) walks every wire type: a struct holding the sample's
    fields, a long list, a map, a double, a byte and bool list elements, kept raw,
    is its own bytes and ends where the decoder says it ends."""
    inner = tc.Struct(
        [
            *_sample().fields[:6],
            tc.Field(8, tc.LIST, tc.ListValue(tc.I64, list(range(-20, 20)))),
            tc.Field(9, tc.DOUBLE, -1.5),
            tc.Field(10, tc.BYTE, -3),
            tc.Field(11, tc.MAP, tc.MapValue(tc.BINARY, tc.I32, [(b"k", 1)])),
            tc.Field(12, tc.MAP, tc.MapValue(0, 0, [])),
            tc.Field(13, tc.LIST, tc.ListValue(tc.TRUE, [True, False])),
            tc.Field(300, tc.STRUCT, _sample()),
        ]
    )
    outer = tc.Struct([tc.Field(1, tc.STRUCT, inner), tc.Field(2, tc.I32, 9)])
    data = tc.encode_struct(outer)
    lazy = tc.decode_struct(data, {1: tc.RAW})
    kept = lazy.get(1)
    assert isinstance(kept, tc.RawStruct) and kept.data == tc.encode_struct(inner)
    assert kept.ids == {f.id for f in inner.fields} and lazy.get(2) == 9
    assert tc.encode_struct(lazy) == data


def test_every_cut_of_a_footer_kept_raw_is_refused_as_thrift() -> None:
    """Every truncation of a footer read with raw chunks is a ``ThriftError`` (never an
    index error, never a struct that seems whole)."""
    raw = _footer(SHAPES.slice(0, 20), row_group_size=10)
    for n in range(len(raw)):
        with pytest.raises(tc.ThriftError):
            tc.decode_struct(raw[:n], _CHUNKS_RAW)

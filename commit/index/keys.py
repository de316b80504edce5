"""Primary keys as columnar, canonical values, and their 64-bit hashes.

A key of one integer-like column (int, long, date, time, timestamps) is kept as an
``int64`` array (``IntKeys``). Any other key becomes canonical bytes per row
(``ByteKeys``: offsets plus one byte buffer), the columns concatenated in key order:

* integer-like: 8 bytes big-endian with the sign bit flipped (``int`` widened to 8 bytes,
  so the Iceberg promotion int -> long keeps every key's bytes);
* boolean: 1 byte; decimal: the unscaled value as 16 bytes big-endian, sign bit flipped
  (precision widening keeps the bytes); uuid and fixed[L]: the raw 16 / L bytes;
* string (UTF-8) and binary: a 4-byte big-endian length, then the bytes. The last column
  carries no length: the row's end delimits it, so a one-string key is just its UTF-8.

The encoding is injective for a given list of key types, which is what makes lookups
exact: a hash match is only a candidate until the stored bytes compare equal.

Hashes are computed with numpy over 8-byte words (no Python object per key) and are
stable across processes and machines (little-endian words by definition), so they can
also split keys into partitions (``partition_of``) for lookups on executors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from calving.commit.errors import SchemaError, Terminal
from calving.commit.spec.arrow import primitive_to_arrow
from calving.commit.spec.types import PrimitiveType

INT_LIKE = frozenset(
    {"int", "long", "date", "time", "timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"}
)
_VARIABLE = frozenset({"string", "binary"})
_SIGN = np.uint64(1 << 63)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_WORD_SALT = np.uint64(0x9E3779B97F4A7C15)
_LEN_SALT = np.uint64(0xD6E8FEB86659FD93)
_S33 = np.uint64(33)
# _TAIL_MASKS[k] keeps the low k bytes of a little-endian word.
_TAIL_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
SLACK = 8  # zero bytes after every ByteKeys buffer: any 8-byte word read stays inside


class NullKeyError(Terminal):
    """A key column holds a null: rows without a complete primary key cannot be indexed."""

    def __init__(self, column: int, field_id: int | None, row: int, count: int) -> None:
        self.column = column
        self.field_id = field_id
        self.row = row
        self.count = count
        super().__init__(
            f"primary key column {column} (field id {field_id}) has {count} null value(s), "
            f"first at row {row}"
        )


class KeyTypeError(SchemaError):
    """A key column's Arrow type does not fit the Iceberg key type, or a value is out of
    range for it; names the column."""


# ---------------------------------------------------------------- key columns


@dataclass(frozen=True)
class IntKeys:
    """Keys of one integer-like column, as their int64 values."""

    values: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.values)

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes)

    def take(self, rows: np.ndarray) -> IntKeys:
        return IntKeys(self.values[rows])

    @staticmethod
    def concat(parts: Sequence[IntKeys]) -> IntKeys:
        if not parts:
            return IntKeys(np.empty(0, np.int64))
        return IntKeys(np.concatenate([p.values for p in parts]))

    def equal_at(self, rows: np.ndarray, other: IntKeys, other_rows: np.ndarray) -> np.ndarray:
        return self.values[rows] == other.values[other_rows]  # type: ignore[no-any-return]

    def to_arrow(self) -> pa.Array:
        return pa.array(self.values, pa.int64())


class ByteKeys:
    """Canonical key bytes: row ``i`` is ``data[start(i):start(i) + length(i)]``.

    Two layouts, chosen on construction: when every key has the same non-zero length
    (formatted ids, UUID text, fixed composites) the offsets are implicit, ``i * width``,
    and cost nothing per key; otherwise ``offsets`` (n + 1, zero-based) are int32 while
    the key bytes fit in 2 GiB, else int64. Arithmetic on offsets is done in int64.

    ``data`` always ends with ``SLACK`` zero bytes past the last key so 8-byte words
    can be read at any row start without bounds checks.
    """

    __slots__ = ("_count", "_offsets", "_width", "data")

    def __init__(self, offsets: np.ndarray, data: np.ndarray) -> None:
        self.data = data  # uint8, key bytes + SLACK
        self._count = len(offsets) - 1
        lengths = np.diff(offsets)
        width = int(lengths[0]) if self._count else 0
        if width > 0 and bool(np.all(lengths == width)):
            self._width, self._offsets = width, None
        else:
            self._width, self._offsets = 0, offsets.astype(_offset_dtype(offsets), copy=False)

    @staticmethod
    def from_parts(offsets: np.ndarray, body: np.ndarray) -> ByteKeys:
        """From zero-based offsets and exactly ``offsets[-1]`` bytes (copied, slack added)."""
        data = np.zeros(len(body) + SLACK, np.uint8)
        data[: len(body)] = body
        return ByteKeys(offsets, data)

    def __len__(self) -> int:
        return self._count

    @property
    def width(self) -> int | None:
        """The common key length of the fixed-width layout, else None."""
        return self._width or None

    @property
    def nbytes(self) -> int:
        extra = self._offsets.nbytes if self._offsets is not None else 0
        return int(extra + self.data.nbytes)

    @property
    def size(self) -> int:
        """Key bytes in all (without the slack)."""
        if self._offsets is None:
            return self._count * self._width
        return int(self._offsets[-1])

    @property
    def offsets(self) -> np.ndarray:
        """All n + 1 offsets as int64 (materialized for the fixed-width layout)."""
        if self._offsets is None:
            return np.arange(self._count + 1, dtype=np.int64) * self._width
        return self._offsets.astype(np.int64, copy=False)

    @property
    def lengths(self) -> np.ndarray:
        if self._offsets is None:
            return np.full(self._count, self._width, np.int64)
        return np.diff(self._offsets).astype(np.int64, copy=False)

    def starts_and_lengths(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._offsets is None:
            return rows.astype(np.int64) * self._width, np.full(len(rows), self._width, np.int64)
        starts = self._offsets[:-1][rows].astype(np.int64)
        return starts, self._offsets[1:][rows].astype(np.int64) - starts

    def take(self, rows: np.ndarray) -> ByteKeys:
        if self._offsets is None:
            width = self._width
            body = self.data[: self.size].reshape(-1, width)[rows].ravel()
            return ByteKeys.from_parts(np.arange(len(rows) + 1, dtype=np.int64) * width, body)
        # Arrow's C++ take gathers variable-length values several times faster than numpy.
        return ByteKeys.from_arrow(self.to_arrow().take(pa.array(rows)))

    @staticmethod
    def concat(parts: Sequence[ByteKeys]) -> ByteKeys:
        if not parts:
            return ByteKeys(np.zeros(1, np.int64), np.zeros(SLACK, np.uint8))
        bodies, offsets, base = [], [np.zeros(1, np.int64)], 0
        for p in parts:
            bodies.append(p.data[: p.size])
            offsets.append(p.offsets[1:] + base)
            base += p.size
        return ByteKeys.from_parts(np.concatenate(offsets), np.concatenate(bodies))

    def words(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The 8-byte little-endian words of the given rows, tails zero-masked.

        Returns (words, word index within its row, first word of each row); every row,
        even an empty one, has at least one word, so ``np.add.reduceat`` works on it.
        """
        starts, lengths = self.starts_and_lengths(rows)
        count = np.maximum(1, (lengths + 7) >> 3)
        first = np.zeros(len(rows), np.int64)
        np.cumsum(count[:-1], out=first[1:])
        view = np.ndarray((len(self.data) - 7,), "<u8", self.data, 0, (1,))
        if len(count) and int(count.max()) == 1:  # short keys: one word per row, no expand
            within = np.zeros(len(rows), np.int64)
            words = view[starts]
            words &= _TAIL_MASKS[np.minimum(lengths, 8)]
            return words, within, first
        if bool(np.all(lengths == lengths[0])):  # one length (ids, UUID text): a 2-d gather
            width = int(count[0])
            steps = 8 * np.arange(width, dtype=np.int64)
            grid = view[starts[:, None] + steps]
            grid &= _TAIL_MASKS[np.clip(int(lengths[0]) - steps, 0, 8)]
            return grid.ravel(), np.tile(np.arange(width, dtype=np.int64), len(rows)), first
        within = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(first, count)
        at = np.repeat(starts, count) + 8 * within
        words = view[at]
        left = np.repeat(lengths, count) - 8 * within
        words &= _TAIL_MASKS[np.clip(left, 0, 8)]
        return words, within, first

    def equal_at(self, rows: np.ndarray, other: ByteKeys, other_rows: np.ndarray) -> np.ndarray:
        _, lengths = self.starts_and_lengths(rows)
        _, other_lengths = other.starts_and_lengths(other_rows)
        same = lengths == other_lengths
        check = np.flatnonzero(same)
        if len(check):
            mine, _, first = self.words(rows[check])
            theirs, _, _ = other.words(other_rows[check])
            differing = np.add.reduceat((mine != theirs).astype(np.int64), first)
            same[check] = differing == 0
        return same  # type: ignore[no-any-return]

    def to_arrow(self) -> pa.Array:
        return pa.LargeBinaryArray.from_buffers(
            pa.large_binary(),
            len(self),
            [None, pa.py_buffer(self.offsets), pa.py_buffer(self.data[: self.size])],
        )

    @staticmethod
    def from_arrow(array: pa.Array) -> ByteKeys:
        offsets, body = _binary_buffers(array.cast(pa.large_binary()))
        return ByteKeys.from_parts(offsets - offsets[0], body)


Keys = IntKeys | ByteKeys


def concat_keys(parts: Sequence[Keys], int_mode: bool) -> Keys:
    """``parts`` (all ``IntKeys`` when ``int_mode``, else all ``ByteKeys``) as one."""
    if int_mode:
        ints = [p for p in parts if isinstance(p, IntKeys)]
        if len(ints) != len(parts):
            raise KeyTypeError("byte keys among integer keys")
        return IntKeys.concat(ints)
    byte_parts = [p for p in parts if isinstance(p, ByteKeys)]
    if len(byte_parts) != len(parts):
        raise KeyTypeError("integer keys among byte keys")
    if not byte_parts:
        return ByteKeys(np.zeros(1, np.int64), np.zeros(SLACK, np.uint8))
    return ByteKeys.concat(byte_parts)


# ---------------------------------------------------------------- hashing


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer, in place (a bijection on uint64)."""
    x ^= x >> _S33
    x *= _M1
    x ^= x >> _S33
    x *= _M2
    x ^= x >> _S33
    return x


class KeyHasher:
    """The 64-bit hash the index sorts and searches by.

    ``ints_are_keys``: ``hash_ints`` is a bijection, so an int key's hash stands for the
    key and the index need not store the value a second time. Tests inject weaker hashers
    (subclasses) to prove collisions never produce a false match.
    """

    name = "calving-words-fmix64-v1"
    ints_are_keys = True

    def hash_ints(self, values: np.ndarray) -> np.ndarray:
        # Order-preserving and invertible; the index searches int keys by value.
        return values.view(np.uint64) ^ _SIGN

    def int_from_hash(self, hashes: np.ndarray) -> np.ndarray:
        return (hashes ^ _SIGN).view(np.int64)

    def hash_bytes(self, keys: ByteKeys) -> np.ndarray:
        n = len(keys)
        if n == 0:
            return np.empty(0, np.uint64)
        words, within, first = keys.words(np.arange(n))
        words ^= (within.astype(np.uint64) + np.uint64(1)) * _WORD_SALT
        fmix64(words)
        sums = np.add.reduceat(words, first)
        sums ^= keys.lengths.astype(np.uint64) * _LEN_SALT
        return fmix64(sums)

    def hash(self, keys: Keys) -> np.ndarray:
        if isinstance(keys, IntKeys):
            return self.hash_ints(keys.values)
        return self.hash_bytes(keys)


DEFAULT_HASHER = KeyHasher()


def partition_of(hashes: np.ndarray, num_partitions: int) -> np.ndarray:
    """A stable partition number per key hash (for splitting lookups across executors)."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    mixed = fmix64(hashes.astype(np.uint64, copy=True))
    return (mixed % np.uint64(num_partitions)).astype(np.int64)


# ---------------------------------------------------------------- encoding


class KeyCodec:
    """Turns key columns (an Arrow table, columns in key order) into ``Keys``."""

    def __init__(
        self, key_types: Sequence[PrimitiveType], field_ids: Sequence[int] | None = None
    ) -> None:
        if not key_types:
            raise SchemaError("a primary key needs at least one column")
        for t in key_types:
            if not isinstance(t, PrimitiveType) or t.name in ("float", "double", "unknown"):
                raise SchemaError(f"{t} cannot be a primary key column")
        self.key_types = tuple(key_types)
        self.field_ids = tuple(field_ids) if field_ids is not None else (None,) * len(key_types)
        self.int_mode = len(key_types) == 1 and key_types[0].name in INT_LIKE

    def encoding_class(self) -> tuple[str, ...]:
        """Types that encode alike compare equal here (int and long; decimal precisions)."""
        out = []
        for t in self.key_types:
            if t.name in INT_LIKE:
                out.append("int64")
            elif t.name == "decimal":
                out.append(f"decimal/{t.scale}")
            elif t.name == "fixed":
                out.append(f"fixed/{t.length}")
            else:
                out.append(t.name)
        return tuple(out)

    def encode(self, table: pa.Table | pa.RecordBatch) -> Keys:
        if table.num_columns != len(self.key_types):
            raise KeyTypeError(
                f"expected {len(self.key_types)} key column(s), got {table.num_columns}"
            )
        columns = [self._column(table, i) for i in range(table.num_columns)]
        if self.int_mode:
            return IntKeys(self._int_values(0, columns[0]))
        n = table.num_rows
        pieces: list[np.ndarray | tuple[np.ndarray, np.ndarray]] = []
        last = len(self.key_types) - 1
        for i, (t, col) in enumerate(zip(self.key_types, columns)):
            if t.name in _VARIABLE:
                offsets, body = _binary_buffers(self._cast(i, col, pa.large_binary()))
                if i != last:
                    lengths = np.diff(offsets).astype(">u4")
                    pieces.append(lengths.view(np.uint8).reshape(n, 4))
                pieces.append((offsets, body))
            else:
                pieces.append(self._fixed_bytes(i, t, col))
        return _assemble(n, pieces)

    # ------------------------------------------------------------ per column

    def _column(self, table: pa.Table | pa.RecordBatch, i: int) -> pa.Array:
        col = table.column(i)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        if pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        if isinstance(col.type, pa.ExtensionType):
            col = col.storage
        if col.null_count:
            nulls = np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))
            raise NullKeyError(i, self.field_ids[i], int(nulls[0]), int(col.null_count))
        return col

    def _cast(self, i: int, col: pa.Array, target: pa.DataType) -> pa.Array:
        if col.type == target:
            return col
        try:
            return col.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise KeyTypeError(
                f"key column {i} (field id {self.field_ids[i]}): {col.type} does not fit "
                f"{self.key_types[i]}: {err}"
            ) from None

    def _int_values(self, i: int, col: pa.Array) -> np.ndarray:
        t = self.key_types[i]
        typed = self._cast(i, col, primitive_to_arrow(t))
        if t.name in ("int", "date"):
            typed = typed.cast(pa.int32()).cast(pa.int64())
        else:
            typed = typed.cast(pa.int64())
        return np.asarray(typed.to_numpy(zero_copy_only=False), dtype=np.int64)

    def _fixed_bytes(self, i: int, t: PrimitiveType, col: pa.Array) -> np.ndarray:
        n = len(col)
        if t.name in INT_LIKE:
            flipped = self._int_values(i, col).view(np.uint64) ^ _SIGN
            return flipped.astype(">u8").view(np.uint8).reshape(n, 8)
        if t.name == "boolean":
            values = self._cast(i, col, pa.bool_()).to_numpy(zero_copy_only=False)
            return np.asarray(values, np.uint8).reshape(n, 1)
        if t.name == "decimal":
            dec = self._cast(i, col, pa.decimal128(38, t.scale))
            words = _fixed_width_body(dec, 16).view("<u8").reshape(n, 2)
            out = np.empty((n, 2), ">u8")
            out[:, 0] = words[:, 1] ^ _SIGN
            out[:, 1] = words[:, 0]
            return out.view(np.uint8).reshape(n, 16)
        if t.name in ("uuid", "fixed"):
            width = 16 if t.name == "uuid" else t.length
            fixed_col = self._cast(i, col, pa.binary(width))
            return _fixed_width_body(fixed_col, width).reshape(n, width)
        raise SchemaError(f"{t} cannot be a primary key column")


def _binary_buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, bytes) of a large_binary array, offsets as stored (not rebased)."""
    n = len(array)
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], np.int64, n + 1, array.offset * 8)
    if buffers[2] is None:
        return offsets, np.empty(0, np.uint8)
    body = np.frombuffer(buffers[2], np.uint8)[offsets[0] : offsets[-1]]
    return offsets, body


def _fixed_width_body(array: pa.Array, width: int) -> np.ndarray:
    buf = array.buffers()[1]
    return np.frombuffer(buf, np.uint8, len(array) * width, array.offset * width).copy()


def _assemble(n: int, pieces: list[np.ndarray | tuple[np.ndarray, np.ndarray]]) -> ByteKeys:
    """Concatenate per-row pieces: fixed (n, w) matrices and (offsets, bytes) segments."""
    if len(pieces) == 1 and isinstance(pieces[0], tuple):
        offsets, body = pieces[0]
        return ByteKeys.from_parts(offsets - offsets[0], body)
    lengths = np.zeros(n, np.int64)
    for p in pieces:
        lengths += p.shape[1] if isinstance(p, np.ndarray) else np.diff(p[0])
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.zeros(int(offsets[-1]) + SLACK, np.uint8)
    cursor = offsets[:-1].copy()
    for p in pieces:
        if isinstance(p, np.ndarray):
            width = p.shape[1]
            data[cursor[:, None] + np.arange(width)] = p
            cursor += width
        else:
            src_offsets, body = p
            seg = np.diff(src_offsets)
            shift = np.repeat(cursor - (src_offsets[:-1] - src_offsets[0]), seg)
            data[np.arange(len(body), dtype=np.int64) + shift] = body
            cursor += seg
    return ByteKeys(offsets, data)


_INT32_LIMIT = np.iinfo(np.int32).max


def _offset_dtype(offsets: np.ndarray) -> type[np.signedinteger[Any]]:
    return np.int32 if len(offsets) == 0 or int(offsets[-1]) <= _INT32_LIMIT else np.int64


def is_sorted(values: np.ndarray) -> bool:
    return bool(len(values) < 2 or np.all(values[1:] >= values[:-1]))


__all__ = [
    "DEFAULT_HASHER",
    "ByteKeys",
    "IntKeys",
    "KeyCodec",
    "KeyHasher",
    "KeyTypeError",
    "Keys",
    "NullKeyError",
    "concat_keys",
    "partition_of",
]

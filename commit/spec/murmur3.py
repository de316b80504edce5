"""32-bit Murmur3, x86 variant, seed 0: the hash behind Iceberg's bucket transform.

Three entry points with identical results where they overlap:

* ``murmur3_32(data)`` hashes bytes.
* ``hash_long(v)`` hashes a signed 64-bit integer as its 8 little-endian bytes without
  building them (the hot path for int/long/date/time/timestamp buckets).
* ``hash_long_array(values)`` does the same over a pyarrow integer array with
  ``pyarrow.compute`` (uint32 arithmetic wraps, which is exactly Murmur3's mod 2**32).

All return the hash as a signed 32-bit int, as Java's ``int`` would hold it.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.compute as pc

_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_MASK = 0xFFFFFFFF
_SIGN = 0x80000000
_BLOCKS = struct.Struct("<I")


def _signed(h: int) -> int:
    return h - 0x1_0000_0000 if h & _SIGN else h


def _mix_block(h: int, k: int) -> int:
    k = (k * _C1) & _MASK
    k = ((k << 15) | (k >> 17)) & _MASK
    k = (k * _C2) & _MASK
    h ^= k
    h = ((h << 13) | (h >> 19)) & _MASK
    return (h * 5 + 0xE6546B64) & _MASK


def _finish(h: int, length: int) -> int:
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return _signed(h)


def murmur3_32(data: bytes | bytearray | memoryview) -> int:
    """Signed 32-bit Murmur3 (x86, seed 0) of ``data``, as Guava's murmur3_32 gives it."""
    view = memoryview(data).cast("B")
    length = len(view)
    body = length - length % 4
    h = 0
    for (k,) in _BLOCKS.iter_unpack(view[:body]):
        h = _mix_block(h, k)
    tail = view[body:]
    if tail:
        k = 0
        for i in range(len(tail) - 1, -1, -1):
            k = (k << 8) | tail[i]
        k = (k * _C1) & _MASK
        k = ((k << 15) | (k >> 17)) & _MASK
        k = (k * _C2) & _MASK
        h ^= k
    return _finish(h, length)


def hash_long(value: int) -> int:
    """``murmur3_32`` of the 8-byte little-endian two's complement form of ``value``."""
    bits = value & 0xFFFF_FFFF_FFFF_FFFF
    h = _mix_block(0, bits & _MASK)
    h = _mix_block(h, bits >> 32)
    return _finish(h, 8)


# ---------------------------------------------------------------- vectorized

_U32 = pa.uint32()


def _u32(value: int) -> pa.Scalar:
    return pa.scalar(value, _U32)


def _rotl_array(x: pa.Array, r: int) -> pa.Array:
    return pc.bit_wise_or(pc.shift_left(x, _u32(r)), pc.shift_right(x, _u32(32 - r)))


def _mix_block_array(h: pa.Array | None, k: pa.Array) -> pa.Array:
    k = pc.multiply(k, _u32(_C1))
    k = _rotl_array(k, 15)
    k = pc.multiply(k, _u32(_C2))
    h = k if h is None else pc.bit_wise_xor(h, k)
    h = _rotl_array(h, 13)
    return pc.add(pc.multiply(h, _u32(5)), _u32(0xE6546B64))


def hash_long_array(values: pa.Array) -> pa.Array:
    """``hash_long`` of every value of an integer array: an int32 array, nulls kept."""
    bits = values.cast(pa.int64()).cast(pa.uint64(), safe=False)
    low = pc.bit_wise_and(bits, pa.scalar(_MASK, pa.uint64())).cast(_U32)
    high = pc.shift_right(bits, pa.scalar(32, pa.uint64())).cast(_U32)
    h = _mix_block_array(None, low)
    h = _mix_block_array(h, high)
    h = pc.bit_wise_xor(h, _u32(8))
    h = pc.bit_wise_xor(h, pc.shift_right(h, _u32(16)))
    h = pc.multiply(h, _u32(0x85EBCA6B))
    h = pc.bit_wise_xor(h, pc.shift_right(h, _u32(13)))
    h = pc.multiply(h, _u32(0xC2B2AE35))
    h = pc.bit_wise_xor(h, pc.shift_right(h, _u32(16)))
    return h.cast(pa.int32(), safe=False)

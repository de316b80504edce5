"""Recorded byte vectors for Puffin files and ``deletion-vector-v1`` blobs.

The inputs live here; the bytes live in ``tests/vectors/dv/*.bin`` and
``tests/vectors/puffin/*.puffin``. Tests check both directions: encoding the input gives
the recorded bytes, decoding the recorded bytes gives the input. Regenerate (only after a
deliberate format change, then review the diff) with::

    .venv/bin/python -m tests.commit.spec.puffin_vectors

``HAND_BUILT_DVS`` are composed here field by field from the spec and the Roaring format
spec with ``struct`` only, independently of pyroaring and of ``calving.commit.spec``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path

from pyroaring import BitMap64

from calving.commit.spec.deletion_vector import serialize_dv, write_dv_puffin
from calving.commit.spec.puffin import PuffinWriter

VECTORS_DIR = Path(__file__).resolve().parents[2] / "vectors"
DV_DIR = VECTORS_DIR / "dv"
PUFFIN_DIR = VECTORS_DIR / "puffin"

HIGH = 1 << 32


def _every_other(start: int, stop: int) -> BitMap64:
    return BitMap64(range(start, stop, 2))


# name -> positions; together they cover array, bitset and run containers, several keys.
DV_CASES: dict[str, Callable[[], BitMap64]] = {
    "empty": lambda: BitMap64(),
    "small": lambda: BitMap64([0, 1, 2, 3, 100, 65535, 65536, 2**31, 2**32 - 1]),
    "run": lambda: BitMap64(range(200_000)),
    "bitset": lambda: _every_other(0, 20_000),
    "high_keys": lambda: BitMap64([5, 7, HIGH + 1, HIGH + 2, 7 * HIGH + 99, 1000 * HIGH]),
    "all_containers_two_keys": lambda: (
        BitMap64([3, 70_000])
        | _every_other(200_000, 220_000)
        | BitMap64(range(HIGH + 10, HIGH + 50_000))
    ),
}

DV_FILE = "s3://bucket/db/t/data/00000-0-a.parquet"
OTHER_FILE = "s3://bucket/db/t/data/00001-0-b.parquet"


def _two_dvs(compress_footer: bool) -> bytes:
    data, _ = write_dv_puffin(
        [(DV_FILE, DV_CASES["small"]()), (OTHER_FILE, DV_CASES["high_keys"]())],
        compress_footer=compress_footer,
    )
    return data


def _mixed_blobs() -> bytes:
    writer = PuffinWriter()
    writer.add_blob("some-sketch-v1", b"sketch bytes " * 20, [1, 2], 42, 7, {"ndv": "3"}, "lz4")
    writer.add_blob("raw-v1", b"\x00\x01\x02", [3], 42, 7)
    return writer.finish(properties={"note": "mixed"})


PUFFIN_CASES: dict[str, Callable[[], bytes]] = {
    "no_blobs": lambda: PuffinWriter().finish(),
    "no_blobs_compressed_footer": lambda: PuffinWriter().finish(compress_footer=True),
    "two_dvs": lambda: _two_dvs(False),
    "two_dvs_compressed_footer": lambda: _two_dvs(True),
    "mixed_blobs": _mixed_blobs,
}


# ---------------------------------------------------------------- hand-built DVs


def _frame(vector: bytes) -> bytes:
    body = b"\xd1\xd3\x39\x64" + vector
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


def _array_bitmap32(containers: list[tuple[int, list[int]]]) -> bytes:
    """Portable 32-bit Roaring bitmap of array containers only (cookie 12346)."""
    out = struct.pack("<II", 12346, len(containers))
    for key, values in containers:
        out += struct.pack("<HH", key, len(values) - 1)
    offset = len(out) + 4 * len(containers)
    for _, values in containers:
        out += struct.pack("<I", offset)
        offset += 2 * len(values)
    for _, values in containers:
        out += struct.pack(f"<{len(values)}H", *values)
    return out


def _single_run_bitmap32(key: int, start: int, length: int) -> bytes:
    """Portable 32-bit Roaring bitmap with one run container (cookie 12347, no offsets)."""
    return (
        struct.pack("<I", 12347 | (0 << 16))  # (container count - 1) in the high half
        + b"\x01"  # run flags: container 0 is a run
        + struct.pack("<HH", key, length - 1)
        + struct.pack("<HHH", 1, start, length - 1)  # one run: start, length - 1
    )


def _vector(bitmaps: list[tuple[int, bytes]]) -> bytes:
    return struct.pack("<Q", len(bitmaps)) + b"".join(
        struct.pack("<I", key) + bitmap for key, bitmap in bitmaps
    )


# name -> (blob bytes, positions, canonical: whether our writer produces exactly these bytes)
HAND_BUILT_DVS: dict[str, tuple[bytes, list[int], bool]] = {
    "arrays": (
        _frame(
            _vector(
                [
                    (0, _array_bitmap32([(0, [1, 2, 3]), (1, [0, 5])])),
                    (3, _array_bitmap32([(0x8000, [7])])),
                ]
            )
        ),
        [1, 2, 3, 65536, 65541, 3 * HIGH + 0x8000_0007],
        True,
    ),
    "run": (
        _frame(_vector([(0, _single_run_bitmap32(2, 10, 1000))])),
        list(range(2 * 65536 + 10, 2 * 65536 + 1010)),
        True,
    ),
    # Iceberg Java writes every key from 0 to the highest, empty bitmaps included.
    "java_style_empty_gaps": (
        _frame(
            _vector(
                [
                    (0, _array_bitmap32([])),
                    (1, _array_bitmap32([])),
                    (2, _array_bitmap32([(0, [9])])),
                ]
            )
        ),
        [2 * HIGH + 9],
        False,
    ),
}


def main() -> None:
    DV_DIR.mkdir(parents=True, exist_ok=True)
    PUFFIN_DIR.mkdir(parents=True, exist_ok=True)
    for name, make_positions in DV_CASES.items():
        (DV_DIR / f"{name}.bin").write_bytes(serialize_dv(make_positions()))
    for name, make_file in PUFFIN_CASES.items():
        (PUFFIN_DIR / f"{name}.puffin").write_bytes(make_file())


if __name__ == "__main__":
    main()

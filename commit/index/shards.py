"""The primary-key index split into shards by key hash, and the manifest naming them.

A *shard* holds the entries (key -> data file, position) of the keys whose hash falls in
it: ``shard_of(hashes, S)`` is the index's own 64-bit key hash mixed once more
(MurmurHash3's finalizer) modulo the shard count ``S``, a power of two. It depends on the
key alone (not on Kafka partitions, converters or the tool that wrote the row), and it is
named in every file (``calving-key-hash-v1``) so that a reader that does not know the
function refuses the files instead of looking in the wrong shard.

Files, under ``<table location>/metadata/calving-index/shards/``:

* a shard: ``<snapshot-id>-s<shard>-<uuid>.calvidx``, an index file of ``store``'s format
  2 (header, Arrow IPC payload, CRC-32), entries in hash order, its file table holding
  only the files with entries in the shard; its schema metadata adds the shard number,
  ``S`` and the shard function;
* the manifest: ``<snapshot-id>-<uuid>.calvshards``, framed like an index file (magic
  ``CALVSHM\\0``, version, length, CRC-32) around JSON: the table, snapshot, key, ``S``,
  the shard function, the snapshot's live data files with their row counts (the global
  file table) and each shard's file and entry count.
* while the executors rebuild shards, their piece files
  (``rebuild-<uuid>-s<shard>-t<task>.calvpiece``, index files too), deleted when the
  rebuild ends (``calving.ingest.sink.index_rebuild``).

``load_sharded`` reads a manifest's shards and merges them into one ``PrimaryKeyIndex``
(the driver-resident index), checking every shard against the manifest: the checksum,
the table, snapshot, shard number, ``S``, function and entry count. Any disagreement is
``UnreadableIndexError`` naming the shard's file, which the caller answers with a
rebuild. ``split_index`` writes a driver index as shards (the switch to sharded mode, and
the reference the executors' rebuild is tested against).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from calving.commit.errors import CalvingError, ConfigError, FileIOError
from calving.commit.index.index_file import (
    Compression,
    IndexHeader,
    UnreadableIndexError,
    file_header,
    frame,
    read_entries,
    read_index_table,
    unframe,
    write_entries,
)
from calving.commit.index.keys import (
    DEFAULT_HASHER,
    KeyCodec,
    KeyHasher,
    Keys,
    KeyTypeError,
    concat_keys,
    partition_of,
)
from calving.commit.index.pk_index import PrimaryKeyIndex
from calving.commit.index.store import IndexMismatchError, key_spec, mismatch_with_table
from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.types import PrimitiveType, primitive_from_string

SHARD_FUNCTION = "calving-key-hash-v1"
SHARDS_DIRECTORY = "metadata/calving-index/shards"
MAX_SHARDS = 1 << 16
MANIFEST_FORMAT = 1
_MANIFEST_MAGIC = b"CALVSHM\0"
_MD_SHARD = b"calving.index.shard"
_MD_SHARDS = b"calving.index.shards"
_MD_FUNCTION = b"calving.index.shard-function"


class ShardCountError(ConfigError):
    """A shard count that is not a power of two between 1 and ``MAX_SHARDS``."""


def check_shard_count(shards: int, key: str = "shards") -> int:
    """``shards`` if it is a valid shard count, else ``ShardCountError`` naming ``key``."""
    if isinstance(shards, bool) or not isinstance(shards, int):
        raise ShardCountError(f"{key}: must be an integer, got {shards!r}")
    if not 1 <= shards <= MAX_SHARDS or shards & (shards - 1):
        raise ShardCountError(f"{key}: must be a power of two from 1 to {MAX_SHARDS}, got {shards}")
    return shards


def shard_of(hashes: np.ndarray, shards: int) -> np.ndarray:
    """The shard (int64) of each key hash, for ``shards`` shards."""
    return partition_of(hashes, check_shard_count(shards))


def shard_file_location(table_location: str, snapshot_id: int | None, shard: int) -> str:
    snap = "none" if snapshot_id is None else str(snapshot_id)
    name = f"{snap}-s{shard}-{uuid.uuid4()}.calvidx"
    return f"{table_location.rstrip('/')}/{SHARDS_DIRECTORY}/{name}"


def manifest_file_location(table_location: str, snapshot_id: int | None) -> str:
    snap = "none" if snapshot_id is None else str(snapshot_id)
    return f"{table_location.rstrip('/')}/{SHARDS_DIRECTORY}/{snap}-{uuid.uuid4()}.calvshards"


# ---------------------------------------------------------------- the manifest


@dataclass(frozen=True)
class ShardFile:
    """One shard: its base file, the delta files applied over it in order (the commits
    since the base, ``shard_chain``), and the live entries the whole holds."""

    shard: int
    location: str
    entries: int
    #: The snapshot the base file says it describes (its header's).
    base_snapshot: int | None
    deltas: tuple[str, ...] = ()


@dataclass(frozen=True)
class ShardManifest:
    """What one snapshot's sharded index is made of."""

    table_uuid: str
    snapshot_id: int | None
    key_field_ids: tuple[int, ...]
    key_types: tuple[PrimitiveType, ...]
    shard_count: int
    files: tuple[tuple[str, int], ...]  # the snapshot's live data files, row counts
    shards: tuple[ShardFile, ...]  # one per shard, in shard order
    shard_function: str = SHARD_FUNCTION
    #: (chain file, old path, new path): a data file a chain's file names by a path
    #: the commit did not keep (a row-lineage copy replaced it), while that file is
    #: in a chain.
    aliases: tuple[tuple[str, str, str], ...] = ()

    @property
    def entries(self) -> int:
        return sum(s.entries for s in self.shards)

    def encode(self) -> bytes:
        body = json.dumps(
            {
                "table-uuid": self.table_uuid,
                "snapshot-id": self.snapshot_id,
                "key-field-ids": list(self.key_field_ids),
                "key-types": [str(t) for t in self.key_types],
                "shard-count": self.shard_count,
                "shard-function": self.shard_function,
                "files": [[p, n] for p, n in self.files],
                "shards": [_encode_shard(s, self.snapshot_id) for s in self.shards],
                "aliases": [list(a) for a in self.aliases],
            },
            separators=(",", ":"),
        ).encode()
        header, trailer = frame(_MANIFEST_MAGIC, MANIFEST_FORMAT, body)
        return header + body + trailer

    @classmethod
    def decode(cls, location: str, data: bytes) -> ShardManifest:
        body = unframe(location, data, _MANIFEST_MAGIC, MANIFEST_FORMAT)
        try:
            doc = json.loads(bytes(body))
            snapshot = doc["snapshot-id"]
            manifest = cls(
                table_uuid=str(doc["table-uuid"]),
                snapshot_id=None if snapshot is None else int(snapshot),
                key_field_ids=tuple(int(i) for i in doc["key-field-ids"]),
                key_types=tuple(primitive_from_string(t) for t in doc["key-types"]),
                shard_count=check_shard_count(int(doc["shard-count"]), "shard-count"),
                files=tuple((str(p), int(n)) for p, n in doc["files"]),
                shards=tuple(_decode_shard(s, snapshot) for s in doc["shards"]),
                shard_function=str(doc["shard-function"]),
                aliases=tuple((str(c), str(o), str(n)) for c, o, n in doc.get("aliases", ())),
            )
        except (KeyError, ValueError, TypeError, CalvingError) as err:
            raise UnreadableIndexError(location, f"shard manifest is malformed: {err}") from None
        if [s.shard for s in manifest.shards] != list(range(manifest.shard_count)):
            raise UnreadableIndexError(
                location, f"shard manifest does not list shards 0..{manifest.shard_count - 1}"
            )
        if manifest.shard_function != SHARD_FUNCTION:
            raise UnreadableIndexError(
                location, f"unknown shard function {manifest.shard_function!r}"
            )
        return manifest


def _encode_shard(shard: ShardFile, snapshot_id: int | None) -> list[Any]:
    """``[shard, base, entries]`` for a base of the manifest's snapshot alone, else
    ``[shard, base, entries, base snapshot, [deltas]]``."""
    entry: list[Any] = [shard.shard, shard.location, shard.entries]
    if shard.deltas or shard.base_snapshot != snapshot_id:
        entry += [shard.base_snapshot, list(shard.deltas)]
    return entry


def _decode_shard(entry: Sequence[Any], snapshot_id: int | None) -> ShardFile:
    if len(entry) == 3:
        s, location, entries = entry
        return ShardFile(int(s), str(location), int(entries), snapshot_id)
    s, location, entries, base, deltas = entry
    return ShardFile(
        int(s),
        str(location),
        int(entries),
        None if base is None else int(base),
        tuple(str(d) for d in deltas),
    )


def write_manifest(io: FileIO, manifest: ShardManifest, table_location: str) -> str:
    """Write ``manifest`` to a new file; returns its location."""
    location = manifest_file_location(table_location, manifest.snapshot_id)
    try:
        with io.new_output_stream(location) as sink:
            sink.write(manifest.encode())
    except OSError as err:
        raise FileIOError(f"{location}: writing the shard manifest failed: {err}") from err
    return location


def read_manifest(io: FileIO, location: str) -> ShardManifest:
    return ShardManifest.decode(location, io.read(location))


# ---------------------------------------------------------------- shard files


@dataclass(frozen=True)
class ShardHeader:
    """What a shard file says it is, beside its entries' file table."""

    table_uuid: str
    snapshot_id: int | None
    key_field_ids: tuple[int, ...]
    key_types: tuple[PrimitiveType, ...]
    shard: int
    shard_count: int


def write_shard(
    io: FileIO,
    table_location: str,
    header: ShardHeader,
    keys: Keys,
    file_index: np.ndarray,
    positions: np.ndarray,
    files: Sequence[tuple[str, int]],
    *,
    hasher: KeyHasher = DEFAULT_HASHER,
    hashes: np.ndarray | None = None,
) -> ShardFile:
    """Write one shard's entries (``file_index`` into ``files``) in hash order (entries
    given in that order are not sorted again); files without entries are left out of
    the shard's file table. ``hashes``: the keys' hashes, when the caller has them."""
    if hashes is None:
        hashes = hasher.hash(keys)
    wrong = shard_of(hashes, header.shard_count) != header.shard
    if bool(np.any(wrong)):
        raise ValueError(f"{int(wrong.sum())} entries do not belong in shard {header.shard}")
    file_index = np.asarray(file_index, np.int64)
    positions = np.asarray(positions, np.uint32)
    if len(hashes) > 1 and not bool(np.all(hashes[1:] >= hashes[:-1])):
        order = np.argsort(hashes)  # the order among equal hashes does not matter
        keys, file_index, positions = keys.take(order), file_index[order], positions[order]
    present = np.zeros(len(files), bool)
    present[file_index] = True
    used = np.flatnonzero(present)
    local = (np.cumsum(present) - 1)[file_index]
    md = shard_metadata(header, [files[int(i)] for i in used])
    location = shard_file_location(table_location, header.snapshot_id, header.shard)
    write_entries(
        io, location, md, keys, local.astype(np.uint32), positions, compression=Compression.BASE
    )
    return ShardFile(header.shard, location, len(keys), header.snapshot_id)


def read_shard(
    io: FileIO, manifest: ShardManifest, shard: ShardFile, file_ids: dict[str, int]
) -> tuple[Keys, np.ndarray, np.ndarray]:
    """(keys, file indexes into ``manifest.files``, positions) of one shard without
    deltas, once the file is checked against the manifest (``file_ids``: path -> index
    in it). A shard with deltas is read by ``shard_chain.load_chain``."""
    if shard.deltas:
        raise ValueError(f"shard {shard.shard} has deltas; read it with load_chain")
    header, keys, local, positions = read_base(io, manifest, shard, file_ids)
    if len(keys) != shard.entries:
        raise UnreadableIndexError(
            shard.location, f"{len(keys)} entries, the manifest says {shard.entries}"
        )
    global_ids = np.array([file_ids[p] for p, _ in header.files], np.uint32)
    return keys, global_ids[local], positions


def read_base(
    io: FileIO,
    manifest: ShardManifest,
    shard: ShardFile,
    file_ids: dict[str, int],
    *,
    allow_gone: bool = False,
) -> tuple[IndexHeader, Keys, np.ndarray, np.ndarray]:
    """(header, keys, file indexes into the header's file table, positions) of a
    shard's base file, checked against the manifest: the shard number, ``S``, function,
    table, key and base snapshot it names, and that every file of its file table is a
    live file of the manifest with as many rows (``allow_gone``: or not in the manifest
    at all, for a chain whose deltas delete those files' entries)."""
    location = shard.location
    table = read_index_table(io, location)
    md = table.schema.metadata or {}
    header = check_shard_header(location, md, manifest, shard.shard)
    if header.snapshot_id != shard.base_snapshot:
        raise UnreadableIndexError(
            location,
            f"shard of snapshot {header.snapshot_id}, the manifest names a base of "
            f"snapshot {shard.base_snapshot}",
        )
    keys, local, positions = read_entries(location, table)
    check_file_table(location, header.files, manifest, file_ids, allow_gone=allow_gone)
    if len(local) and int(local.max()) >= len(header.files):
        raise UnreadableIndexError(location, "an entry names a file beyond the file table")
    return header, keys, local, positions


def check_shard_header(
    location: str, md: dict[bytes, bytes], manifest: ShardManifest, shard: int
) -> IndexHeader:
    """The header of a shard's file (base or delta), once it names this shard of the
    manifest's table, key, ``S`` and function."""
    header = IndexHeader.parse(location, md)
    said = (md.get(_MD_SHARD), md.get(_MD_SHARDS), md.get(_MD_FUNCTION))
    wanted = (str(shard).encode(), str(manifest.shard_count).encode())
    if said != (*wanted, SHARD_FUNCTION.encode()):
        raise UnreadableIndexError(
            location,
            f"shard file says shard {said[0]!r} of {said[1]!r} ({said[2]!r}), the manifest "
            f"shard {shard} of {manifest.shard_count} ({SHARD_FUNCTION})",
        )
    if (header.table_uuid, header.key_field_ids) != (
        manifest.table_uuid,
        manifest.key_field_ids,
    ):
        raise UnreadableIndexError(
            location,
            f"shard of table {header.table_uuid} key {header.key_field_ids}, the manifest "
            f"names table {manifest.table_uuid} key {manifest.key_field_ids}",
        )
    return header


def check_file_table(
    location: str,
    files: Sequence[tuple[str, int]],
    manifest: ShardManifest,
    file_ids: dict[str, int],
    *,
    allow_gone: bool = False,
) -> None:
    for path, rows in files:
        at = file_ids.get(path)
        if at is None and allow_gone:
            continue
        if at is None or manifest.files[at][1] != rows:
            raise UnreadableIndexError(
                location, f"{path}: not a live data file of {rows} rows in the manifest"
            )


def shard_metadata(header: ShardHeader, files: Sequence[tuple[str, int]]) -> dict[bytes, str]:
    """The schema metadata of a shard's file (base or delta) over ``files``."""
    md = file_header(
        header.table_uuid, header.snapshot_id, header.key_field_ids, header.key_types, files
    )
    md[_MD_SHARD] = str(header.shard)
    md[_MD_SHARDS] = str(header.shard_count)
    md[_MD_FUNCTION] = SHARD_FUNCTION
    return md


# ---------------------------------------------------------------- driver index <-> shards


def split_index(
    io: FileIO, index: PrimaryKeyIndex, table_location: str, shard_count: int
) -> tuple[str, ShardManifest]:
    """Write ``index`` as ``shard_count`` shard files and a manifest; returns the
    manifest's location and the manifest."""
    if index.table_uuid is None:
        raise ValueError("the index has no table_uuid; set it before splitting")
    keys, file_index, positions, files = index.export_entries()
    shard = shard_of(index.hasher.hash(keys), shard_count).astype(np.uint16)  # radix sort
    order = np.argsort(shard, kind="stable")
    bounds = np.searchsorted(shard[order], np.arange(shard_count + 1))

    def one(s: int) -> ShardFile:
        rows = order[bounds[s] : bounds[s + 1]]
        header = ShardHeader(
            index.table_uuid or "",
            index.snapshot_id,
            index.key_field_ids,
            index.key_types,
            s,
            shard_count,
        )
        return write_shard(
            io,
            table_location,
            header,
            keys.take(rows),
            file_index[rows],
            positions[rows],
            files,
            hasher=index.hasher,
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        shard_files = tuple(pool.map(one, range(shard_count)))
    manifest = ShardManifest(
        index.table_uuid,
        index.snapshot_id,
        index.key_field_ids,
        index.key_types,
        shard_count,
        tuple(files),
        shard_files,
    )
    return write_manifest(io, manifest, table_location), manifest


def load_sharded(
    io: FileIO,
    location: str,
    metadata: TableMetadata,
    key_field_ids: Sequence[int] | None = None,
    *,
    verify_files: bool = True,
    max_workers: int = 4,
    **options: Any,
) -> PrimaryKeyIndex:
    """The driver index merged from the shards the manifest at ``location`` names,
    each checked against it, then (``verify_files``) the whole against the table's
    current snapshot. ``UnreadableIndexError`` names the first file that fails."""
    manifest = read_manifest(io, location)
    ids, types = key_spec(metadata, key_field_ids)
    if (manifest.table_uuid, manifest.key_field_ids) != (metadata.table_uuid, ids):
        raise IndexMismatchError(
            f"{location}: shards of table {manifest.table_uuid} key {manifest.key_field_ids}, "
            f"wanted table {metadata.table_uuid} key {ids}"
        )
    if manifest.snapshot_id != metadata.current_snapshot_id:
        raise IndexMismatchError(
            f"{location}: shards of snapshot {manifest.snapshot_id}, the table is at "
            f"{metadata.current_snapshot_id}"
        )
    file_ids = {path: i for i, (path, _) in enumerate(manifest.files)}
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        parts = list(pool.map(lambda s: read_shard(io, manifest, s, file_ids), manifest.shards))
    int_mode = KeyCodec(types, ids).int_mode
    try:
        keys = concat_keys([k for k, _, _ in parts], int_mode)
    except KeyTypeError:
        raise UnreadableIndexError(location, "shards hold keys of another kind") from None
    index = PrimaryKeyIndex.from_entries(
        ids,
        types,
        keys,
        np.concatenate([f for _, f, _ in parts]),
        np.concatenate([p for _, _, p in parts]),
        manifest.files,
        table_uuid=manifest.table_uuid,
        snapshot_id=manifest.snapshot_id,
        **options,
    )
    if verify_files:
        problem = mismatch_with_table(io, index, metadata)
        if problem:
            raise IndexMismatchError(f"{location}: {problem}")
    return index

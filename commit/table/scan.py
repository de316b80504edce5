"""Reading what a snapshot holds: manifest lists, manifests, live files, DVs.

Manifests and manifest lists are immutable once written, so parsed contents are
cached by location for the life of the process: a commit after the first reads
only the manifests created since, which keeps commit cost flat as history grows.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence, Sized
from dataclasses import dataclass
from typing import cast

from pyroaring import BitMap64

from calving.commit.io import FileIO
from calving.commit.spec.data_file import (
    DataFile,
    EntryStatus,
    FileContent,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
)
from calving.commit.spec.deletion_vector import deserialize_dv
from calving.commit.spec.manifest import inherit, read_manifest
from calving.commit.spec.manifest_list import read_manifest_list
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.position_map import SUMMARY_PROPERTY as POSITION_MAP
from calving.commit.spec.snapshot import Snapshot


class _Lru:
    """Least recently used out, past ``max_items`` values or past ``max_weight`` in all
    (a value's weight: its ``len``)."""

    def __init__(self, max_items: int, max_weight: int | None = None) -> None:
        self._items: OrderedDict[str, object] = OrderedDict()
        self._max = max_items
        self._max_weight = max_weight
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> object | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._weight = 0

    def put(self, key: str, value: object) -> None:
        with self._lock:
            before = self._items.get(key)
            if before is not None:
                self._weight -= self._weigh(before)
            self._items[key] = value
            self._items.move_to_end(key)
            self._weight += self._weigh(value)
            while len(self._items) > 1 and (
                len(self._items) > self._max
                or (self._max_weight is not None and self._weight > self._max_weight)
            ):
                _, gone = self._items.popitem(last=False)
                self._weight -= self._weigh(gone)

    def discard(self, key: str) -> None:
        with self._lock:
            gone = self._items.pop(key, None)
            if gone is not None:
                self._weight -= self._weigh(gone)

    def discard_where(self, drop: Callable[[str], bool]) -> None:
        """Drop every key ``drop`` says (outside the lock: a string test per key)."""
        with self._lock:
            keys = list(self._items)
        for key in keys:
            if drop(key):
                self.discard(key)

    def _weigh(self, value: object) -> int:
        if self._max_weight is None or not isinstance(value, Sized):
            return 0
        return len(value)


_MANIFEST_LISTS = _Lru(2048)  # one a table for a 2,000-table pipeline; each small
#: Parsed entries cost about 2.4 KB each: at most 250,000 (~600 MB) are kept.
_MANIFESTS = _Lru(4096, max_weight=250_000)
#: Deletion vectors this process wrote, by "<puffin location>@<offset>": the next commit
#: merging into one reads it from here, not from its file (the bigger ones are read).
_DVS = _Lru(1024)
#: The cached DV written last for each data file (its ``_DVS`` key).
_DV_OF_FILE = _Lru(1024)
_DV_CACHE_MAX_POSITIONS = 1 << 16
#: Data manifests (by location) none of whose live files lacks a ``first_row_id``: a
#: merged manifest is carried into every later snapshot without an id of its own, and
#: checking its entries again on every commit grew commit time with the table.
_NOTHING_TO_ASSIGN = _Lru(8192)


def clear_caches() -> None:
    """Forget every parsed manifest list, manifest and DV (benchmarks measuring a cold
    read; tests)."""
    for cache in (_MANIFEST_LISTS, _MANIFESTS, _DVS, _DV_OF_FILE, _NOTHING_TO_ASSIGN):
        cache.clear()


def manifest_files(io: FileIO, snapshot: Snapshot | None) -> tuple[ManifestFile, ...]:
    if snapshot is None:
        return ()
    location = snapshot.manifest_list
    cached = _MANIFEST_LISTS.get(location)
    if cached is None:
        cached = tuple(read_manifest_list(io.read(location), location).manifests)
        _MANIFEST_LISTS.put(location, cached)
    return cached  # type: ignore[return-value]


def manifest_entries(
    io: FileIO, metadata: TableMetadata, manifest: ManifestFile
) -> tuple[ManifestEntry, ...]:
    """All entries of a manifest (DELETED ones included), with inherited values filled."""
    key = manifest.manifest_path
    cached = _MANIFESTS.get(key)
    if cached is None:
        spec = metadata.spec_by_id(manifest.partition_spec_id)
        ptype = spec.partition_type(metadata.schema)
        parsed = read_manifest(io.read(key), key, partition_type=ptype)
        cached = tuple(inherit(parsed.entries, manifest))
        _MANIFESTS.put(key, cached)
    return cached  # type: ignore[return-value]


def own_manifests(io: FileIO, snapshot: Snapshot) -> tuple[ManifestFile, ...]:
    """The manifests ``snapshot`` wrote itself (its ``added_snapshot_id``): from the
    cache when its list was read, else decoding only those entries of the list."""
    cached = _MANIFEST_LISTS.get(snapshot.manifest_list)
    if cached is not None:
        mine = snapshot.snapshot_id
        return tuple(m for m in cached if m.added_snapshot_id == mine)  # type: ignore[attr-defined]
    data = io.read(snapshot.manifest_list)
    listed = read_manifest_list(
        data, snapshot.manifest_list, added_snapshot_id=snapshot.snapshot_id
    )
    return tuple(listed.manifests)


def changed_entries(
    io: FileIO, metadata: TableMetadata, manifest: ManifestFile
) -> tuple[ManifestEntry, ...]:
    """A manifest's ADDED and DELETED entries, values inherited: from the cache when it
    was read whole, else decoding only those entries (and what their row ids need),
    without their column metrics (what a change feed needs: which files changed)."""
    cached = _MANIFESTS.get(manifest.manifest_path)
    if cached is None:
        spec = metadata.spec_by_id(manifest.partition_spec_id)
        ptype = spec.partition_type(metadata.schema)
        key = manifest.manifest_path
        parsed = read_manifest(
            io.read(key), key, partition_type=ptype, skip_existing=True, metrics=False
        )
        cached = tuple(inherit(parsed.entries, manifest))
    return tuple(e for e in cached if e.status != EntryStatus.EXISTING)  # type: ignore[attr-defined]


def known_to_assign_nothing(manifest: ManifestFile) -> bool:
    """Whether ``manifest``'s entries were already found to need no row ids (its file
    is immutable, so the answer holds for as long as the name does)."""
    return _NOTHING_TO_ASSIGN.get(manifest.manifest_path) is not None


def remember_assigns_nothing(manifest: ManifestFile) -> None:
    _NOTHING_TO_ASSIGN.put(manifest.manifest_path, True)


def remember_written_manifest(manifest: ManifestFile, entries: Iterable[ManifestEntry]) -> None:
    """Seed the cache with a manifest this process just wrote (saves reading it back)."""
    _MANIFESTS.put(manifest.manifest_path, tuple(inherit(list(entries), manifest)))


def remember_written_manifest_list(
    location: str, manifests: Iterable[ManifestFile], parent: Snapshot | None = None
) -> None:
    """Seed the cache with a manifest list this process just wrote; forget the parsed
    manifests of ``parent``'s list (if cached) that the new list drops: the snapshot
    going current no longer holds them, and a long stream would otherwise keep them
    until the cache is full (tens of MB of Python objects)."""
    manifests = tuple(manifests)
    _MANIFEST_LISTS.put(location, manifests)
    before = _MANIFEST_LISTS.get(parent.manifest_list) if parent is not None else None
    if before is None:
        return
    kept = {m.manifest_path for m in manifests}
    for m in cast(tuple[ManifestFile, ...], before):
        if m.manifest_path not in kept:
            _MANIFESTS.discard(m.manifest_path)


def forget(locations: Iterable[str]) -> None:
    """Drop what is cached of files that were deleted (an expired snapshot's manifest
    list and manifests): no snapshot reaches them again. (``history_files`` drops those
    another process expired.)"""
    for location in locations:
        _MANIFESTS.discard(location)
        _MANIFEST_LISTS.discard(location)
        _NOTHING_TO_ASSIGN.discard(location)


def remember_written_dv(location: str, offset: int, positions: BitMap64, data_file: str) -> None:
    """Seed the cache with a deletion vector this process just wrote (a copy of it) for
    ``data_file`` (the file it deletes from); the DV this process wrote before for that
    file is dropped: a data file has one DV at a time and the next commit merges
    into the newest, while a stream rewriting the growing DVs of a big table's files
    kept every earlier version until the cache's count bound (tens of MB)."""
    key = f"{location}@{offset}"
    before = _DV_OF_FILE.get(data_file)
    if isinstance(before, str) and before != key:
        _DVS.discard(before)
    _DV_OF_FILE.put(data_file, key)
    if len(positions) <= _DV_CACHE_MAX_POSITIONS:
        _DVS.put(key, BitMap64(positions))


@dataclass(frozen=True)
class LiveEntry:
    entry: ManifestEntry
    manifest: ManifestFile

    @property
    def data_file(self) -> DataFile:
        return self.entry.data_file


@dataclass
class LiveFiles:
    """Live data files and deletion vectors of one snapshot, by path."""

    data: dict[str, LiveEntry]
    dvs: dict[str, LiveEntry]  # keyed by referenced data file path
    manifests: tuple[ManifestFile, ...]

    def positions_deleted(self, io: FileIO, data_file_path: str) -> BitMap64:
        live = self.dvs.get(data_file_path)
        return BitMap64() if live is None else read_dv(io, live.data_file)


def live_files(io: FileIO, metadata: TableMetadata, snapshot: Snapshot | None) -> LiveFiles:
    manifests = manifest_files(io, snapshot)
    data: dict[str, LiveEntry] = {}
    dvs: dict[str, LiveEntry] = {}
    for mf in manifests:
        for entry in manifest_entries(io, metadata, mf):
            if entry.status == EntryStatus.DELETED:
                continue
            df = entry.data_file
            if mf.content == ManifestContent.DATA:
                data[df.file_path] = LiveEntry(entry, mf)
            elif df.content == FileContent.POSITION_DELETES and df.referenced_data_file:
                dvs[df.referenced_data_file] = LiveEntry(entry, mf)
    return LiveFiles(data, dvs, manifests)


def read_dv(io: FileIO, dv: DataFile) -> BitMap64:
    if dv.content_offset is None or dv.content_size_in_bytes is None:
        from calving.commit.errors import UnsupportedFeatureError

        raise UnsupportedFeatureError(
            f"{dv.file_path}: position delete file without content offset (v2 position "
            "delete files are not supported; v3 tables use deletion vectors)"
        )
    where = f"{dv.file_path}@{dv.content_offset}"
    cached = _DVS.get(where)
    if isinstance(cached, BitMap64):
        return BitMap64(cached)  # a copy: callers may change theirs
    blob = io.read_range(dv.file_path, dv.content_offset, dv.content_size_in_bytes)
    return deserialize_dv(blob, where)


def read_dvs_of_file(io: FileIO, dvs: Sequence[DataFile]) -> list[BitMap64]:
    """The positions of deletion vectors that all sit in one Puffin file, in order, with
    one read of the span they cover: a file holding several (``calving.dv.blobs-per-
    puffin`` above 1, or another writer's) is opened once for all of them."""
    if len({dv.file_path for dv in dvs}) > 1:
        raise ValueError("read_dvs_of_file: deletion vectors of more than one file")
    out: list[BitMap64 | None] = []
    wanted: list[tuple[int, DataFile]] = []
    for dv in dvs:
        cached = _DVS.get(f"{dv.file_path}@{dv.content_offset}")
        out.append(BitMap64(cached) if isinstance(cached, BitMap64) else None)
        if out[-1] is None:
            if dv.content_offset is None or dv.content_size_in_bytes is None:
                out[-1] = read_dv(io, dv)  # raises the typed error
                continue
            wanted.append((len(out) - 1, dv))
    if wanted:
        location = wanted[0][1].file_path
        start = min(dv.content_offset or 0 for _, dv in wanted)
        end = max((dv.content_offset or 0) + (dv.content_size_in_bytes or 0) for _, dv in wanted)
        span = io.read_range(location, start, end - start)
        for at, dv in wanted:
            offset = (dv.content_offset or 0) - start
            blob = span[offset : offset + (dv.content_size_in_bytes or 0)]
            out[at] = deserialize_dv(blob, f"{location}@{dv.content_offset}")
    return cast(list[BitMap64], out)


def history_files(io: FileIO, metadata: TableMetadata) -> set[str]:
    """``files_reached`` by every snapshot the table keeps; then what is cached of this
    table's manifests and manifest lists that no kept snapshot reaches is dropped. Only
    a walk of the whole history can tell which parsed manifests are still of use: the
    snapshots that reached the others are gone (expired by this process or another)."""
    reached = files_reached(io, metadata, metadata.snapshots)
    prefix = manifests_directory(metadata.location) + "/"
    for cache in (_MANIFESTS, _MANIFEST_LISTS, _NOTHING_TO_ASSIGN):
        cache.discard_where(lambda key: key.startswith(prefix) and key not in reached)
    return reached


def manifests_directory(table_location: str) -> str:
    """Where calving writes a table's manifests, manifest lists and Puffin files."""
    return table_location.rstrip("/") + "/metadata"


def files_reached(io: FileIO, metadata: TableMetadata, snapshots: Iterable[Snapshot]) -> set[str]:
    """Every file ``snapshots`` reach: manifest lists, manifests, the data and delete
    files of their live entries, and rewrite position maps named in their summaries."""
    out: set[str] = set()
    for snap in snapshots:
        out.add(snap.manifest_list)
        if snap.summary.get(POSITION_MAP):
            out.add(snap.summary[POSITION_MAP])
        for mf in manifest_files(io, snap):
            if mf.manifest_path in out:
                continue  # shared with a snapshot already visited: its files are in `out`
            out.add(mf.manifest_path)
            for e in manifest_entries(io, metadata, mf):
                if e.status != EntryStatus.DELETED:
                    out.add(e.data_file.file_path)
    return out

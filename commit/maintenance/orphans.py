"""Orphan file removal: delete files under the table location that no metadata references
and that are older than a safety age.

Referenced: the current metadata file and those in its metadata log, every kept
snapshot's manifest list, manifests and the data and delete (DV) files their live
entries name, rewrite position maps, statistics and partition-statistics files, the primary-key index and the
column-sketch cache the table properties name, and the base and delta files of the
index shards the named shard manifest lists. Never deleted, whatever their age: the
filesystem catalog's version files (``v<N>.metadata.json``, ``version-hint.text``): a
writer that read an old version could otherwise re-create a deleted ``v<N+1>`` and take
it for a landed commit. A commit in flight writes files before it swaps; the safety age
(default 3 days, Iceberg's) keeps them: no commit runs for that long.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, field

from calving.commit.errors import CorruptFileError, FileNotFoundInTableError, Terminal
from calving.commit.index.sharded import MANIFEST_SUFFIX
from calving.commit.index.shards import read_manifest
from calving.commit.index.store import INDEX_LOCATION_PROPERTY
from calving.commit.io import LOCAL_SCHEME, FileIO, ListedFile, local_path, scheme_of
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import TableProperties
from calving.commit.table import scan

log = logging.getLogger(__name__)

DEFAULT_SAFETY_AGE_MS = 3 * 24 * 3600 * 1000
_FILESYSTEM_CATALOG_FILE = re.compile(r"/metadata/(v\d+\.metadata\.json|version-hint\.text)$")


class OrphanListingMismatchError(Terminal):
    """The table's files as listed do not match what its metadata references."""


@dataclass
class OrphanReport:
    """What one run found and did."""

    listed: int = 0
    referenced: int = 0
    orphans: list[ListedFile] = field(default_factory=list)
    too_young: int = 0
    deleted: int = 0
    deleted_bytes: int = 0
    dry_run: bool = False


def referenced_files(io: FileIO, metadata: TableMetadata, metadata_location: str) -> set[str]:
    """Every file location the table's metadata reaches (normalized)."""
    out = {metadata_location}
    out.update(e.metadata_file for e in metadata.metadata_log)
    out.update(s.statistics_path for s in metadata.statistics)
    out.update(str(s.get("statistics-path")) for s in metadata.partition_statistics)
    props = TableProperties(metadata.properties)
    index = metadata.properties.get(INDEX_LOCATION_PROPERTY)
    for extra in (props.file_sketches, index):
        if extra:
            out.add(extra)
    if index and index.endswith(MANIFEST_SUFFIX):
        out.update(_shard_files(io, index))
    out.update(scan.history_files(io, metadata))
    return {canonical(loc) for loc in out}


def _shard_files(io: FileIO, manifest_location: str) -> list[str]:
    """The base and delta files of every shard the sharded index's manifest names. A
    manifest that cannot be read names none: its shards are rebuilt when next used."""
    try:
        manifest = read_manifest(io, manifest_location)
    except (CorruptFileError, FileNotFoundInTableError) as err:
        log.warning("orphans: the index shard manifest is not readable: %s", err)
        return []
    return [f for s in manifest.shards for f in (s.location, *s.deltas)]


def is_catalog_version_file(location: str) -> bool:
    """The filesystem catalog's ``v<N>.metadata.json`` / ``version-hint.text``."""
    return _FILESYSTEM_CATALOG_FILE.search(location) is not None


def canonical(location: str) -> str:
    """One form per file: local paths normalized (``a//b`` is ``a/b`` there); object
    store keys are literal (``a//b`` and ``a/b`` are different keys). A path with no
    empty, ``.`` or ``..`` part (what calving writes) is its own normal form, so only
    the others pay for ``os.path.normpath`` (it runs for every file a table reaches)."""
    if scheme_of(location) != LOCAL_SCHEME:
        return location
    path = local_path(location)
    if not path or path.startswith(".") or "//" in path or "/." in path or path.endswith("/"):
        return os.path.normpath(path)
    return path


def find_orphans(
    io: FileIO,
    metadata: TableMetadata,
    metadata_location: str,
    *,
    older_than_ms: int | None = None,
    now_ms: int | None = None,
) -> OrphanReport:
    """Unreferenced files under the table location older than the safety age."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now - DEFAULT_SAFETY_AGE_MS if older_than_ms is None else older_than_ms
    referenced = referenced_files(io, metadata, metadata_location)
    prefix = metadata.location.rstrip("/") + "/"
    listed = io.list_files(prefix)
    found = {canonical(f.location) for f in listed}
    inside = canonical(prefix)
    unseen = sorted(r for r in referenced if r.startswith(inside) and r not in found)
    if unseen:
        # A referenced file the listing does not show: either it is gone (the table is
        # already broken) or its path has another form than the listing's. Either way
        # nothing can be judged an orphan safely.
        raise OrphanListingMismatchError(
            f"{metadata.location}: {len(unseen)} referenced file(s) are not in the listing "
            f"(first: {unseen[0]}); refusing to remove orphans"
        )
    report = OrphanReport(listed=len(listed), referenced=len(referenced))
    for f in listed:
        if canonical(f.location) in referenced or is_catalog_version_file(f.location):
            continue
        if f.modified_ms >= cutoff:
            report.too_young += 1
            continue
        report.orphans.append(f)
    return report


def remove_orphans(
    io: FileIO,
    metadata: TableMetadata,
    metadata_location: str,
    *,
    older_than_ms: int | None = None,
    dry_run: bool = False,
) -> OrphanReport:
    """``find_orphans``, then delete them (unless ``dry_run``)."""
    report = find_orphans(io, metadata, metadata_location, older_than_ms=older_than_ms)
    report.dry_run = dry_run
    if not dry_run:
        for f in report.orphans:
            io.delete(f.location)
            report.deleted += 1
            report.deleted_bytes += f.size
    return report

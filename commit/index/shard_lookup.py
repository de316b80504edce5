"""Stage 2 of a keyed batch in sharded mode: one step per touched shard, run by a task.

A step loads its shard (from the worker's cache when it holds the very chain the
manifest names, else from the base and deltas), follows other writers' commits when the
batch brings a ``ShardDiff``, resolves the batch's keys to the live (file, position) rows
holding them, and writes the shard's next file: a delta with the batch's changes (the
positions it deletes, the keys of its new files), or a new base once the chain holds
``max_deltas`` deltas or after a catch-up. It returns the positions and the shard's new
chain; the driver merges the positions into deletion vectors and names the chains in
the next manifest. Nothing here knows Spark: the Spark job (``calving.ingest.sink.
shard_stage``) and ``LocalResolver`` run the same ``resolve_shards``.

The cache (``shard_cache.ShardCache``, one per Python process: ``CACHE``) is keyed by
the chain's file names, so a stale copy cannot be read. A step takes its shard out of
the cache, changes it in place and puts it back under the chain it wrote; when the
commit then fails, nothing names that chain and the entry ages out. In the cache's
background thread, while the worker waits, a write task reads ahead the shards its steps
will take (``read_ahead_in_background``) and a task that ends tidies those it stepped
(``tidy_in_background``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from calving.commit.errors import FileNotFoundInTableError
from calving.commit.index.index_file import UnreadableIndexError
from calving.commit.index.keys import KeyCodec, Keys
from calving.commit.index.pk_index import IndexUpdateError, PrimaryKeyIndex
from calving.commit.index.shard_cache import ShardCache
from calving.commit.index.shard_chain import (
    AddedFile,
    Deleted,
    ShardDiff,
    apply_aliases,
    apply_changes,
    catch_up_shard,
    load_chain,
    read_added,
    read_delta,
    write_base,
    write_delta,
)
from calving.commit.index.shards import ShardFile, ShardHeader, ShardManifest
from calving.commit.io import FileIO
from calving.commit.io_sync import synced_together
from calving.commit.spec.properties import INDEX_WORKER_CACHE_BYTES
from calving.commit.spec.sorted_sets import dense_ids, unique_sorted

log = logging.getLogger(__name__)

#: Bytes of shards a Python process keeps between batches unless the table sets
#: ``calving.index.worker-cache-bytes`` (``ShardCache``: the shards used in the latest
#: rounds stay, the others go least recently used first).
DEFAULT_CACHE_BYTES = INDEX_WORKER_CACHE_BYTES.default
#: A batch of up to ``calving.index.driver-step-keys`` keys whose shards hold up to
#: this many entries in all runs its steps in the driver (no Spark job).
DRIVER_SHARD_ENTRIES = 2_000_000


@dataclass(frozen=True)
class ShardJob:
    """What every step of one batch's stage 2 needs."""

    table_location: str
    #: The manifest the batch resolves on (its shards' chains as committed).
    manifest: ShardManifest
    #: The snapshot the batch resolves on: the manifest's, or where ``catch_up`` leads.
    snapshot_id: int | None
    #: Other writers' commits since the manifest's snapshot (every shard steps then).
    catch_up: ShardDiff | None
    io_properties: Mapping[str, str]
    max_deltas: int = 16
    cache_bytes: int = DEFAULT_CACHE_BYTES
    #: A batch of up to this many keys may run its steps in the driver (the resolver
    #: decides; ``calving.index.driver-step-keys``).
    driver_step_keys: int = 0
    #: The steps run inside the batch's write tasks (``task_steps``): several tasks
    #: step one shard, each writing a delta on the manifest's chain (never a base) and
    #: leaving the cached shard as that chain has it.
    in_task: bool = False
    #: The manifest's location (the tasks' steps name it back to the driver).
    manifest_location: str = ""
    #: In-task steps: the shards whose chains are due for a rebase. The task that
    #: writes one's base (``rebase_owners``) writes the manifest's chain as a new base
    #: and its delta on that; the driver puts every task's delta on it
    #: (``task_steps``).
    rebase: frozenset[int] = frozenset()
    #: In-task rebases: the write task (its partition) that writes a due shard's base,
    #: the other tasks writing their deltas on the manifest's chain. A due shard not
    #: named here is written by every task stepping it (a base is the same rows in
    #: each).
    rebase_owners: Mapping[int, int] = field(default_factory=dict)
    #: Bases that in-task rebases wrote, each with the chain (base, then deltas) whose
    #: rows it holds: a worker that cached that chain uses it for the base.
    rebased: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def writes_base(self, shard: int, task: int | None) -> bool:
        """Whether write task ``task`` (its partition; None: unknown) writes due shard
        ``shard``'s base (see ``rebase_owners``)."""
        if shard not in self.rebase:
            return False
        owner = self.rebase_owners.get(shard)
        return task is None or owner is None or owner == task


@dataclass(frozen=True)
class ShardRequest:
    """One shard's part of a batch: the keys to find (encoded) and its new rows."""

    shard: int
    lookups: Keys
    added: tuple[AddedFile, ...] = ()


@dataclass(frozen=True)
class ShardResult:
    """One shard's step: lookup ``key_rows[j]`` (into the request's keys) is live at
    ``positions[j]`` of ``files[file_index[j]]``; ``chain`` is the shard after the batch."""

    chain: ShardFile
    key_rows: np.ndarray  # int64
    files: tuple[str, ...]
    file_index: np.ndarray  # int64
    positions: np.ndarray  # int64
    cache_hit: bool
    #: The new data files whose keys the step recorded in the shard.
    added: tuple[str, ...] = ()
    #: Why the shard's chain could not be read (nothing else is set then): the driver
    #: rebuilds that shard and runs the batch's stage 2 again.
    unreadable: str = ""
    #: The step's wall time in the task (load or cache, look up, write).
    seconds: float = 0.0


class ShardResolver(Protocol):
    """Runs a batch's stage 2 (the Spark job, or ``LocalResolver`` in-process)."""

    def __call__(self, job: ShardJob, requests: Sequence[ShardRequest]) -> list[ShardResult]: ...

    def owners(self) -> int:
        """Processes the steps are pinned to, shard ``s`` to the ``s mod n``-th (0:
        none; every step may run anywhere)."""
        ...


#: This process's shards (a reused Python worker keeps them across batches).
CACHE = ShardCache()


def tidy_in_background() -> None:
    """A task's last act: this process's stepped shards tidied while the worker waits
    for its next task (``ShardCache.tidy_in_background``). A function, not the cache's
    method, so that a task's closure names it instead of pickling the cache."""
    CACHE.tidy_in_background()


#: A write task's read-ahead reads the shards its worker does not cache only when all
#: of the manifest's shards fit the cache at this many bytes an entry (else it brings
#: forward those the cache holds a state of, and the steps read the others).
READ_AHEAD_BYTES_PER_ENTRY = 64


def read_ahead_in_background(job: ShardJob | None, task: int | None = None) -> None:
    """A write task's first act in sharded mode (steps in the write tasks; ``task``: its
    partition): while the task waits for its input and its Kafka records, the cache's
    background thread brings each shard the worker caches forward to the chain
    ``job``'s manifest names (by the other tasks' deltas, read from storage), or reads
    it when the whole index fits the cache, and tidies it; and writes the new base of
    each shard due for a rebase that this task writes (``ShardJob.writes_base``). The
    task's steps, on the batch's critical path, then find the very chain cached (and
    its base written) and only look up and write their deltas. A shard it cannot read,
    or a base it cannot write, is left to the step, which does it again and reports
    it. A catch-up is left to the steps too (each shard follows the other writers'
    commits there)."""
    if job is None or not job.in_task or job.catch_up is not None:
        return
    CACHE.run_in_background(lambda: _read_ahead(job, task), "calving-shard-read-ahead")


def _read_ahead(job: ShardJob, task: int | None) -> None:
    io = FileIO(dict(job.io_properties))
    manifest = job.manifest
    entries = sum(chain.entries for chain in manifest.shards)
    load = entries * READ_AHEAD_BYTES_PER_ENTRY <= job.cache_bytes
    for chain in manifest.shards:
        try:
            got = (
                _shard(io, manifest, chain, job.rebased)
                if load
                else _cached_shard(io, manifest, chain, job.rebased, count_miss=False)
            )
            if got is None:
                continue
            CACHE.count_tidy(got[0].tidy())
        except Exception as err:  # noqa: BLE001 - any failure: the step reads the shard again, and reports it
            log.debug("shard %d not read ahead: %s: %s", chain.shard, type(err).__name__, err)
            continue
        if job.writes_base(chain.shard, task):
            try:
                CACHE.keep_base(chain, _rebase(io, job, chain, got[0]), io)
            except Exception as err:  # noqa: BLE001 - any failure: the step writes the base, and reports it
                log.debug("shard %d base not written ahead: %s", chain.shard, err)
        CACHE.put(chain, got[0], job.cache_bytes, ahead=got[1])


# ---------------------------------------------------------------- the steps


def resolve_shards(
    job: ShardJob,
    requests: Iterable[ShardRequest],
    task: int | None = None,
    owner: tuple[int, int] | None = None,
) -> list[ShardResult]:
    """Run the steps of ``requests`` (one task's share of a batch; ``task``: the write
    task's partition, for in-task rebases; ``owner``: (this process's owner number,
    owners): the steps run pinned to shard owners, and the cache keeps this owner's
    shards only). The files the steps write are fsynced together (one wait, one
    directory fsync) before the results naming them return."""
    if owner is not None:
        CACHE.keep(*owner)
    io = FileIO(dict(job.io_properties))
    manifest = job.manifest
    codec = KeyCodec(manifest.key_types, manifest.key_field_ids)
    fresh = None
    results = []
    with synced_together():
        for request in requests:
            if job.catch_up is not None and fresh is None:  # read once per task
                fresh = read_added(io, job.catch_up, manifest.key_field_ids, codec)
            results.append(resolve_one(io, job, request, fresh or [], task))
    return results


def resolve_one(
    io: FileIO,
    job: ShardJob,
    request: ShardRequest,
    fresh: Sequence[tuple[str, int, Keys, np.ndarray]],
    task: int | None = None,
) -> ShardResult:
    started = time.perf_counter()
    manifest = job.manifest
    chain = manifest.shards[request.shard]
    try:
        index, hit = _shard(io, manifest, chain, job.rebased)
    except (UnreadableIndexError, FileNotFoundInTableError) as err:
        none = np.empty(0, np.int64)
        return ShardResult(chain, none, (), none, none, False, unreadable=str(err))
    before = chain.entries
    if job.catch_up is not None:
        catch_up_shard(index, request.shard, manifest.shard_count, job.catch_up, fresh)
        before = len(index)
    matches = index.lookup_encoded(request.lookups)
    used, file_index = dense_ids(matches.file_ids)
    paths = tuple(matches.paths[int(f)] for f in used)
    deleted = Deleted(
        tuple((p, index.file_row_count(p)) for p in paths),
        request.lookups.take(matches.key_rows),
        file_index.astype(np.int64),
        matches.positions,
    )
    located = (file_index.astype(np.uint64) << np.uint64(32)) | matches.positions.astype(np.uint64)
    after = before - len(unique_sorted(located)) + sum(len(f.positions) for f in request.added)
    new = _write_step(io, job, request, index, deleted, after, task)
    # A write task leaves its shard as the manifest has it: the batch's chain holds
    # every task's delta, its own among them, which the next batch applies in order
    # (and another task of this batch in this process finds the very chain).
    CACHE.put(chain if job.in_task else new, index, job.cache_bytes, stepped=True)
    return ShardResult(
        new,
        matches.key_rows,
        paths,
        file_index.astype(np.int64),
        matches.positions,
        hit,
        tuple(f.path for f in request.added),
        seconds=time.perf_counter() - started,
    )


def _write_step(
    io: FileIO,
    job: ShardJob,
    request: ShardRequest,
    index: PrimaryKeyIndex,
    deleted: Deleted,
    after: int,
    task: int | None = None,
) -> ShardFile:
    """Apply the step's changes to ``index`` and write them: a new base after a
    catch-up or once the chain holds ``max_deltas`` deltas, else a delta (nothing when
    nothing changed). Returns the shard's chain after the step."""
    manifest = job.manifest
    chain = manifest.shards[request.shard]
    header = _header(job, request.shard)
    rebase = job.catch_up is not None or len(chain.deltas) >= job.max_deltas
    if job.in_task and job.writes_base(request.shard, task):
        # ``index`` holds the manifest's chain (a write task does not apply its own
        # changes): that chain as a base (the read-ahead's, when it wrote it), then
        # this task's delta on it.
        base = CACHE.take_base(chain) or _rebase(io, job, chain, index)
        deltas: tuple[str, ...] = ()
        if len(deleted) or request.added:
            deltas = (_write_delta(io, job, header, request, deleted),)
        new = ShardFile(chain.shard, base.location, after, base.base_snapshot, deltas)
    elif rebase and not job.in_task:
        apply_changes(index, request.added, deleted)
        new = write_base(io, job.table_location, header, index)
    elif len(deleted) or request.added:
        location = _write_delta(io, job, header, request, deleted)
        if not job.in_task:
            apply_changes(index, request.added, deleted)
        new = ShardFile(
            chain.shard, chain.location, after, chain.base_snapshot, (*chain.deltas, location)
        )
    else:
        new = chain
    if new.entries != after:  # a base counts its entries; they must agree
        raise IndexUpdateError(
            f"shard {request.shard}: {new.entries} entries written, {after} expected"
        )
    return new


def _header(job: ShardJob, shard: int) -> ShardHeader:
    manifest = job.manifest
    return ShardHeader(
        manifest.table_uuid,
        job.snapshot_id,
        manifest.key_field_ids,
        manifest.key_types,
        shard,
        manifest.shard_count,
    )


def _rebase(io: FileIO, job: ShardJob, chain: ShardFile, index: PrimaryKeyIndex) -> ShardFile:
    """The manifest's ``chain``, which ``index`` holds, written as a new base."""
    base = write_base(io, job.table_location, _header(job, chain.shard), index)
    if base.entries != chain.entries:
        raise IndexUpdateError(
            f"shard {chain.shard}: rebased to {base.entries} entries, not {chain.entries}"
        )
    return base


def _write_delta(
    io: FileIO, job: ShardJob, header: ShardHeader, request: ShardRequest, deleted: Deleted
) -> str:
    """Write the step's delta; a write task's (which leaves its shard without it)
    is remembered for this process's next step of the shard."""
    location = write_delta(io, job.table_location, header, request.added, deleted)
    if job.in_task:
        CACHE.remember_delta(location, request.added, deleted)
    return location


def _shard(
    io: FileIO,
    manifest: ShardManifest,
    chain: ShardFile,
    rebased: Mapping[str, tuple[str, ...]],
) -> tuple[PrimaryKeyIndex, bool]:
    """The shard's index and whether the cache had it (``_cached_shard``), or else the
    whole chain read."""
    got = _cached_shard(io, manifest, chain, rebased)
    return got if got is not None else (load_chain(io, manifest, chain), False)


def _cached_shard(
    io: FileIO,
    manifest: ShardManifest,
    chain: ShardFile,
    rebased: Mapping[str, tuple[str, ...]],
    count_miss: bool = True,
) -> tuple[PrimaryKeyIndex, bool] | None:
    """The shard's index from the cache, and whether the cache held it (False: a
    read-ahead read it): the very chain, or an earlier state of it that the chain's
    later deltas (read from storage) bring forward (its base may be a rebase of a
    cached chain: ``rebased``); None when the cache holds no state of it
    (``count_miss``: a miss of the cache's count)."""
    got = CACHE.take_for_step(chain, count_miss)
    if got is not None:
        apply_aliases(got[0], manifest.aliases)
        return got
    same = chain
    earlier = CACHE.take_prefix(chain)
    if earlier is None and chain.location in rebased:
        # The base holds the rows of an earlier chain: that chain, whole, and then
        # this chain's deltas.
        held = rebased[chain.location]
        same = replace(chain, location=held[0], deltas=(*held[1:], *chain.deltas))
        earlier = CACHE.take_prefix(same, len(held) - 1)
    if earlier is None:
        return None
    index, applied = earlier
    try:
        apply_aliases(index, manifest.aliases)  # files renamed after its last step
        for location in same.deltas[applied:]:
            changes = CACHE.recall_delta(location)
            added, deleted = changes or read_delta(io, manifest, chain.shard, location)
            apply_changes(index, added, deleted)
            apply_aliases(index, manifest.aliases)
    except IndexUpdateError as err:
        raise UnreadableIndexError(chain.location, f"shard chain does not apply: {err}") from None
    return index, True


def resolve_here(job: ShardJob, requests: Sequence[ShardRequest]) -> list[ShardResult]:
    """A whole batch's steps in this process (the driver's): one round of the cache
    (``ShardCache.end_round``)."""
    try:
        return resolve_shards(job, requests)
    finally:
        CACHE.end_round()


@dataclass(frozen=True)
class LocalResolver:
    """Stage 2 in this process (tests, and tables without a Spark session)."""

    def __call__(self, job: ShardJob, requests: Sequence[ShardRequest]) -> list[ShardResult]:
        return resolve_here(job, requests)

    def owners(self) -> int:
        return 0

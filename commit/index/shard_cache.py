"""The shard cache of a Python process: shards' indexes kept between a worker's tasks.

Entries are keyed by the chain's file names (base, then deltas). Names are unique per
content (a UUID each), so a cached shard is either the chain a manifest names, or an
earlier state of it that later deltas bring forward, never a stale copy. A step takes
its shard out, changes it in place and puts it back under the chain it leaves.

Work a step would do on a batch's critical path runs in one background thread instead,
while the worker waits: as a task ends, the tidy of the shards it stepped (their full
merges); as a write task starts, the read-ahead of the shards its steps will take
(``shard_lookup.read_ahead_in_background``). Every use of the entries waits for that
thread first (``settle``).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from calving.commit.index.pk_index import PrimaryKeyIndex
from calving.commit.index.shard_chain import AddedFile, Deleted
from calving.commit.index.shards import ShardFile
from calving.commit.io import FileIO

log = logging.getLogger(__name__)

#: Bytes of its own deltas' changes a Python process keeps for its next step.
DELTA_MEMO_BYTES = 64 << 20


def _chain_key(chain: ShardFile) -> tuple[str, ...]:
    return (chain.location, *chain.deltas)


#: A cached shard used (put) in this many of the latest rounds is not evicted to admit
#: another: the current round and the one before.
PROTECTED_ROUNDS = 2


class ShardCache:
    """Shards by chain, at most ``max_bytes`` of them.

    Past ``max_bytes``, the least recently used shard goes first, but only one that no
    step used in the current round (a task: ``end_round``) or the one before. When
    every cached shard was used that recently, the shard being put is not kept
    instead: a batch steps its shards in the same order every time, and evicting the
    oldest would evict the very shard the next step asks for, so that an index a little
    larger than the cache would be read from storage in full at every batch. This way
    the cache keeps as many shards as fit, batch after batch, and reads only the others.
    A shard nothing uses any more (its chain was replaced) ages out after two rounds.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, ...], PrimaryKeyIndex] = OrderedDict()
        self._shards: dict[tuple[str, ...], int] = {}
        #: Each entry's bytes when it was put (an entry is not changed in the cache: a
        #: step takes it out, changes it and puts it back).
        self._bytes: dict[tuple[str, ...], int] = {}
        self._total = 0
        #: The round each entry was last put in (``end_round`` starts the next round).
        self._used: dict[tuple[str, ...], int] = {}
        self._round = 0
        #: Deltas this process's write tasks wrote, by location, until a step brings
        #: a cached shard forward by them (then they are not read back from storage).
        self._deltas: OrderedDict[str, tuple[tuple[AddedFile, ...], Deleted, int]] = OrderedDict()
        self._delta_bytes = 0
        self.hits = 0
        self.misses = 0
        #: Entries a step put since the last tidy.
        self._stepped: set[tuple[str, ...]] = set()
        #: Entries a read-ahead put, each with whether the cache held a state of its
        #: chain (the step that takes it reports that, not a second hit).
        self._ahead: dict[tuple[str, ...], bool] = {}
        #: The thread tidying or reading ahead (every use of the entries waits for it
        #: first: ``settle``).
        self._background: threading.Thread | None = None
        #: Shards tidied in the background, and how many of them merged fully.
        self.tidied = 0
        self.merged = 0
        #: Shards steps took as a read-ahead left them.
        self.taken_ahead = 0
        #: Bases a read-ahead wrote, by the chain whose rows they hold (with the
        #: ``FileIO`` that wrote them: one no step took is deleted as the task ends).
        self._bases: dict[tuple[str, ...], tuple[ShardFile, FileIO]] = {}

    def settle(self) -> None:
        """Wait for the background thread (a tidy or a read-ahead) to end."""
        thread = self._background
        if thread is not None and thread is not threading.current_thread():
            thread.join()
            with self._lock:
                if self._background is thread:  # not a newer thread
                    self._background = None

    def run_in_background(self, target: Callable[[], None], name: str) -> None:
        """Run ``target`` in the cache's background thread, once the previous one has
        ended; every use of the cache waits for it (``settle``). ``target`` must not
        raise: what it could not do is left to the steps."""
        self.settle()
        self._background = threading.Thread(target=target, name=name, daemon=True)
        self._background.start()

    def end_round(self) -> None:
        """A task's (or the driver's batch's) use of the cache ended: the shards it
        used stay protected from eviction for one more round."""
        with self._lock:
            self._round += 1

    def tidy_in_background(self) -> None:
        """End the round (``end_round``) and tidy (``PrimaryKeyIndex.tidy``) the shards
        the steps put since the last call, in the background thread: a task calls it as
        it ends, so the merges a lookup would do run while the worker waits for its next
        task, not on the batch's critical path. A shard whose tidy fails is dropped (read again when
        asked for). The bases a read-ahead wrote that no step took are deleted there
        too (nothing names them)."""
        self.end_round()
        self.settle()
        with self._lock:
            keys = [k for k in self._stepped if k in self._entries]
            self._stepped.clear()
            spare = list(self._bases.values())
            self._bases.clear()
        if keys or spare:
            self.run_in_background(lambda: self._tidy(keys, spare), "calving-shard-tidy")

    def count_tidy(self, merged: bool) -> None:
        """One shard tidied in the background (``merged``: fully)."""
        self.tidied += 1
        self.merged += merged

    def keep_base(self, chain: ShardFile, base: ShardFile, io: FileIO) -> None:
        """A base a read-ahead wrote, holding ``chain``'s rows, for the step that
        rebases it (``take_base``)."""
        with self._lock:
            self._bases[_chain_key(chain)] = (base, io)

    def take_base(self, chain: ShardFile) -> ShardFile | None:
        """The base a read-ahead wrote for ``chain`` (handed out once), or None."""
        self.settle()
        with self._lock:
            kept = self._bases.pop(_chain_key(chain), None)
            return None if kept is None else kept[0]

    def _tidy(
        self, keys: Sequence[tuple[str, ...]], spare: Sequence[tuple[ShardFile, FileIO]] = ()
    ) -> None:
        for base, io in spare:
            try:
                io.delete(base.location)
            except Exception as err:  # noqa: BLE001 - an orphan file: orphan removal takes it
                log.info("could not delete %s: %s", base.location, err)
        for key in keys:
            index = self._entries.get(key)
            if index is None:
                continue
            try:
                merged = index.tidy()
            except Exception:  # noqa: BLE001 - any failure: a half-merged shard is not used again
                with self._lock:
                    self._drop(key)
                continue
            with self._lock:
                self.count_tidy(merged)
                self._total += index.nbytes - self._bytes[key]
                self._bytes[key] = index.nbytes

    def _drop(self, key: tuple[str, ...]) -> PrimaryKeyIndex | None:
        """Take entry ``key`` out (the lock held)."""
        index = self._entries.pop(key, None)
        self._stepped.discard(key)
        self._ahead.pop(key, None)
        self._shards.pop(key, None)
        self._used.pop(key, None)
        self._total -= self._bytes.pop(key, 0)
        return index

    def take(self, chain: ShardFile) -> PrimaryKeyIndex | None:
        got = self.take_for_step(chain)
        return None if got is None else got[0]

    def take_for_step(
        self, chain: ShardFile, count_miss: bool = True
    ) -> tuple[PrimaryKeyIndex, bool] | None:
        """The cached shard of ``chain`` (taken out), and whether the cache held it:
        for a shard the task's read-ahead put, whether the cache held a state of it
        then (counted then, not again); None when none is cached (``count_miss``:
        counted as a miss; not when the caller leaves the shard to a step)."""
        self.settle()
        with self._lock:
            key = _chain_key(chain)
            ahead = self._ahead.get(key)
            index = self._drop(key)
            if index is None:
                if count_miss:
                    self.misses += 1
                return None
            if ahead is None:
                self.hits += 1
            else:
                self.taken_ahead += 1
            return index, ahead is not False

    def take_prefix(self, chain: ShardFile, deltas: int = 0) -> tuple[PrimaryKeyIndex, int] | None:
        """The cached shard of the longest earlier state of ``chain`` (its base and
        the first ``n`` of its deltas, ``n`` at least ``deltas``), and ``n``; None when
        none is cached."""
        wanted = _chain_key(chain)
        self.settle()
        with self._lock:
            earlier = [
                k for k in self._entries if deltas < len(k) < len(wanted) and wanted[: len(k)] == k
            ]
            best = max(earlier, key=len, default=None)
            if best is None:
                return None
            self.hits += 1
            index = self._drop(best)
            assert index is not None
            return index, len(best) - 1

    def put(
        self,
        chain: ShardFile,
        index: PrimaryKeyIndex,
        max_bytes: int,
        stepped: bool = False,
        ahead: bool | None = None,
    ) -> None:
        """Cache ``index`` as ``chain`` has it (``stepped``: a step looked keys up in
        it; the next ``tidy_in_background`` tidies it; ``ahead``: a read-ahead put it,
        and whether the cache held a state of it)."""
        key = _chain_key(chain)
        size = index.nbytes
        self.settle()
        with self._lock:
            self._drop(key)
            if stepped:
                self._stepped.add(key)
            if ahead is not None:
                self._ahead[key] = ahead
            self._entries[key] = index
            self._shards[key] = chain.shard
            self._bytes[key] = size
            self._used[key] = self._round
            self._total += size
            self._make_room(key, max_bytes)

    def _make_room(self, new: tuple[str, ...], max_bytes: int) -> None:
        """Evict the least recently used entries not used in the protected rounds
        until the cache fits ``max_bytes``; if that is not enough, drop ``new`` instead
        (unless it is the only entry). The lock held."""
        if self._total <= max_bytes:
            return
        oldest_kept = self._round - PROTECTED_ROUNDS + 1
        for key in [k for k in self._entries if k != new]:
            if self._total <= max_bytes:
                return
            if self._used[key] < oldest_kept:
                self._drop(key)
        if self._total > max_bytes and len(self._entries) > 1:
            self._drop(new)

    def keep(self, owner: int, owners: int) -> None:
        """Drop every shard but those of owner ``owner`` of ``owners`` (shard ``s``
        belongs to owner ``s mod owners``): a process that steps its own shards holds
        no copy of another's (a rebuild's task, or a task of an earlier placement,
        left it here)."""
        self.settle()
        with self._lock:
            for key in [k for k, s in self._shards.items() if s % owners != owner]:
                self._drop(key)

    def forget(self, base: str) -> None:
        """Drop every cached state of the chains on base file ``base`` (a shard a
        reshard replaced: nothing will ask for it again)."""
        self.settle()
        with self._lock:
            for key in [k for k in self._entries if k[0] == base]:
                self._drop(key)

    @property
    def nbytes(self) -> int:
        """The entries' bytes, each as it was put (or last tidied)."""
        self.settle()
        with self._lock:
            return self._total

    def shards(self) -> list[int]:
        """The shard numbers cached (one a cached state), in order."""
        self.settle()
        with self._lock:
            return sorted(self._shards.values())

    def remember_delta(self, location: str, added: Sequence[AddedFile], deleted: Deleted) -> None:
        """The changes of the delta just written at ``location`` (a file is never
        written twice: its name is unique). At most ``DELTA_MEMO_BYTES`` are kept, the
        oldest dropped first (a delta no step asked for: its commit failed, or the
        worker holds no earlier state of its shard)."""
        size = deleted.keys.nbytes + deleted.positions.nbytes + deleted.file_index.nbytes
        size += sum(f.keys.nbytes + f.positions.nbytes for f in added)
        with self._lock:
            self._deltas[location] = (tuple(added), deleted, size)
            self._delta_bytes += size
            while self._delta_bytes > DELTA_MEMO_BYTES:
                self._delta_bytes -= self._deltas.popitem(last=False)[1][2]

    def recall_delta(self, location: str) -> tuple[list[AddedFile], Deleted] | None:
        """The changes ``remember_delta`` kept for ``location`` (forgotten now), or
        None."""
        with self._lock:
            kept = self._deltas.pop(location, None)
            if kept is None:
                return None
            self._delta_bytes -= kept[2]
            return list(kept[0]), kept[1]

    def clear(self) -> None:
        self.settle()
        with self._lock:
            self._stepped.clear()
            self._ahead.clear()
            self._bases.clear()
            self._entries.clear()
            self._shards.clear()
            self._bytes.clear()
            self._used.clear()
            self._total = 0
            self._deltas.clear()
            self._delta_bytes = 0

    def __len__(self) -> int:
        self.settle()
        return len(self._entries)

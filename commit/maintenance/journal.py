"""The maintenance journal: what a run is about to write, so the next run can remove
what a killed one left behind.

Orphan removal only deletes files older than days, because a commit in flight writes
files nobody references yet. A maintenance run that is SIGKILLed leaves exactly such
files (rewritten Parquet files, position maps, statistics files, manifests, manifest
lists, metadata JSON of its commit attempts), so each run keeps a journal,
``<metadata>/calving-maintenance/<run-id>.json``: its host, pid, the process start time
(``/proc/<pid>/stat``) and boot id, when it started, and every location it is about to
write, recorded (durably) before the write begins. Writes are seen through
``calving.commit.io.WRITE_LISTENER`` in the run's thread (the table's files, the
catalog's metadata files and a local rewriter's data files alike); files a rewriter
wrote elsewhere (Spark executors) are recorded when the rewrite returns them.

At its start a run judges every other journal: a run on this host (same host name, boot
id and PID namespace) is dead when its pid is gone, a zombie, or has another start time;
any other run (another host, a reboot ago, another container's PID namespace) when its
journal was untouched for ``STALE_MS`` (a live run rewrites it every
``HEARTBEAT_S``). For a dead run the listed locations the current metadata does
not reference are deleted, then the journal. The filesystem catalog's version files are
never deleted (see ``orphans``). A run that finishes judges its own journal the same
way (its commits are over) and deletes it; if the catalog cannot be read then, the
journal stays, marked finished, for the next run.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from calving.commit.errors import CalvingError, CorruptFileError, FileIOError
from calving.commit.io import (
    LOCAL_FSYNC,
    LOCAL_SCHEME,
    WRITE_LISTENER,
    FileIO,
    local_path,
    scheme_of,
)
from calving.commit.io_sync import fsync_dir
from calving.commit.maintenance import compaction
from calving.commit.maintenance.compaction_plan import RewriteGroup
from calving.commit.maintenance.orphans import canonical, is_catalog_version_file, referenced_files
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import TableProperties
from calving.commit.table.table import Table

log = logging.getLogger("calving.maintenance")

JOURNAL_DIR = "calving-maintenance"
#: Another host's journal untouched this long belongs to a dead run.
STALE_MS = 60 * 60 * 1000
#: A live run rewrites its journal at least this often (well below ``STALE_MS``).
HEARTBEAT_S = 300.0

Listener = Callable[[Sequence[str]], None]


# ---------------------------------------------------------------- who runs


@dataclass(frozen=True)
class Owner:
    """The process a journal belongs to."""

    host: str
    pid: int
    pid_start: int | None  # /proc/<pid>/stat start time (clock ticks after boot)
    boot_id: str | None
    pid_ns: str | None = None  # the PID namespace its pid is in (containers)

    @staticmethod
    def current() -> Owner:
        pid = os.getpid()
        stat = _proc_stat(pid)
        return Owner(
            socket.gethostname(), pid, stat[1] if stat else None, _boot_id(), _pid_namespace()
        )

    def sees(self, other: Owner) -> bool:
        """Whether this process can look ``other``'s pid up: same host name, same boot
        and same PID namespace (a host name alone may be shared: containers, clones)."""
        return (
            self.host == other.host
            and self.boot_id == other.boot_id
            and self.pid_ns == other.pid_ns
        )


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of ``pid`` from ``/proc``, or None where there is none."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2 :].split()  # the command name may hold spaces
    try:
        return rest[0], int(rest[19])  # fields 3 (state) and 22 (starttime)
    except (IndexError, ValueError):
        return None


def process_alive(owner: Owner) -> bool:
    """Whether ``owner`` (a process on this host) still runs."""
    if os.path.isdir("/proc/self"):
        stat = _proc_stat(owner.pid)
        if stat is None or stat[0] in ("Z", "X"):
            return False  # gone, or killed and not yet reaped
        return owner.pid_start is None or stat[1] == owner.pid_start
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------- the journal file


@dataclass
class JournalRecord:
    run_id: str
    owner: Owner
    started_ms: int
    updated_ms: int
    locations: list[str] = field(default_factory=list)
    finished: bool = False

    def to_json(self) -> bytes:
        obj: dict[str, Any] = {
            "run-id": self.run_id,
            "host": self.owner.host,
            "pid": self.owner.pid,
            "pid-start": self.owner.pid_start,
            "boot-id": self.owner.boot_id,
            "pid-ns": self.owner.pid_ns,
            "started-ms": self.started_ms,
            "updated-ms": self.updated_ms,
            "finished": self.finished,
            "locations": self.locations,
        }
        return json.dumps(obj, indent=1).encode()

    @staticmethod
    def parse(data: bytes, location: str) -> JournalRecord:
        try:
            obj = json.loads(data)
            owner = Owner(
                str(obj["host"]),
                int(obj["pid"]),
                obj.get("pid-start"),
                obj.get("boot-id"),
                obj.get("pid-ns"),
            )
            return JournalRecord(
                str(obj["run-id"]),
                owner,
                int(obj["started-ms"]),
                int(obj["updated-ms"]),
                [str(x) for x in obj["locations"]],
                bool(obj.get("finished", False)),
            )
        except (ValueError, KeyError, TypeError) as err:
            raise CorruptFileError(location, f"not a maintenance journal: {err}") from err


def journal_dir(metadata: TableMetadata) -> str:
    base = TableProperties(metadata.properties).write_metadata_path or (
        metadata.location.rstrip("/") + "/metadata"
    )
    return f"{base.rstrip('/')}/{JOURNAL_DIR}"


def _store(io: FileIO, location: str, data: bytes) -> None:
    """Replace the journal whole: a kill leaves the old or the new one, never half."""
    if scheme_of(location) != LOCAL_SCHEME:
        io.write(location, data)  # an object store's put is atomic
        return
    path = local_path(location)
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    sync = io.properties.get(LOCAL_FSYNC, "true").lower() != "false"
    try:
        os.makedirs(directory, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if sync:
            fsync_dir(directory)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise FileIOError(f"{location}: journal write failed: {err}") from err


def _now_ms() -> int:
    return int(time.time() * 1000)


class RunJournal:
    """This run's journal: written at the start, then again before every write the run
    makes in this thread (``WRITE_LISTENER``), and every ``heartbeat_s`` meanwhile."""

    def __init__(
        self, io: FileIO, metadata: TableMetadata, *, heartbeat_s: float = HEARTBEAT_S
    ) -> None:
        now = _now_ms()
        self.io = io
        self.run_id = f"{now}-{uuid.uuid4().hex[:12]}"
        self.location = f"{journal_dir(metadata)}/{self.run_id}.json"
        self.record = JournalRecord(self.run_id, Owner.current(), now, now)
        self.heartbeat_s = heartbeat_s
        self._known: set[str] = set()
        self._lock = threading.Lock()
        self._token: contextvars.Token[Listener | None] | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def start(self) -> RunJournal:
        """Write the journal, then listen to this thread's writes."""
        with self._lock:
            self._save()
        self._token = WRITE_LISTENER.set(self.add)
        self._beat = threading.Thread(target=self._heartbeat, name="calving-journal", daemon=True)
        self._beat.start()
        return self

    def add(self, locations: Sequence[str]) -> None:
        """Record ``locations`` (durably) unless already recorded."""
        with self._lock:
            new = [x for x in dict.fromkeys(locations) if x not in self._known]
            if not new or new == [self.location]:
                return
            self.record.locations.extend(new)
            self._known.update(new)
            self._save()

    def stop(self) -> None:
        """Stop listening and beating (the journal file stays)."""
        if self._token is not None:
            WRITE_LISTENER.reset(self._token)
            self._token = None
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=10)
            self._beat = None

    def finish(self, table: Table) -> int:
        """Judge this run's own files as a dead run's (its commits are over): delete the
        unreferenced ones and the journal; the number deleted. If the table cannot be
        read now, the journal stays, marked finished, for the next run."""
        self.stop()
        try:
            if not self.record.locations:
                table.io.delete(self.location)
                return 0
            table.refresh()
            deleted = delete_leftovers(table, self.record)
            table.io.delete(self.location)
            return deleted
        except CalvingError as err:
            log.warning("maintenance run %s: journal kept for the next run: %s", self.run_id, err)
            with self._lock:
                self.record.finished = True
                with contextlib.suppress(CalvingError):
                    self._save()
            return 0

    def _save(self) -> None:
        """Write the journal (the caller holds the lock); not itself journaled."""
        self.record.updated_ms = _now_ms()
        token = WRITE_LISTENER.set(None)
        try:
            _store(self.io, self.location, self.record.to_json())
        finally:
            WRITE_LISTENER.reset(token)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            with self._lock:
                try:
                    self._save()
                except CalvingError as err:
                    log.warning("maintenance journal %s: heartbeat failed: %s", self.location, err)


def start_run(table: Table, *, dry_run: bool) -> RunJournal | None:
    """The journal of a run that writes (a dry run writes nothing: none)."""
    return None if dry_run else RunJournal(table.io, table.metadata).start()


class JournaledRewriter:
    """A ``Rewriter`` that records the files each rewrite returns before they are
    committed (a rewriter writing elsewhere, e.g. on Spark executors, is not seen by
    the listener; a local one was recorded before writing and is ignored here)."""

    def __init__(self, inner: compaction.Rewriter, journal: RunJournal) -> None:
        self.inner = inner
        self.journal = journal
        self.parallelism = inner.parallelism

    def rewrite_many(
        self,
        metadata: TableMetadata,
        jobs: Sequence[tuple[RewriteGroup, compaction.Inputs]],
    ) -> list[compaction.Rewritten | CalvingError]:
        results = self.inner.rewrite_many(metadata, jobs)
        written = [f.file_path for r in results if not isinstance(r, CalvingError) for f in r[0]]
        self.journal.add(written)
        return results


def journaled(
    rewriter: compaction.RewriteFn | compaction.Rewriter, journal: RunJournal | None
) -> compaction.RewriteFn | compaction.Rewriter:
    if journal is None:
        return rewriter
    inner = rewriter if isinstance(rewriter, compaction.Rewriter) else compaction.OneByOne(rewriter)
    return JournaledRewriter(inner, journal)


# ---------------------------------------------------------------- judging journals


@dataclass
class LeftoverReport:
    live_runs: int = 0
    dead_runs: int = 0
    unreadable: int = 0
    leftovers: list[str] = field(default_factory=list)
    deleted: int = 0

    def figures(self, dry_run: bool) -> dict[str, int | float]:
        out: dict[str, int | float] = {"dead_runs": self.dead_runs, "live_runs": self.live_runs}
        if dry_run:
            out["leftovers"] = len(self.leftovers)
        else:
            out["leftovers_deleted"] = self.deleted
        if self.unreadable:
            out["unreadable_journals"] = self.unreadable
        return out


@dataclass(frozen=True)
class FoundJournal:
    location: str
    modified_ms: int
    record: JournalRecord | None  # None: unreadable
    temporaries: tuple[str, ...] = ()  # half-written replacements a kill left


def list_journals(io: FileIO, metadata: TableMetadata) -> list[FoundJournal]:
    listed = io.list_files(journal_dir(metadata) + "/")
    tmp = [f.location for f in listed if f.location.rsplit("/", 1)[-1].startswith(".")]
    out: list[FoundJournal] = []
    for f in listed:
        name = f.location.rsplit("/", 1)[-1]
        if name.startswith(".") or not name.endswith(".json"):
            continue
        try:
            record: JournalRecord | None = JournalRecord.parse(io.read(f.location), f.location)
        except CorruptFileError:
            record = None
        except CalvingError:
            continue  # removed meanwhile by another run cleaning it up
        mine = tuple(t for t in tmp if t.rsplit("/", 1)[-1].startswith(f".{name}."))
        out.append(FoundJournal(f.location, f.modified_ms, record, mine))
    return out


def is_dead(found: FoundJournal, now_ms: int, me: Owner | None = None) -> bool:
    record = found.record
    if record is None:
        return False
    if record.finished:
        return True
    me = me or Owner.current()
    if me.sees(record.owner):
        return not process_alive(record.owner)
    return now_ms - max(found.modified_ms, record.updated_ms) > STALE_MS


def _roots(metadata: TableMetadata) -> list[str]:
    props = TableProperties(metadata.properties)
    roots = [metadata.location, props.write_data_path, props.write_metadata_path]
    return [canonical(r).rstrip("/") + "/" for r in roots if r]


def leftovers_of(
    io: FileIO, metadata: TableMetadata, record: JournalRecord, referenced: set[str]
) -> list[str]:
    """The locations ``record`` lists that exist, under the table's roots, and that
    neither the metadata references nor are the filesystem catalog's version files."""
    roots = _roots(metadata)
    out: list[str] = []
    for location in dict.fromkeys(record.locations):
        key = canonical(location)
        if key in referenced or is_catalog_version_file(location):
            continue
        if not any(key.startswith(root) for root in roots):
            continue
        if io.exists(location):
            out.append(location)
    return out


def delete_leftovers(table: Table, record: JournalRecord) -> int:
    """Delete ``record``'s leftovers judged against ``table``'s (fresh) metadata."""
    referenced = referenced_files(table.io, table.metadata, table.metadata_location)
    gone = leftovers_of(table.io, table.metadata, record, referenced)
    for location in gone:
        table.io.delete(location)
    return len(gone)


def clean_leftovers(
    table: Table, *, own_run: str | None, dry_run: bool = False, now_ms: int | None = None
) -> LeftoverReport:
    """Delete what dead runs' journals list and the table does not reference, then
    their journals (a dry run only reports the leftovers)."""
    now = _now_ms() if now_ms is None else now_ms
    report = LeftoverReport()
    me = Owner.current()
    dead: list[FoundJournal] = []
    for found in list_journals(table.io, table.metadata):
        if found.record is None:
            report.unreadable += 1
        elif found.record.run_id == own_run:
            continue
        elif is_dead(found, now, me):
            dead.append(found)
        else:
            report.live_runs += 1
    if not dead:
        return report
    table.refresh()
    referenced = referenced_files(table.io, table.metadata, table.metadata_location)
    for found in dead:
        assert found.record is not None
        gone = leftovers_of(table.io, table.metadata, found.record, referenced)
        report.leftovers.extend(gone)
        report.dead_runs += 1
        if dry_run:
            continue
        for location in [*gone, *found.temporaries, found.location]:
            table.io.delete(location)
        report.deleted += len(gone)
        log.info(
            "maintenance run %s (pid %d on %s) is dead: deleted %d leftover file(s)",
            found.record.run_id,
            found.record.owner.pid,
            found.record.owner.host,
            len(gone),
        )
    return report

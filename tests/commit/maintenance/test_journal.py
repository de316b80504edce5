"""The maintenance journal: a run records every file before writing it, and the next run
deletes what a dead run left unreferenced (never a referenced file, a filesystem-catalog
version file, a file outside the table, or anything of a live run). The SIGKILL cases on
every catalog are the fault family ``maintenance-crash`` (``tests.faults.maintenance``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from calving.commit.errors import FileIOError
from calving.commit.maintenance import journal
from calving.commit.maintenance.compaction import compact
from calving.commit.maintenance.journal import JournalRecord, Owner, RunJournal
from calving.commit.maintenance.policy import MaintenancePolicy
from calving.commit.maintenance.run import run_maintenance
from calving.commit.table.table import Table
from calving.ingest.write.rewrite import local_rewrite
from tests.commit.maintenance.test_run import POLICY, TARGET, _files_under, _table
from tests.support.tables import row, write_partitioned

LEFTOVERS_ONLY = MaintenancePolicy(jobs=("leftovers",))


def _path(location: str) -> str:
    return location.removeprefix("file://")


def _dead_pid() -> tuple[int, int | None]:
    """A pid whose process has exited and been reaped (and its start time)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    stat = journal._proc_stat(child.pid)
    child.wait()
    return child.pid, stat[1] if stat else None


def _journal(table: Table, run_id: str, owner: Owner, locations: list[str]) -> str:
    now = int(time.time() * 1000)
    location = f"{journal.journal_dir(table.metadata)}/{run_id}.json"
    record = JournalRecord(run_id, owner, now, now, locations)
    journal._store(table.io, location, record.to_json())
    return location


def _stray(table: Table, relative: str) -> str:
    location = f"{table.metadata.location}/{relative}"
    os.makedirs(os.path.dirname(_path(location)), exist_ok=True)
    with open(_path(location), "wb") as f:
        f.write(b"left by a killed run")
    return location


def test_a_run_records_every_file_before_writing_it(sqlite_catalog) -> None:
    table, _ = _table(sqlite_catalog, "journaled")
    before = _files_under(table.metadata.location)
    run = RunJournal(table.io, table.metadata).start()
    try:
        compact(table, POLICY.compaction, local_rewrite(table.io, TARGET))
    finally:
        run.stop()
    written = _files_under(table.metadata.location) - before - {_path(run.location)}
    kinds = {os.path.basename(p).rsplit(".", 1)[-1] for p in written}
    assert {"parquet", "pmap", "avro", "json"} <= kinds  # data, maps, manifests, metadata
    assert written <= {_path(x) for x in run.record.locations}
    on_disk = JournalRecord.parse(table.io.read(run.location), run.location)
    assert on_disk.locations == run.record.locations and on_disk.owner == Owner.current()
    assert run.finish(table) == 0  # everything it wrote was committed
    assert not os.path.exists(_path(run.location))


def test_a_file_is_not_written_when_its_journal_entry_cannot_be(
    sqlite_catalog, monkeypatch
) -> None:
    table, _ = _table(sqlite_catalog, "unjournaled")
    run = RunJournal(table.io, table.metadata).start()

    def broken(io: Any, location: str, data: bytes) -> None:
        raise FileIOError(f"{location}: journal write failed: disk full")

    monkeypatch.setattr(journal, "_store", broken)
    target = f"{table.metadata.location}/data/never.parquet"
    try:
        with pytest.raises(FileIOError, match="journal write failed"):
            table.io.write(target, b"x")
    finally:
        run.stop()
    assert not os.path.exists(_path(target))
    table.io.write(target, b"x")  # outside the run's context nothing is journaled
    assert os.path.exists(_path(target))


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_a_dead_runs_leftovers_are_deleted_and_nothing_else(any_catalog, tmp_path) -> None:
    table, expected = _table(any_catalog, "leftovers")
    pid, start = _dead_pid()
    me = Owner.current()
    owner = Owner(me.host, pid, start, me.boot_id, me.pid_ns)
    leftovers = [
        _stray(table, "data/region=eu/rewrite-x.parquet"),
        _stray(table, "metadata/m.avro"),
    ]
    referenced = min(table.live_files().data)
    version_file = _stray(table, "data/metadata/v999.metadata.json")  # a version file name
    outside = f"file://{tmp_path}/outside.bin"
    with open(tmp_path / "outside.bin", "wb") as f:
        f.write(b"not the table's")
    never_written = f"{table.metadata.location}/metadata/never-written.avro"
    listed = [*leftovers, referenced, version_file, outside, never_written]
    location = _journal(table, "1-dead", owner, listed)

    report = run_maintenance(table, LEFTOVERS_ONLY, local_rewrite(table.io, TARGET))

    job = report.job("leftovers")
    assert job is not None and job.error is None
    assert job.figures == {"dead_runs": 1, "live_runs": 0, "leftovers_deleted": 2}
    assert not any(os.path.exists(_path(x)) for x in [*leftovers, location])
    assert all(os.path.exists(_path(x)) for x in (referenced, version_file, outside))
    _check_rows(table, expected)


def _check_rows(table: Table, expected: list[dict[str, Any]]) -> None:
    from tests.commit.maintenance.test_compaction import _check

    _check(table, expected)


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_live_runs_and_fresh_foreign_journals_are_left_alone(sqlite_catalog) -> None:
    table, _ = _table(sqlite_catalog, "alive")
    me = Owner.current()
    mine = _stray(table, "data/in-flight.parquet")
    live = _journal(table, "1-live", me, [mine])
    # Same host name, another PID namespace (a container): its pid means nothing here,
    # so it is judged like another host's journal (fresh: alive), not by the dead pid.
    pid, start = _dead_pid()
    boxed = _stray(table, "data/boxed.parquet")
    container = Owner(me.host, pid, start, me.boot_id, "pid:[1]")
    other_ns = _journal(table, "4-container", container, [boxed])
    theirs = _stray(table, "data/theirs.parquet")
    foreign = _journal(table, "2-foreign", Owner("elsewhere", 1, 1, "b"), [theirs])
    stale = _stray(table, "data/stale.parquet")
    old_foreign = _journal(table, "3-old", Owner("elsewhere", 2, 2, "b"), [stale])
    two_hours_ago = time.time() - 2 * 3600
    os.utime(_path(old_foreign), (two_hours_ago, two_hours_ago))
    # The record's own clock says old too (the journal is judged by its latest touch).
    record = JournalRecord.parse(table.io.read(old_foreign), old_foreign)
    record.updated_ms = int(two_hours_ago * 1000)
    journal._store(table.io, old_foreign, record.to_json())
    os.utime(_path(old_foreign), (two_hours_ago, two_hours_ago))

    dry = run_maintenance(table, LEFTOVERS_ONLY, local_rewrite(table.io, TARGET), dry_run=True)
    dry_job = dry.job("leftovers")
    assert dry_job is not None
    assert dry_job.figures == {"dead_runs": 1, "live_runs": 3, "leftovers": 1}
    assert os.path.exists(_path(stale)) and os.path.exists(_path(old_foreign))

    report = run_maintenance(table, LEFTOVERS_ONLY, local_rewrite(table.io, TARGET))
    job = report.job("leftovers")
    assert job is not None
    assert job.figures == {"dead_runs": 1, "live_runs": 3, "leftovers_deleted": 1}
    assert not os.path.exists(_path(stale)) and not os.path.exists(_path(old_foreign))
    for kept in (mine, live, theirs, foreign, boxed, other_ns):
        assert os.path.exists(_path(kept)), kept


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_a_killed_unreaped_process_is_dead_and_a_finished_journal_too() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stat = journal._proc_stat(child.pid)
        owner = Owner(socket.gethostname(), child.pid, stat[1] if stat else None, None)
        assert journal.process_alive(owner)
        assert not journal.process_alive(
            Owner(owner.host, owner.pid, (owner.pid_start or 0) + 1, None)
        )
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while journal.process_alive(owner) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not journal.process_alive(owner)  # a zombie until reaped
    finally:
        child.wait()
    me = Owner.current()
    now = int(time.time() * 1000)
    finished = JournalRecord("r", me, now, now, [], finished=True)
    assert journal.is_dead(journal.FoundJournal("x", now, finished), now, me)
    running = JournalRecord("r", me, now, now, [])
    assert not journal.is_dead(journal.FoundJournal("x", now, running), now, me)


def test_a_finished_pass_leaves_no_journal_and_no_unreferenced_file(sqlite_catalog) -> None:
    table, _ = _table(sqlite_catalog, "finished")
    report = run_maintenance(table, POLICY, local_rewrite(table.io, TARGET))
    assert report.ok, report.lines()
    assert journal.list_journals(table.io, table.metadata) == []
    # Files a run wrote and never committed are deleted by that run when it finishes.
    run = RunJournal(table.io, table.metadata).start()
    try:
        written = write_partitioned(table, [row(10_000)])
    finally:
        run.stop()
    (data_file, _), *_ = written
    assert os.path.exists(_path(data_file.file_path))
    assert run.finish(table) == 1
    assert not os.path.exists(_path(data_file.file_path))

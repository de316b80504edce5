"""The demo's live progress line: produced, committed, records/s, lag, commits, DVs."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

from calving.ingest.sink.coordinator import BatchStats


@dataclass
class Totals:
    produced: int = 0  # Kafka records acknowledged by the broker
    committed: int = 0  # Kafka records covered by committed snapshots (ledger)
    commits: int = 0
    skipped: int = 0
    rows_added: int = 0
    rows_deleted: int = 0
    dv_files: int = 0
    dead_letters: int = 0


class Progress:
    """Thread-safe counters fed by the producer thread and the sink's ``on_batch``; one
    status line drawn in place on a terminal, or a line every few seconds in a log."""

    def __init__(self, out: TextIO = sys.stdout, enabled: bool = True) -> None:
        self.totals = Totals()
        self._lock = threading.Lock()
        self._out = out
        self._enabled = enabled
        self._tty = out.isatty()
        self._started = time.monotonic()
        self._last_draw = 0.0
        self._rate_mark = (self._started, 0)
        self._rate = 0.0

    def produced(self, records: int) -> None:
        with self._lock:
            self.totals.produced += records

    def on_batch(self, stats: BatchStats) -> None:
        with self._lock:
            t = self.totals
            if stats.outcome == "committed":
                t.commits += 1
                t.committed += stats.records
                t.rows_added += stats.added_rows
                t.rows_deleted += stats.deleted_rows
                t.dv_files += stats.dv_files
                t.dead_letters += stats.dead_letters
            elif stats.outcome == "skipped":
                t.skipped += 1

    def line(self) -> str:
        with self._lock:
            t = self.totals
            now = time.monotonic()
            mark_time, mark_count = self._rate_mark
            if now - mark_time >= 2.0:
                self._rate = (t.committed - mark_count) / (now - mark_time)
                self._rate_mark = (now, t.committed)
            return (
                f"[{now - self._started:6.1f}s] produced {t.produced:>8,}  committed "
                f"{t.committed:>8,} ({self._rate:>8,.0f} rec/s)  lag {t.produced - t.committed:>7,}"
                f"  commits {t.commits:>4}  DVs {t.dv_files:>4}  deleted {t.rows_deleted:>7,}"
                f"  dead letters {t.dead_letters}"
            )

    def draw(self, force: bool = False) -> None:
        if not self._enabled:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < (0.5 if self._tty else 5.0):
            return
        self._last_draw = now
        if self._tty:
            self._out.write("\r" + self.line() + "\x1b[K")
        else:
            self._out.write(self.line() + "\n")
        self._out.flush()

    def finish(self) -> None:
        if self._enabled:
            self.draw(force=True)
            if self._tty:
                self._out.write("\n")
                self._out.flush()

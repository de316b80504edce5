"""A recorder of every commit attempt, shared by writer processes through one file.

Each writer process appends JSON lines (one ``os.write`` on an ``O_APPEND`` descriptor
per event, so lines from concurrent processes never interleave) to the scenario's
history file. An attempt is an ``invoke`` event followed, unless the process died in
between, by exactly one outcome event with the same ``attempt`` id:

* ``ok``: committed (``snapshot`` is the new snapshot id, ``base`` its parent);
* ``skip``: nothing committed (an exactly-once replay);
* ``conflict``: certainly not committed (validation failed or retries ran out);
* ``unknown``: the commit loop could not tell;
* ``error``: an exception escaped the commit loop.

The harness adds ``crash`` events (a writer killed at a fault point) and ``run`` events
(a writer process started, with its arguments). An ``invoke`` without an outcome is a
commit that was cut off by a crash: it may or may not have landed.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUTCOMES = ("ok", "skip", "conflict", "unknown", "error")
EVENTS = ("run", "invoke", "crash", *OUTCOMES)


@dataclass(frozen=True)
class Claim:
    """The offsets one commit claims for one writer: ``[start, end)`` of a partition."""

    writer: str
    topic: str
    partition: int
    start: int
    end: int

    def to_json(self) -> dict[str, Any]:
        return {
            "writer": self.writer,
            "topic": self.topic,
            "partition": self.partition,
            "start": self.start,
            "end": self.end,
        }

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> Claim:
        return Claim(
            str(obj["writer"]),
            str(obj["topic"]),
            int(obj["partition"]),
            int(obj["start"]),
            int(obj["end"]),
        )


@dataclass(frozen=True)
class Event:
    event: str
    writer: str
    run: str
    attempt: str | None = None
    kind: str | None = None  # "append" | "delta" | "seed" | ... (what was committed)
    claim: Claim | None = None
    base: int | None = None  # snapshot id the attempt started from (or its parent)
    snapshot: int | None = None  # new snapshot id (ok)
    attempts: int | None = None  # commit-loop attempts (swap retries + 1)
    detail: str | None = None
    time: float = 0.0
    pid: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "event": self.event,
            "writer": self.writer,
            "run": self.run,
            "time": self.time,
            "pid": self.pid,
        }
        for key in ("attempt", "kind", "base", "snapshot", "attempts", "detail"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.claim is not None:
            out["claim"] = self.claim.to_json()
        if self.extra:
            out["extra"] = dict(self.extra)
        return out

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> Event:
        claim = obj.get("claim")
        return Event(
            event=str(obj["event"]),
            writer=str(obj["writer"]),
            run=str(obj["run"]),
            attempt=obj.get("attempt"),
            kind=obj.get("kind"),
            claim=None if claim is None else Claim.from_json(claim),
            base=obj.get("base"),
            snapshot=obj.get("snapshot"),
            attempts=obj.get("attempts"),
            detail=obj.get("detail"),
            time=float(obj.get("time", 0.0)),
            pid=int(obj.get("pid", 0)),
            extra=obj.get("extra") or {},
        )


class HistoryRecorder:
    """Appends events for one writer process (``run``) to the shared history file."""

    def __init__(self, path: str | Path, writer: str, run: str | None = None) -> None:
        self.path = str(path)
        self.writer = writer
        self.run = run or uuid.uuid4().hex[:10]

    def _append(self, event: Event) -> None:
        line = (json.dumps(event.to_json(), separators=(",", ":"), sort_keys=True) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def record(self, event: str, **fields: Any) -> Event:
        if event not in EVENTS:
            raise ValueError(f"unknown history event {event!r}")
        ev = Event(
            event=event,
            writer=self.writer,
            run=self.run,
            time=time.time(),
            pid=os.getpid(),
            **fields,
        )
        self._append(ev)
        return ev

    def invoke(self, kind: str, claim: Claim | None, base: int | None) -> str:
        attempt = uuid.uuid4().hex[:12]
        self.record("invoke", attempt=attempt, kind=kind, claim=claim, base=base)
        return attempt


def read_history(path: str | Path) -> list[Event]:
    """Every event in the file, in append order (a torn last line is ignored)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    events: list[Event] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            events.append(Event.from_json(json.loads(line)))
        except (ValueError, KeyError):
            continue  # a line cut by a kill mid-write: never an outcome we rely on
    return events


@dataclass(frozen=True)
class Attempt:
    """An ``invoke`` and its outcome event (``None`` if the process died first)."""

    invoke: Event
    outcome: Event | None

    @property
    def status(self) -> str:
        return "cut" if self.outcome is None else self.outcome.event

    @property
    def claim(self) -> Claim | None:
        return self.invoke.claim


def attempts(events: Iterable[Event]) -> list[Attempt]:
    invokes: dict[str, Event] = {}
    outcomes: dict[str, Event] = {}
    order: list[str] = []
    for ev in events:
        if ev.attempt is None:
            continue
        if ev.event == "invoke":
            invokes[ev.attempt] = ev
            order.append(ev.attempt)
        elif ev.event in OUTCOMES:
            outcomes[ev.attempt] = ev
    return [Attempt(invokes[a], outcomes.get(a)) for a in order]


def crashes(events: Iterable[Event]) -> list[Event]:
    return [ev for ev in events if ev.event == "crash"]


def runs(events: Iterable[Event]) -> list[Event]:
    return [ev for ev in events if ev.event == "run"]


def by_writer(events: Iterable[Event]) -> Iterator[tuple[str, list[Event]]]:
    grouped: dict[str, list[Event]] = {}
    for ev in events:
        grouped.setdefault(ev.writer, []).append(ev)
    yield from sorted(grouped.items())

"""The demo's change stream: its final state is what folding the produced records gives."""

from __future__ import annotations

import datetime as dt
import json

from calving.ingest.demo.generator import COLUMN_NAMES, CdcGenerator


def _fold(records: list[tuple[int, bytes | None, bytes | None, None]]) -> dict[int, tuple]:
    """An independent reading of the records: apply each decodable event in order."""
    state: dict[int, tuple] = {}
    for _, key, value, _ in records:
        if value is None:
            state.pop(json.loads(key)["id"], None)
            continue
        try:
            event = json.loads(value)
        except ValueError:
            continue  # poison
        if event["op"] == "d":
            state.pop(event["before"]["id"], None)
        else:
            after = event["after"]
            ts = dt.datetime.fromisoformat(after["updated_at"].replace("Z", "+00:00"))
            state[after["id"]] = tuple(after[c] for c in COLUMN_NAMES[:-1]) + (ts,)
    return state


def test_final_state_is_the_fold_of_the_records() -> None:
    gen = CdcGenerator(events=5_000, keys=700, partitions=3, poison=7, seed=11)
    records = [r for chunk in gen.chunks(600) for r in chunk]
    s = gen.stream
    assert s.records == len(records)
    assert s.events == 5_000 and s.poison == 7
    assert s.creates + s.updates + s.deletes == s.events
    assert (s.updates + s.deletes) / s.events >= 0.30
    assert s.tombstones == s.deletes == sum(1 for r in records if r[2] is None)
    assert _fold(records) == s.final
    assert s.expected_rows() == sorted(s.final.values())


def test_a_key_stays_on_one_partition_and_poison_is_undecodable() -> None:
    gen = CdcGenerator(events=2_000, keys=100, partitions=4, poison=5, seed=3)
    records = [r for chunk in gen.chunks(10_000) for r in chunk]
    partitions: dict[int, set[int]] = {}
    bad = 0
    for part, key, value, _ in records:
        partitions.setdefault(json.loads(key)["id"], set()).add(part)
        if value is not None:
            try:
                json.loads(value)
            except ValueError:
                bad += 1
    assert all(len(p) == 1 for p in partitions.values())
    assert bad == 5


def test_same_seed_same_stream() -> None:
    a = [r for c in CdcGenerator(300, 50, 2, seed=9).chunks(100) for r in c]
    b = [r for c in CdcGenerator(300, 50, 2, seed=9).chunks(100) for r in c]
    c = [r for c in CdcGenerator(300, 50, 2, seed=10).chunks(100) for r in c]
    assert a == b and a != c

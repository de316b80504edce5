"""The write tasks' shard steps as values: their codec, and the driver's merge (and
what it refuses)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from calving.commit.index.shards import ShardFile, ShardManifest
from calving.commit.index.task_steps import (
    MergedSteps,
    PlacedSteps,
    TaskSteps,
    merge_task_steps,
    steps_from_payload,
    steps_to_payload,
)
from calving.commit.spec.types import LONG

BASE = ShardFile(0, "s0-base", 10, 7, ("d1",))
OTHER = ShardFile(1, "s1-base", 5, 7, ())
MANIFEST = ShardManifest("uuid", 7, (1,), (LONG,), 2, (("a", 10), ("b", 5)), (BASE, OTHER))


def _steps(
    chains: tuple[ShardFile, ...],
    key_rows: list[int],
    paths: tuple[str, ...],
    file_ids: list[int],
    positions: list[int],
    *,
    file_rows: int = 2,
    delete_rows: int = 1,
    manifest: str = "m.calvshards",
) -> TaskSteps:
    return TaskSteps(
        manifest,
        7,
        file_rows,
        delete_rows,
        chains,
        tuple(("new-file",) for _ in chains),
        np.array(key_rows, np.int64),
        paths,
        np.array(file_ids, np.uint32),
        np.array(positions, np.int64),
        cache_hits=1,
    )


def test_steps_round_trip_through_the_message_payload() -> None:
    steps = _steps((ShardFile(0, "s0-base", 11, 7, ("d1", "t0")),), [0, 2], ("a",), [0, 0], [3, 9])
    steps = replace(steps, task=3, read_ahead=2)
    back = steps_from_payload(*steps_to_payload(steps))
    assert back.read_ahead == 2
    assert (
        back.task == 3
        and steps_from_payload(*steps_to_payload(replace(steps, task=None))).task is None
    )
    assert back.chains == steps.chains and back.added == steps.added
    assert back.paths == steps.paths and back.manifest == steps.manifest
    assert (back.file_rows, back.delete_rows, back.cache_hits) == (2, 1, 1)
    for name in ("key_rows", "file_ids", "positions"):
        assert getattr(back, name).tolist() == getattr(steps, name).tolist()


def test_matches_travel_as_uint32_and_the_largest_position_comes_back() -> None:
    top = (1 << 32) - 1
    n = 10_000
    steps = _steps((), list(range(n)), ("a",), [0] * n, [top - i for i in range(n)])
    _, matches = steps_to_payload(steps)
    assert 12 * n <= len(matches) < 12 * n + 1024  # three uint32 columns, no more
    back = steps_from_payload(*steps_to_payload(steps))
    assert back.positions.dtype == np.int64 and int(back.positions[0]) == top
    assert back.key_rows.tolist() == list(range(n))
    with pytest.raises(pa.ArrowInvalid):  # refused, never wrapped
        steps_to_payload(_steps((), [0], ("a",), [0], [top + 1]))


def test_a_payload_naming_a_file_it_does_not_list_is_refused() -> None:
    payload, matches = steps_to_payload(_steps((), [0], ("a",), [0], [1]))
    with pytest.raises(ValueError, match="names a file"):
        steps_from_payload(payload.replace('"paths":["a"]', '"paths":[]'), matches)


def test_two_tasks_merge_into_the_batchs_keys_and_one_chain_a_shard() -> None:
    # Task 0: files' keys rows 0-1, deleted key row 2; task 1: files' keys 0-1, deleted 2.
    # The batch: files' keys [t0 0, t0 1, t1 0, t1 1], then deleted [t0, t1].
    t0 = _steps((ShardFile(0, "s0-base", 11, 7, ("d1", "t0")),), [0, 2], ("a",), [0, 0], [3, 9])
    t1 = _steps(
        (ShardFile(0, "s0-base", 9, 7, ("d1", "t1")), ShardFile(1, "s1-base", 5, 7, ())),
        [1, 2],
        ("b", "a"),
        [0, 1],
        [4, 1],
    )
    merged = merge_task_steps(
        MANIFEST, "m.calvshards", [PlacedSteps(t0, 0, 0), PlacedSteps(t1, 2, 1)], 4, 2
    )
    assert isinstance(merged, MergedSteps)
    m = merged.matches
    assert m.key_rows.tolist() == [0, 3, 4, 5]
    assert [m.file_path(f) for f in m.file_ids] == ["a", "b", "a", "a"]
    assert m.positions.tolist() == [3, 4, 9, 1]
    assert m.found.tolist() == [True, False, False, True, True, True]
    by_shard = {r.chain.shard: r for r in merged.results}
    assert by_shard[0].chain == ShardFile(0, "s0-base", 10 + 1 - 1, 7, ("d1", "t0", "t1"))
    assert by_shard[1].chain == OTHER  # the task changed nothing there
    assert merged.cache_hits == 2


@pytest.mark.parametrize(
    ("steps", "file_rows", "why"),
    [
        (_steps((), [], (), [], [], manifest="older.calvshards"), 2, "steps ran on"),
        (_steps((), [], (), [], []), 3, "do not cover"),
        (_steps((ShardFile(0, "other-base", 10, 7, ("d1", "t0")),), [], (), [], []), 2, "extend"),
        (_steps((ShardFile(0, "s0-base", 10, 7, ("d1", "x", "y")),), [], (), [], []), 2, "extend"),
    ],
)
def test_steps_that_do_not_make_the_batch_are_refused(
    steps: TaskSteps, file_rows: int, why: str
) -> None:
    merged = merge_task_steps(MANIFEST, "m.calvshards", [PlacedSteps(steps, 0, 0)], file_rows, 1)
    assert isinstance(merged, str) and why in merged


@pytest.mark.parametrize("first_rebased", [True, False])
def test_rebased_chains_merge_on_the_first_tasks_base(first_rebased: bool) -> None:
    """Tasks that rebased shard 0 each wrote the manifest's chain as a base of their own
    with their delta on it: the merged chain is the first such base with every task's
    delta; the other base is spare, and the kept one holds the manifest's chain. A task
    that did not rebase adds its delta all the same."""
    t0_chain = (
        ShardFile(0, "b-t0", 11, 7, ("t0",))
        if first_rebased
        else ShardFile(0, "s0-base", 11, 7, ("d1", "t0"))
    )
    t0 = _steps((t0_chain,), [0, 2], ("a",), [0, 0], [3, 9])
    t1 = _steps((ShardFile(0, "b-t1", 9, 7, ("t1",)),), [1, 2], ("b",), [0, 0], [4, 1])
    merged = merge_task_steps(
        MANIFEST, "m.calvshards", [PlacedSteps(t0, 0, 0), PlacedSteps(t1, 2, 1)], 4, 2
    )
    assert isinstance(merged, MergedSteps)
    kept = "b-t0" if first_rebased else "b-t1"
    assert merged.results[0].chain == ShardFile(0, kept, 10, 7, ("t0", "t1"))
    assert merged.rebased == {kept: ("s0-base", "d1")}
    assert merged.spare == (("b-t1",) if first_rebased else ())


def test_a_rebased_chain_at_another_snapshot_is_refused() -> None:
    steps = _steps((ShardFile(0, "b-t0", 11, 6, ("t0",)),), [], (), [], [])
    merged = merge_task_steps(MANIFEST, "m.calvshards", [PlacedSteps(steps, 0, 0)], 2, 1)
    assert isinstance(merged, str) and "extend" in merged

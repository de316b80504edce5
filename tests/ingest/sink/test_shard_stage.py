"""``shard_stage.owner_groups``: a batch's shard steps grouped by owner executor."""

from __future__ import annotations

from calving.commit.index.keys import IntKeys
from calving.commit.index.shard_lookup import ShardRequest
from calving.ingest.sink.shard_stage import owner_groups

PLACES = ["executor_127.0.0.1_0", "executor_127.0.0.1_1"]


def _requests(shards: list[int]) -> list[ShardRequest]:
    return [ShardRequest(s, IntKeys.concat([])) for s in shards]


def _shards(groups: list[tuple[int, list[ShardRequest]]]) -> list[tuple[int, list[int]]]:
    return [(owner, [r.shard for r in group]) for owner, group in groups]


def test_shard_s_goes_to_the_s_mod_n_th_executor() -> None:
    groups, places = owner_groups(_requests([5, 0, 1, 2, 4]), PLACES, 2)
    assert _shards(groups) == [(0, [0, 2, 4]), (1, [5, 1])]
    assert places == PLACES


def test_an_owner_splits_its_shards_over_its_share_of_the_tasks() -> None:
    groups, places = owner_groups(_requests(list(range(8))), PLACES, 4)
    assert _shards(groups) == [(0, [0, 4]), (0, [2, 6]), (1, [1, 5]), (1, [3, 7])]
    assert places == [PLACES[0], PLACES[0], PLACES[1], PLACES[1]]


def test_an_owner_with_no_touched_shard_gets_no_task() -> None:
    groups, places = owner_groups(_requests([0, 2]), PLACES + ["executor_h_2"], 1)
    assert _shards(groups) == [(0, [0]), (2, [2])]
    assert places == [PLACES[0], "executor_h_2"]

"""A stream keeps only its recent batches' stats, and counts them all."""

from __future__ import annotations

from calving.ingest.sink.history import BatchHistory


def test_only_the_last_batches_are_kept_and_every_one_is_counted():
    history: BatchHistory[int] = BatchHistory(keep=3)
    for batch in range(10):
        history.append(batch)
    assert list(history) == [7, 8, 9] and len(history) == 3 and history.total == 10
    assert history[-1] == 9 and history[0] == 7


def test_since_gives_the_batches_after_a_count_even_past_what_is_kept():
    history: BatchHistory[int] = BatchHistory(keep=3)
    assert history.since(0) == []
    history.append(0)
    history.append(1)
    seen = history.total
    assert history.since(0) == [0, 1]
    history.append(2)
    assert history.since(seen) == [2]
    for batch in range(3, 8):
        history.append(batch)
    assert history.since(seen) == [5, 6, 7]  # the ones not kept are gone
    assert history.since(history.total) == []

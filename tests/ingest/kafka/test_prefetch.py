"""Which of a task's ranges are fetched together (``small_ranges``)."""

from __future__ import annotations

from calving.ingest.kafka import prefetch
from calving.ingest.kafka.offsets import OffsetRange


def test_small_distinct_ranges_within_the_budget_smallest_first(monkeypatch) -> None:
    monkeypatch.setattr(prefetch, "BUDGET", 25)
    ranges = [
        OffsetRange("a", 0, 0, 10),
        OffsetRange("b", 0, 5, 6),
        OffsetRange("c", 0, 0, prefetch.SMALL_RANGE + 1),  # too big
        OffsetRange("d", 0, 0, 3),
        OffsetRange("d", 0, 3, 5),  # d/0 twice: read alone
        OffsetRange("e", 1, 7, 7),  # empty: neither fetched nor counted
        OffsetRange("e", 1, 0, 9),
        OffsetRange("f", 0, 0, 10),  # past the budget (1 + 9 + 10 = 20, then 30)
    ]
    picked = prefetch.small_ranges(ranges)
    assert picked == [ranges[1], ranges[6], ranges[0]]
    assert sum(r.size for r in picked) <= 25


def test_prefetch_groups_are_few_and_even(monkeypatch) -> None:
    from calving.ingest.kafka import range_reader

    monkeypatch.setattr(range_reader, "PREFETCH_PARTITIONS", 16)
    ranges = [OffsetRange(f"t{i}", 0, 0, 1) for i in range(20)]
    groups = range_reader.prefetch_groups(ranges)
    assert [len(g) for g in groups] == [10, 10]
    assert [r for g in groups for r in g] == ranges
    assert [len(g) for g in range_reader.prefetch_groups(ranges[:16])] == [16]
    assert [len(g) for g in range_reader.prefetch_groups(ranges * 25)] == [16] * 31 + [4]
    assert range_reader.prefetch_groups([]) == [[]]

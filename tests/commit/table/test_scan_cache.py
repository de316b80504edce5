"""The scan caches' bounds: by count, and by weight (a manifest's entries)."""

from __future__ import annotations

from typing import Any, cast

from calving.commit.table.scan import _MANIFESTS, _Lru


def test_the_least_recently_used_go_past_the_weight_bound():
    cache = _Lru(100, max_weight=10)
    cache.put("a", (1,) * 4)
    cache.put("b", (1,) * 4)
    assert cache.get("a") is not None  # "b" is now the least recently used
    cache.put("c", (1,) * 4)  # 12 > 10: "b" goes
    assert cache.get("b") is None
    assert cache.get("a") is not None and cache.get("c") is not None
    cache.put("a", (1,) * 2)  # replacing a value re-weighs it: 6, nothing goes
    cache.put("d", (1,) * 4)  # 10
    assert all(cache.get(k) is not None for k in "acd")


def test_one_value_heavier_than_the_bound_is_still_kept_alone():
    cache = _Lru(100, max_weight=3)
    cache.put("a", (1,))
    cache.put("big", (1,) * 50)
    assert cache.get("a") is None and cache.get("big") is not None


def test_the_count_bound_still_holds_and_clear_resets_the_weight():
    cache = _Lru(2, max_weight=1000)
    for k in "abc":
        cache.put(k, (1,))
    assert cache.get("a") is None
    cache.clear()
    cache.put("x", (1,) * 1000)
    assert cache.get("x") is not None


def test_manifests_are_bounded_by_their_entries():
    assert _MANIFESTS._max_weight is not None


def test_a_written_list_forgets_the_parents_manifests_it_drops(monkeypatch):
    from types import SimpleNamespace

    from calving.commit.table import scan

    monkeypatch.setattr(scan, "_MANIFESTS", _Lru(100))
    monkeypatch.setattr(scan, "_MANIFEST_LISTS", _Lru(100))
    # Stand-ins: the cache reads only these attributes.
    m1, m2, m3 = (cast(Any, SimpleNamespace(manifest_path=f"m{i}.avro")) for i in (1, 2, 3))
    for m in (m1, m2, m3):
        scan._MANIFESTS.put(m.manifest_path, ("entry",))
    scan.remember_written_manifest_list("list-0.avro", [m1, m2])
    parent: Any = SimpleNamespace(manifest_list="list-0.avro")
    scan.remember_written_manifest_list("list-1.avro", [m2, m3], parent)
    assert scan._MANIFESTS.get("m1.avro") is None  # merged away: forgotten
    assert scan._MANIFESTS.get("m2.avro") is not None
    assert scan._MANIFESTS.get("m3.avro") is not None
    # A parent whose list is not cached: nothing to compare, nothing forgotten.
    unknown: Any = SimpleNamespace(manifest_list="x")
    scan.remember_written_manifest_list("list-2.avro", [m3], unknown)
    assert scan._MANIFESTS.get("m2.avro") is not None

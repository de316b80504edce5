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


def test_a_carried_manifest_needing_no_row_ids_is_checked_once(sqlite_catalog, monkeypatch):
    """A merged manifest has no ``first_row_id`` of its own (its entries keep theirs)
    and is carried into every later snapshot: its entries are checked for rows needing
    ids once, not again on every commit (that re-check grew commit time with the
    table)."""
    import pyarrow as pa

    from calving.commit.spec.data_file import ManifestContent
    from calving.commit.spec.schema import Schema
    from calving.commit.spec.types import LONG, NestedField
    from calving.commit.table import producer, scan
    from calving.commit.table.actions.fast_append import FastAppend
    from calving.commit.table.table import create_table
    from calving.ingest.write.parquet_writer import write_data_file

    schema = Schema((NestedField(1, "id", LONG, required=True),))
    props = {"commit.manifest.min-count-to-merge": "3"}
    table = create_table(sqlite_catalog, ("db", "t"), schema, properties=props)

    def append(n: int) -> None:
        loc = f"{table.metadata.location}/data/f{n}.parquet"
        rows = pa.table({"id": pa.array([n, n + 100], pa.int64())})
        table.commit_or_raise(FastAppend((write_data_file(table.io, loc, rows, schema),)))

    for n in range(8):
        append(n)
    current = scan.manifest_files(table.io, table.metadata.current_snapshot)
    merged = [m for m in current if m.content == ManifestContent.DATA and m.first_row_id is None]
    assert merged  # the shape this is about: a carried manifest without an id
    checked: list[str] = []
    original = producer.SnapshotProducer._entries

    def spy(self, mf):
        checked.append(mf.manifest_path)
        return original(self, mf)

    monkeypatch.setattr(producer.SnapshotProducer, "_entries", spy)
    scan.clear_caches()  # as a new process: the first commit checks it, later ones not
    append(8)
    assert merged[0].manifest_path in checked
    checked.clear()
    append(9)
    assert merged[0].manifest_path not in checked
    after = scan.manifest_files(table.io, table.metadata.current_snapshot)
    assert merged[0].manifest_path in {m.manifest_path for m in after}  # still carried
    assert table.metadata.next_row_id == 20  # every row of the ten files got an id

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


def test_a_history_walk_drops_what_expired_snapshots_left_in_the_cache(sqlite_catalog):
    """A long stream's maintenance walks the kept history (orphans, expiry) and so parses
    the manifests of old snapshots. Once those snapshots expire (here by a commit that
    does not delete their files, as another process's expiry looks to this one), the
    next walk must drop what it cached of them: only what the kept snapshots reach stays
    (it grew a 5,000-batch soak's driver by about 90 MB before)."""
    import pyarrow as pa

    from calving.commit.spec.schema import Schema
    from calving.commit.spec.types import LONG, NestedField
    from calving.commit.table import scan
    from calving.commit.table.actions.expire_snapshots import ExpireSnapshots
    from calving.commit.table.actions.fast_append import FastAppend
    from calving.commit.table.table import create_table
    from calving.ingest.write.parquet_writer import write_data_file

    schema = Schema((NestedField(1, "id", LONG, required=True),))
    props = {"commit.manifest.min-count-to-merge": "4"}
    table = create_table(sqlite_catalog, ("db", "walk"), schema, properties=props)
    other = create_table(sqlite_catalog, ("db", "other"), schema)
    for n in range(12):
        for t in (table, other):
            loc = f"{t.metadata.location}/data/f{n}.parquet"
            rows = pa.table({"id": pa.array([n], pa.int64())})
            t.commit_or_raise(FastAppend((write_data_file(t.io, loc, rows, schema),)))
    scan.history_files(table.io, table.metadata)  # every snapshot's manifests, cached
    scan.history_files(other.io, other.metadata)
    prefix = scan.manifests_directory(table.metadata.location) + "/"

    def cached(cache: _Lru, under: str) -> set[str]:
        return {k for k in list(cache._items) if k.startswith(under)}

    old = cached(scan._MANIFESTS, prefix)
    table.commit_or_raise(ExpireSnapshots(retain_last=1, delete_files=False))
    table = table.refresh()
    assert len(table.metadata.snapshots) == 1
    others = cached(scan._MANIFESTS, scan.manifests_directory(other.metadata.location))
    reached = scan.history_files(table.io, table.metadata)
    left = cached(scan._MANIFESTS, prefix) | cached(scan._MANIFEST_LISTS, prefix)
    assert left and left <= reached, left - reached
    assert len(cached(scan._MANIFESTS, prefix)) < len(old)
    # Another table's entries are not this walk's business.
    assert cached(scan._MANIFESTS, scan.manifests_directory(other.metadata.location)) == others
    # Expiry that deletes the files forgets them at once.
    for n in range(3):
        loc = f"{table.metadata.location}/data/g{n}.parquet"
        rows = pa.table({"id": pa.array([100 + n], pa.int64())})
        table.commit_or_raise(FastAppend((write_data_file(table.io, loc, rows, schema),)))
    scan.history_files(table.io, table.metadata)
    expire = ExpireSnapshots(retain_last=1)
    table.commit_or_raise(expire)
    assert expire.deleted
    assert not set(expire.deleted) & (
        cached(scan._MANIFESTS, prefix) | cached(scan._MANIFEST_LISTS, prefix)
    )


def test_a_new_dv_of_a_data_file_drops_the_one_before_from_the_cache(monkeypatch):
    """A data file has one DV at a time: a stream rewriting the growing DVs of a big
    table's files must not keep every earlier version (the next commit merges into the
    newest; an older one is read from its file if ever asked for)."""
    from pyroaring import BitMap64

    from calving.commit.table import scan

    monkeypatch.setattr(scan, "_DVS", _Lru(100))
    monkeypatch.setattr(scan, "_DV_OF_FILE", _Lru(100))
    scan.remember_written_dv("a.puffin", 4, BitMap64([1, 2]), "data-1.parquet")
    scan.remember_written_dv("b.puffin", 4, BitMap64([1, 2, 3]), "data-1.parquet")
    scan.remember_written_dv("b.puffin", 40, BitMap64([7]), "data-2.parquet")
    assert scan._DVS.get("a.puffin@4") is None
    assert scan._DVS.get("b.puffin@4") == BitMap64([1, 2, 3])
    assert scan._DVS.get("b.puffin@40") == BitMap64([7])

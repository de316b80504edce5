"""The index against a plain dict model: random add / delete / remove / replace /
compact / export-import sequences, every lookup compared exactly (duplicates included).

Run for int64, string and composite keys, each with the real hasher and with a weak one
that makes almost every key collide, so exactness cannot rest on the hash."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from calving.commit.index.keys import ByteKeys, KeyHasher
from calving.commit.index.pk_index import PrimaryKeyIndex
from calving.commit.spec.position_map import PositionMap
from calving.commit.spec.types import LONG, STRING, PrimitiveType


class WeakHasher(KeyHasher):
    """Two hash values in all: nearly every lookup meets colliding keys."""

    name = "weak-test-hasher"
    ints_are_keys = False

    def hash_ints(self, values: np.ndarray) -> np.ndarray:
        return (values.view(np.uint64) & np.uint64(1)).astype(np.uint64)

    def hash_bytes(self, keys: ByteKeys) -> np.ndarray:
        return (keys.lengths % 2).astype(np.uint64)


_INT_POOL = [-(2**63), -(2**62), -1, 0, 1, 2**31, 2**62, 2**63 - 1]
_texts = st.text(alphabet="ab\x00é", max_size=9)
_short = st.text(alphabet="ab", max_size=3)


def _shift_boundary(k: tuple[str, str, int, str]) -> tuple[str, str, int, str]:
    a, b, c, d = k
    return (a + b[:1], b[1:], c, d) if b else (a[:-1], a[-1:] + b, c, d)


# kind -> (key types, key values, values -> Arrow table, a near miss of a key)
KINDS: dict[
    str,
    tuple[
        list[PrimitiveType],
        st.SearchStrategy[Any],
        Callable[[list[Any]], pa.Table],
        Callable[[Any], Any],
    ],
] = {
    "int64": (
        [LONG],
        st.one_of(st.sampled_from(_INT_POOL), st.integers(-4, 4)),
        lambda ks: pa.table({"id": pa.array(ks, pa.int64())}),
        lambda k: k ^ 1,
    ),
    "string": (
        [STRING],
        _texts,
        lambda ks: pa.table({"k": pa.array(ks, pa.string())}),
        lambda k: k + "\x00",  # equal up to a trailing zero byte: the tail mask must not hide it
    ),
    # (string, string, long, string): ("a", "bc", ..) must differ from ("ab", "c", ..).
    "composite": (
        [STRING, STRING, LONG, STRING],
        st.tuples(_short, _short, st.integers(-1, 1), _short),
        lambda ks: pa.table(
            {
                "a": pa.array([k[0] for k in ks], pa.string()),
                "b": pa.array([k[1] for k in ks], pa.large_string()),
                "c": pa.array([k[2] for k in ks], pa.int64()),
                "d": pa.array([k[3] for k in ks], pa.string()),
            }
        ),
        _shift_boundary,
    ),
}


def machine(kind: str, hasher: KeyHasher) -> type[RuleBasedStateMachine]:
    types, key_strategy, to_table, near = KINDS[kind]

    class IndexVersusDict(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.index = PrimaryKeyIndex(
                list(range(1, len(types) + 1)),
                types,
                hasher=hasher,
                min_merge_rows=3,
                merge_fraction=0.3,
            )
            self.live: dict[str, dict[int, Any]] = {}  # path -> position -> key
            self.rows: dict[str, int] = {}
            self.seen: list[Any] = []
            self.counter = 0

        def _new_path(self) -> str:
            self.counter += 1
            return f"s3://b/data/f{self.counter}.parquet"

        @rule(keys=st.lists(key_strategy, max_size=8))
        def add_file(self, keys: list[Any]) -> None:
            path = self._new_path()
            self.index.add_file(path, to_table(keys))
            self.live[path] = dict(enumerate(keys))
            self.rows[path] = len(keys)
            self.seen += keys

        @rule(keys=st.lists(key_strategy, max_size=8), data=st.data())
        def add_file_with_positions(self, keys: list[Any], data: st.DataObject) -> None:
            path = self._new_path()
            rows = len(keys) + data.draw(st.integers(0, 3))
            positions = sorted(data.draw(st.permutations(range(rows)))[: len(keys)])
            self.index.add_file(path, to_table(keys), positions=positions, row_count=rows)
            self.live[path] = dict(zip(positions, keys))
            self.rows[path] = rows
            self.seen += keys

        @precondition(lambda self: self.live)
        @rule(data=st.data())
        def delete_positions(self, data: st.DataObject) -> None:
            path = data.draw(st.sampled_from(sorted(self.live)))
            rows = self.rows[path]
            positions = data.draw(st.lists(st.integers(0, max(rows - 1, 0)), max_size=4))
            if rows == 0:
                positions = []
            self.index.delete_positions(path, np.array(positions, np.int64))
            for p in positions:
                self.live[path].pop(p, None)

        @precondition(lambda self: self.live)
        @rule(data=st.data())
        def remove_file(self, data: st.DataObject) -> None:
            path = data.draw(st.sampled_from(sorted(self.live)))
            self.index.remove_file(path)
            del self.live[path]

        @precondition(lambda self: self.live)
        @rule(data=st.data())
        def replace_files(self, data: st.DataObject) -> None:
            removed = data.draw(
                st.lists(st.sampled_from(sorted(self.live)), min_size=1, max_size=3, unique=True)
            )
            survivors = [k for p in removed for _, k in sorted(self.live[p].items())]
            survivors = data.draw(st.permutations(survivors))
            split = data.draw(st.integers(0, len(survivors)))
            added = {self._new_path(): survivors[:split], self._new_path(): survivors[split:]}
            self.index.replace_files(removed, {p: to_table(ks) for p, ks in added.items()})
            for p in removed:
                del self.live[p]
            for p, ks in added.items():
                self.live[p] = dict(enumerate(ks))
                self.rows[p] = len(ks)

        @precondition(lambda self: self.live)
        @rule(data=st.data())
        def rewrite_with_a_map(self, data: st.DataObject) -> None:
            """A compaction with a position map: the live rows of a few files copied in
            any order to new files (with spare rows the map does not fill), followed by
            moving the entries, no key given."""
            removed = data.draw(
                st.lists(st.sampled_from(sorted(self.live)), min_size=1, max_size=3, unique=True)
            )
            rows = [(i, pos) for i, p in enumerate(removed) for pos in sorted(self.live[p])]
            rows = data.draw(st.permutations(rows))
            split = data.draw(st.integers(0, len(rows)))
            spare = data.draw(st.integers(0, 2))
            new_paths = (self._new_path(), self._new_path())
            of, op, nf, np_ = [], [], [], []
            for n, (i, pos) in enumerate(rows):
                target = 0 if n < split else 1
                of.append(i)
                op.append(pos)
                nf.append(target)
                np_.append(n if target == 0 else n - split)
            pmap = PositionMap.from_rows(
                tuple(removed), new_paths, *(np.array(a, np.int64) for a in (of, op, nf, np_))
            )
            sizes = {new_paths[0]: split + spare, new_paths[1]: len(rows) - split}
            self.index.remap_files(pmap, sizes)
            moved: dict[str, dict[int, Any]] = {p: {} for p in new_paths}
            for n, (i, pos) in enumerate(rows):
                target = 0 if n < split else 1
                moved[new_paths[target]][n if target == 0 else n - split] = self.live[removed[i]][
                    pos
                ]
            for p in removed:
                del self.live[p]
            for p in new_paths:
                self.live[p] = moved[p]
                self.rows[p] = sizes[p]

        @rule()
        def compact(self) -> None:
            self.index.compact()

        @rule()
        def export_and_import(self) -> None:
            keys, file_index, positions, files = self.index.export_entries()
            self.index = PrimaryKeyIndex.from_entries(
                self.index.key_field_ids,
                self.index.key_types,
                keys,
                file_index,
                positions,
                files,
                hasher=hasher,
                min_merge_rows=3,
                merge_fraction=0.3,
            )
            assert sorted(p for p, _ in files) == sorted(self.live)

        @rule(data=st.data())
        def lookup(self, data: st.DataObject) -> None:
            pool = st.sampled_from(self.seen) if self.seen else key_strategy
            queries = data.draw(
                st.lists(st.one_of(pool, pool.map(near), key_strategy), max_size=10)
            )
            matches = self.index.lookup(to_table(queries))
            got = sorted(
                (int(r), matches.file_path(f), int(p))
                for r, f, p in zip(matches.key_rows, matches.file_ids, matches.positions)
            )
            expected = sorted(
                (i, path, pos)
                for i, q in enumerate(queries)
                for path, rows in self.live.items()
                for pos, k in rows.items()
                if k == q
            )
            assert got == expected
            assert matches.found.tolist() == [
                any(e[0] == i for e in expected) for i in range(len(queries))
            ]
            assert list(matches.key_rows) == sorted(matches.key_rows)
            by_file = matches.by_file()
            assert {p: sorted(v.tolist()) for p, v in by_file.items()} == {
                p: sorted(pos for _, q, pos in expected if q == p) for p in {e[1] for e in expected}
            }

        @invariant()
        def files_agree(self) -> None:
            assert sorted(self.index.file_paths) == sorted(self.live)

    IndexVersusDict.TestCase.settings = settings(
        max_examples=35,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    return IndexVersusDict


class TestInt64Keys(machine("int64", KeyHasher()).TestCase):  # type: ignore[misc]  # hypothesis' state machine TestCase is typed Any
    pass


class TestInt64KeysWeakHash(machine("int64", WeakHasher()).TestCase):  # type: ignore[misc]  # hypothesis' state machine TestCase is typed Any
    pass


class TestStringKeys(machine("string", KeyHasher()).TestCase):  # type: ignore[misc]  # hypothesis' state machine TestCase is typed Any
    pass


class TestStringKeysWeakHash(machine("string", WeakHasher()).TestCase):  # type: ignore[misc]  # hypothesis' state machine TestCase is typed Any
    pass


class TestCompositeKeys(machine("composite", KeyHasher()).TestCase):  # type: ignore[misc]  # hypothesis' state machine TestCase is typed Any
    pass


class TestCompositeKeysWeakHash(machine("composite", WeakHasher()).TestCase):  # type: ignore[misc]  # hypothesis' state machine TestCase is typed Any
    pass


def test_live_counts_match_the_model_after_many_merges() -> None:
    index = PrimaryKeyIndex([1], [LONG], min_merge_rows=2, merge_fraction=0.1)
    for f in range(20):
        index.add_file(f"f{f}", pa.table({"id": pa.array(range(f, f + 10), pa.int64())}))
        index.delete_positions(f"f{f}", [0, 9])
        if f % 3 == 0:
            index.lookup(pa.table({"id": pa.array([f], pa.int64())}))
    index.remove_file("f4")
    assert len(index) == 19 * 8
    assert index.live_rows_per_file()["f7"] == 8
    assert "f4" not in index.live_rows_per_file()

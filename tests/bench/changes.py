"""``calving changes`` over a run of CDC upserts vs diffing two full scans with pyiceberg.

A keyed table of N rows (``tests.bench.cdc_upsert``'s table: ``id`` long primary key,
``v``, ``name``, ``score``, in 250k-row files) takes C commits of B-row upserts through
calving's real commit path (index lookup, new Parquet file, deletion vectors). Then,
interleaved and repeated (median), each cold (calving's manifest caches cleared):

* calving: ``read_changes`` from the snapshot before the upserts to the last one: one
  change row per row before and after each update (C x B x 2 rows: UPDATE_BEFORE and
  UPDATE_AFTER, the updates keeping their ``_row_id``), and the same range with ``net``;
* pyiceberg: scan the table whole at both snapshots and diff the two by key (a full
  outer join on ``id``, keeping keys whose row changed).

Both sides are checked: the keys calving reports changed are exactly the diff's. Wall
seconds and CPU seconds (this process, all threads) are reported side by side.

    python -m tests.bench.changes [--rows 1000000] [--commits 100] [--batch 1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.catalog import SqlCatalog
from calving.commit.changelog import read_changes
from calving.commit.table import scan
from tests.bench.cdc_upsert import CalvingCdc, Model
from tests.bench.figures import Figure, at_least

GOAL_SPEEDUP = 20.0
ROWS_PER_FILE = 250_000


@dataclass
class Timing:
    wall: list[float]
    cpu: list[float]

    @property
    def wall_s(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_s(self) -> float:
        return statistics.median(self.cpu)


def _timed(fn: Callable[[], Any], timing: Timing) -> Any:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    timing.wall.append(time.perf_counter() - wall)
    timing.cpu.append(time.process_time() - cpu)
    return out


def _full_scan_diff(metadata_location: str, start: int, end: int) -> set[int]:
    """Keys whose row differs between the two snapshots, from two pyiceberg scans."""
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_location)
    before = table.scan(snapshot_id=start).to_arrow()
    after = table.scan(snapshot_id=end).to_arrow()
    joined = before.join(after, "id", join_type="full outer", left_suffix="_a", right_suffix="_b")
    changed = None
    for name in ("v", "name", "score"):
        a, b = joined.column(f"{name}_a"), joined.column(f"{name}_b")
        differ = pc.or_(pc.invert(pc.fill_null(pc.equal(a, b), False)), pc.is_null(a))
        changed = differ if changed is None else pc.or_(changed, differ)
    return set(joined.filter(changed).column("id").to_pylist())


def floor_seconds(table: Any, start: int, end: int) -> dict[str, float]:
    """A lower bound for any reader of the range's changes with their before-images,
    measured (best of three, warm page cache): ``io``, reading the bytes (no decoding)
    of every file the range names (manifest lists, the snapshots' own manifests, the
    deletion vectors' Puffin files, the data files added), and ``before``, pyarrow
    decoding (all its threads) only the row groups that hold the deleted rows' old
    values. The manifests, vectors and added rows still have to be decoded on top."""
    import numpy as np
    import pyarrow.parquet as pq

    from calving.commit.changelog import delta, feed
    from calving.commit.changelog.range import resolve_range

    io, metadata = table.io, table.metadata
    snapshots = resolve_range(metadata, start, end).snapshots
    deltas = [delta.read_delta(io, metadata, s) for s in snapshots]
    names: set[str] = set()
    for s, d in zip(snapshots, deltas):
        names.add(s.manifest_list)
        names.update(mf.manifest_path for mf in scan.own_manifests(io, s))
        names.update(d.added)
        names.update(dv.file_path for dv in (*d.new_dvs.values(), *d.old_dvs.values()))
    groups: dict[str, set[int]] = {}
    for item in feed._items(io, deltas, feed._Directory(io, metadata, deltas)):
        if item.deleted and item.positions is not None and item.ref.path not in names:
            groups.setdefault(item.ref.path, set()).update(item.positions)
    plans = []
    for path, positions in groups.items():
        fs, local = io.resolve(path)
        meta = pq.read_metadata(local, filesystem=fs)
        starts = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
        wanted = np.unique(np.searchsorted(starts, sorted(positions), side="right") - 1)
        plans.append((fs, local, wanted.tolist()))
    locals_ = [io.resolve(n) for n in names]

    def read_bytes() -> None:
        for fs, local in locals_:
            with fs.open_input_stream(local) as f:
                f.read()

    def read_before() -> None:
        for fs, local, wanted in plans:
            pq.ParquetFile(local, filesystem=fs).read_row_groups(wanted, use_threads=True)

    best = {}
    for name, fn in (("io", read_bytes), ("before", read_before)):
        runs = []
        for _ in range(3):
            began = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - began)
        best[name] = min(runs)
    best["files"] = float(len(names))
    return best


def _changed_keys(changes: pa.Table) -> set[int]:
    return set(changes.column("id").to_pylist())


def run(rows: int, commits: int, batch: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-changes-") as tmp:
        catalog = SqlCatalog("bench", f"sqlite:///{tmp}/catalog.db", f"{tmp}/warehouse")
        catalog.create_namespace(("bench",))
        model = Model(rows)
        cdc = CalvingCdc(catalog, model, min(rows, ROWS_PER_FILE))
        start = cdc.table.metadata.current_snapshot_id
        assert start is not None
        for _ in range(commits):
            cdc.upsert(model.batch(batch))
        table = cdc.table
        end = table.metadata.current_snapshot_id
        assert end is not None
        calving, calving_net, peer = Timing([], []), Timing([], []), Timing([], [])

        def feed(net: bool) -> pa.Table:
            scan.clear_caches()
            return read_changes(table.io, table.metadata, start, end, net=net)

        for _ in range(repeat):
            changes = _timed(lambda: feed(False), calving)
            net = _timed(lambda: feed(True), calving_net)
            diff = _timed(lambda: _full_scan_diff(table.metadata_location, start, end), peer)
        if not (_changed_keys(changes) == _changed_keys(net) == diff):
            raise AssertionError("calving changes and the full-scan diff disagree on the keys")
        return {
            "floor": floor_seconds(table, start, end),
            "rows": rows,
            "commits": commits,
            "batch": batch,
            "change_rows": changes.num_rows,
            "net_rows": net.num_rows,
            "changed_keys": len(diff),
            "calving": calving,
            "calving_net": calving_net,
            "peer": peer,
        }


def _size(rows: int) -> str:
    return f"{rows // 1_000_000}M" if rows >= 1_000_000 else f"{rows // 1000}k"


def figures(quick: bool) -> list[Figure]:
    rows = 100_000 if quick else 1_000_000
    r = run(rows, commits=100, batch=1_000, repeat=3 if quick else 5)
    where = f"{r['commits']} commits of {r['batch']:,}-row upserts on a {_size(rows)}-row table"
    c, n, p = r["calving"], r["calving_net"], r["peer"]
    goal = f">= {GOAL_SPEEDUP:.0f}x" if rows >= 1_000_000 else ""
    ratio = p.wall_s / c.wall_s
    note = (
        f"{r['change_rows']:,} change rows, {r['net_rows']:,} net, {r['changed_keys']:,} keys "
        f"changed; CPU-s calving {c.cpu_s:.2f}, net {n.cpu_s:.2f}, pyiceberg {p.cpu_s:.2f}; "
        + _floor_text(r["floor"], p.wall_s)
    )
    per_row_us = c.wall_s / max(1, r["change_rows"]) * 1e6
    return [
        Figure(
            "changes",
            f"changes over {where}, s",
            c.wall_s,
            "pyiceberg: diff of two full scans",
            p.wall_s,
            goal=goal,
            met=at_least(ratio, GOAL_SPEEDUP) if goal else None,
            note=note,
        ),
        Figure(
            "changes",
            f"net changes over {where}, s",
            n.wall_s,
            "pyiceberg: diff of two full scans",
            p.wall_s,
        ),
        Figure(
            "changes", f"CPU-s of the changes over {where}", c.cpu_s, "pyiceberg CPU-s", p.cpu_s
        ),
        Figure(
            "changes",
            "changes: per change row, us",
            per_row_us,
            "pyiceberg per changed key",
            p.wall_s / max(1, r["changed_keys"]) * 1e6,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.changes", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    r = run(args.rows, args.commits, args.batch, args.repeat)
    c, n, p = r["calving"], r["calving_net"], r["peer"]
    print(
        f"{args.commits} commits x {args.batch} upserts on {args.rows:,} rows: "
        f"{r['change_rows']:,} change rows ({r['net_rows']:,} net, {r['changed_keys']:,} keys)"
    )
    for name, t in (("calving changes", c), ("calving changes --net", n), ("pyiceberg diff", p)):
        print(f"  {name:22s} {t.wall_s * 1000:9.1f} ms wall  {t.cpu_s:7.2f} CPU-s")
    print(
        f"  ratio (pyiceberg / calving): {p.wall_s / c.wall_s:.1f}x, net {p.wall_s / n.wall_s:.1f}x"
    )
    print(f"  {_floor_text(r['floor'], p.wall_s)}")
    return 0


def _floor_text(floor: dict[str, float], peer_s: float) -> str:
    budget = peer_s / GOAL_SPEEDUP
    least = floor["io"] + floor["before"]
    return (
        f"floor {least * 1000:.1f} ms (bytes of the range's {floor['files']:.0f} files "
        f"{floor['io'] * 1000:.1f} ms + before-images' row groups decoded "
        f"{floor['before'] * 1000:.1f} ms) against the {GOAL_SPEEDUP:.0f}x goal's "
        f"{budget * 1000:.1f} ms: {'within' if least <= budget else 'above'} it"
    )


if __name__ == "__main__":
    sys.exit(main())

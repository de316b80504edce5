"""cProfile of calving's two commit paths at the quick benchmark sizes.

* ``cdc``: upserts of 1k rows into a 100k-row keyed table (index lookup, Parquet
  write, ``RowDelta`` with DVs, metadata commit, index update), as ``cdc_upsert`` runs.
* ``append``: 10-file ``FastAppend`` commits on a table with ``--snapshots`` history,
  as ``commit_latency`` runs.

Only the measured operations are profiled (table set-up is not).

    python -m tests.bench.profile_commits [--path cdc|append] [--top 30] [--sort tottime]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile

from calving.commit.catalog import SqlCatalog
from tests.bench import cdc_upsert, commit_latency


def _catalog() -> tuple[SqlCatalog, str]:
    tmp = tempfile.mkdtemp(prefix="calving-profile-")
    catalog = SqlCatalog("bench", f"sqlite:///{tmp}/catalog.db", f"{tmp}/warehouse")
    catalog.create_namespace(("bench",))
    return catalog, tmp


def profile_cdc(
    batches: int, batch_rows: int, n_rows: int, rows_per_file: int = 25_000
) -> cProfile.Profile:
    catalog, _ = _catalog()
    model = cdc_upsert.Model(n_rows)
    side = cdc_upsert.CalvingCdc(catalog, model, rows_per_file=rows_per_file)
    side.upsert(model.batch(100))  # warm-up, as the benchmark does
    work = [model.batch(batch_rows) for _ in range(batches)]
    profile = cProfile.Profile()
    profile.enable()
    for batch in work:
        side.upsert(batch)
    profile.disable()
    return profile


def profile_append(snapshots: int, commits: int) -> cProfile.Profile:
    catalog, tmp = _catalog()
    side = commit_latency.CalvingSide(catalog, tmp)
    for _ in range(snapshots):
        side.commit(1)
    work = [side._files(commit_latency.FILES_PER_COMMIT) for _ in range(commits)]
    profile = cProfile.Profile()
    profile.enable()
    for files in work:
        side.table.commit_or_raise(commit_latency.FastAppend(files))
    profile.disable()
    return profile


def report(profile: cProfile.Profile, sort: str, top: int) -> str:
    out = io.StringIO()
    pstats.Stats(profile, stream=out).strip_dirs().sort_stats(sort).print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", choices=["cdc", "append"], default="cdc")
    ap.add_argument("--snapshots", type=int, default=100)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--batch-rows", type=int, default=1_000)
    ap.add_argument("--rows-per-file", type=int, default=25_000)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--sort", default="cumulative")
    args = ap.parse_args(argv)
    if args.path == "cdc":
        profile = profile_cdc(args.batches, args.batch_rows, args.rows, args.rows_per_file)
    else:
        profile = profile_append(args.snapshots, args.batches)
    print(report(profile, args.sort, args.top))


if __name__ == "__main__":
    main()

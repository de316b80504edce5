"""Smoke test of ``python -m tests.bench``'s structure (no timings asserted, ever):
a failing benchmark becomes a "not measured" row and a non-zero exit, the others still
run, and one cheap real benchmark (the index, at a tiny size) yields its figures."""

from __future__ import annotations

import json

import pytest

from tests.bench import __main__ as suite
from tests.bench import index_bench
from tests.bench.figures import Figure, render


def _ok(quick: bool) -> list[Figure]:
    return [Figure("ok", "a figure, ms", 1.0, "peer", 2.0, goal="<= 5 ms", met=True)]


def _broken(quick: bool) -> list[Figure]:
    raise RuntimeError("broker went away\nsecond line")


def test_a_failing_benchmark_is_reported_and_the_rest_run(capsys):
    figures, failed = suite.run([], True, {"broken": _broken, "ok": _ok})
    assert failed == ["broken"]
    assert [f.figure for f in figures] == ["not measured", "a figure, ms"]
    assert figures[0].value is None
    assert figures[0].note == "RuntimeError: broker went away second line"
    table = render(figures)
    assert "not measured" in table and "broker went away" in table
    assert "RuntimeError" in capsys.readouterr().err  # the traceback goes to stderr


def test_k_selects_by_substring():
    registry = {"commit_latency": _ok, "cdc_upsert": _ok, "throughput": _ok}
    assert suite.selected(["c"], registry) == ["commit_latency", "cdc_upsert"]
    assert suite.selected(["through", "cdc"], registry) == ["cdc_upsert", "throughput"]
    assert suite.selected([], registry) == list(registry)


def test_main_exit_status_and_table(monkeypatch, capsys):
    monkeypatch.setattr(suite, "BENCHMARKS", {"fine": _ok, "broken": _broken})
    assert suite.main(["--quick", "-k", "fine"]) == 0
    out = capsys.readouterr().out
    assert "machine:" in out and "cores" in out and "pyspark" in out
    assert "| ok " in out and "not measured" not in out
    assert suite.main(["--quick"]) == 1
    with pytest.raises(SystemExit):
        suite.main(["-k", "no-such-benchmark"])


def test_index_bench_figures_at_a_tiny_size():
    figures = index_bench.figures(True, sizes=[100_000], kinds=["long"])
    assert [f.figure for f in figures] == [
        "resident bytes/key, long keys @100k",
        "lookups/s, long keys @100k",
    ]
    for f in figures:
        assert f.value is not None and f.value > 0
        assert f.peer_value is not None and f.peer_value > 0
        assert f.ratio is not None and f.met is not None


@pytest.mark.integration
def test_shard_steps_bench_at_a_tiny_size():
    from tests.bench import shard_steps

    figures = shard_steps.figures(True, keys=200_000, shards=2, batch_keys=40_000, batches=8)
    assert [f.peer for f in figures] == ["no background work"] * 2
    assert all(f.value and f.peer_value for f in figures)
    assert "full merges" in figures[0].note and " 0 full merges" not in figures[0].note


@pytest.mark.slow
def test_maintenance_bench_at_a_tiny_size(tmp_path):
    """The maintenance benchmark runs end to end (it checks every table against the
    model with DuckDB and pyiceberg itself) and writes its figures as JSON."""
    from tests.bench import maintenance

    params = maintenance.Params(
        rows=20_000,
        commits=30,
        batch_rows=200,
        every=5,
        scan_repeat=1,
        window=5,
        concurrent_commits=20,
        concurrent_every=5,
    )
    out = tmp_path / "maintenance.json"
    figures = maintenance.figures(True, params, str(out))
    assert len(figures) == 10
    assert all(f.value is not None and f.peer_value is not None for f in figures[:-1])
    assert sum(f.met is not None for f in figures) == 6  # every goal was checked
    saved = json.loads(out.read_text())
    assert [f["figure"] for f in saved["figures"]] == [f.figure for f in figures]
    assert saved["stream"]["passes"] == 30 // 5
    concurrent = saved["concurrent"]
    assert concurrent["rewrites_attempted"] > 0
    assert concurrent["rewrites_failed"] == 0 and concurrent["stream_failures"] == 0
    assert figures[-1].met is True


@pytest.mark.integration  # starts `calving catalog serve` as a process
def test_rest_catalog_bench_at_a_tiny_size():
    from tests.bench import rest_catalog

    results = rest_catalog.run(repeat=3, quick=True)
    sides = results["sqlite"]
    assert set(sides) == {"sql", "rest", "pyiceberg"}
    assert all(r["median_ms"] > 0 for r in sides.values())
    assert "pyiceberg -> REST" in rest_catalog.report(results)


def test_decode_debezium_bench_at_a_tiny_size():
    from tests.bench import decode_debezium

    for with_schemas in (False, True):
        got = decode_debezium.measure(2_000, with_schemas)
        assert set(got) == {"per-event", "vectorized"}
        assert all(rate > 0 and cpu > 0 for rate, cpu in got.values())
    value = decode_debezium.wrapped(b'{"op":"c","after":{"id":1}}')
    assert value is not None and json.loads(value)["payload"]["after"] == {"id": 1}


def test_cost_figures_from_recorded_runs():
    """The cost benchmark's table from runs given as JSON: CPU per million over the whole
    run and after start-up, the goals checked on them, and the cluster scaling."""
    from tests.bench import cost

    def run(kind: str, seconds: float, cpu: float, batches: float) -> dict:
        side = {"seconds": seconds, "startup_s": 1.0, "cpu": {"jvm": cpu}}
        return {
            "kind": kind,
            "records": 1_000_000,
            "sides": {
                "calving": {**side, "cpu_batches": {"jvm": batches}},
                "raw": {"seconds": 4.0, "startup_s": 0.0, "cpu": {"driver": 4.0}},
                "pyiceberg": {**side, "cpu": {"jvm": 20.0}, "cpu_batches": {"jvm": 5.0}},
            },
        }

    figures = cost.to_figures(
        {
            "cluster x1": [run("json", 5.0, 12.0, 5.0)],
            "cluster x2": [run("json", 3.0, 13.0, 5.5)],
        }
    )
    by_name = {(f.figure, f.peer): f for f in figures}
    whole = by_name[("JSON append, cluster x1, CPU-s per million records, whole run",
                     "raw loop (1 process)")]  # fmt: skip
    assert (whole.value, whole.peer_value, whole.met) == (12.0, 4.0, False)
    after = by_name[("JSON append, cluster x1, CPU-s per million records, after query start-up",
                     "raw loop (1 process)")]  # fmt: skip
    assert (after.value, after.met) == (5.0, True)
    peer = by_name[("JSON append, cluster x1, CPU-s per million records, after query start-up",
                    "pyiceberg in foreachBatch")]  # fmt: skip
    assert (peer.peer_value, peer.met) == (5.0, False)  # equal is not below
    scaled = [f for f in figures if "standalone 2 workers" in f.figure]
    assert [round(f.ratio or 0, 2) for f in scaled] == [1.67, 2.0]  # 5/3, then 4/2
    assert [f.met for f in scaled] == [False, True]


def test_many_tables_start_bench_at_a_tiny_size():
    from tests.bench import many_tables_start

    among, alone, scanned = many_tables_start.startup(foreign=60, rounds=1)
    assert among > 0 and alone > 0 and scanned > 0


@pytest.mark.integration  # a child Python process per mode
def test_many_tables_memory_bench_at_a_tiny_size():
    from tests.bench import many_tables_memory

    m = many_tables_memory.measure(tables=4, keys=2_000)
    assert set(m) == {"unbounded", "budget", "small"}
    assert m["unbounded"]["evictions"] == 0 and m["unbounded"]["held_gib"] > 0


def test_cpu_used_leaves_out_processes_that_exited():
    """A group whose processes exited between two samples (Spark's Python workers of an
    earlier run, during the raw loop) must not come out below zero; a new process counts
    whole."""
    from tests.bench.streaming import cpu_used

    before = {("driver", 1): 5.0, ("python workers", 7): 40.0}
    after = {("driver", 1): 9.0, ("python workers", 8): 2.5, ("broker", 3): 1.0}
    assert cpu_used(before, after) == {"driver": 4.0, "python workers": 2.5, "broker": 1.0}


def test_the_soak_sums_given_up_groups_by_cause_over_the_pass_lines():
    from tests.bench.soak import _given_up_by

    def line(**by: int) -> str:
        return json.dumps({"event": "maintenance", "groups_given_up_by": by})

    lines = [
        "maintenance of shop.orders",
        line(RewriteConflictError=2),
        "  compact  groups=4 given_up.RewriteConflictError=2  0.20s",
        line(),
        line(RewriteConflictError=1, RetriesExhaustedError=3),
    ]
    assert _given_up_by(lines) == {"RetriesExhaustedError": 3, "RewriteConflictError": 3}


def test_the_soak_seeds_every_key_once_and_sizes_maintenance_to_the_seeds_files():
    """A bulk seed inserts each key once (no batch fill), and maintenance's target puts
    every seed file above the small-file line (3/4 of the target), so a pass compacts
    the stream's files, not the whole table again."""
    from calving.commit.maintenance.compaction_plan import CompactionPolicy
    from tests.bench.soak import Params, seed_records, seed_target, soak_events

    p = Params(batches=3, keys=50, records_per_batch=8)
    stream = soak_events(p)
    seed = stream.records[: seed_records(p)]
    assert [json.loads(v)["after"]["id"] for _, _, v, _ in seed] == list(range(50))
    assert len(stream.records) >= seed_records(p) + 3 * 8
    streamed = Params(batches=3, keys=50, records_per_batch=8, bulk_seed=False)
    assert seed_records(streamed) == 56  # seven whole batches, the first keys again
    sizes = [700_000, 760_000, 755_000]
    target = seed_target(sizes, floor=1024)
    small = CompactionPolicy(target_file_bytes=target).small_file_bytes
    assert small < min(sizes) and max(sizes) < target
    assert seed_target([100, 200], floor=1024) == 1024


def test_index_sharded_figures_from_recorded_sides():
    """The sharded-index benchmark's figures from sides' results (no Spark here): RSS
    and batch time against the driver index, and the 2-worker scaling with its goal."""
    from tests.bench.index_sharded import to_figures

    def side(seconds, rss):
        return {"seconds": seconds, "cpu": [1.0], "open_s": 1.0, "rss_peak_mib": rss}

    results = {
        "driver": side([0.2, 0.3], 1600.0),
        "sharded x1": side([0.8, 0.9], 900.0),
        "sharded x2": side([0.5, 0.5], 950.0),
        "keys": 20_000_000,
        "batch_rows": 100_000,
        "shards": 16,
    }
    by_name = {f.figure: f for f in to_figures(results)}
    scaling = by_name["100,000-row upsert into 20M keys, sharded on 2 workers, s"]
    assert scaling.value == 0.5 and scaling.peer_value == pytest.approx(0.85)
    assert scaling.met is True  # 1.7x
    rss = by_name["driver peak RSS, 20M keys, sharded x2, MiB"]
    assert (rss.value, rss.peer_value) == (950.0, 1600.0)
    # Without the steps' times there is no bound; with them, the batch less half its steps.
    assert not [f for f in by_name if "Amdahl" in f]
    results["sharded x1"]["steps"] = [{"sum": 0.2}, {"sum": 0.4}]
    by_name = {f.figure: f for f in to_figures(results)}
    bound = by_name[
        "100,000-row upsert into 20M keys, 1 worker's batch with its steps split over 2 "
        "(Amdahl's bound), s"
    ]
    assert bound.value == pytest.approx(0.7)  # median of 0.8 - 0.1 and 0.9 - 0.2
    assert bound.ratio == pytest.approx(0.85 / 0.7) and bound.met is False


def test_index_rebuild_figures_hold_the_reshards_against_a_rebuild():
    """The rebuild benchmark's figures from recorded sides (no Spark here): each side's
    split and merge of the shards against its own rebuild at the new count."""
    from tests.bench.index_rebuild import to_figures

    def side(seconds, reshard):
        return {"seconds": seconds, "cpu": [4.0], "entries": 10, "merge_s": 1.0, **reshard}

    def runs(split, merge, rebuild):
        return {
            "reshard": {
                "split 32 -> 64": {"seconds": split, "cpu": [2.0]},
                "merge 32 -> 16": {"seconds": merge, "cpu": [3.0]},
                "rebuild at 64": {"seconds": rebuild, "cpu": [8.0]},
            }
        }

    results = {
        "driver": {"seconds": [10.0], "cpu": [9.0], "entries": 10},
        "cluster x1": side([6.0], runs([2.0, 3.0], [2.5], [6.0, 7.0])),
        "cluster x2": side([4.0], {}),
        "keys": 10_000_000,
        "shards": 32,
    }
    by_name = {f.figure: f for f in to_figures(results)}
    split = by_name["split 32 -> 64 shards of 10M keys, 32 shards, x1, s"]
    assert (split.value, split.peer_value) == (2.5, 6.5)
    assert split.note == "CPU-s 2.0 vs 8.0"
    merge = by_name["merge 32 -> 16 shards of 10M keys, 32 shards, x1, s"]
    assert (merge.value, merge.peer_value) == (2.5, 6.5)
    assert not any("x2" in name and "shards of" in name for name in by_name)

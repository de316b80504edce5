"""A Spark driver for the many-table fault scenarios, run as a subprocess and killed at
will: ``python -m tests.faults.many_driver '<json config>'``.

It builds the pipeline from a calving config document (``build_pipeline``: routed
tables, one catalog transaction per batch) and drains what is available. After
``arm_after`` committed batches it arms ``faults`` in this process only. The two points
the commit core does not hit itself are hit here: ``after-data-files`` (the tasks wrote
every table's files, nothing is committed) and ``after-swap-before-checkpoint`` (the
batch's tables swapped; ``foreachBatch`` has not returned). ``mutation`` applies a
deliberately broken build (``tests.faults.mutations``).

Points armed from the start (a catalog failing during the pipeline's start) come
through ``CALVING_FAULTS`` in its environment.

Output, one line each: ``committed <batch> <tables>`` per batch that committed, then
``fired <point>`` per point armed ``once-...`` that fired, then ``drained`` (exit 0) or
``failed <ErrorClass>: <message>`` (exit 2).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ManyDriverConfig:
    config: dict[str, Any]
    faults: str = ""
    arm_after: int = 1
    mutation: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


def main(text: str) -> int:
    cfg = ManyDriverConfig(**json.loads(text))
    from calving.commit import faults
    from calving.ingest.config.loader import parse_config
    from calving.ingest.pipeline import build_pipeline
    from calving.ingest.sink.many.sink import ManyBatchStats, ManyTablesSink
    from tests.faults.mutations import apply
    from tests.support.spark import local_session

    apply(cfg.mutation)
    spark = local_session("calving-many-driver")
    committed = 0

    def on_batch(stats: ManyBatchStats) -> None:
        nonlocal committed
        faults.hit("after-swap-before-checkpoint")
        if stats.committed:
            committed += 1
            print(f"committed {stats.batch_id} {','.join(stats.committed)}", flush=True)
        if committed == cfg.arm_after and cfg.faults:
            for item in cfg.faults.split(","):
                point, _, action = item.partition("=")
                faults.arm(point, action or "kill")

    pipeline = build_pipeline(parse_config(cfg.config, "many-driver"), spark, on_batch=on_batch)
    sink = pipeline.sink
    assert isinstance(sink, ManyTablesSink)
    commit = sink._commit

    def commit_after_files(*args: Any, **kw: Any) -> Any:
        faults.hit("after-data-files")
        return commit(*args, **kw)

    sink._commit = commit_after_files  # type: ignore[method-assign]  # the fault harness replaces the sink's commit step
    print("started", flush=True)
    try:
        pipeline.run(available_now=True, timeout=600)
    except Exception as err:  # noqa: BLE001 - reported to the harness as a line
        print(f"failed {type(err).__name__}: {str(err).splitlines()[0][:300]}", flush=True)
        traceback.print_exc()
        return 2
    for point in sorted(faults.fired()):
        print(f"fired {point}", flush=True)
    print("drained", flush=True)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1])
    sys.stdout.flush()
    os._exit(code)

"""Running a demo's stream while a background thread produces its records."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from calving.commit.errors import CalvingError


def stream_while_producing(
    pipeline: Any,
    produce: Callable[[], None],
    caught_up: Callable[[], bool],
    timeout: float,
    tick: Callable[[], None] = lambda: None,
    poll: float = 0.25,
) -> None:
    """Start the pipeline's query, run ``produce`` in a thread, and return once it is
    done and ``caught_up()`` holds (``tick`` runs every poll). A producer error, a
    stream error or ``timeout`` seconds raise ``CalvingError``. The query is stopped and
    the sink closed in any case."""
    failure: list[BaseException] = []

    def producer() -> None:
        try:
            produce()
        except Exception as exc:  # noqa: BLE001 - re-raised by the main thread
            failure.append(exc)

    thread = threading.Thread(target=producer, name="demo-producer", daemon=True)
    query = pipeline.start()
    thread.start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            tick()
            if failure:
                raise CalvingError(f"the demo producer failed: {failure[0]}") from failure[0]
            if query.exception() is not None:
                raise CalvingError(f"the stream failed: {query.exception()}")
            if not thread.is_alive() and caught_up():
                return
            if time.monotonic() > deadline:
                raise CalvingError(f"the demo did not finish within {timeout:.0f}s")
            time.sleep(poll)
    finally:
        if query.isActive:
            query.stop()
        pipeline.sink.close()

"""``python -m tests.bench.as_driver MODULE ARGS...``: run benchmark module ``MODULE``
(``python -m MODULE ARGS...``) in a process set up as the ``calving`` command sets up its
driver before it imports anything else (``calving.ingest.launch.prepare_driver``: one
glibc arena, Arrow's system pool), for a benchmark child that stands for ``calving
run``'s driver but drives the sink itself."""

from __future__ import annotations

import runpy
import sys

from calving.ingest.launch import prepare_driver

if __name__ == "__main__":
    prepare_driver()
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)

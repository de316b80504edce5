"""``allocator``: the ``calving`` process runs on one glibc arena, Spark's Python
workers (calving's daemon) on one arena that keeps arrays of a few MiB in the heap; a
process whose environment sets glibc's allocator keeps its own settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from calving.ingest.allocator import DRIVER_MALLOC, WORKER_MALLOC, tune_malloc


def allocator() -> dict[str, int]:
    """What glibc's allocator did here: the MiB it mapped apart for a 16 MiB numpy
    array, and its arenas once another thread has made a 1 MiB one (``malloc_info``)."""
    import ctypes
    import ctypes.util
    import tempfile
    import threading

    import numpy as np

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
            )
        ]  # fmt: skip

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.mallinfo2.restype = MallInfo2
    libc.fopen.restype = ctypes.c_void_p
    before = libc.mallinfo2().hblkhd
    arrays = [np.ones(2 << 20)]
    mapped = (libc.mallinfo2().hblkhd - before) >> 20
    thread = threading.Thread(target=lambda: arrays.append(np.ones(128 << 10)))
    thread.start()
    thread.join()
    with tempfile.NamedTemporaryFile() as report:
        out = ctypes.c_void_p(libc.fopen(report.name.encode(), b"w"))
        libc.malloc_info(0, out)
        libc.fclose(out)
        arenas = report.read().decode().count("<heap nr=")
    return {"mapped_mib": mapped, "arenas": arenas}


#: A fresh process: the settings set first (before any thread, as the daemon and the
#: ``calving`` command do), or the command's entry point run, then ``allocator``.
_PROBE = """
import contextlib, io, json, sys
from calving.ingest import allocator as settings
from calving.ingest.launch import main
how = sys.argv[1]
tuned = None
if how == "command":
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(["--version"])  # argparse prints the version and exits
elif how != "leave":
    tuned = settings.tune_malloc(getattr(settings, how))
from tests.ingest.test_allocator import allocator
print(json.dumps({"tuned": tuned, **allocator()}))
"""

DEFAULTS = {"mapped_mib": 16}  # glibc maps a 16 MiB array apart; a thread: its own arena


@pytest.mark.integration  # a fresh Python process each
@pytest.mark.parametrize(
    ("how", "env", "tuned", "expected"),
    [
        ("WORKER_MALLOC", {}, True, {"mapped_mib": 0, "arenas": 1}),
        ("DRIVER_MALLOC", {}, True, {"mapped_mib": 16, "arenas": 1}),
        ("command", {}, None, {"mapped_mib": 16, "arenas": 1}),
        ("leave", {}, None, DEFAULTS),
        ("WORKER_MALLOC", {"MALLOC_ARENA_MAX": "4"}, False, DEFAULTS),
        ("DRIVER_MALLOC", {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, False, DEFAULTS),
    ],
    ids=["workers", "driver", "calving-command", "untuned", "env-arena", "env-tunables"],
)
def test_one_arena_unless_the_environment_says_otherwise(
    how: str, env: dict[str, str], tuned: bool | None, expected: dict[str, int]
) -> None:
    """The workers' settings keep a large array in the heap and a thread in the one
    arena; the driver's (what the ``calving`` command sets first) only the thread;
    glibc's defaults map the array apart and give the thread an arena of its own, and a
    process whose environment sets the allocator keeps them."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_"))}
    run = subprocess.run(
        [sys.executable, "-c", _PROBE, how],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    got = json.loads(run.stdout)
    assert got["tuned"] is tuned
    assert got["mapped_mib"] == expected["mapped_mib"]
    if "arenas" in expected:
        assert got["arenas"] == expected["arenas"]
    else:
        assert got["arenas"] >= 2


def test_an_environment_that_sets_the_allocator_is_left_alone() -> None:
    for settings in (DRIVER_MALLOC, WORKER_MALLOC):
        assert tune_malloc(settings, {"MALLOC_TRIM_THRESHOLD_": "0"}) is False
        assert tune_malloc(settings, {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}) is False

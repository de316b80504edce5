"""``calving run``'s driver takes the system allocator as Arrow's default pool, unless
``ARROW_DEFAULT_MEMORY_POOL`` says otherwise (in a fresh process each: the pool is
process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

SCRIPT = "from calving.ingest.driver_memory import use_system_pool; print(use_system_pool())"


def _pool(env_pool: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if env_pool is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = env_pool
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_driver_takes_the_system_pool() -> None:
    assert _pool(None) == "system"


@pytest.mark.parametrize("chosen", ["mimalloc", "jemalloc"])
def test_the_environment_choice_wins(chosen: str) -> None:
    import pyarrow as pa

    available = {"mimalloc": pa.mimalloc_memory_pool, "jemalloc": pa.jemalloc_memory_pool}
    try:
        available[chosen]()
    except NotImplementedError:
        pytest.skip(f"this pyarrow has no {chosen}")
    assert _pool(chosen) == chosen

"""The ``calving`` process picks Arrow's system pool for its driver before pyarrow is
imported, keeps a pool the user names, and does not pass its choice on to the processes
it starts (Spark's JVM and Python workers keep Arrow's default)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from calving.ingest.launch import POOL_ENV

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = pytest.mark.integration  # starts Python processes

REPO = Path(__file__).resolve().parents[2]

#: What a fresh interpreter reports after ``choose_memory_pool``: the driver's pool, the
#: variable as left in its environment, and the default pool of a child it starts.
PROBE = """
import json, os, subprocess, sys
{before}
from calving.ingest.launch import choose_memory_pool
pool = choose_memory_pool()
child = subprocess.run(
    [sys.executable, "-c", "import pyarrow; print(pyarrow.default_memory_pool().backend_name)"],
    capture_output=True, text=True, check=True,
).stdout.strip()
print(json.dumps({{"pool": pool, "env": os.environ.get({env!r}), "child": child}}))
"""


def _probe(env_value: str | None = None, before: str = "") -> dict[str, str | None]:
    env = {k: v for k, v in os.environ.items() if k != POOL_ENV}
    if env_value is not None:
        env[POOL_ENV] = env_value
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(before=before, env=POOL_ENV)],
        capture_output=True, text=True, check=True, env=env, timeout=120,
    ).stdout  # fmt: skip
    return dict(json.loads(out.splitlines()[-1]))


def _arrow_default() -> str:
    env = {k: v for k, v in os.environ.items() if k != POOL_ENV}
    code = "import pyarrow; print(pyarrow.default_memory_pool().backend_name)"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.strip()


def test_the_driver_uses_the_system_pool_and_its_children_arrows_default() -> None:
    default = _arrow_default()
    assert default != "system"  # else this test could not tell the two apart
    assert _probe() == {"pool": "system", "env": None, "child": default}


def test_a_pool_the_user_names_is_kept_for_the_driver_and_its_children() -> None:
    assert _probe("mimalloc") == {"pool": "mimalloc", "env": "mimalloc", "child": "mimalloc"}


def test_once_pyarrow_is_imported_the_choice_is_only_reported() -> None:
    default = _arrow_default()
    assert _probe(before="import pyarrow") == {"pool": default, "env": None, "child": default}


def test_the_installed_command_starts_at_the_entry_point() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert scripts["project"]["scripts"]["calving"] == "calving.ingest.launch:main"
    out = subprocess.run(
        [sys.executable, "-m", "calving.ingest.launch", "--version"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.startswith("calving ")

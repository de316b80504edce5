"""A fake SPARK_HOME for dry runs of the deploy scripts: its spark-class,
spark-daemon.sh and spark-submit record their arguments and the environment variables the
scripts set, and start nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.deploy.checks import DEPLOY

#: What the fake scripts record about their environment (one KEY=value block per call).
RECORDED_ENV = (
    "SPARK_WORKER_OPTS",
    "SPARK_MASTER_OPTS",
    "SPARK_LOCAL_IP",
    "SPARK_SUBMIT_OPTS",
    "_SPARK_AUTH_SECRET",
)

FAKE_SCRIPT = """#!/usr/bin/env bash
{{ printf '%s' "$(basename "$0")"; printf '\\x1f%s' "$@"; printf '\\n'; }} >> "$FAKE_LOG"
{{ for v in {names}; do printf '%s=%s\\x1f' "$v" "${{!v:-}}"; done; printf '\\n'; }} >> "$FAKE_LOG.env"
exit {code}
"""


def make_fake_spark(tmp_path: Path) -> dict[str, str]:
    """Environment with SPARK_HOME at a fake whose spark-class, spark-daemon.sh and
    spark-submit append their arguments to $FAKE_LOG (and their environment to
    $FAKE_LOG.env)."""
    home = tmp_path / "spark"
    for sub, name in (("bin", "spark-class"), ("sbin", "spark-daemon.sh"), ("bin", "spark-submit")):
        path = home / sub / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(FAKE_SCRIPT.format(code=0, names=" ".join(RECORDED_ENV)))
        path.chmod(0o755)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "USER": "tester",
        "SPARK_HOME": str(home),
        "CALVING_SPARK_DIR": str(tmp_path / "state"),
        "FAKE_LOG": str(tmp_path / "calls"),
        "PYTHON": sys.executable,
    }


def calls(env: dict[str, str]) -> list[list[str]]:
    """The argument lists the fake scripts were called with, in order."""
    log = Path(env["FAKE_LOG"])
    if not log.exists():
        return []
    return [line.split("\x1f") for line in log.read_text().splitlines()]


def call_envs(env: dict[str, str]) -> list[dict[str, str]]:
    """The recorded environment (RECORDED_ENV) of each call, in order."""
    log = Path(env["FAKE_LOG"] + ".env")
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        pairs = [item.partition("=") for item in line.split("\x1f") if item]
        out.append({key: value for key, _, value in pairs})
    return out


def run(
    script: str, env: dict[str, str], *args: str, **extra: str
) -> subprocess.CompletedProcess[str]:
    """Run deploy/SCRIPT with ``env`` plus ``extra``."""
    return subprocess.run(
        ["bash", str(DEPLOY / script), *args],
        env={**env, **extra},
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )

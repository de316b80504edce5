"""A benchmark run as JSON: what ``--json-out`` writes and ``tests.bench.plots`` reads.

One document per run: the benchmark's name, its parameters (sizes, rates, set-ups), the
machine (cores, RAM, CPU model, versions), the load average when the run ended (a busy
machine moves the figures), and the benchmark's own results.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ram_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / (1024 * 1024)
    except OSError:
        pass
    return None


def version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(package)
    except PackageNotFoundError:
        return "not installed"


def machine() -> dict[str, Any]:
    ram = ram_gib()
    return {
        "cores": os.cpu_count(),
        "ram_gib": round(ram, 1) if ram is not None else None,
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "pyspark": version("pyspark"),
        "pyiceberg": version("pyiceberg"),
    }


def write(path: Path, benchmark: str, params: dict[str, Any], results: Any) -> None:
    """Write one run's document to ``path`` (its directory is created)."""
    doc = {
        "benchmark": benchmark,
        "params": params,
        "machine": machine(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "results": results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")


def read(path: Path, benchmark: str) -> dict[str, Any]:
    """A run's document, checked to be ``benchmark``'s."""
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict) or doc.get("benchmark") != benchmark:
        raise ValueError(f"{path}: not a {benchmark} run (benchmark = {doc.get('benchmark')!r})")
    return doc

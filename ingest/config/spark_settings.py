"""``[spark]`` values checked the way Spark will read them, so a typo fails at load with
the key named instead of as a JVM stack trace after the table was created.

* ``master``: ``local``, ``local[N]``, ``local[*]``, ``local[N,F]``, ``local[*,F]``,
  ``local-cluster[N,C,M]``, ``spark://host:port[,host:port...]``, ``yarn``,
  ``k8s://[https://]host[:port]``.
* ``conf``: settings Spark documents as numbers, sizes, durations, fractions or booleans
  (``spark.executor.cores``, ``spark.sql.shuffle.partitions``, ``spark.executor.memory``,
  ``spark.network.timeout`` ...), with Spark's own spellings (``4g``, ``512m``, ``120s``).
  Other settings pass through unchecked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_HOST_PORT = r"[A-Za-z0-9_.\-]+:\d{1,5}|\[[0-9A-Fa-f:.]+\]:\d{1,5}"
_MASTER = re.compile(
    r"local"
    r"|local\[(?:\*|[1-9]\d*)(?:,\s*[1-9]\d*)?\]"
    r"|local-cluster\[\s*[1-9]\d*\s*,\s*[1-9]\d*\s*,\s*[1-9]\d*\s*\]"
    rf"|spark://(?:{_HOST_PORT})(?:,(?:{_HOST_PORT}))*"
    r"|yarn"
    r"|k8s://(?:https?://)?[A-Za-z0-9_.\-\[\]:]+(?::\d{1,5})?/?"
)
MASTER_FORMS = (
    '"local", "local[N]", "local[*]", "local[N,F]", "spark://host:port[,host:port]", '
    '"yarn" or "k8s://https://host:port"'
)

_INT = re.compile(r"-?\d+")
_POSITIVE = re.compile(r"[1-9]\d*")
#: Spark's byte strings (JavaUtils.byteStringAs): a whole number and an optional unit.
_SIZE = re.compile(r"\d+(?:b|k|kb|m|mb|g|gb|t|tb|p|pb)?", re.IGNORECASE)
#: Spark's time strings (JavaUtils.timeStringAs).
_SIZE_OR_OFF = re.compile(rf"-1|{_SIZE.pattern}", re.IGNORECASE)
_TIME = re.compile(r"-?\d+(?:us|ms|s|m|min|h|d)?", re.IGNORECASE)
_FRACTION = re.compile(r"(?:0(?:\.\d+)?|1(?:\.0+)?|\.\d+)")
_BOOL = re.compile(r"true|false", re.IGNORECASE)

_KINDS: dict[str, tuple[re.Pattern[str], str]] = {
    "positive": (_POSITIVE, "a whole number >= 1"),
    "int": (_INT, "a whole number"),
    "size": (_SIZE, 'a size such as "512m", "4g" or "1048576"'),
    "size_or_minus_one": (_SIZE_OR_OFF, 'a size such as "10m" or -1'),
    "time": (_TIME, 'a duration such as "120s", "500ms" or "5min"'),
    "fraction": (_FRACTION, "a fraction from 0 to 1"),
    "bool": (_BOOL, "true or false"),
}

#: Settings Spark documents with a typed value (Spark 3.5/4.0 configuration pages).
SETTINGS: dict[str, str] = {
    "spark.executor.cores": "positive",
    "spark.executor.instances": "int",
    "spark.driver.cores": "positive",
    "spark.cores.max": "positive",
    "spark.task.cpus": "positive",
    "spark.task.maxFailures": "positive",
    "spark.default.parallelism": "positive",
    "spark.sql.shuffle.partitions": "positive",
    "spark.sql.files.maxRecordsPerFile": "int",
    "spark.sql.streaming.minBatchesToRetain": "positive",
    "spark.sql.adaptive.coalescePartitions.initialPartitionNum": "positive",
    "spark.dynamicAllocation.minExecutors": "int",
    "spark.dynamicAllocation.maxExecutors": "int",
    "spark.dynamicAllocation.initialExecutors": "int",
    "spark.port.maxRetries": "int",
    "spark.ui.port": "int",
    "spark.driver.port": "int",
    "spark.blockManager.port": "int",
    "spark.ui.retainedJobs": "int",
    "spark.ui.retainedStages": "int",
    "spark.sql.ui.retainedExecutions": "int",
    "spark.executor.memoryOverhead": "size",
    "spark.driver.memoryOverhead": "size",
    "spark.driver.maxResultSize": "size",
    "spark.memory.offHeap.size": "size",
    "spark.kryoserializer.buffer": "size",
    "spark.kryoserializer.buffer.max": "size",
    "spark.reducer.maxSizeInFlight": "size",
    "spark.shuffle.file.buffer": "size",
    "spark.sql.files.maxPartitionBytes": "size",
    "spark.sql.files.openCostInBytes": "size",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "size",
    "spark.sql.autoBroadcastJoinThreshold": "size_or_minus_one",
    "spark.network.timeout": "time",
    "spark.executor.heartbeatInterval": "time",
    "spark.locality.wait": "time",
    "spark.sql.broadcastTimeout": "time",
    "spark.dynamicAllocation.executorIdleTimeout": "time",
    "spark.sql.streaming.stopTimeout": "time",
    "spark.sql.streaming.pollingDelay": "time",
    "spark.memory.fraction": "fraction",
    "spark.memory.storageFraction": "fraction",
    "spark.ui.enabled": "bool",
    "spark.sql.adaptive.enabled": "bool",
    "spark.dynamicAllocation.enabled": "bool",
    "spark.speculation": "bool",
    "spark.eventLog.enabled": "bool",
    "spark.memory.offHeap.enabled": "bool",
    "spark.shuffle.service.enabled": "bool",
    "spark.sql.ansi.enabled": "bool",
}


def master_ok(master: str) -> bool:
    return _MASTER.fullmatch(master.strip()) is not None


def setting_kind(key: str) -> str | None:
    """The documented kind of ``key``'s value, or None for settings not checked.
    Every ``*.memory`` setting (``spark.executor.memory`` ...) is a size."""
    if key in SETTINGS:
        return SETTINGS[key]
    if key.endswith((".memory", ".memoryOverhead")):
        return "size"
    return None


def bad_settings(conf: Mapping[str, str]) -> tuple[str, str] | None:
    """The first ``(key, expected)`` whose value Spark would refuse, or None."""
    for key, value in conf.items():
        kind = setting_kind(key)
        if kind is None:
            continue
        pattern, expected = _KINDS[kind]
        if pattern.fullmatch(value.strip()) is None:
            return key, expected
    return None

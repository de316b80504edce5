"""Table properties calving reads: one typed accessor, one definition per property.

Every property calving reads from a table's metadata is declared here once (name, kind,
default, allowed range). ``TableProperties(metadata.properties)`` reads them with their
defaults; a value that cannot be used raises ``InvalidTablePropertyError`` naming the
property, the value, what is wanted and how to fix it on an existing table.
``validate_properties`` checks a whole mapping up front (pipeline config, ``calving table
set-property``) so a bad value is refused before anything is created or committed.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from calving.commit.errors import InvalidTablePropertyError

#: How to repair a table that already carries a bad value.
FIX_HINT = "fix it with `calving table set-property` or `calving table unset-property`"


@dataclass(frozen=True)
class IntProperty:
    """A whole-number property with an inclusive range."""

    name: str
    default: int
    minimum: int
    maximum: int = 2**63 - 1

    def parse(self, raw: str) -> int:
        try:
            value = int(raw.strip())
        except (ValueError, AttributeError):
            value = None
        if value is None or not self.minimum <= value <= self.maximum:
            want = f"a whole number >= {self.minimum}"
            if self.maximum < 2**63 - 1:
                want = f"a whole number from {self.minimum} to {self.maximum}"
            raise InvalidTablePropertyError(
                f"table property {self.name}={raw!r}: want {want}; {FIX_HINT}"
            )
        return value


@dataclass(frozen=True)
class PowerOfTwoProperty(IntProperty):
    """A whole-number property that is 0 or a power of two."""

    def parse(self, raw: str) -> int:
        value = super().parse(raw)
        if value & (value - 1):
            raise InvalidTablePropertyError(
                f"table property {self.name}={raw!r}: want 0 or a power of two; {FIX_HINT}"
            )
        return value


@dataclass(frozen=True)
class BoolProperty:
    """``true`` or ``false`` (any case), as Iceberg Java reads them."""

    name: str
    default: bool

    def parse(self, raw: str) -> bool:
        text = raw.strip().lower() if isinstance(raw, str) else ""
        if text not in ("true", "false"):
            raise InvalidTablePropertyError(
                f"table property {self.name}={raw!r}: want true or false; {FIX_HINT}"
            )
        return text == "true"


@dataclass(frozen=True)
class PathProperty:
    """A location (no default: derived from the table location by the caller)."""

    name: str

    def parse(self, raw: str) -> str:
        if not isinstance(raw, str) or not raw.strip() or "\x00" in raw:
            raise InvalidTablePropertyError(
                f"table property {self.name}={raw!r}: want a non-empty location; {FIX_HINT}"
            )
        return raw.rstrip("/")


@dataclass(frozen=True)
class ChoiceProperty:
    """One of a few words; ``unavailable`` maps a word the format allows but calving
    cannot honour here to the reason, given when it is chosen."""

    name: str
    default: str
    choices: tuple[str, ...]
    unavailable: tuple[tuple[str, str], ...] = ()

    def parse(self, raw: str) -> str:
        text = raw.strip().lower() if isinstance(raw, str) else ""
        why = dict(self.unavailable).get(text)
        if why is not None:
            raise InvalidTablePropertyError(f"table property {self.name}={raw!r}: {why}")
        if text not in self.choices:
            want = " or ".join(self.choices)
            raise InvalidTablePropertyError(
                f"table property {self.name}={raw!r}: want {want}; {FIX_HINT}"
            )
        return text


Property = IntProperty | BoolProperty | PathProperty | ChoiceProperty

COMMIT_NUM_RETRIES = IntProperty("commit.retry.num-retries", 4, 0, 1_000)
COMMIT_MIN_WAIT_MS = IntProperty("commit.retry.min-wait-ms", 100, 0, 3_600_000)
COMMIT_MAX_WAIT_MS = IntProperty("commit.retry.max-wait-ms", 60_000, 0, 3_600_000)
COMMIT_TOTAL_TIMEOUT_MS = IntProperty("commit.retry.total-timeout-ms", 1_800_000, 0)
MANIFEST_MERGE_ENABLED = BoolProperty("commit.manifest-merge.enabled", True)
MANIFEST_MIN_COUNT_TO_MERGE = IntProperty("commit.manifest.min-count-to-merge", 100, 1)
MANIFEST_TARGET_SIZE_BYTES = IntProperty("commit.manifest.target-size-bytes", 8 * 1024 * 1024, 1024)
TARGET_FILE_SIZE_BYTES = IntProperty("write.target-file-size-bytes", 512 * 1024 * 1024, 1024)
PREVIOUS_VERSIONS_MAX = IntProperty("write.metadata.previous-versions-max", 100, 0)
#: How metadata files are written: ``none`` (plain JSON, Iceberg's default) or ``gzip``
#: (``*.gz.metadata.json``); calving creates its tables with ``gzip``.
METADATA_COMPRESSION_CODEC = ChoiceProperty(
    "write.metadata.compression-codec", "none", ("none", "gzip")
)
DV_BLOBS_PER_PUFFIN = IntProperty("calving.dv.blobs-per-puffin", 1, 1, 1_000_000)
WRITE_DATA_PATH = PathProperty("write.data.path")
WRITE_METADATA_PATH = PathProperty("write.metadata.path")
FILE_SKETCHES = PathProperty("calving.statistics.file-sketches")
#: When the published column statistics were computed (ms since the epoch; 0: never).
STATISTICS_COMPUTED_MS = IntProperty("calving.statistics.computed-ms", 0, 0)
#: Updates keep their rows' ``_row_id`` (v3 row lineage); false: an update is a new row.
ROW_LINEAGE_KEEP_ON_UPDATE = BoolProperty("calving.row-lineage.keep-on-update", True)
#: A full rebuild of a keyed table's driver index runs on the Spark executors (as
#: shards, merged on the driver) when the snapshot holds at least this many live rows,
#: and so does a rebuild of a sharded index's shards (below it, the driver builds
#: them); 0: always, when a Spark session is at hand.
INDEX_EXECUTOR_REBUILD_ROWS = IntProperty("calving.index.executor-rebuild-rows", 10_000_000, 0)
#: Where a keyed table's primary-key index lives: ``driver`` (one index in the driver
#: process), ``sharded`` (shard files resolved by Spark tasks, the driver holding no
#: per-key state), or ``auto``: sharded once the table holds
#: ``calving.index.sharded-rows`` live rows when a stream starts.
INDEX_MODE = ChoiceProperty("calving.index.mode", "auto", ("auto", "driver", "sharded"))
INDEX_SHARDED_ROWS = IntProperty("calving.index.sharded-rows", 20_000_000, 0)
#: Shards of a sharded index (a power of two; 0: chosen when sharding starts, about 2M
#: keys a shard and at least two a core). Fixed once the shards exist.
INDEX_SHARDS = PowerOfTwoProperty("calving.index.shards", 0, 0, 1 << 16)
#: Batches of deltas a shard's chain holds before a new base is written (one delta a
#: batch from the separate stage, one a write task when the write tasks step).
INDEX_SHARD_DELTAS = IntProperty("calving.index.shard-deltas", 16, 0, 10_000)
#: Keys a batch may touch for its shard steps to run in the driver instead of the
#: executors (when its shards are small and the last batch was as small); 0: always on
#: the executors.
INDEX_DRIVER_STEP_KEYS = IntProperty("calving.index.driver-step-keys", 1_000, 0, 1_000_000)
#: Where a batch's shard steps run: in the write tasks (each worker then keeps every
#: shard), on the shards' owners (a separate job, each executor keeping its share), or
#: ``auto``: on the owners once the index is large (``sharded.owner_step_entries``:
#: 32M entries with the default worker shard cache).
INDEX_SHARD_STEPS = ChoiceProperty(
    "calving.index.shard-steps", "auto", ("auto", "write-tasks", "owners")
)
#: Bytes of shards a Spark Python worker keeps cached between batches (sharded mode;
#: the cache is the worker's, shared by the tables it steps). Past it the shards used
#: in the latest tasks stay and the others are read from storage when stepped.
INDEX_WORKER_CACHE_BYTES = IntProperty("calving.index.worker-cache-bytes", 1 << 30, 1 << 20)
#: The Iceberg type of Debezium ``io.debezium.data.Json`` columns. ``variant`` (v3) is
#: refused until pyarrow can write Parquet VARIANT columns (see the reason).
DEBEZIUM_JSON_TYPE = ChoiceProperty(
    "calving.debezium.json-type",
    "string",
    ("string",),
    (
        (
            "variant",
            (
                "variant is not available: pyarrow (26) cannot write Parquet VARIANT "
                "columns, DuckDB 1.5 decodes variant only from those, pyiceberg 0.12 cannot "
                "load a table with a variant column and pyiceberg-core 0.11 cannot read one; "
                "Json columns are string"
            ),
        ),
    ),
)

#: Every property calving reads, by name.
KNOWN: dict[str, Property] = {
    p.name: p
    for p in (
        COMMIT_NUM_RETRIES,
        COMMIT_MIN_WAIT_MS,
        COMMIT_MAX_WAIT_MS,
        COMMIT_TOTAL_TIMEOUT_MS,
        MANIFEST_MERGE_ENABLED,
        MANIFEST_MIN_COUNT_TO_MERGE,
        MANIFEST_TARGET_SIZE_BYTES,
        TARGET_FILE_SIZE_BYTES,
        PREVIOUS_VERSIONS_MAX,
        METADATA_COMPRESSION_CODEC,
        DV_BLOBS_PER_PUFFIN,
        WRITE_DATA_PATH,
        WRITE_METADATA_PATH,
        FILE_SKETCHES,
        STATISTICS_COMPUTED_MS,
        DEBEZIUM_JSON_TYPE,
        ROW_LINEAGE_KEEP_ON_UPDATE,
        INDEX_EXECUTOR_REBUILD_ROWS,
        INDEX_MODE,
        INDEX_SHARDED_ROWS,
        INDEX_SHARDS,
        INDEX_SHARD_DELTAS,
        INDEX_DRIVER_STEP_KEYS,
        INDEX_SHARD_STEPS,
        INDEX_WORKER_CACHE_BYTES,
    )
}


def validate_properties(properties: Mapping[str, str]) -> None:
    """Raise ``InvalidTablePropertyError`` for the first known property with a bad value;
    unknown names pass (other engines' properties are theirs)."""
    for name, raw in properties.items():
        prop = KNOWN.get(name)
        if prop is not None:
            prop.parse(raw)


class TableProperties:
    """Typed, defaulted view of a table's properties (raises on the first bad read)."""

    def __init__(self, properties: Mapping[str, str]) -> None:
        self._raw = properties

    def _int(self, prop: IntProperty) -> int:
        raw = self._raw.get(prop.name)
        return prop.default if raw is None else prop.parse(raw)

    def _bool(self, prop: BoolProperty) -> bool:
        raw = self._raw.get(prop.name)
        return prop.default if raw is None else prop.parse(raw)

    def _path(self, prop: PathProperty) -> str | None:
        raw = self._raw.get(prop.name)
        return None if raw is None else prop.parse(raw)

    def _choice(self, prop: ChoiceProperty) -> str:
        raw = self._raw.get(prop.name)
        return prop.default if raw is None else prop.parse(raw)

    @property
    def commit_num_retries(self) -> int:
        return self._int(COMMIT_NUM_RETRIES)

    @property
    def commit_min_wait_ms(self) -> int:
        return self._int(COMMIT_MIN_WAIT_MS)

    @property
    def commit_max_wait_ms(self) -> int:
        return self._int(COMMIT_MAX_WAIT_MS)

    @property
    def commit_total_timeout_ms(self) -> int:
        return self._int(COMMIT_TOTAL_TIMEOUT_MS)

    @property
    def manifest_merge_enabled(self) -> bool:
        return self._bool(MANIFEST_MERGE_ENABLED)

    @property
    def manifest_min_count_to_merge(self) -> int:
        return self._int(MANIFEST_MIN_COUNT_TO_MERGE)

    @property
    def manifest_target_size_bytes(self) -> int:
        return self._int(MANIFEST_TARGET_SIZE_BYTES)

    @property
    def target_file_size_bytes(self) -> int:
        return self._int(TARGET_FILE_SIZE_BYTES)

    @property
    def previous_versions_max(self) -> int:
        return self._int(PREVIOUS_VERSIONS_MAX)

    @property
    def metadata_compression_codec(self) -> str:
        return self._choice(METADATA_COMPRESSION_CODEC)

    @property
    def dv_blobs_per_puffin(self) -> int:
        return self._int(DV_BLOBS_PER_PUFFIN)

    @property
    def write_data_path(self) -> str | None:
        return self._path(WRITE_DATA_PATH)

    @property
    def write_metadata_path(self) -> str | None:
        return self._path(WRITE_METADATA_PATH)

    @property
    def file_sketches(self) -> str | None:
        """calving's per-file theta sketch cache (column statistics maintenance)."""
        return self._path(FILE_SKETCHES)

    @property
    def statistics_computed_ms(self) -> int:
        return self._int(STATISTICS_COMPUTED_MS)

    @property
    def row_lineage_keep_on_update(self) -> bool:
        return self._bool(ROW_LINEAGE_KEEP_ON_UPDATE)

    @property
    def index_executor_rebuild_rows(self) -> int:
        return self._int(INDEX_EXECUTOR_REBUILD_ROWS)

    @property
    def index_mode(self) -> str:
        return self._choice(INDEX_MODE)

    @property
    def index_sharded_rows(self) -> int:
        return self._int(INDEX_SHARDED_ROWS)

    @property
    def index_shards(self) -> int:
        return self._int(INDEX_SHARDS)

    @property
    def index_shard_deltas(self) -> int:
        return self._int(INDEX_SHARD_DELTAS)

    @property
    def index_driver_step_keys(self) -> int:
        return self._int(INDEX_DRIVER_STEP_KEYS)

    @property
    def index_shard_steps(self) -> str:
        return self._choice(INDEX_SHARD_STEPS)

    @property
    def index_worker_cache_bytes(self) -> int:
        return self._int(INDEX_WORKER_CACHE_BYTES)

    @property
    def debezium_json_type(self) -> str:
        """The Iceberg type of Debezium Json columns (``string``)."""
        return self._choice(DEBEZIUM_JSON_TYPE)

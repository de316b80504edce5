"""What the last maintenance pass did, kept beside the table for ``calving table show``.

Each pass (of ``calving maintain`` or inline) overwrites one small JSON document,
``<metadata>/calving-maintenance/last-pass.record``: when it started, how long it took,
its commits, groups committed / given up / failed / left, lost swaps, whether it was
stopped, and each job's figures or error. It is not a commit (the stream never races
it) and not a journal (the journal reader takes ``*.json`` only). A missing or
unreadable record reads as None: nothing is known about earlier passes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from calving.commit.errors import CalvingError
from calving.commit.io import FileIO
from calving.commit.maintenance.journal import journal_dir
from calving.commit.spec.metadata import TableMetadata

RECORD_NAME = "last-pass.record"


def record_location(metadata: TableMetadata) -> str:
    return f"{journal_dir(metadata)}/{RECORD_NAME}"


def write_last_pass(io: FileIO, metadata: TableMetadata, summary: Mapping[str, Any]) -> None:
    io.write(record_location(metadata), json.dumps(dict(summary), sort_keys=True).encode())


def read_last_pass(io: FileIO, metadata: TableMetadata) -> dict[str, Any] | None:
    try:
        data = io.read(record_location(metadata))
    except CalvingError:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None

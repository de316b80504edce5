"""The vectorized path for events of Kafka Connect's JSON converter with schemas
(``{"schema": {...}, "payload": {...}}``, as Debezium writes them by default).

Events whose bytes start with the same schema text form a group (one comparison over
the batch per group); each group's payloads are cut out of the records as Arrow views
(no copy of the schema bytes) and read by the bare-envelope reader
(``debezium_arrow``), with the epoch units the group's schema names for temporal
columns. What the bulk path does not take goes to the decoder's per-event path, which
gives the same rows and dead letters for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from calving.ingest.decode.batch import BatchAssembler
from calving.ingest.decode.coerce import TimeUnit
from calving.ingest.decode.debezium_arrow import DebeziumVectorReader, EnvelopeSource, as_mask


def wrapped_first(values: pa.Array) -> bool:
    """True when the batch's first value is a JSON-converter event with its schema
    (``{"schema": ...``): those take the wrapped path of the vectorized reader."""
    valid = as_mask(values.is_valid())
    if not valid.any():
        return False
    first: bytes = values[int(np.argmax(valid))].as_py()
    return first.lstrip()[:10] == b'{"schema":'


#: Schemas of JSON-converter events per batch read in bulk; events of further schemas
#: go per event (each group costs a pass over the batch).
_WRAPPED_GROUPS = 8
_PAYLOAD = b'"payload":'


def wrapped_head(value: bytes) -> str | None:
    """A JSON-converter event's bytes up to and with its first ``"payload":``, as text:
    every event that starts with them carries the same schema text. None when there is
    no such marker or the bytes are not UTF-8."""
    cut = value.find(_PAYLOAD)
    if cut <= 0:
        return None
    try:
        return value[: cut + len(_PAYLOAD)].decode()
    except UnicodeDecodeError:
        return None


def read_wrapped(
    vector: DebeziumVectorReader,
    values: pa.Array,
    units_of: Callable[[bytes], Mapping[str, TimeUnit] | None],
    out: BatchAssembler,
) -> list[int]:
    """The vectorized path for JSON-converter events: events carrying the same schema
    text (the bytes before ``"payload":``) form a group, and the payloads of each
    group whose schema allows it are read in bulk (epoch integers in the units the
    schema names: ``units_of`` the schema bytes, None if its events go per event).
    Events in another shape, of a schema the bulk path does not apply, or past the
    first few schemas of the batch go per event. Returns the rows left for the
    per-event path, in order."""
    wrapped = pc.and_(
        pc.starts_with(values, pattern='{"schema":'), pc.ends_with(values, pattern="}")
    )
    left = as_mask(wrapped.fill_null(False))
    rest = [np.flatnonzero(~left)]
    groups = 0
    for _ in range(4 * _WRAPPED_GROUPS):
        if groups == _WRAPPED_GROUPS or not left.any():
            break
        at = int(np.argmax(left))
        first: bytes = values[at].as_py()
        head = wrapped_head(first)
        if head is None:  # not a wrapped event: it goes per event
            left[at] = False
            rest.append(np.array([at]))
            continue
        groups += 1
        members = left & as_mask(pc.starts_with(values, pattern=head).fill_null(False))
        left &= ~members
        rows = np.flatnonzero(members)
        skip = len(head.encode())
        units = units_of(first[: skip - len(_PAYLOAD)])
        if units is None:
            rest.append(rows)
            continue
        payloads, short = payload_slices(values, rows, skip)
        rest.append(rows[short])
        rows = rows[~short]
        rest.append(vector.read_values(payloads, EnvelopeSource(rows, units), out))
    rest.append(np.flatnonzero(left))
    ordered: list[int] = np.sort(np.concatenate(rest)).tolist()
    return ordered


def payload_slices(values: pa.Array, rows: np.ndarray, skip: int) -> tuple[pa.Array, np.ndarray]:
    """The bytes of ``values[rows]`` past their first ``skip`` bytes and before their
    last byte (a wrapped event's payload: after ``{"schema": ..., "payload":`` and
    before the closing brace), without copying the records: Arrow binary views into
    the values' own data, cast to a binary array (which copies just the payloads).
    Also the mask of ``rows`` too short to slice (12 bytes or fewer), left out."""
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset :]
    start = offsets[rows] + skip
    length = offsets[rows + 1] - 1 - start
    short = length <= 12  # views of up to 12 bytes must hold them inline
    start, length = start[~short], length[~short]
    data = np.frombuffer(values.buffers()[2], dtype=np.uint8)
    views = np.zeros((len(start), 4), dtype=np.int32)
    views[:, 0] = length
    prefix = np.zeros(len(start), dtype=np.uint32)  # a view's first 4 bytes, inline
    for j in range(4):
        prefix |= data[start + j].astype(np.uint32) << np.uint32(8 * j)
    views[:, 1] = prefix.view(np.int32)
    views[:, 3] = start  # buffer 0, at this offset
    buffers = [None, pa.py_buffer(views.tobytes()), values.buffers()[2]]
    viewed = pa.Array.from_buffers(pa.binary_view(), len(start), buffers)
    return viewed.cast(pa.binary()), short

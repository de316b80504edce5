"""One exception hierarchy for calving.

Every error is a ``CalvingError`` carrying two facts the commit loop acts on:

* ``retryable``: repeating the same operation may succeed (``Transient``).
* ``cleanable``: the failed attempt is known not to have committed, so files it
  wrote may be deleted (``Cleanable``). An unknown outcome is never cleanable.

Corrupt input is never a ``ValueError``: it is a ``CorruptInputError`` naming
the file (or Kafka coordinates) it came from.
"""

from __future__ import annotations


class CalvingError(Exception):
    """Base of every error calving raises on purpose."""

    retryable: bool = False
    cleanable: bool = False


class Transient(CalvingError):
    """Marker: trying again later may succeed."""

    retryable = True


class Terminal(CalvingError):
    """Marker: trying again will fail the same way; a person or the caller must act."""

    retryable = False


class Cleanable(CalvingError):
    """Marker: the attempt certainly did not commit; its new files may be deleted."""

    cleanable = True


# ---------------------------------------------------------------- bad input


class CorruptInputError(Terminal):
    """Bytes that do not decode as the format they claim to be.

    ``source`` names where they came from: a file location, or
    ``topic/partition@offset`` for a Kafka record.
    """

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"{source}: {reason}")


class CorruptFileError(CorruptInputError):
    """A table file (manifest, manifest list, metadata, Puffin, DV) is corrupt."""


class CorruptRecordError(CorruptInputError):
    """A Kafka record cannot be decoded or does not fit the table."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(f"{topic}/{partition}@{offset}", reason)


class UnsupportedFeatureError(Terminal):
    """Valid input using a feature calving does not implement (named in the README)."""


class SchemaError(Terminal):
    """A schema, type or schema change is invalid or incompatible; names the field."""


class ConfigError(Terminal):
    """A configuration key is missing, unknown or has the wrong type; names the key."""


class InvalidTablePropertyError(ConfigError, Cleanable):
    """A table property calving reads has a value it cannot use; names the property.
    Raised while building an attempt, before the swap, so the attempt's files may go."""


# ---------------------------------------------------------------- catalog


class CatalogError(CalvingError):
    """Base of catalog failures."""


class NoSuchTableError(CatalogError, Terminal):
    pass


class TableAlreadyExistsError(CatalogError, Terminal):
    pass


class NoSuchNamespaceError(CatalogError, Terminal):
    pass


class NamespaceAlreadyExistsError(CatalogError, Terminal):
    pass


class NamespaceNotEmptyError(CatalogError, Terminal):
    pass


class CatalogUnavailableError(CatalogError, Transient):
    """The catalog could not be reached before anything was sent; safe to retry."""


# ---------------------------------------------------------------- commit


class CommitError(CalvingError):
    """Base of commit failures."""


class CommitSwapLostError(CommitError, Transient, Cleanable):
    """The check-and-put found another metadata location: someone committed first.

    The attempt did not land; the commit loop refreshes, re-validates and retries.
    """


class TableMovedError(CommitSwapLostError):
    """A multi-table commit's check-and-put found ``ident`` at another metadata location:
    the whole transaction was rolled back, nothing committed."""

    def __init__(self, ident: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.ident = ident


class CommitConflictError(CommitError, Terminal, Cleanable):
    """Validation against the refreshed table failed: the change can no longer apply."""


class CommitStateUnknownError(CommitError, Terminal):
    """The swap may or may not have happened (reply lost). Never retried blindly and
    never cleaned up; resolve by reading the catalog."""


class RetriesExhaustedError(CommitError, Terminal, Cleanable):
    """``calving.commit.retry.*`` limits ran out while every attempt was a clean loss."""


class StaleWriterError(CommitError, Terminal, Cleanable):
    """Another pipeline with the same writer id moved the ledger past this one's offsets
    in a way that is not a plain replay; this writer must stop."""


class TableIdentityChangedError(CommitConflictError):
    """The table UUID changed under the writer (dropped and recreated)."""


class FileIOError(Transient):
    """A storage operation failed (network, permissions transient)."""


class FileAlreadyExistsError(Terminal):
    """An exclusive create found the file already present."""

    def __init__(self, location: str) -> None:
        self.location = location
        super().__init__(f"{location}: already exists")


class FileNotFoundInTableError(Terminal):
    """A location the caller (or the table's metadata) names does not exist.

    Not a ``FileIOError``: retrying will not make the file appear.
    """

    def __init__(self, location: str, detail: str = "") -> None:
        self.location = location
        super().__init__(f"{location}: no such file" + (f" ({detail})" if detail else ""))


class InvalidLocationError(Terminal):
    """A location that is not an absolute URI of a supported scheme, or that does not fit
    the layout a catalog needs (e.g. not the next ``v<N>.metadata.json``)."""


class InvalidIdentifierError(CatalogError, Terminal):
    """A namespace or table identifier that cannot be stored (empty, or a part the
    catalog cannot represent)."""


class InvalidUpdateError(Terminal):
    """A table update or requirement (REST ``TableUpdate`` / ``TableRequirement``) that is
    unknown, malformed, or cannot apply to the table it names."""


class LocationNotAllowedError(InvalidLocationError):
    """A table or metadata location outside the places a catalog may write or read
    (the warehouse, or the allowed prefixes of ``calving catalog serve``)."""


class ChangeFeedError(Terminal):
    """A change range that cannot be read exactly: a snapshot in it was expired, the
    start is not an ancestor of the end, or a snapshot in it changed rows in a way the
    change feed cannot see through (a rewrite that did not keep ``_row_id``s, equality
    deletes, v2 position delete files)."""

"""The REST protocol's error model: ``{"error": {"message", "type", "code"}}``.

``RestError`` carries the HTTP status and the Iceberg exception type name a client
maps it to; ``rest_error_of`` maps calving's typed errors onto them.
"""

from __future__ import annotations

from typing import Any

from calving.commit.errors import (
    CatalogUnavailableError,
    CommitConflictError,
    CommitStateUnknownError,
    CommitSwapLostError,
    InvalidIdentifierError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    SchemaError,
    TableAlreadyExistsError,
    UnsupportedFeatureError,
)


class RestError(Exception):
    """An error answer: HTTP ``status``, Iceberg ``error_type``, one-line message."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.error_type, "code": self.status}}


def bad_request(message: str) -> RestError:
    return RestError(400, "BadRequestException", message)


def commit_failed(message: str) -> RestError:
    return RestError(409, "CommitFailedException", message)


# calving error -> (status, Iceberg exception type); the first match wins.
_MAPPING: tuple[tuple[type[Exception], int, str], ...] = (
    (NoSuchTableError, 404, "NoSuchTableException"),
    (NoSuchNamespaceError, 404, "NoSuchNamespaceException"),
    (TableAlreadyExistsError, 409, "AlreadyExistsException"),
    (NamespaceAlreadyExistsError, 409, "AlreadyExistsException"),
    (NamespaceNotEmptyError, 409, "NamespaceNotEmptyException"),
    (CommitSwapLostError, 409, "CommitFailedException"),
    (CommitConflictError, 409, "CommitFailedException"),
    (CommitStateUnknownError, 500, "CommitStateUnknownException"),
    (CatalogUnavailableError, 503, "ServiceUnavailableException"),
    (InvalidIdentifierError, 400, "BadRequestException"),
    (SchemaError, 400, "BadRequestException"),
    (UnsupportedFeatureError, 400, "BadRequestException"),
)


def rest_error_of(exc: Exception) -> RestError:
    """The answer for ``exc``; anything unmapped is a 500 ``InternalServerError``."""
    if isinstance(exc, RestError):
        return exc
    for kind, status, name in _MAPPING:
        if isinstance(exc, kind):
            return RestError(status, name, str(exc))
    return RestError(500, "InternalServerError", f"{type(exc).__name__}: {exc}")

"""The REST protocol's error model: ``{"error": {"message", "type", "code"}}``.

``RestError`` carries the HTTP status and the Iceberg exception type name a client
maps it to; ``rest_error_of`` maps calving's typed errors onto them. Anything it does not
know is a 500 whose message is only the request id: the details go to the server's log.
"""

from __future__ import annotations

from typing import Any

from calving.commit.errors import (
    CatalogUnavailableError,
    CommitConflictError,
    CommitStateUnknownError,
    CommitSwapLostError,
    InvalidIdentifierError,
    InvalidLocationError,
    InvalidTablePropertyError,
    InvalidUpdateError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    SchemaError,
    TableAlreadyExistsError,
    UnsupportedFeatureError,
)

#: Longest message an error answer carries (a client's own oversized input stays out).
MAX_MESSAGE_CHARS = 500


class RestError(Exception):
    """An error answer: HTTP ``status``, Iceberg ``error_type``, one-line message."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        message = " ".join(message.split())
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[: MAX_MESSAGE_CHARS - 3] + "..."
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.error_type, "code": self.status}}


def bad_request(message: str) -> RestError:
    return RestError(400, "BadRequestException", message)


def unprocessable(message: str) -> RestError:
    return RestError(422, "UnprocessableEntityException", message)


def commit_failed(message: str) -> RestError:
    return RestError(409, "CommitFailedException", message)


def not_authorized() -> RestError:
    return RestError(401, "NotAuthorizedException", "missing, wrong or expired bearer token")


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
    (InvalidLocationError, 400, "BadRequestException"),
    (InvalidUpdateError, 400, "BadRequestException"),
    (InvalidTablePropertyError, 400, "BadRequestException"),
    (SchemaError, 400, "BadRequestException"),
    (UnsupportedFeatureError, 400, "BadRequestException"),
)

#: Statuses whose message may be shown to the client (the rest say only the request id).
_CLIENT_SAFE = frozenset((400, 404, 409, 503))


def rest_error_of(exc: Exception, request_id: str) -> RestError:
    """The answer for ``exc``. A 5xx says what kind of failure and the request id, never
    the exception's text (it may hold paths); the caller logs that with the same id."""
    if isinstance(exc, RestError):
        return exc
    for kind, status, name in _MAPPING:
        if isinstance(exc, kind):
            if status in _CLIENT_SAFE:
                return RestError(status, name, str(exc))
            return RestError(status, name, f"{name} (request id {request_id})")
    return RestError(500, "InternalServerError", f"internal server error (request id {request_id})")

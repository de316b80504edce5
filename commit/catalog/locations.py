"""Where a catalog may put, or read, table metadata: location confinement.

``Confinement(prefixes)`` holds the roots a catalog owns (its warehouse, plus any
allowed prefixes). ``check`` accepts a location only when it is one of the roots or below
one, compared segment by segment after the location is made canonical (``to_uri``), and
refuses any location with a ``.`` or ``..`` segment (also percent-encoded), a
backslash, or a control character, so no spelling of a path walks out of a root. A
refusal is a ``LocationNotAllowedError`` that names what was refused (``what``) and
never the server's own paths. Pure: nothing is resolved on a filesystem.
"""

from __future__ import annotations

import unicodedata
import urllib.parse
from collections.abc import Iterable

from calving.commit.errors import InvalidLocationError, LocationNotAllowedError
from calving.commit.io import to_uri


def _segments_ok(location: str) -> bool:
    path = urllib.parse.urlsplit(location).path
    for raw in path.split("/"):
        segment = urllib.parse.unquote(raw)
        if segment in (".", "..") or "\\" in segment:
            return False
    return not any(unicodedata.category(c) == "Cc" for c in urllib.parse.unquote(location))


def canonical(location: str) -> str:
    """``location`` as ``to_uri`` spells it, without a trailing ``/``; raises
    ``InvalidLocationError`` for one that cannot be a location at all."""
    if not isinstance(location, str) or not location or len(location) > 4096:
        raise InvalidLocationError("a location must be a non-empty string of at most 4096 chars")
    if not _segments_ok(location):
        raise InvalidLocationError("a location may not hold '.' or '..' segments or controls")
    return to_uri(location).rstrip("/")


class Confinement:
    """The roots a catalog may write metadata under or register tables from."""

    def __init__(self, roots: Iterable[str]) -> None:
        self.roots = tuple(sorted({canonical(r) for r in roots}))
        if not self.roots:
            raise InvalidLocationError("a confinement needs at least one root location")

    def __repr__(self) -> str:
        return f"Confinement({len(self.roots)} roots)"

    def allows(self, location: str) -> bool:
        try:
            where = canonical(location)
        except InvalidLocationError:
            return False
        return any(where == root or where.startswith(root + "/") for root in self.roots)

    def check(self, location: str, what: str) -> str:
        """The canonical ``location``, or ``LocationNotAllowedError`` naming ``what``."""
        if not self.allows(location):
            raise LocationNotAllowedError(
                f"{what} is outside the locations this catalog may use (its warehouse "
                "and allowed prefixes)"
            )
        return canonical(location)

"""The one rule for namespace and table names, in every catalog calving writes or serves.

A name part (a namespace level or the table name) is 1-255 characters of printable
Unicode (letters, digits, punctuation, spaces) with none of:

* ``.`` in a namespace level (namespaces are stored dotted, ``"a.b"``, as Iceberg's JDBC
  catalog and pyiceberg store them), and no table name made only of dots (``.``, ``..``);
* the path separators ``/`` and ``\\``;
* control characters (Unicode category Cc: NUL, newline, ``\\x1f`` ...) or line and
  paragraph separators.

A dotted namespace is at most 255 characters (the SQL catalog's ``VARCHAR(255)``
columns). Names become path segments of table locations, so this rule is also what keeps
a derived location inside its warehouse. ``InvalidIdentifierError`` names what is wrong
and shows at most the first 40 characters of an offending part. Pure.
"""

from __future__ import annotations

import unicodedata

from calving.commit.errors import InvalidIdentifierError

TableIdent = tuple[str, ...]  # namespace parts + table name
Namespace = tuple[str, ...]

#: Longest table name, and longest dotted namespace, in characters.
MAX_NAME_LENGTH = 255
_SEPARATORS = frozenset("/\\")
_BAD_CATEGORIES = frozenset(("Cc", "Zl", "Zp"))


def _shown(part: str) -> str:
    return repr(part[:40]) + ("..." if len(part) > 40 else "")


def _bad_character(part: str) -> str | None:
    for c in part:
        if c in _SEPARATORS:
            return f"the path separator {c!r}"
        if unicodedata.category(c) in _BAD_CATEGORIES:
            return f"the control character U+{ord(c):04X}"
    return None


def _check_part(part: object, what: str) -> str:
    if not isinstance(part, str) or not part:
        raise InvalidIdentifierError(f"{what} must be a non-empty string")
    if len(part) > MAX_NAME_LENGTH:
        raise InvalidIdentifierError(
            f"{what} {_shown(part)} is longer than {MAX_NAME_LENGTH} characters"
        )
    bad = _bad_character(part)
    if bad is not None:
        raise InvalidIdentifierError(f"{what} {_shown(part)} holds {bad}")
    return part


def check_namespace(namespace: Namespace) -> Namespace:
    """``namespace`` as a tuple, or ``InvalidIdentifierError``."""
    if isinstance(namespace, str) or not isinstance(namespace, tuple | list) or not namespace:
        raise InvalidIdentifierError(f"namespace must be a non-empty tuple, got {namespace!r}")
    for part in namespace:
        _check_part(part, "namespace level")
        if "." in part:
            raise InvalidIdentifierError(
                f"namespace level {_shown(part)} holds '.', which separates namespace levels"
            )
    if sum(len(p) for p in namespace) + len(namespace) - 1 > MAX_NAME_LENGTH:
        raise InvalidIdentifierError(
            f"namespace {_shown('.'.join(namespace))} is longer than {MAX_NAME_LENGTH} characters"
        )
    return tuple(namespace)


def check_ident(ident: TableIdent) -> TableIdent:
    """``ident`` (namespace levels + table name) as a tuple, or ``InvalidIdentifierError``."""
    if isinstance(ident, str) or not isinstance(ident, tuple | list) or len(ident) < 2:
        raise InvalidIdentifierError(f"table identifier needs a namespace and a name: {ident!r}")
    check_namespace(tuple(ident[:-1]))
    name = _check_part(ident[-1], "table name")
    if not name.strip("."):
        raise InvalidIdentifierError(f"table name {name!r} is made only of dots")
    return tuple(ident)

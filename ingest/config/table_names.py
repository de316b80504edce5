"""Table-name templates and the rules that make their output an Iceberg identifier.

A template is text with placeholders, e.g. ``"{schema}.{table}"``, ``"cdc.{db}_{table}"``
or ``"raw.{topic[2]}"``. Placeholders:

* from the Debezium ``source`` block of the change event: ``{db}``, ``{schema}``,
  ``{table}``, ``{collection}`` (MongoDB), ``{name}`` (the connector's logical name,
  its topic prefix) and ``{connector}`` (``postgresql``, ``mysql`` ...);
* from the topic name: ``{topic}`` (all of it) and ``{topic[i]}``, the i-th part when
  the name is split on ``.`` (from 0; negative counts from the end, ``{topic[-1]}`` is
  the last part).

The literal text may hold ASCII letters, digits, ``_`` and ``.``; a literal ``.``
separates namespace levels, and the rendered name needs at least one (a namespace and a
table). Each substituted value is one level: its characters other than ASCII letters,
digits and ``_`` (dots included) become ``_`` (``invalid_characters = "replace"``,
the default) or are refused (``"error"``). Then, with ``name_case = "lower"`` (the
default), the whole name is lowercased: engines such as Trino and Hive fold identifiers
to lower case, so a mixed-case Iceberg name is unreachable from them. A namespace (dotted)
or table name may have at most 255 characters (the SQL catalog's columns); the rendered
name must also pass the catalogs' identifier rule (``calving.commit.catalog.identifiers``).

A name that cannot be made valid (an empty value, a missing source field, too few topic
parts, too long) is a ``TableNameError`` naming the config key and the topic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from calving.commit.catalog.identifiers import MAX_NAME_LENGTH, check_ident
from calving.commit.errors import ConfigError, InvalidIdentifierError

SOURCE_FIELDS = ("db", "schema", "table", "collection", "name", "connector")
NameCase = Literal["lower", "preserve"]
InvalidCharacters = Literal["replace", "error"]
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]+)(?:\[(-?\d+)\])?\}")
_INVALID = re.compile(r"[^A-Za-z0-9_]")
_LITERAL = re.compile(r"[A-Za-z0-9_.]*")


class TableNameError(ConfigError):
    """A topic whose table name the routing config cannot make; names key and topic."""

    def __init__(self, key: str, topic: str, reason: str) -> None:
        self.key = key
        self.topic = topic
        self.reason = reason
        super().__init__(f"{key}: topic {topic!r}: {reason}")


@dataclass(frozen=True)
class NameRules:
    case: NameCase = "lower"
    invalid_characters: InvalidCharacters = "replace"

    def level(self, key: str, topic: str, value: str, what: str) -> str:
        """One substituted value as (part of) one namespace level or table name."""
        if not value:
            raise TableNameError(key, topic, f"{what} is empty")
        bad = sorted(set(_INVALID.findall(value)))
        if bad and self.invalid_characters == "error":
            shown = "".join(bad)
            raise TableNameError(
                key,
                topic,
                f"{what} {value!r} has characters {shown!r} that are not allowed in table "
                'names (ASCII letters, digits and _; set invalid_characters = "replace")',
            )
        return _INVALID.sub("_", value)

    def finish(self, key: str, topic: str, name: str) -> tuple[str, ...]:
        """The rendered dotted name -> its identifier (namespace levels, table)."""
        if self.case == "lower":
            name = name.lower()
        parts = tuple(name.split("."))
        if len(parts) < 2:
            raise TableNameError(
                key, topic, f"table name {name!r} has no namespace (expected namespace.table)"
            )
        if any(not p for p in parts):
            raise TableNameError(key, topic, f"table name {name!r} has an empty level")
        namespace = ".".join(parts[:-1])
        for what, text in (("namespace", namespace), ("table name", parts[-1])):
            if len(text) > MAX_NAME_LENGTH:
                raise TableNameError(
                    key, topic, f"{what} {text[:40]!r}... is longer than {MAX_NAME_LENGTH}"
                )
        try:
            return check_ident(parts)  # the catalogs' own rule, on top of the stricter one
        except InvalidIdentifierError as err:
            raise TableNameError(key, topic, str(err)) from None

    def check_literal(self, key: str, name: str) -> tuple[str, ...]:
        """A table name written in the config (a static route): valid as written."""
        if _INVALID.search(name.replace(".", "")):
            raise ConfigError(
                f"{key}: table name {name!r} may hold only ASCII letters, digits, _ and ."
            )
        return self.finish(key, "(static route)", name)


@dataclass(frozen=True)
class _Slot:
    text: str  # the placeholder as written, for messages
    field: str
    index: int | None = None


@dataclass(frozen=True)
class NameTemplate:
    key: str
    text: str
    pieces: tuple[str | _Slot, ...]

    @property
    def source_fields(self) -> tuple[str, ...]:
        """The ``source`` block fields the template needs (none: topic parts only)."""
        return tuple(p.field for p in self.pieces if isinstance(p, _Slot) and p.field != "topic")

    def render(
        self, topic: str, source: Mapping[str, Any] | None, rules: NameRules
    ) -> tuple[str, ...]:
        """The identifier for one event of ``topic``. ``source`` may be None only when
        ``source_fields`` is empty."""
        out = []
        for piece in self.pieces:
            if isinstance(piece, str):
                out.append(piece)
                continue
            value = self._value(piece, topic, source)
            out.append(rules.level(self.key, topic, value, piece.text))
        return rules.finish(self.key, topic, "".join(out))

    def _value(self, slot: _Slot, topic: str, source: Mapping[str, Any] | None) -> str:
        if slot.field == "topic":
            if slot.index is None:
                return topic
            parts = topic.split(".")
            if not -len(parts) <= slot.index < len(parts):
                raise TableNameError(
                    self.key, topic, f"{slot.text} needs more than {len(parts)} topic name parts"
                )
            return parts[slot.index]
        value = None if source is None else source.get(slot.field)
        if not isinstance(value, str):
            why = (
                "the record has no source block"
                if source is None
                else f"the event's source block has no string {slot.field!r}"
            )
            raise TableNameError(self.key, topic, f"{slot.text}: {why}")
        return value


def parse_template(key: str, text: str) -> NameTemplate:
    """Parse and check a template; errors are one line naming ``key``."""
    pieces: list[str | _Slot] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(text):
        _literal(key, text, text[pos : m.start()], pieces)
        field, index = m.group(1), m.group(2)
        if field != "topic" and field not in SOURCE_FIELDS:
            known = ", ".join(f"{{{f}}}" for f in (*SOURCE_FIELDS, "topic", "topic[N]"))
            raise ConfigError(f"{key}: unknown placeholder {m.group(0)!r} in {text!r} ({known})")
        if index is not None and field != "topic":
            raise ConfigError(f"{key}: only {{topic}} takes an index, got {m.group(0)!r}")
        pieces.append(_Slot(m.group(0), field, None if index is None else int(index)))
        pos = m.end()
    _literal(key, text, text[pos:], pieces)
    levels = "".join("x" if isinstance(p, _Slot) else p for p in pieces).split(".")
    if len(levels) < 2 or any(not level for level in levels):
        raise ConfigError(
            f'{key}: {text!r} must name namespace and table with non-empty levels, e.g. "{{schema}}.{{table}}"'
        )
    return NameTemplate(key, text, tuple(pieces))


def _literal(key: str, text: str, literal: str, pieces: list[str | _Slot]) -> None:
    if not literal:
        return
    if not _LITERAL.fullmatch(literal):
        bad = next(c for c in literal if not _LITERAL.fullmatch(c))
        raise ConfigError(
            f"{key}: {text!r} has {bad!r} outside a placeholder; names may hold ASCII letters, "
            "digits, _ and . (placeholders look like {table} or {topic[1]})"
        )
    pieces.append(literal)

"""Which Iceberg table a change event of a Kafka topic belongs to.

``TableRouter.from_config`` builds a router from config values (nothing is read or
written): the subscription (``source.topics`` or ``source.topic_pattern``, a regex that
must match the whole topic name, as the Kafka source matches it), the table-name
template (``table.name``, see ``names``), a static topic -> table map
(``table.topic_map``, which wins over the template), the name rules and the per-table
sections (``tables``, see ``settings``).

``route(topic, source)`` answers with a value, never by raising for ordinary outcomes:

* ``Route``: the table identifier and its settings;
* ``Skip``: the topic is not subscribed, is reserved for something other than rows (the
  caller passes e.g. Debezium's ``<prefix>.transaction`` topic), or its table is
  excluded;
* ``NeedsSource``: the template uses ``source`` fields and the record has no source
  block (a tombstone or a null value). Debezium writes one table per topic, so the
  caller routes such records like the topic's previous events (it remembers the last
  ``Route`` per topic, or reads the topic's table from the tables' ledgers after a
  restart).

A name that cannot be made valid raises ``TableNameError`` (key and topic named); the
caller decides whether that stops the pipeline or dead-letters the topic's records.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from calving.commit.errors import ConfigError
from calving.ingest.config.reader import Context
from calving.ingest.config.secrets import join_key
from calving.ingest.config.table_names import (
    InvalidCharacters,
    NameCase,
    NameRules,
    NameTemplate,
    parse_template,
)
from calving.ingest.config.table_settings import (
    TableSettings,
    TableSettingsList,
    parse_table_settings,
)


@dataclass(frozen=True)
class Route:
    topic: str
    ident: tuple[str, ...]
    settings: TableSettings

    @property
    def name(self) -> str:
        return ".".join(self.ident)


@dataclass(frozen=True)
class Skip:
    topic: str
    reason: Literal["unsubscribed", "reserved", "excluded"]
    #: The table an excluded topic would have gone to.
    table: str | None = None


@dataclass(frozen=True)
class NeedsSource:
    topic: str
    fields: tuple[str, ...]


Outcome = Route | Skip | NeedsSource


@dataclass(frozen=True)
class TableRouter:
    template: NameTemplate
    topics: frozenset[str] = frozenset()
    pattern: re.Pattern[str] | None = None
    topic_map: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    settings: TableSettingsList = field(default_factory=TableSettingsList)
    rules: NameRules = field(default_factory=NameRules)
    reserved: frozenset[str] = frozenset()

    @classmethod
    def from_config(
        cls,
        *,
        name: str,
        topics: Iterable[str] | None = None,
        topic_pattern: str | None = None,
        topic_map: Mapping[str, Any] | None = None,
        tables: Mapping[str, Any] | None = None,
        name_case: str = "lower",
        invalid_characters: str = "replace",
        reserved: Iterable[str] = (),
        ctx: Context | None = None,
    ) -> TableRouter:
        """Config values -> a router; every error is one line naming its key."""
        rules = _rules(name_case, invalid_characters)
        subscribed = frozenset(topics or ())
        if subscribed and topic_pattern is not None:
            raise ConfigError("source.topic_pattern: give source.topics or topic_pattern, not both")
        pattern = _pattern(topic_pattern) if topic_pattern is not None else None
        static_routes = _topic_map(topic_map or {}, rules, subscribed, pattern)
        if not subscribed and pattern is None and not static_routes:
            raise ConfigError(
                "source.topics: no topics to read; give source.topics, source.topic_pattern "
                "or a [table.topic_map]"
            )
        return cls(
            template=parse_template("table.name", name),
            topics=subscribed,
            pattern=pattern,
            topic_map=static_routes,
            settings=parse_table_settings(tables, rules, ctx),
            rules=rules,
            reserved=frozenset(reserved),
        )

    def subscribed(self, topic: str) -> bool:
        if topic in self.topic_map or topic in self.topics:
            return True
        return self.pattern is not None and self.pattern.fullmatch(topic) is not None

    def route(self, topic: str, source: Mapping[str, Any] | None = None) -> Outcome:
        if topic in self.reserved:
            return Skip(topic, "reserved")
        if not self.subscribed(topic):
            return Skip(topic, "unsubscribed")
        ident = self.topic_map.get(topic)
        if ident is None:
            needed = self.template.source_fields
            if needed and source is None:
                return NeedsSource(topic, needed)
            ident = self.template.render(topic, source, self.rules)
        name = ".".join(ident)
        settings = self.settings.for_table(name)
        if settings.exclude:
            return Skip(topic, "excluded", name)
        return Route(topic, ident, settings)


def _rules(name_case: str, invalid_characters: str) -> NameRules:
    if name_case not in ("lower", "preserve"):
        raise ConfigError(f'table.name_case: expected "lower" or "preserve", got {name_case!r}')
    if invalid_characters not in ("replace", "error"):
        raise ConfigError(
            f'table.invalid_characters: expected "replace" or "error", got {invalid_characters!r}'
        )
    case: NameCase = "lower" if name_case == "lower" else "preserve"
    invalid: InvalidCharacters = "replace" if invalid_characters == "replace" else "error"
    return NameRules(case, invalid)


def _pattern(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise ConfigError(f"source.topic_pattern: invalid regex {text!r} ({exc})") from None


def _topic_map(
    values: Mapping[str, Any],
    rules: NameRules,
    topics: frozenset[str],
    pattern: re.Pattern[str] | None,
) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    if not isinstance(values, Mapping):
        raise ConfigError('table.topic_map: expected a table of "topic" = "namespace.table"')
    for topic, table in values.items():
        key = join_key("table.topic_map", topic)
        if not isinstance(table, str):
            raise ConfigError(f'{key}: expected a table name "namespace.table", got {table!r}')
        covered = topic in topics or (pattern is not None and pattern.fullmatch(topic))
        if (topics or pattern is not None) and not covered:
            by = "source.topics" if topics else "source.topic_pattern"
            raise ConfigError(f"{key}: topic {topic!r} is not read ({by} does not name it)")
        out[topic] = rules.check_literal(key, table)
    return out

"""Per-table settings of a many-table pipeline: ``[tables."<name or glob>"]`` sections.

Each section names one table exactly (``[tables."inventory.orders"]``) or a glob over
table names (``[tables."inventory.audit_*"]``: ``*`` any run of characters, dots
included; ``?`` one character; ``[abc]`` / ``[!abc]`` a set), matched against the
routed, normalized table name. Keys: ``partition`` (transforms as in ``table.partition``),
``properties`` (as ``table.properties``), ``identifier_fields`` (instead of the Debezium
key's fields) and ``exclude = true`` (the table's records are skipped; no other key may
be given with it).

Which section applies: the exact name if there is one, otherwise the first glob in the
order the file lists them; sections never merge. "First listed glob" is easy to predict
from the file alone (specificity rules differ between tools and cannot order
``inventory.*`` against ``*.orders``), so write narrower globs first.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from calving.commit.errors import ConfigError
from calving.ingest.config.reader import Context, Section
from calving.ingest.config.secrets import join_key
from calving.ingest.config.table import (
    PartitionFieldConfig,
    check_properties,
    parse_partition,
)
from calving.ingest.config.table_names import NameRules

KEYS = ("partition", "properties", "identifier_fields", "exclude")
_GLOB = re.compile(r"[A-Za-z0-9_.*?\[\]!-]+")


@dataclass(frozen=True)
class TableSettings:
    #: The section's name (exact table name or glob); "" when no section applies.
    pattern: str = ""
    partition: tuple[PartitionFieldConfig, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    identifier_fields: tuple[str, ...] = ()
    exclude: bool = False


DEFAULT = TableSettings()


@dataclass(frozen=True)
class TableSettingsList:
    exact: Mapping[str, TableSettings] = field(default_factory=dict)
    globs: tuple[TableSettings, ...] = ()

    def for_table(self, name: str) -> TableSettings:
        found = self.exact.get(name)
        if found is not None:
            return found
        for settings in self.globs:
            if fnmatch.fnmatchcase(name, settings.pattern):
                return settings
        return DEFAULT


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def parse_table_settings(
    values: Any, rules: NameRules, ctx: Context | None = None, path: str = "tables"
) -> TableSettingsList:
    """``[tables."..."]`` sections (a mapping of name/glob -> table) -> settings."""
    if values is None:
        return TableSettingsList()
    if not isinstance(values, Mapping):
        raise ConfigError(f'{path}: expected a table of [{path}."<table or glob>"] sections')
    ctx = ctx or Context(base_dir=".")
    exact: dict[str, TableSettings] = {}
    globs: list[TableSettings] = []
    for pattern, body in values.items():
        key = join_key(path, pattern)
        _check_pattern(key, pattern, rules)
        if not isinstance(body, Mapping):
            raise ConfigError(f"{key}: expected a table with {', '.join(KEYS)}")
        settings = _settings(Section(body, key, ctx, KEYS), pattern)
        if is_glob(pattern):
            globs.append(settings)
        else:
            exact[pattern] = settings
    return TableSettingsList(exact, tuple(globs))


def _check_pattern(key: str, pattern: str, rules: NameRules) -> None:
    if not is_glob(pattern):
        ident = rules.check_literal(key, pattern)
        if ".".join(ident) != pattern:
            raise ConfigError(
                f'{key}: never matches: table names are lowercased (name_case = "lower"); '
                f"write {'.'.join(ident)!r}"
            )
        return
    if not _GLOB.fullmatch(pattern):
        raise ConfigError(
            f"{key}: a table-name glob may hold ASCII letters, digits, _, ., -, and * ? [ ] !"
        )
    if rules.case == "lower" and pattern != pattern.lower():
        raise ConfigError(
            f'{key}: never matches: table names are lowercased (name_case = "lower"); '
            f"write {pattern.lower()!r}"
        )


def _settings(s: Section, pattern: str) -> TableSettings:
    exclude = s.boolean("exclude", False)
    if exclude:
        given = [k for k in KEYS if k != "exclude" and s.has(k)]
        if given:
            s.fail(given[0], "an excluded table takes no other settings")
    properties = s.passthrough("properties")
    check_properties(s, properties)
    identifiers = s.string_list("identifier_fields") or ()
    if len(set(identifiers)) != len(identifiers):
        s.fail("identifier_fields", "names a column twice")
    settings = TableSettings(
        pattern=pattern,
        partition=parse_partition(s),
        properties=properties,
        identifier_fields=identifiers,
        exclude=exclude,
    )
    s.finish()
    return settings

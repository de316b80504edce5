"""Typed, key-naming access to one table of the parsed TOML document.

A ``Section`` hands out each key's value checked against what the key expects, and
remembers which keys it handed out; ``finish()`` then refuses every key nobody asked for
(suggesting the closest known key, so ``writer_idd`` points at ``writer_id``). Every
error is a ``ConfigError`` that starts with the dotted key (``table.partition[1]``) and
says what was expected and what was found. Values that came from ``${env:...}`` are
never echoed: the message shows where they came from instead.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, overload

from calving.commit.errors import ConfigError
from calving.ingest.config.secrets import Redactor, env_placeholder, join_key


@dataclass
class Context:
    """What every section of one document shares."""

    #: Directory that relative local paths are resolved against (the config file's).
    base_dir: str
    #: Dotted key -> environment variables its value was built from.
    env_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Masks env-sourced text in any error message (see ``Redactor``).
    redact: Redactor = field(default_factory=Redactor)

    def resolve_path(self, path: str) -> str:
        """A local path relative to the config file made absolute; URIs unchanged."""
        if "://" in path or path.startswith("file:"):
            return path
        return os.path.normpath(os.path.join(self.base_dir, os.path.expanduser(path)))


def type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


def suggestion(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


class Section:
    def __init__(
        self, data: Mapping[str, Any], path: str, ctx: Context, known: Sequence[str]
    ) -> None:
        self.data = data
        self.path = path
        self.ctx = ctx
        #: Every key this section accepts (for unknown-key suggestions).
        self.known = tuple(known)
        self._used: set[str] = set()
        # Refuse unknown keys first: a misspelt required key (``writer_idd`` without
        # ``writer_id``) must be reported as the typo, not as "writer_id is required".
        for name in data:
            if name not in self.known:
                self._unknown(name)

    # ------------------------------------------------------------ naming and errors

    def key(self, name: str) -> str:
        return join_key(self.path, name)

    def shown(self, key: str, value: Any) -> str:
        """How a value appears in an error: its repr, or its env origin if secret."""
        names = self.ctx.env_keys.get(key)
        if names is not None:
            return env_placeholder(names)
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."

    def fail(self, name: str, message: str) -> NoReturn:
        raise ConfigError(f"{self.key(name)}: {message}")

    def wrong(self, name: str, expected: str, value: Any, key: str | None = None) -> NoReturn:
        key = key or self.key(name)
        raise ConfigError(
            f"{key}: expected {expected}, got {type_name(value)} {self.shown(key, value)}"
        )

    def is_env(self, name: str) -> bool:
        return self.key(name) in self.ctx.env_keys

    def env_names(self) -> frozenset[str]:
        """Names (relative to this section) of keys whose values came from the environment,
        as the config dataclasses' ``env_keys`` hold them."""
        prefix = self.path + "." if self.path else ""
        return frozenset(
            k[len(prefix) :].replace('"', "") for k in self.ctx.env_keys if k.startswith(prefix)
        )

    # ------------------------------------------------------------ typed getters

    def has(self, name: str) -> bool:
        return name in self.data

    def raw(self, name: str) -> Any:
        self._used.add(name)
        return self.data.get(name)

    def string(
        self,
        name: str,
        default: str | None = None,
        *,
        required: bool = False,
        choices: Sequence[str] | None = None,
        what: str = "a string",
    ) -> str | None:
        value = self.raw(name)
        if value is None:
            if required:
                self.fail(name, f"is required ({what})")
            return default
        if not isinstance(value, str):
            self.wrong(name, what, value)
        if not value.strip():
            self.fail(name, f"must not be empty ({what})")
        if choices is not None and value not in choices:
            options = ", ".join(f'"{c}"' for c in choices)
            self.fail(
                name,
                f"expected one of {options}, got {self.shown(self.key(name), value)}"
                + suggestion(value, choices),
            )
        return value

    def required_string(self, name: str, what: str = "a string", **kw: Any) -> str:
        value = self.string(name, required=True, what=what, **kw)
        assert value is not None
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        # Environment variables are text: accept their usual spellings.
        if (
            isinstance(value, str)
            and self.is_env(name)
            and value.strip().lower() in ("true", "false")
        ):
            return value.strip().lower() == "true"
        if not isinstance(value, bool):
            self.wrong(name, "true or false", value)
        return value

    @overload
    def _typed(self, name: str, parse: type[int], what: str) -> int | None: ...
    @overload
    def _typed(self, name: str, parse: type[float], what: str) -> float | None: ...
    def _typed(self, name: str, parse: type[int | float], what: str) -> int | float | None:
        """The raw value as ``parse`` (an env string is parsed; a float key takes ints)."""
        value = self.raw(name)
        if value is None:
            return None
        if isinstance(value, str) and self.is_env(name):
            try:
                value = parse(value.strip())
            except ValueError:
                self.wrong(name, what, value)
        kinds = (int, float) if parse is float else (int,)
        if isinstance(value, bool) or not isinstance(value, kinds):
            self.wrong(name, what, value)
        return value

    def fraction(self, name: str, default: float) -> float:
        """A number in (0, 1]."""
        value = self._typed(name, float, "a number in (0, 1]")
        if value is None:
            return default
        if not 0 < value <= 1:
            self.fail(name, f"must be in (0, 1], got {self.shown(self.key(name), value)}")
        return float(value)

    def integer(
        self, name: str, default: int | None = None, *, minimum: int | None = None
    ) -> int | None:
        value = self._typed(name, int, "an integer")
        if value is None:
            return default
        if minimum is not None and value < minimum:
            shown = self.shown(self.key(name), value)
            self.fail(name, f"must be at least {minimum}, got {shown}")
        return value

    def string_list(self, name: str, *, what: str = "a list of strings") -> tuple[str, ...] | None:
        value = self.raw(name)
        if value is None:
            return None
        if not isinstance(value, list):
            self.wrong(name, what, value)
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                self.wrong(
                    name, f"a non-empty string in {what}", item, key=f"{self.key(name)}[{i}]"
                )
        return tuple(value)

    def table(self, name: str, known: Sequence[str], *, required: bool = False) -> Section | None:
        value = self.raw(name)
        if value is None:
            if required:
                self.fail(name, "is required (a table)")
            return None
        if not isinstance(value, dict):
            self.wrong(name, "a table", value)
        return Section(value, self.key(name), self.ctx, known)

    def table_list(self, name: str, known: Sequence[str]) -> list[Section]:
        value = self.raw(name)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            self.wrong(name, f"an array of tables ([[{self.key(name)}]] entries)", value)
        return [Section(v, f"{self.key(name)}[{i}]", self.ctx, known) for i, v in enumerate(value)]

    def passthrough(self, name: str) -> dict[str, str]:
        """A table of settings handed to another system as strings.

        Nested tables are flattened with dots, so both ``"sasl.mechanism" = "PLAIN"`` and
        an unquoted ``sasl.mechanism = "PLAIN"`` (which TOML reads as a nested table) give
        the key ``sasl.mechanism``. Integers, floats and booleans become their text
        (booleans as ``true``/``false``, as librdkafka and Spark spell them).
        """
        value = self.raw(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.wrong(name, "a table of settings", value)
        out: dict[str, str] = {}
        self._flatten(value, self.key(name), "", out)
        return out

    def _flatten(
        self, table: Mapping[str, Any], key: str, prefix: str, out: dict[str, str]
    ) -> None:
        for k, v in table.items():
            setting = f"{prefix}{k}"
            full = join_key(key, k)
            if isinstance(v, dict):
                self._flatten(v, full, setting + ".", out)
            elif isinstance(v, bool):
                out[setting] = "true" if v else "false"
            elif isinstance(v, (str, int, float)):
                out[setting] = str(v)
            else:
                self.wrong("", "a string, number or boolean", v, key=full)

    # ------------------------------------------------------------ completeness

    def finish(self) -> None:
        """Refuse keys nobody read: a typo must not silently fall back to a default."""
        for name in self.data:
            if name not in self._used:
                self._unknown(name)

    def _unknown(self, name: str) -> NoReturn:
        hint = suggestion(name, self.known)
        known = ", ".join(self.known)
        raise ConfigError(
            f"{self.key(name)}: unknown key{hint}"
            + ("" if hint else f" (known keys here: {known})")
        )

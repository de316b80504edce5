"""Secrets in configuration: ``${env:NAME}`` references and masked ``repr``.

Secrets never live in the config file. Any string value may reference environment
variables as ``${env:NAME}``, alone (``password = "${env:KAFKA_PASSWORD}"``) or inside a
longer string (``"postgresql+psycopg://calving:${env:PGPASSWORD}@db/catalog"``). They are
resolved once, when the file is parsed; a variable that is not set is a ``ConfigError``
naming the key and the variable, never its value.

Every key whose value came from the environment is remembered, so error messages and
``repr`` show ``<from ${env:NAME}>`` instead of the value, and passthrough keys whose name
says they hold a secret (password, secret, jaas, token, credential) are masked in ``repr``
whatever their origin.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from calving.commit.errors import ConfigError

ENV_REFERENCE = re.compile(r"\$\{env:([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: Passthrough keys whose values are masked in ``repr`` (librdkafka's sasl.password,
#: sasl.jaas.config, sasl.oauthbearer.client.secret, s3.secret-access-key, tokens ...).
SENSITIVE_KEY = re.compile(r"password|secret|jaas|token|credential", re.IGNORECASE)
MASK = "***"


def resolve_env(
    value: Any,
    key: str,
    environ: Mapping[str, str],
    found: dict[str, tuple[str, ...]],
    resolved: dict[str, str] | None = None,
) -> Any:
    """``value`` with every ``${env:NAME}`` in its strings replaced (lists and tables
    walked). ``found`` collects dotted key -> variable names of each substituted value,
    ``resolved`` (if given) dotted key -> the substituted string."""
    if isinstance(value, str):
        names = ENV_REFERENCE.findall(value)
        if not names:
            return value
        for name in names:
            if not _ENV_NAME.match(name):
                raise ConfigError(
                    f"{key}: ${{env:{name}}} is not a valid environment variable reference; "
                    "use ${env:NAME} with letters, digits and underscores"
                )
            if name not in environ:
                raise ConfigError(
                    f"{key}: environment variable {name} is not set (referenced as ${{env:{name}}})"
                )
        found[key] = tuple(names)
        text = ENV_REFERENCE.sub(lambda m: environ[m.group(1)], value)
        if resolved is not None:
            resolved[key] = text
        return text
    if isinstance(value, list):
        return [
            resolve_env(v, f"{key}[{i}]", environ, found, resolved) for i, v in enumerate(value)
        ]
    if isinstance(value, dict):
        return {
            k: resolve_env(v, join_key(key, k) if key else quote_key(k), environ, found, resolved)
            for k, v in value.items()
        }
    return value


def quote_key(name: str) -> str:
    """A TOML key as the user would write it: bare when possible, else quoted."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else '"' + name.replace('"', '\\"') + '"'


def join_key(prefix: str, name: str) -> str:
    return f"{prefix}.{quote_key(name)}" if prefix else quote_key(name)


def env_placeholder(names: tuple[str, ...]) -> str:
    return "<from " + ", ".join(f"${{env:{n}}}" for n in names) + ">"


def mask_url_password(url: str) -> str:
    """``scheme://user:secret@host/db`` -> ``scheme://user:***@host/db``."""
    return re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1" + MASK + "@", url)


def masked_repr(obj: Any) -> str:
    """``repr`` of a config dataclass without secrets.

    A dataclass field is masked if its value came from the environment (its name is in
    ``obj.env_keys``, unquoted dotted names relative to the section) or, for passthrough mappings, if the entry's key looks sensitive or
    came from the environment. URLs have their password masked.
    """
    env_keys: frozenset[str] = getattr(obj, "env_keys", frozenset())
    parts = []
    for f in dataclasses.fields(obj):
        if not f.repr:
            continue
        value = getattr(obj, f.name)
        if f.name in env_keys:
            shown = repr(MASK)
        elif isinstance(value, Mapping):
            shown = repr(
                {
                    k: MASK if SENSITIVE_KEY.search(str(k)) or f"{f.name}.{k}" in env_keys else v
                    for k, v in value.items()
                }
            )
        elif isinstance(value, (tuple, list)) and any(k.startswith(f"{f.name}[") for k in env_keys):
            # Entries from ${env:...} (``topics[1]``, ``columns[0].doc``) are masked whole.
            shown = repr(
                type(value)(
                    MASK if any(_within(k, f"{f.name}[{i}]") for k in env_keys) else v
                    for i, v in enumerate(value)
                )
            )
        elif isinstance(value, str) and "://" in value:
            shown = repr(mask_url_password(value))
        else:
            shown = repr(value)
        parts.append(f"{f.name}={shown}")
    return f"{type(obj).__name__}({', '.join(parts)})"


def _within(key: str, entry: str) -> bool:
    """``key`` is ``entry`` or one of its sub-keys (``columns[0].doc`` in ``columns[0]``)."""
    return key == entry or key.startswith(entry + ".")


#: Pieces of an environment value at least this long are masked wherever they appear
#: in an error message (a parser quoting one token of a secret must not leak it).
_MIN_PIECE = 6
_PIECE = re.compile(rf"[A-Za-z0-9_]{{{_MIN_PIECE},}}")
#: Pieces that read like plain words ("spaces", "Orders") are not masked on their own:
#: they would blank the message's own words. Pieces with digits, inner capitals or
#: underscores (what keys, tokens and passwords look like) are.
_WORD = re.compile(r"[A-Za-z][a-z]*")


class Redactor:
    """Masks text that came from ``${env:...}`` in error messages, whoever wrote them.

    Built from the variables a document referenced (name -> value) and the keys whose
    values they went into (key -> resolved value and variable names). ``redact(text)``
    replaces, in one pass, every occurrence of a resolved value, of a variable's value
    and of each of its alphanumeric pieces of 6 characters or more that hold a digit,
    an inner capital or an underscore (case-insensitively, also in repr/JSON escaping)
    by ``<from ${env:NAME}>``. Values shorter than 3
    characters are only masked when quoted. The section parsers already show env values
    as placeholders; this is the net under every other error path (parsers quoting a
    token, later stages naming a column or an identifier field).
    """

    def __init__(self, texts: Iterable[tuple[str, tuple[str, ...]]] = ()) -> None:
        found: dict[str, str] = {}
        for value, names in texts:
            if not value:
                continue
            shown = env_placeholder(names)
            forms = {value, value.strip(), repr(value)[1:-1], json.dumps(value)[1:-1]}
            if len(value.strip()) < 3:
                forms = {f"'{f}'" for f in forms} | {f'"{f}"' for f in forms}
            else:
                forms |= {p for p in _PIECE.findall(value) if not _WORD.fullmatch(p)}
            for form in forms:
                if form and form.strip():
                    found.setdefault(form, shown)
        self._shown = {k.lower(): v for k, v in found.items()}
        ordered = sorted(found, key=len, reverse=True)
        self._pattern = (
            re.compile("|".join(re.escape(f) for f in ordered), re.IGNORECASE) if ordered else None
        )

    @staticmethod
    def of(env_keys: Mapping[str, tuple[str, ...]], resolved: Mapping[str, str],
           environ: Mapping[str, str]) -> Redactor:  # fmt: skip
        """From ``resolve_env``'s key -> names map, the resolved values by key and the
        environment the names were read from."""
        texts: list[tuple[str, tuple[str, ...]]] = []
        for key, names in env_keys.items():
            if key in resolved:
                texts.append((resolved[key], names))
            texts.extend((environ[n], (n,)) for n in names if n in environ)
        return Redactor(texts)

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: self._shown[m.group(0).lower()], text)

    def message(self, text: str) -> str:
        """``key: detail`` with only the detail redacted (the key is the user's own)."""
        key, sep, detail = text.partition(": ")
        return key + sep + self(detail) if sep else self(text)

    def __repr__(self) -> str:
        return "Redactor(<masked>)"

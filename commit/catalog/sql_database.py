"""The catalog database: the tables shared with Iceberg's JDBC catalog and pyiceberg
(with pyiceberg 0.12's exact column types), engine set-up per backend, and how driver
errors are read (unavailable, rolled back, or unknown)."""

from __future__ import annotations

import os
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from calving.commit.errors import ConfigError

SCHEMA = sa.MetaData()
ICEBERG_TABLES = sa.Table(
    "iceberg_tables",
    SCHEMA,
    sa.Column("catalog_name", sa.String(255), primary_key=True, nullable=False),
    sa.Column("table_namespace", sa.String(255), primary_key=True, nullable=False),
    sa.Column("table_name", sa.String(255), primary_key=True, nullable=False),
    sa.Column("metadata_location", sa.String(1000), nullable=True),
    sa.Column("previous_metadata_location", sa.String(1000), nullable=True),
    sa.Column("iceberg_type", sa.String(5), nullable=True),
)
NAMESPACE_PROPERTIES = sa.Table(
    "iceberg_namespace_properties",
    SCHEMA,
    sa.Column("catalog_name", sa.String(255), primary_key=True, nullable=False),
    sa.Column("namespace", sa.String(255), primary_key=True, nullable=False),
    sa.Column("property_key", sa.String(255), primary_key=True, nullable=False),
    sa.Column("property_value", sa.String(1000), nullable=False),
)
# Failures of reaching or locking the database, as opposed to rejected statements.
UNAVAILABLE_ERRORS = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,
)


def create_engine(url: sa.URL, sqlite_busy_timeout_s: float) -> sa.Engine:
    """PostgreSQL: a small pre-pinged pool. SQLite: a connection per use (``NullPool``),
    the busy timeout, and our own BEGIN (``BEGIN IMMEDIATE`` for writes)."""
    if url.get_backend_name() != "sqlite":
        return sa.create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=4)
    database = url.database
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        raise ConfigError(
            f"{url}: an in-memory SQLite catalog is private to one connection; use a database file"
        )
    os.makedirs(os.path.dirname(os.path.abspath(database)), exist_ok=True)
    engine = sa.create_engine(
        url, poolclass=sa.pool.NullPool, connect_args={"timeout": sqlite_busy_timeout_s}
    )
    sa.event.listen(engine, "connect", _sqlite_manual_transactions)
    sa.event.listen(engine, "begin", _sqlite_begin)
    return engine


def describe_error(err: BaseException) -> str:
    orig = getattr(err, "orig", None)
    return str(orig if orig is not None else err).strip().splitlines()[0]


def commit_was_rolled_back(err: BaseException) -> bool:
    """True if the database reported that the failed COMMIT rolled the transaction back.

    SQLite: ``database is locked`` at COMMIT leaves the transaction open, and it is rolled
    back on close. PostgreSQL: SQLSTATE class 40 (serialization failure, deadlock). A lost
    connection or anything else is not proof either way.
    """
    orig = getattr(err, "orig", None)
    if orig is None:
        return False
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str):
        return sqlstate.startswith("40")
    text = str(orig).lower()
    return type(orig).__module__.startswith("sqlite3") and (
        "database is locked" in text or "database is busy" in text
    )


def _sqlite_manual_transactions(dbapi_connection: Any, _record: Any) -> None:
    # pysqlite's own implicit BEGIN would be DEFERRED; the "begin" hook issues ours.
    dbapi_connection.isolation_level = None


def _sqlite_begin(conn: sa.Connection) -> None:
    # Writers take the write lock up front (waiting up to the busy timeout), so two
    # writers never deadlock upgrading read locks; readers do not block each other.
    write = conn.get_execution_options().get("calving_write", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

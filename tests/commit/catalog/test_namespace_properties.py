"""``update_namespace_properties`` and ``properties_with_prefix`` on every catalog:
SQLite, PostgreSQL, the filesystem catalog, and a REST client talking to calving's
REST server over a loopback port. The writer registry stands on them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from calving.commit.catalog.base import Catalog
from calving.commit.catalog.filesystem import FilesystemCatalog
from calving.commit.catalog.rest.client import RestCatalog
from calving.commit.errors import NoSuchNamespaceError

PG = pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.integration])


@pytest.fixture(params=["sqlite", PG, "filesystem", "rest"])
def catalog(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Catalog]:
    if request.param == "filesystem":
        yield FilesystemCatalog(str(tmp_path / "fs"))
        return
    if request.param == "postgres":
        yield request.getfixturevalue("pg_catalog")
        return
    sqlite = request.getfixturevalue("sqlite_catalog")
    if request.param == "sqlite":
        yield sqlite
        return
    from tests.commit.catalog.rest.conftest import start_server

    server = start_server(sqlite)
    try:
        yield RestCatalog("rest", server.url)
    finally:
        server.stop()


def _user_keys(props: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in props.items() if k != "exists"}


def test_updates_and_removals_change_only_their_keys(catalog: Catalog) -> None:
    catalog.create_namespace(("a",), {"owner": "ops", "stale": "x"})
    catalog.update_namespace_properties(("a",), {"k1": "v1", "owner": "data"}, ["stale", "absent"])
    assert _user_keys(catalog.namespace_properties(("a",))) == {"owner": "data", "k1": "v1"}
    catalog.update_namespace_properties(("a",), {"k1": "v2"})
    assert catalog.namespace_properties(("a",))["k1"] == "v2"
    with pytest.raises(NoSuchNamespaceError):
        catalog.update_namespace_properties(("nope",), {"k": "v"})


def test_keys_with_a_prefix_are_found_in_every_namespace(catalog: Catalog) -> None:
    catalog.create_namespace(("a",))
    catalog.create_namespace(("a", "b"))
    catalog.create_namespace(("c",), {"calving.writer.w.x": "1"})
    catalog.update_namespace_properties(("a", "b"), {"calving.writer.w.t": "r", "other": "o"})
    # LIKE's wildcards and SQLite's case-insensitive LIKE must not widen the match.
    catalog.update_namespace_properties(
        ("a",), {"calving_writer_w_t": "no", "CALVING.writer.w.t": "no"}
    )
    assert catalog.properties_with_prefix("calving.writer.w.") == {
        ("a", "b"): {"calving.writer.w.t": "r"},
        ("c",): {"calving.writer.w.x": "1"},
    }
    assert catalog.properties_with_prefix("calving.writer.none.") == {}


def test_concurrent_updates_of_one_namespace_lose_no_key(catalog: Catalog) -> None:
    catalog.create_namespace(("a",))
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(10):
                catalog.update_namespace_properties(("a",), {f"w{n}.k{i}": str(i)})
        except BaseException as err:  # noqa: BLE001  (reported below)
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    keys = set(_user_keys(catalog.namespace_properties(("a",))))
    assert keys == {f"w{n}.k{i}" for n in range(4) for i in range(10)}

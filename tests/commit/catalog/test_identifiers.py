"""The one name rule and location confinement every catalog calving writes or serves
applies (pure: no catalog is opened)."""

from __future__ import annotations

import pytest

from calving.commit.catalog.identifiers import MAX_NAME_LENGTH, check_ident, check_namespace
from calving.commit.catalog.locations import Confinement, canonical
from calving.commit.errors import (
    InvalidIdentifierError,
    InvalidLocationError,
    LocationNotAllowedError,
)


@pytest.mark.parametrize(
    "ident",
    [("db", "events"), ("a", "b", "c-d e"), ("ünï", "cödé"), ("db", "v1.events"), ("db", "...x")],
)
def test_valid_identifiers(ident):
    assert check_ident(ident) == ident


@pytest.mark.parametrize(
    ("ident", "why"),
    [
        (("db", ".."), "only of dots"),
        (("db", "."), "only of dots"),
        (("db", "a/b"), "path separator"),
        (("db", "a\\b"), "path separator"),
        (("db", "x\x00"), r"U\+0000"),
        (("db", "new\nline"), r"U\+000A"),
        (("a\x1fb", "t"), r"U\+001F"),
        (("a.b", "t"), "holds '.'"),
        (("", "t"), "non-empty"),
        (("db", "n" * (MAX_NAME_LENGTH + 1)), "longer than 255"),
        (("n" * 200, "m" * 60, "t"), "longer than 255"),
        (("db",), "namespace and a name"),
        ("db.t", "namespace and a name"),
        (("db", 7), "non-empty string"),
    ],
)
def test_invalid_identifiers_name_the_problem_briefly(ident, why):
    with pytest.raises(InvalidIdentifierError, match=why) as info:
        check_ident(ident)
    assert len(str(info.value)) < 200


def test_namespaces():
    assert check_namespace(["a", "b"]) == ("a", "b")
    with pytest.raises(InvalidIdentifierError):
        check_namespace(())


ROOTS = Confinement(["file:///wh", "s3://bucket/lake/"])


@pytest.mark.parametrize(
    "location",
    ["/wh", "/wh/db/t", "file:///wh/db/t/", "s3://bucket/lake/db/t", "s3://bucket/lake"],
)
def test_locations_under_a_root_are_allowed(location):
    assert ROOTS.allows(location)
    assert ROOTS.check(location, "x") == canonical(location)


@pytest.mark.parametrize(
    "location",
    [
        "/wh2/db",  # a sibling that shares the prefix's characters
        "/wh/../etc",
        "/wh/db/%2e%2e/%2E%2E/etc",
        "/wh/./db",
        "/etc/passwd",
        "s3://bucket/lake2/t",
        "s3://other/lake/t",
        "/wh/db/t\x00",
        "/wh/a\\..\\b",
        "",
    ],
)
def test_locations_outside_or_walking_out_are_refused(location):
    assert not ROOTS.allows(location)
    with pytest.raises(LocationNotAllowedError, match="the table location is outside") as info:
        ROOTS.check(location, "the table location")
    assert "/etc" not in str(info.value) and "/wh" not in str(info.value)


def test_a_confinement_needs_a_root():
    with pytest.raises(InvalidLocationError):
        Confinement([])

"""``canonical``: one form per file location. Local paths come out as
``os.path.normpath`` gives them (the fast path for paths with no empty, ``.`` or ``..``
part must agree with it on every path), ``file:`` URIs as their normalized path, and
object-store keys unchanged (``a//b`` is another key than ``a/b`` there)."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from calving.commit.maintenance.orphans import canonical

_PARTS = st.sampled_from(["a", "b", ".", "..", "", ".x", "x.", "..y", "a.b", "..."])


@given(st.lists(_PARTS, min_size=1, max_size=6), st.booleans())
def test_a_local_path_is_what_normpath_makes_of_it(parts: list[str], uri: bool) -> None:
    path = "/" + "/".join(parts)
    assert canonical(f"file://{path}" if uri else path) == os.path.normpath(path)


def test_object_store_keys_are_kept_literally() -> None:
    assert canonical("s3://bucket/t//data/./x.parquet") == "s3://bucket/t//data/./x.parquet"
    assert canonical("file:///tmp/t/data//x.parquet") == "/tmp/t/data/x.parquet"
    assert canonical("/tmp/t/metadata/v1.metadata.json") == "/tmp/t/metadata/v1.metadata.json"

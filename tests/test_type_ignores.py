"""A ``type: ignore`` in the tests names the error it silences and why:
``# type: ignore[code]  # reason``. (The sources are checked by mypy --strict, with
``warn_unused_ignores``; an ignore there is already accounted for.)"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

TESTS = Path(__file__).resolve().parent
_IGNORE = re.compile(r"type:\s*ignore")
_WITH_REASON = re.compile(r"#\s*type:\s*ignore\[[a-z-]+(,\s*[a-z-]+)*\]\s+#\s*\S.{4,}")


def unexplained(source: str) -> list[int]:
    """Lines whose comment holds a ``type: ignore`` without codes and a reason."""
    return [
        token.start[0]
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
        and _IGNORE.search(token.string)
        and not _WITH_REASON.search(token.string)
    ]


def test_every_type_ignore_in_the_tests_has_codes_and_a_reason() -> None:
    wrong = [
        f"{path.relative_to(TESTS.parent)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        if _IGNORE.search(text := path.read_text())
        for line in unexplained(text)
    ]
    assert not wrong, "type: ignore without [code]  # reason:\n" + "\n".join(wrong)


def test_the_check_tells_explained_from_unexplained() -> None:
    source = (
        "a = f()  # type: ignore\n"
        "b = f()  # type: ignore[arg-type]\n"
        "c = f()  # type: ignore[arg-type]  # the wrong type on purpose\n"
        "d = f()  # type: ignore[arg-type, union-attr]  # both on purpose\n"
        "e = '# type: ignore'\n"
    )
    assert unexplained(source) == [1, 2]

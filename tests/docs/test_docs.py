"""The documentation site against the code: the configuration reference lists exactly the
keys the config code accepts, the table-property and metrics references every name the
code declares, the CLI reference is what ``docs/gen_cli.py`` generates from the parser,
and the README is short, its config example loads and every link in it resolves.

The config keys are not a hand list: every ``Section`` the loader builds (each carries
the full tuple of keys it accepts) is recorded while two sample configs are parsed, so a
key or sub-table another change adds shows up here by itself. To add a key: document it
in the row table of its section's page, docs/reference/config/<section>.md.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from markdown.extensions.toc import slugify

from calving.commit.maintenance.run import PASS_FIELDS
from calving.commit.spec.properties import KNOWN, BoolProperty, IntProperty
from calving.ingest.config import loader
from calving.ingest.config.reader import Section
from calving.ingest.metrics import LOG_FIELDS, METRICS
from calving.ingest.metrics.maintenance import MAINTENANCE_METRICS

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
CONFIG_PAGES = DOCS / "reference" / "config"

# Two configs between them reach every section and sub-table the loader knows: a keyed
# table with declared columns and a [table.catalog] table, and a routed (many-table)
# pipeline with a [tables."..."] section.
KEYED: dict[str, Any] = {
    "source": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["t"]},
    "format": {"type": "debezium-json"},
    "table": {
        "catalog": {"type": "sql", "uri": "sqlite:///c.db"},
        "warehouse": "w",
        "name": "db.t",
        "identifier_fields": ["id"],
        "columns": [{"name": "id", "type": "long"}],
    },
    "sink": {"writer_id": "w", "checkpoint": "ck"},
    "spark": {"master": "local[1]"},
    "metrics": {"enabled": False},
    "maintenance": {"inline": False},
}
ROUTED: dict[str, Any] = {
    "source": {"bootstrap_servers": "127.0.0.1:9092", "topic_pattern": r"db\..*"},
    "format": {"type": "debezium-json"},
    "table": {"catalog": "sqlite:///c.db", "warehouse": "w", "name": "{schema}.{table}"},
    "tables": {"shop.audit_*": {"exclude": True}},
    "sink": {"writer_id": "w", "checkpoint": "ck"},
}


def _section_name(path: str) -> str:
    """``table.columns[0]`` -> ``table.columns``; ``tables."shop.audit_*"`` -> ``tables``."""
    return re.sub(r'\.?"[^"]*"', "", re.sub(r"\[\d+\]", "", path))


@pytest.fixture(scope="module")
def accepted() -> dict[str, frozenset[str]]:
    """Section name -> the keys the config code accepts there ("" is the top level)."""
    found: dict[str, frozenset[str]] = {}
    original = Section.__init__

    def recording(
        self: Section, data: Mapping[str, Any], path: str, ctx: Any, known: Sequence[str]
    ) -> None:
        found[_section_name(path)] = frozenset(known)
        original(self, data, path, ctx, known)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Section, "__init__", recording)
        for doc in (KEYED, ROUTED):
            loader.parse_config(doc, base_dir=str(REPO))
    return found


def _headings(text: str) -> Iterator[tuple[int, str, str]]:
    """(level, heading text, the text up to the next heading) of a Markdown page."""
    parts = re.split(r"^(#{1,6}) (.+)$", text, flags=re.MULTILINE)
    for i in range(1, len(parts) - 1, 3):
        yield len(parts[i]), parts[i + 1], parts[i + 2]


def _documented_sections(page: Path) -> dict[str, set[str]]:
    """Section name -> the keys in the first column of the page's ``| key | ...`` tables
    under the heading that names it (``[table.catalog]``, ``[[table.columns]]``,
    ``[tables."<name or glob>"]``), up to the next heading that names a section."""
    out: dict[str, set[str]] = {}
    current: str | None = None
    for _, title, body in _headings(page.read_text()):
        named = re.search(r"\[\[?([a-z_][a-z_.]*)(?:\.\"[^\"]*\")?\]\]?", title)
        if named:
            current = named.group(1)
            if current in out:
                raise AssertionError(f"{page.name}: two headings name [{current}]")
            out[current] = set()
        if current is None:
            continue
        in_keys = False
        for line in body.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not line.startswith("|"):
                in_keys = False
            elif cells[0] == "key":
                in_keys = True
            elif in_keys and not set(cells[0]) <= set("-: "):
                key = re.fullmatch(r"`([^`]+)`", cells[0])
                assert key, f"{page.name} [{current}]: key cell {cells[0]!r} is not `key`"
                out[current].add(key.group(1))
    return out


def test_every_top_level_section_has_its_page(accepted: dict[str, frozenset[str]]) -> None:
    top = accepted[""]
    unreached = sorted(name for name in top if name not in accepted)
    assert not unreached, f"the sample configs of this test do not reach {unreached}: add them"
    pages = {p.stem for p in CONFIG_PAGES.glob("*.md")} - {"index"}
    assert pages == set(top), "docs/reference/config/ has one page per TOML section"


def test_the_config_reference_lists_exactly_the_accepted_keys(
    accepted: dict[str, frozenset[str]],
) -> None:
    documented: dict[str, set[str]] = {}
    for page in sorted(CONFIG_PAGES.glob("*.md")):
        if page.stem == "index":
            continue
        for name, keys in _documented_sections(page).items():
            assert name.split(".")[0] == page.stem, f"{page.name} documents [{name}]"
            documented[name] = keys
    code = {name: keys for name, keys in accepted.items() if name}
    assert sorted(documented) == sorted(code), "sections documented vs. sections in the code"
    for name, accepted_keys in code.items():
        doc_keys = documented[name]
        missing, unknown = sorted(accepted_keys - doc_keys), sorted(doc_keys - accepted_keys)
        assert not missing, f"[{name}] keys the code accepts but the reference lacks: {missing}"
        assert not unknown, f"[{name}] keys documented but unknown to the code: {unknown}"


def test_the_table_properties_page_lists_every_property_calving_reads() -> None:
    rows = {}
    text = (DOCS / "reference" / "table-properties.md").read_text()
    part = text.split("## Properties calving reads", 1)[1].split("\n## ", 1)[0]
    for line in part.splitlines():
        row = re.match(r"\| `([a-z0-9.-]+)` \| (.*)$", line)
        if row:
            rows[row.group(1)] = row.group(2)
    assert sorted(rows) == sorted(KNOWN)
    for name, prop in KNOWN.items():
        if isinstance(prop, BoolProperty):
            assert f"`{str(prop.default).lower()}`" in rows[name], name
        elif isinstance(prop, IntProperty):
            assert f"`{prop.default}`" in rows[name], name


def test_the_metrics_reference_lists_every_metric_and_log_field() -> None:
    text = (DOCS / "reference" / "metrics.md").read_text()
    named = set(re.findall(r"`(calving_[a-z_]+)`", text))
    assert named == set(METRICS) | set(MAINTENANCE_METRICS)
    fields = text[text.index("JSON line fields") : text.index("## Maintenance")]
    for field in LOG_FIELDS:
        assert f"`{field}`" in fields, field
    passes = text[text.index("Maintenance JSON line fields") :]
    for field in PASS_FIELDS:
        assert f"`{field}`" in passes, field


def _gen_cli() -> Any:
    spec = importlib.util.spec_from_file_location("gen_cli", DOCS / "gen_cli.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_is_generated_from_the_parser() -> None:
    page = (DOCS / "reference" / "cli.md").read_text()
    assert page == _gen_cli().render(), "run: python docs/gen_cli.py"
    for command in ("demo", "run", "maintain", "table show", "catalog serve"):
        assert f"## `calving {command}`" in page, command


# ------------------------------------------------------------------------- README


README = REPO / "README.md"
POINTERS = (
    README,
    REPO / "config/README.md",
    REPO / "deploy/README.md",
    REPO / "tests/bench/README.md",
)


def _anchors(page: Path) -> set[str]:
    """The heading anchors MkDocs gives a page (the toc extension's slugify)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    out = set()
    for _, title, _ in _headings(text):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "")
        out.add(slugify(plain, "-"))
    return out


def test_the_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) < 300


@pytest.mark.parametrize("doc", POINTERS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves(doc: Path) -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", doc.read_text())
    assert links or doc != README
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        path = (doc.parent / target).resolve() if target else doc
        assert path.exists(), f"{doc.name}: {link}"
        if anchor:
            assert path.suffix == ".md", link
            assert anchor in _anchors(path), f"{doc.name}: {link}: no such heading"


def test_the_readme_config_example_loads() -> None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the backport the loader uses too
        import tomli as tomllib

    blocks = re.findall(r"^```toml\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)
    assert blocks
    for block in blocks:
        loader.parse_config(tomllib.loads(block), "README.md", base_dir=str(REPO))

"""The documentation's examples, as a test runs them.

Every fenced block in the repository's Markdown files names its language (``text`` for
output). Every shell or Python block is marked by an HTML comment on the line before its
fence, which the site does not show:

    <!-- example: run [expect="TEXT"]... [timeout=SECONDS] [slow] [kafka] [ports=N,N] -->
    <!-- example: no-run REASON -->

``run`` blocks are executed exactly as printed (shell blocks by ``bash -e``, Python blocks
by the venv's interpreter), in page order, in one fresh copy of the checkout per page;
``no-run`` blocks name why they cannot run here (a Docker daemon, several hosts ...).
The only substitutions are these documented placeholders:

* ``kafka``: ``localhost:9092`` (the brokers of the shipped configs and the examples) is
  replaced by a test broker's address, in the block and in the copy's ``config/*.toml``;
  the broker holds ``dbserver1.shop.orders``: Debezium change events of ``shop.orders``
  with the columns of ``config/orders-cdc.toml`` (``ORDERS_TOPIC``);
* ``ports=7077,8080``: each listed port number in the block is replaced by a free one.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

#: Languages of the blocks that run: shell by ``bash -e -o pipefail``, Python by the venv.
SHELL = frozenset({"sh", "bash", "shell"})
PYTHON = frozenset({"python", "py"})
RUNNABLE = SHELL | PYTHON
#: Blocks that must be marked: the runnable ones and transcripts (``no-run`` only).
MARKED = RUNNABLE | {"console", "zsh", "pycon"}

PLACEHOLDER_BROKER = "localhost:9092"
ORDERS_TOPIC = "dbserver1.shop.orders"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$")
_MARK = re.compile(r"^[ \t]*<!--\s*example:\s*(?P<body>.*?)\s*-->\s*$")


class ExampleError(ValueError):
    """A malformed block or marker (the message names the file and line)."""


@dataclass(frozen=True)
class Mark:
    """What the comment before a block says."""

    run: bool
    reason: str = ""
    expect: tuple[str, ...] = ()
    timeout: float = 300.0
    slow: bool = False
    kafka: bool = False
    ports: tuple[int, ...] = ()


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    mark: Mark | None

    def where(self, root: Path) -> str:
        return f"{self.path.relative_to(root)}:{self.line}"


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)

    @property
    def runnable(self) -> list[Block]:
        return [b for b in self.blocks if b.mark is not None and b.mark.run]


def parse_mark(body: str, where: str) -> Mark:
    """``run [options]`` or ``no-run REASON`` (the part after ``example:``)."""
    kind, _, rest = body.partition(" ")
    if kind == "no-run":
        if not rest.strip():
            raise ExampleError(f"{where}: no-run needs a reason")
        return Mark(run=False, reason=rest.strip())
    if kind != "run":
        raise ExampleError(f"{where}: expected 'example: run ...' or 'example: no-run REASON'")
    expect: list[str] = []
    options: dict[str, object] = {}
    for word in shlex.split(rest):
        key, eq, value = word.partition("=")
        if key == "expect" and eq:
            expect.append(value)
        elif key == "timeout" and eq:
            options["timeout"] = float(value)
        elif key == "ports" and eq:
            options["ports"] = tuple(int(p) for p in value.split(","))
        elif key in ("slow", "kafka") and not eq:
            options[key] = True
        else:
            raise ExampleError(f"{where}: unknown example option {word!r}")
    return Mark(run=True, expect=tuple(expect), **options)  # type: ignore[arg-type]  # keys checked above


def parse_page(path: Path, root: Path) -> Page:
    """The fenced blocks of a Markdown file with their marks."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = Page(path)
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        where = f"{path.relative_to(root)}:{i + 1}"
        fence, indent = opening.group("fence"), opening.group("indent")
        language = opening.group("info").strip().split(" ")[0].strip("{}.").lower()
        end = i + 1
        while end < len(lines) and not re.match(
            rf"^{re.escape(indent)}{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[end]
        ):
            end += 1
        if end == len(lines):
            raise ExampleError(f"{where}: the block is never closed")
        body = [line.removeprefix(indent) for line in lines[i + 1 : end]]
        previous = lines[i - 1] if i > 0 else ""
        marked = _MARK.match(previous)
        mark = parse_mark(marked.group("body"), where) if marked else None
        page.blocks.append(Block(path, i + 1, language, "\n".join(body) + "\n", mark))
        i = end + 1
    for n, line in enumerate(lines):
        if _MARK.match(line):
            following = lines[n + 1] if n + 1 < len(lines) else ""
            fenced = _FENCE.match(following)
            if not fenced or not fenced.group("info").strip():
                raise ExampleError(
                    f"{path.relative_to(root)}:{n + 1}: an example mark must stand on the "
                    "line right before the opening fence of a block with a language"
                )
    return page


def markdown_files(root: Path, listed: list[str]) -> Iterator[Path]:
    """The Markdown files among ``listed`` (repository-relative paths)."""
    for name in sorted(listed):
        if name.endswith(".md"):
            yield root / name


def problems(page: Page, root: Path) -> list[str]:
    """What the page's blocks lack: a language, or a mark on a shell/Python block."""
    out = []
    for block in page.blocks:
        where = block.where(root)
        if not block.language:
            out.append(f"{where}: a fenced block needs a language (`text` for output)")
        elif block.language in MARKED and block.mark is None:
            out.append(
                f"{where}: a {block.language} block needs <!-- example: run ... --> or "
                "<!-- example: no-run REASON --> on the line before it"
            )
        elif block.mark is not None and block.language not in MARKED:
            out.append(f"{where}: only shell and Python blocks are examples")
        elif block.mark is not None and block.mark.run and block.language not in RUNNABLE:
            out.append(f"{where}: a {block.language} block cannot run (sh or python can)")
    return out


def substitute(text: str, mark: Mark, broker: str | None, ports: dict[int, int]) -> str:
    """The block with its documented placeholders filled in (see the module doc)."""
    if mark.kafka:
        assert broker is not None
        text = text.replace(PLACEHOLDER_BROKER, broker)
    for documented, free in ports.items():
        text = re.sub(rf"(?<![0-9]){documented}(?![0-9])", str(free), text)
    return text


# ------------------------------------------------------------------- the Kafka topic


def _unscaled(amount: Decimal, scale: int) -> str:
    """A Debezium ``precise`` decimal: base64 of the big-endian two's complement
    unscaled value."""
    value = int(amount.scaleb(scale))
    size = max(1, (value.bit_length() + 8) // 8)
    return base64.b64encode(value.to_bytes(size, "big", signed=True)).decode()


def orders_events() -> tuple[list[tuple[int, bytes, bytes | None]], dict[int, str]]:
    """Debezium JSON change events of ``shop.orders`` (the columns of
    config/orders-cdc.toml) as (partition, key, value) records on two partitions, and
    each live order's final status."""
    records: list[tuple[int, bytes, bytes | None]] = []
    final: dict[int, str] = {}

    def row(order: int, status: str) -> dict[str, object]:
        return {
            "id": order,
            "customer_id": 100 + order % 7,
            "status": status,
            "amount": _unscaled(Decimal(order) + Decimal("0.25"), 2),
            "tags": ["web"] if order % 2 else ["shop", "gift"],
            "created_at": f"2026-01-01T10:{order:02d}:00Z",
            "updated_at": f"2026-01-02T10:{order:02d}:00Z",
        }

    def emit(order: int, op: str, before: object, after: object) -> None:
        key = json.dumps({"id": order}).encode()
        value = {"before": before, "after": after, "op": op, "ts_ms": 1_767_261_600_000}
        records.append((order % 2, key, json.dumps(value).encode()))

    for order in range(1, 41):
        emit(order, "c", None, row(order, "new"))
        final[order] = "new"
    for order in range(1, 41, 3):
        emit(order, "u", row(order, "new"), row(order, "paid"))
        final[order] = "paid"
    for order in (5, 6, 30):
        emit(order, "d", row(order, final.pop(order)), None)
        records.append((order % 2, json.dumps({"id": order}).encode(), None))  # tombstone
    return records, final

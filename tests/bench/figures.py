"""One measured figure of a benchmark, and the table the suite prints.

A ``Figure`` pairs calving's value with a peer measured in the same run. ``ratio`` is
always "how many times better calving is than the peer": peer / calving for costs
(milliseconds, bytes), calving / peer for rates (lookups per second). A goal is checked
by the benchmark that knows what it means (on the value or on the ratio) and stored as
text plus ``met``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Better = Literal["lower", "higher"]


@dataclass(frozen=True)
class Figure:
    benchmark: str
    figure: str  # what is measured, with its unit, e.g. "append 10 files @1000 snapshots, ms"
    value: float | None  # calving; None: not measured (see note)
    peer: str = ""
    peer_value: float | None = None  # None: no peer, or not measured (see note)
    better: Better = "lower"
    goal: str = ""
    met: bool | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if not self.value or not self.peer_value:
            return None
        if self.better == "lower":
            return self.peer_value / self.value
        return self.value / self.peer_value


def at_most(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def at_least(value: float | None, limit: float) -> bool | None:
    return None if value is None else value >= limit


def _number(v: float | None) -> str:
    if v is None:
        return "not measured"
    if math.isfinite(v) and abs(v) >= 10_000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _met(m: bool | None) -> str:
    return "" if m is None else ("yes" if m else "NO")


def render(figures: Sequence[Figure]) -> str:
    """A Markdown table of all figures, notes numbered below it."""
    header = ("benchmark", "figure", "calving", "peer", "peer value", "ratio", "goal", "met?")
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    for f in figures:
        label = f.figure
        if f.note:
            notes.append(f.note)
            label += f" [{len(notes)}]"
        ratio = f.ratio
        rows.append(
            (
                f.benchmark,
                label,
                _number(f.value),
                f.peer or "-",
                _number(f.peer_value) if f.peer else "-",
                f"{ratio:.1f}x"
                if ratio is not None and ratio >= 10
                else f"{ratio:.2f}x"
                if ratio is not None
                else "-",
                f.goal or "-",
                _met(f.met),
            )
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = {2, 4, 5}

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if i in right else ("-" * (w + 2)) for i, w in enumerate(widths)
        )
        + "|"
    )
    out = [line(header), rule, *(line(r) for r in rows)]
    if notes:
        out.append("")
        out.extend(f"[{i}] {n}" for i, n in enumerate(notes, 1))
    return "\n".join(out)

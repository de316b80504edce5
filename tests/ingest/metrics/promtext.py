"""A strict parser of the Prometheus text exposition format 0.0.4, written from the
format's description (not from calving's renderer): every line must be a HELP, TYPE,
comment or sample line; a family's TYPE comes once and before its samples; label values
use only the three escapes; histograms are cumulative and end in ``+Inf == _count``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}

Labels = frozenset[tuple[str, str]]


class FormatError(AssertionError):
    pass


@dataclass
class Family:
    name: str
    type: str = "untyped"
    help: str | None = None
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)

    def value(self, sample: str | None = None, **labels: str) -> float:
        """The one sample whose labels include ``labels``."""
        sample = sample or self.name
        hits = [
            v
            for (n, ls), v in self.samples.items()
            if n == sample and set(labels.items()) <= set(ls)
        ]
        if len(hits) != 1:
            raise KeyError(f"{sample} {labels}: {len(hits)} samples")
        return hits[0]

    def series(self, sample: str | None = None) -> dict[Labels, float]:
        sample = sample or self.name
        return {ls: v for (n, ls), v in self.samples.items() if n == sample}


def _unescape(text: str, allowed: dict[str, str]) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text) or text[i + 1] not in allowed:
                raise FormatError(f"bad escape in {text!r}")
            out.append(allowed[text[i + 1]])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _value(text: str) -> float:
    special = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    if text in special:
        return special[text]
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
        raise FormatError(f"bad value {text!r}")
    return float(text)


def _labels(line: str, at: int) -> tuple[Labels, int]:
    """Parse ``{name="value",...}`` starting at ``line[at] == '{'``."""
    pairs: dict[str, str] = {}
    i = at + 1
    while True:
        if line[i] == "}":
            return frozenset(pairs.items()), i + 1
        m = LABEL.match(line, i)
        if m is None:
            raise FormatError(f"bad label name at {i}: {line!r}")
        name = m.group()
        i = m.end()
        if line[i : i + 2] != '="':
            raise FormatError(f'expected =" after {name}: {line!r}')
        i += 2
        start = i
        while line[i] != '"':
            i += 2 if line[i] == "\\" else 1
        if name in pairs:
            raise FormatError(f"label {name} twice: {line!r}")
        pairs[name] = _unescape(line[start:i], {"\\": "\\", '"': '"', "n": "\n"})
        i += 1
        if line[i] == ",":
            i += 1
        elif line[i] != "}":
            raise FormatError(f"expected , or }} at {i}: {line!r}")


def _family_of(sample: str, families: dict[str, Family]) -> Family:
    if sample in families:
        return families[sample]
    for suffix in ("_bucket", "_sum", "_count"):
        base = sample[: -len(suffix)] if sample.endswith(suffix) else None
        if base and base in families and families[base].type in ("histogram", "summary"):
            return families[base]
    raise FormatError(f"sample {sample} has no TYPE line before it")


def parse(text: str) -> dict[str, Family]:
    if not text.endswith("\n"):
        raise FormatError("the exposition must end with a newline")
    families: dict[str, Family] = {}
    seen_samples: set[str] = set()
    for line in text[:-1].split("\n"):
        if not line.strip():
            continue
        if line.startswith(("# HELP ", "# TYPE ")):
            _, kind, name, *rest = line.split(" ", 3)
            if not NAME.fullmatch(name):
                raise FormatError(f"bad metric name {name!r}")
            fam = families.setdefault(name, Family(name))
            if kind == "HELP":
                if fam.help is not None:
                    raise FormatError(f"HELP for {name} twice")
                fam.help = _unescape(rest[0] if rest else "", {"\\": "\\", "n": "\n"})
            else:
                if name in seen_samples or fam.samples:
                    raise FormatError(f"TYPE for {name} after its samples")
                if not rest or rest[0] not in TYPES:
                    raise FormatError(f"bad TYPE line {line!r}")
                fam.type = rest[0]
            continue
        if line.startswith("#"):
            continue
        m = NAME.match(line)
        if m is None:
            raise FormatError(f"bad sample line {line!r}")
        sample, i = m.group(), m.end()
        labels: Labels = frozenset()
        if i < len(line) and line[i] == "{":
            labels, i = _labels(line, i)
        parts = line[i:].split()
        if not line[i:].startswith(" ") or not 1 <= len(parts) <= 2:
            raise FormatError(f"bad sample line {line!r}")
        fam = _family_of(sample, families)
        if (sample, labels) in fam.samples:
            raise FormatError(f"duplicate series {sample}{dict(labels)}")
        fam.samples[(sample, labels)] = _value(parts[0])
        seen_samples.add(fam.name)
    for fam in families.values():
        if fam.type == "histogram":
            _check_histogram(fam)
        if fam.type == "counter" and not fam.name.endswith("_total"):
            raise FormatError(f"counter {fam.name} does not end in _total")
    return families


def _check_histogram(fam: Family) -> None:
    groups: dict[Labels, list[tuple[float, float]]] = {}
    for (sample, labels), value in fam.samples.items():
        if sample == fam.name + "_bucket":
            le = dict(labels)["le"]
            rest = frozenset((k, v) for k, v in labels if k != "le")
            groups.setdefault(rest, []).append((_value(le), value))
    for rest, buckets in groups.items():
        buckets.sort()
        counts = [c for _, c in buckets]
        if counts != sorted(counts):
            raise FormatError(f"{fam.name}{dict(rest)}: buckets are not cumulative")
        if buckets[-1][0] != math.inf:
            raise FormatError(f"{fam.name}{dict(rest)}: no +Inf bucket")
        if fam.samples.get((fam.name + "_count", rest)) != buckets[-1][1]:
            raise FormatError(f"{fam.name}{dict(rest)}: +Inf bucket != _count")
        if (fam.name + "_sum", rest) not in fam.samples:
            raise FormatError(f"{fam.name}{dict(rest)}: no _sum")

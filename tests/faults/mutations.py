"""Deliberately broken builds, applied inside a writer subprocess only.

The harness sets ``CALVING_FAULTS_MUTATION=<name>`` in a writer's environment; the
writer (``tests.faults.writer``) patches the core before it commits anything. Nothing
in ``commit/`` reads this variable: a mutation exists only to show that the invariant
checker catches the bug it plants.
"""

from __future__ import annotations

from collections.abc import Callable

MUTATION_ENV = "CALVING_FAULTS_MUTATION"


def _skip_ledger() -> None:
    """The exactly-once check is gone: every claim is judged new, so a replayed batch
    commits its rows a second time."""
    from calving.commit.table.actions import validation
    from calving.commit.table.ledger import LedgerVerdict

    validation.judge = lambda base, claim: LedgerVerdict.NEW  # type: ignore[assignment]


def _forget_dv() -> None:
    """The producer no longer unions new deletes with a file's current DV: the new DV
    replaces the old one, so rows deleted earlier come back."""
    from pyroaring import BitMap64

    from calving.commit.table import scan

    def positions_deleted(self: scan.LiveFiles, io: object, data_file_path: str) -> BitMap64:
        return BitMap64()

    scan.LiveFiles.positions_deleted = positions_deleted  # type: ignore[method-assign]


MUTATIONS: dict[str, Callable[[], None]] = {
    "skip-ledger": _skip_ledger,
    "forget-dv": _forget_dv,
}


def apply(name: str | None) -> None:
    if not name:
        return
    try:
        MUTATIONS[name]()
    except KeyError:
        raise SystemExit(f"unknown mutation {name!r}; known: {', '.join(MUTATIONS)}") from None

"""The change feed: what changed in a table between two snapshots, row by row.

``range`` resolves the two ends to the snapshots in between (refusing a range that
crosses expired history); ``delta`` reads what each of those snapshots added (its own
manifests only: added and removed data files, added deletion vectors); ``rows`` reads
the rows those name (added files whole, older files only at the deleted positions);
``feed`` pairs them by ``_row_id`` into Iceberg's changelog vocabulary and nets them.
"""

from calving.commit.changelog.columns import CHANGE_COLUMNS
from calving.commit.changelog.feed import read_changes
from calving.commit.changelog.range import Bound, ChangeRange, parse_bound, resolve_range

__all__ = ["CHANGE_COLUMNS", "Bound", "ChangeRange", "parse_bound", "read_changes", "resolve_range"]

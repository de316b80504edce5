"""Named fault-injection points in the commit protocol, off unless a test arms them.

Arm from a test process with ``arm(point, action)`` or, for a child process, the
environment variable ``CALVING_FAULTS="point=action[,point=action]"``. Actions:
``kill`` (SIGKILL this process), ``raise`` (raise ``InjectedFault``), ``transient``
(raise ``InjectedTransientFault``, which callers retry like a catalog outage), and each
of them prefixed ``once-`` (only the first time the point is reached in this process;
``fired()`` names the points that fired so).

``POINTS`` are the crash points of the commit protocol; ``START_POINTS`` are hit while a
pipeline starts (``catalog-read-at-start``: before each catalog read of a many-table
start, the writer registry and the tables holding the ledger; ``after-reshard``: a
sharded index's shards split or merged into a new count and their manifest written,
named by no commit yet).
"""

from __future__ import annotations

import os
import signal
import threading

from calving.commit.errors import CalvingError, Transient

# The producer writes an attempt's Puffin files, manifests and manifest list in one
# batch, so "after-puffin", "after-manifests" and "after-manifest-list" are hit in turn
# once all of them are durable: three names for the same crash state, kept so a crash
# there stays addressable if the batch is ever split again.
POINTS = (
    "after-data-files",
    "after-puffin",
    "after-manifests",
    "after-manifest-list",
    "after-metadata-file",
    "before-swap",
    "after-swap",
    "after-swap-before-checkpoint",
)
START_POINTS = ("catalog-read-at-start", "after-reshard")


class InjectedFault(CalvingError):
    """Raised at an armed point in tests. Not retryable, not cleanable: like a crash."""


class InjectedTransientFault(Transient):
    """Raised at a point armed ``transient``: retryable, like a catalog that is briefly
    unreachable."""


ACTIONS = ("kill", "raise", "transient")

_armed: dict[str, str] = {}
_fired: set[str] = set()
_fired_lock = threading.Lock()  # a multi-table commit hits points from several threads
_loaded_env = False


def _load_env() -> None:
    global _loaded_env
    _loaded_env = True
    spec = os.environ.get("CALVING_FAULTS", "")
    for item in filter(None, (s.strip() for s in spec.split(","))):
        point, _, action = item.partition("=")
        arm(point, action or "kill")


def arm(point: str, action: str = "raise") -> None:
    if point not in POINTS + START_POINTS:
        known = ", ".join(POINTS + START_POINTS)
        raise KeyError(f"unknown fault point {point!r}; known: {known}")
    if action.removeprefix("once-") not in ACTIONS:
        raise KeyError(f"unknown fault action {action!r}; known: {', '.join(ACTIONS)}")
    _armed[point] = action


def fired() -> frozenset[str]:
    """The points armed ``once-...`` that have fired in this process."""
    with _fired_lock:
        return frozenset(_fired)


def disarm_all() -> None:
    _armed.clear()
    _fired.clear()


def hit(point: str) -> None:
    """Called by production code at each named point; a no-op unless armed."""
    if not _loaded_env:
        _load_env()
    action = _armed.get(point)
    if action is None:
        return
    if action.startswith("once-"):
        with _fired_lock:
            if point in _fired:
                return
            _fired.add(point)
        action = action[len("once-") :]
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "transient":
        raise InjectedTransientFault(f"injected transient fault at {point}")
    raise InjectedFault(f"injected fault at {point}")

"""Maintenance yields to the stream: a pause between its commits, and a stop request.

A stream committing every second must always find a window: a pass waits at least
``pause_s`` after each of its own commits before the next one (a stream's try then
swaps in between instead of losing to back-to-back rewrites). A stop request (SIGTERM
or Ctrl-C in ``calving maintain``) ends the pass at the next group, commit or job: the
pause itself is cut short by it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

#: Pause between two commits of a pass unless the policy says otherwise.
DEFAULT_COMMIT_PAUSE_S = 0.5


@dataclass
class Pacer:
    pause_s: float = DEFAULT_COMMIT_PAUSE_S
    #: Set by the caller to stop the pass (a signal handler, a test).
    stop: threading.Event = field(default_factory=threading.Event)
    last_commit: float | None = None
    #: Seconds spent waiting in pauses (figures of the pass).
    paused_s: float = 0.0

    @property
    def stopped(self) -> bool:
        return self.stop.is_set()

    def before_commit(self) -> bool:
        """Wait out the pause after this pass's last commit; False if stopped."""
        if self.last_commit is not None:
            remaining = self.last_commit + self.pause_s - time.monotonic()
            if remaining > 0:
                started = time.monotonic()
                self.stop.wait(remaining)
                self.paused_s += time.monotonic() - started
        return not self.stopped

    def committed(self) -> None:
        self.last_commit = time.monotonic()

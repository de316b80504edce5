"""The commit retry policy, read from the ``commit.retry.*`` table properties."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from calving.commit.spec.properties import TableProperties


@dataclass(frozen=True)
class RetryPolicy:
    num_retries: int = 4
    min_wait_ms: int = 100
    max_wait_ms: int = 60_000
    total_timeout_ms: int = 1_800_000

    @staticmethod
    def from_properties(props: Mapping[str, str]) -> RetryPolicy:
        typed = TableProperties(props)
        return RetryPolicy(
            num_retries=typed.commit_num_retries,
            min_wait_ms=typed.commit_min_wait_ms,
            max_wait_ms=typed.commit_max_wait_ms,
            total_timeout_ms=typed.commit_total_timeout_ms,
        )

    def wait_ms(self, retry: int) -> float:
        """Exponential backoff with jitter: uniformly in [w/2, w], w doubling per retry."""
        w = min(self.max_wait_ms, self.min_wait_ms * (2 ** max(0, retry - 1)))
        return random.uniform(w / 2, w)

    def exhausted(self, retry: int, elapsed_ms: float, wait_ms: float) -> bool:
        """Whether retry number ``retry``, after ``wait_ms`` more, is past the limits."""
        return retry > self.num_retries or elapsed_ms + wait_ms > self.total_timeout_ms

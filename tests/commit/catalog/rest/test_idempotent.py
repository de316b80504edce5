"""The client's commit under an Idempotency-Key (pure: the send is a stub that fails as
a network would)."""

from __future__ import annotations

import uuid

import pytest

from calving.commit.catalog.rest.idempotent import HEADER, parse_lifetime, send_commit, uuid7
from calving.commit.errors import (
    CatalogUnavailableError,
    CommitStateUnknownError,
    CommitSwapLostError,
)


def test_uuid7_is_a_version_7_uuid_in_time_order():
    keys = [uuid7() for _ in range(50)]
    assert all(uuid.UUID(k).version == 7 and len(k) == 36 for k in keys)
    assert len(set(keys)) == 50
    assert [k[:13] for k in keys] == sorted(k[:13] for k in keys)  # millisecond prefix


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("PT30M", 1800), ("PT1800S", 1800), ("P1D", 86400), ("PT1H30M", 5400), ("pt0.5s", 0.5),
     ("P", None), ("PT0S", None), ("30m", None), (None, None), (1800, None)],
)  # fmt: skip
def test_lifetimes(text, seconds):
    assert parse_lifetime(text) == seconds


class Sender:
    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)
        self.headers = []

    def __call__(self, headers):
        self.headers.append(dict(headers))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def test_without_a_lifetime_no_key_and_no_repeat():
    send = Sender(CommitStateUnknownError("lost"))
    with pytest.raises(CommitStateUnknownError):
        send_commit(send, None, sleep=lambda s: None)
    assert send.headers == [{}]


def test_a_lost_reply_is_repeated_under_the_same_key():
    send = Sender(CommitStateUnknownError("lost"), CatalogUnavailableError("refused"), {"ok": 1})
    assert send_commit(send, 1800, sleep=lambda s: None) == {"ok": 1}
    keys = {h[HEADER] for h in send.headers}
    assert len(send.headers) == 3 and len(keys) == 1


def test_a_repeat_refused_409_is_an_unknown_outcome_not_a_lost_race():
    send = Sender(CommitStateUnknownError("lost"), CommitSwapLostError("409"))
    with pytest.raises(CommitStateUnknownError, match="may have landed"):
        send_commit(send, 1800, sleep=lambda s: None)


def test_a_first_409_stays_a_lost_race():
    with pytest.raises(CommitSwapLostError):
        send_commit(Sender(CommitSwapLostError("409")), 1800, sleep=lambda s: None)


def test_repeats_stop_within_the_key_lifetime():
    send = Sender(*[CommitStateUnknownError("lost")] * 5)
    with pytest.raises(CommitStateUnknownError):
        send_commit(send, 1.0, sleep=lambda s: None)
    assert len(send.headers) == 2  # the 0.2 s repeat fits in 1 s, the 1 s one does not

"""Start-up checks of the source, run before any table, catalog or checkpoint exists.

``check_source(source)`` asks the broker for its topics (bounded by
``source.connect_timeout_ms``: an unreachable broker is one ``KafkaUnavailableError``
naming the bootstrap servers) and checks that every topic the config names (``topics``,
or the topics of ``assign``) exists. A missing topic is a ``MissingTopicError`` naming
it, unless ``source.wait_for_topics = true``: then it logs once and asks again every
few seconds until the topics exist. A ``topic_pattern`` needs no topic to exist yet
(topics that match later are read from their start); only the broker is asked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from calving.commit.errors import ConfigError
from calving.ingest.config.source import SourceConfig
from calving.ingest.kafka.source import BrokerView

log = logging.getLogger("calving.source")

#: Seconds between two looks for topics that do not exist yet (``wait_for_topics``).
WAIT_INTERVAL_S = 2.0


class MissingTopicError(ConfigError):
    """A topic the config names does not exist on the broker (and the config does not
    say to wait for it); names the topic and the key."""


def named_topics(source: SourceConfig) -> tuple[str, ...]:
    """The topics the config names explicitly (none for a pattern)."""
    options = source.source_options()
    sub = options.subscription
    if sub.kind == "subscribe":
        return tuple(sub.topics)
    if sub.kind == "assign":
        return tuple(sorted({t for t, _ in sub.assigned}))
    return ()


def check_source(
    source: SourceConfig,
    *,
    view: BrokerView | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """The broker answers and every named topic exists (or, with ``wait_for_topics``,
    until it does)."""
    view = view or BrokerView(source.source_options())
    wanted = named_topics(source)
    key = "source.assign" if source.assign is not None else "source.topics"
    waited = False
    while True:
        counts = view.topic_partition_counts()
        missing = [t for t in wanted if t not in counts]
        if not missing:
            if waited:
                log.warning("topic(s) %s now exist; starting", ", ".join(wanted))
            return
        shown = ", ".join(repr(t) for t in missing)
        if not source.wait_for_topics:
            raise MissingTopicError(
                f"{key}: topic {shown} does not exist at {source.bootstrap_servers}; create "
                "it, or set source.wait_for_topics = true to wait for it"
            )
        if not waited:
            log.warning("waiting for topic %s to exist at %s", shown, source.bootstrap_servers)
            waited = True
        sleep(WAIT_INTERVAL_S)

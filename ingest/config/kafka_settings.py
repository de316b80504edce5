"""``[source.kafka]`` checked against librdkafka itself: each setting is handed to a
``confluent_kafka.Producer`` that has no ``bootstrap.servers``, so nothing contacts a
broker; librdkafka refuses unknown names ("No such configuration property") and values
it cannot parse ("Invalid value for configuration property"). Other construction
failures (a SASL mechanism without its username, an SSL file on another host) are left
to the real clients, which see every setting together.
"""

from __future__ import annotations

from collections.abc import Mapping

#: librdkafka's refusal -> what calving says (its own text may quote the value).
_REFUSALS = {
    "No such configuration property": "librdkafka has no such setting",
    "Invalid value": "librdkafka refuses this value",
}


def bad_kafka_setting(settings: Mapping[str, str]) -> tuple[str, str] | None:
    """The first ``(name, reason)`` librdkafka refuses, or None. The reason never
    quotes the value (it may be a secret)."""
    from confluent_kafka import KafkaException, Producer

    for name, value in settings.items():
        try:
            # log_level 0: no "no bootstrap.servers" / "consumer property" warnings.
            Producer({"log_level": 0, name: value})
        except KafkaException as exc:
            reason = exc.args[0].str() if exc.args else str(exc)
            for start, said in _REFUSALS.items():
                if reason.startswith(start):
                    return name, said
        except (TypeError, ValueError):
            return name, "librdkafka refuses this value"
    return None

"""Schema announcement for registry-less mode: each writer schema goes to ``{prefix}._schemas``.

The record is produced and acknowledged before the first record that uses the schema is
produced, so any consumer that reads ``_schemas`` to its end can decode every record it sees.
"""

from __future__ import annotations

from collections.abc import Callable

from pgbridge.publish.producer import KafkaPublisher
from pgbridge.publish.topics import schemas_topic


def schema_announcer(publisher: KafkaPublisher, prefix: str) -> Callable[[str, str], None]:
    topic = schemas_topic(prefix)
    announced: set[str] = set()

    def announce(fingerprint_hex: str, schema_json: str) -> None:
        if fingerprint_hex in announced:
            return
        publisher.topics.ensure(topic, compacted=True)
        publisher.produce_sync(topic, fingerprint_hex.encode(), schema_json.encode())
        announced.add(fingerprint_hex)

    return announce

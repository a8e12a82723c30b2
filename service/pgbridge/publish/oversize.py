"""Records Kafka refuses as too large: the error that says what to raise, and the dead letter.

Two limits refuse a record. The producer's ``message.max.bytes`` (librdkafka, 1,000,000 by
default) refuses it inside ``produce()``; the topic's ``max.message.bytes`` (the broker's
``message.max.bytes`` unless the topic overrides it, 1,048,588 by default) refuses it in the
delivery report. Either way retrying reads the same row again, so the default policy (``stop``)
fails with one line naming the table, the key, the encoded size, the limit and both settings. The
``dead_letter`` policy publishes, in the refused record's place and under the same delivery unit,
a small JSON record to the internal topic ``{prefix}._dead_letter`` (keyed by the refused record's
key) that says where the change was and why it is missing, and goes on: the change is counted as
delivered once that record is acknowledged, so the confirmed LSN never passes a change that is in
neither topic.

Everything here is pure; ``publish/producer.py`` does the producing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pgbridge.assemble.units import RowChange
from pgbridge.errors import PublishError
from pgbridge.lsn import Lsn, format_lsn
from pgbridge.publish.topics import sanitize

# librdkafka's default message.max.bytes, and the broker's default limit per record batch.
DEFAULT_PRODUCER_MAX_BYTES: Final = 1_000_000
DEFAULT_BROKER_MAX_BYTES: Final = 1_048_588
# Records at least this large are produced with a callback that remembers where they came from, so
# a refusal in the delivery report can name their table, key and position. Smaller ones share the
# unit's callback (the hot path allocates nothing per record); a topic limit below this is
# reported with the topic and the key bytes only.
WATCH_BYTES: Final = 64 * 1024
# How much of a key a message or dead letter quotes: keys can be long, the line must stay one line.
_KEY_TEXT_CHARS: Final = 200
PRODUCER: Final = "producer"
BROKER: Final = "broker"


def dead_letter_topic(prefix: str) -> str:
    """The internal topic (``{prefix}._*`` per the contract) of records refused as too large."""
    return sanitize(f"{prefix}._dead_letter")


@dataclass(frozen=True, slots=True)
class RecordOrigin:
    """Where a record came from, for the error and the dead letter (``None``: not known)."""

    table: str
    key: str
    commit_lsn: Lsn | None = None
    total_order: int | None = None


Describe = Callable[[str], RecordOrigin]


def producer_limit(settings: Mapping[str, Any]) -> int:
    """The producer's ``message.max.bytes`` as configured, or librdkafka's default."""
    value = settings.get("message.max.bytes")
    try:
        return int(value) if value is not None else DEFAULT_PRODUCER_MAX_BYTES
    except (TypeError, ValueError):
        return DEFAULT_PRODUCER_MAX_BYTES


def _clip(text: str) -> str:
    return text if len(text) <= _KEY_TEXT_CHARS else text[:_KEY_TEXT_CHARS] + "…"


def row_key_text(event: RowChange) -> str:
    """``{id=42, region=eu}``: the replica identity columns of a row change, as Postgres text.

    The key of a delete (or of an update that changed it) is in the old tuple; without key
    columns (REPLICA IDENTITY FULL or NOTHING) there is no key to name.
    """
    columns = event.relation.columns
    key_positions = [i for i, column in enumerate(columns) if column.is_key]
    if not key_positions:
        return "(no key columns)"
    data = event.old if event.old_kind == "K" or event.new is None else event.new
    if data is None:
        return "(no key columns)"
    values = data.values  # a key-only old tuple has every column, the non-key ones null
    parts = []
    for i in key_positions:
        raw = values[i] if i < len(values) else None
        text = "null" if raw is None else raw.decode("utf-8", "replace")
        parts.append(f"{columns[i].name}={text}")
    return _clip("{" + ", ".join(parts) + "}")


def key_bytes_text(key: bytes | None) -> str:
    """A key we only have as encoded bytes (a record with no known origin): its hex, clipped."""
    if key is None:
        return "(null key)"
    return _clip(f"0x{key.hex()}")


def _limit_text(refused_by: str, topic: str, limit: int | None) -> str:
    if refused_by == PRODUCER:
        return f"over the producer's message.max.bytes of {limit:,} (refused before sending)"
    if limit is None:
        return f"over topic {topic}'s max.message.bytes (refused by the broker)"
    return f"over topic {topic}'s max.message.bytes of {limit:,} (refused by the broker)"


def oversize_error(origin: RecordOrigin, topic: str, size: int, refused_by: str, limit: int | None,
                   prefix: str) -> PublishError:
    """The one line the operator reads: which record, how big, which limit, what to change."""
    where = ""
    if origin.commit_lsn is not None:
        where = f" (commit {format_lsn(origin.commit_lsn)}, event {origin.total_order})"
    return PublishError(
        f"record too large for Kafka: table {origin.table} key {origin.key}{where} is {size:,} bytes "
        f"encoded (key + value), {_limit_text(refused_by, topic, limit)}",
        hint=f"raise the producer's limit with PGBRIDGE_KAFKA__PROPERTIES__MESSAGE.MAX.BYTES=<bytes> and the "
             f"topic's with `kafka-configs --alter --entity-type topics --entity-name {topic} --add-config "
             f"max.message.bytes=<bytes>` (the broker-wide default is the broker's message.max.bytes), or set "
             f"PGBRIDGE_KAFKA__OVERSIZE_POLICY=dead_letter to publish its position and key to "
             f"{dead_letter_topic(prefix)} and go on",
    )


def dead_letter_value(origin: RecordOrigin, topic: str, size: int, refused_by: str, limit: int | None,
                      error: str) -> bytes:
    """The dead letter's value: where the change was and why it is missing, never the change."""
    return json.dumps({
        "reason": "record_too_large",
        "refused_by": refused_by,
        "topic": topic,
        "table": origin.table,
        "key": origin.key,
        "commit_lsn": None if origin.commit_lsn is None else format_lsn(origin.commit_lsn),
        "total_order": origin.total_order,
        "size_bytes": size,
        "limit_bytes": limit,
        "error": error,
    }, sort_keys=True).encode()

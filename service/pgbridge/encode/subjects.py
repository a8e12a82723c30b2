"""Schema Registry subject names: the one place they are made (the encoder and ``pgbridge schemas``).

``schema_registry.subject_name_strategy`` chooses among Confluent's three strategies:

* ``topic`` (``TopicNameStrategy``, the default): ``{topic}-key`` and ``{topic}-value``;
* ``record`` (``RecordNameStrategy``): the record's full name, ``{namespace}.{name}`` of the key or
  value schema (``pgbridge.public.orders.Key``, ``pgbridge.public.orders.Envelope``);
* ``topic_record`` (``TopicRecordNameStrategy``): ``{topic}-{record full name}``.

Registry-less mode ignores subjects: the fingerprint alone names a schema there.
"""

from __future__ import annotations

from typing import Any, Final, Literal

SubjectNameStrategy = Literal["topic", "record", "topic_record"]
SUBJECT_NAME_STRATEGIES: Final[tuple[SubjectNameStrategy, ...]] = ("topic", "record", "topic_record")


def record_full_name(schema: dict[str, Any]) -> str:
    """``namespace.name`` of a named (record) schema, as Avro defines a full name."""
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def subject_name(strategy: SubjectNameStrategy, topic: str, schema: dict[str, Any], *, key: bool) -> str:
    """The subject the key (``key=True``) or value ``schema`` of a record on ``topic`` is registered under."""
    if strategy == "topic":
        return f"{topic}-{'key' if key else 'value'}"
    if strategy == "record":
        return record_full_name(schema)
    return f"{topic}-{record_full_name(schema)}"

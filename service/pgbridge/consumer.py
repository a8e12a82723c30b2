"""Reading pgbridge topics from Python: resolve writer schemas from ``{prefix}._schemas`` or a registry.

``SchemaStore`` is the consumer side of registry-less encoding, used by the demo, the tests and
anyone who wants to read the topics without a Schema Registry::

    store = SchemaStore()
    for record in read(f"{prefix}._schemas"):
        store.add(record.key, record.value)
    event = store.decode(record_from_a_table_topic.value)

``RegistrySchemaStore`` decodes the Confluent wire format that registry mode writes (byte 0, the
schema id as 4 bytes big-endian, the Avro body), fetching each writer schema once by its id::

    store = RegistrySchemaStore({"url": "http://registry:8081"})
    event = store.decode(record_from_a_table_topic.value)

A row field is null both for a SQL NULL and for a value its Avro type cannot hold (``infinity``
dates, ``NaN`` in ``numeric(p,s)``, ...); the latter's exact text is in the envelope's
``unrepresentable`` map, which ``unrepresentable_text`` reads (see ``docs/types.md``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from fastavro import parse_schema, schemaless_reader

from pgbridge.encode.wire import fingerprint_hex, read_confluent_schema_id, read_single_object_fingerprint

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient



def unrepresentable_text(event: Mapping[str, Any], image: Literal["before", "after"], column: str) -> str | None:
    """The exact Postgres text of ``column`` in ``image`` of a decoded envelope when its Avro field
    could not hold the value (the field is then null), else ``None``. ``column`` is the Postgres
    column name (a field whose Avro name differs carries it as ``pg_name``)."""
    texts = event.get("unrepresentable") or {}
    text = texts.get(f"{image}.{column}")
    return text if isinstance(text, str) else None


class UnknownSchema(KeyError):
    """A record names a writer schema that ``_schemas`` has not (yet) delivered."""


class SchemaStore:
    def __init__(self) -> None:
        self._parsed: dict[str, Any] = {}
        self._raw: dict[str, dict[str, Any]] = {}

    def add(self, key: bytes | str, value: bytes | str) -> None:
        fingerprint = key.decode() if isinstance(key, bytes) else key
        schema = json.loads(value)
        self._raw[fingerprint] = schema
        self._parsed[fingerprint] = parse_schema(schema)

    def __len__(self) -> int:
        return len(self._parsed)

    def __contains__(self, fingerprint: object) -> bool:
        """Whether ``decode`` knows the writer schema of this fingerprint (hex)."""
        return fingerprint in self._parsed

    def schema(self, fingerprint: str) -> dict[str, Any]:
        return self._raw[fingerprint]

    @staticmethod
    def fingerprint_of(data: bytes) -> str:
        return fingerprint_hex(read_single_object_fingerprint(data))

    def decode(self, data: bytes | None, reader_schema: dict[str, Any] | None = None) -> Any:
        """Decode one key or value; ``None`` (a tombstone or null key) stays ``None``."""
        if data is None:
            return None
        fingerprint = self.fingerprint_of(data)
        writer = self._parsed.get(fingerprint)
        if writer is None:
            raise UnknownSchema(fingerprint)
        reader = parse_schema(reader_schema) if reader_schema is not None else None
        return schemaless_reader(io.BytesIO(data[10:]), writer, reader)


class RegistrySchemaStore:
    """Decodes Confluent-framed records, fetching writer schemas by id from a Schema Registry.

    ``registry`` is a confluent-kafka ``SchemaRegistryClient`` or its configuration
    (``{"url": ..., "basic.auth.user.info": "user:password"}``). Each writer schema is fetched
    once (``GET /schemas/ids/{id}``) and kept parsed. An id the registry does not know raises
    ``UnknownSchema``; other registry failures raise the client's ``SchemaRegistryError``.
    """

    def __init__(self, registry: SchemaRegistryClient | Mapping[str, Any]) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self._client = registry if isinstance(registry, SchemaRegistryClient) else SchemaRegistryClient(dict(registry))
        self._parsed: dict[int, Any] = {}
        self._raw: dict[int, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._parsed)

    @staticmethod
    def schema_id_of(data: bytes) -> int:
        return read_confluent_schema_id(data)

    def schema(self, schema_id: int) -> dict[str, Any]:
        """The writer schema registered under ``schema_id``, as parsed JSON."""
        if schema_id not in self._raw:
            from confluent_kafka.schema_registry import SchemaRegistryError

            try:
                registered = self._client.get_schema(schema_id)
            except SchemaRegistryError as exc:
                if exc.http_status_code == 404:
                    raise UnknownSchema(schema_id) from exc
                raise
            if registered.schema_str is None:
                raise UnknownSchema(schema_id)
            schema = json.loads(registered.schema_str)
            self._parsed[schema_id] = parse_schema(schema)
            self._raw[schema_id] = schema
        return self._raw[schema_id]

    def decode(self, data: bytes | None, reader_schema: dict[str, Any] | None = None) -> Any:
        """Decode one key or value; ``None`` (a tombstone or null key) stays ``None``."""
        if data is None:
            return None
        schema_id = self.schema_id_of(data)
        self.schema(schema_id)
        reader = parse_schema(reader_schema) if reader_schema is not None else None
        return schemaless_reader(io.BytesIO(data[5:]), self._parsed[schema_id], reader)

    def close(self) -> None:
        # The context-manager exit closes the HTTP session on every supported confluent-kafka
        # release (``close()`` itself only appeared in 2.15).
        with self._client:
            pass

"""Reading pgbridge topics from Python: resolve writer schemas from ``{prefix}._schemas``.

This is the consumer side of registry-less encoding, used by the demo, the tests and anyone
who wants to read the topics without a Schema Registry::

    store = SchemaStore()
    for record in read(f"{prefix}._schemas"):
        store.add(record.key, record.value)
    event = store.decode(record_from_a_table_topic.value)
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any, Final

from fastavro import parse_schema, schemaless_reader

SINGLE_OBJECT_MAGIC: Final = b"\xc3\x01"


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

    def schema(self, fingerprint: str) -> dict[str, Any]:
        return self._raw[fingerprint]

    @staticmethod
    def fingerprint_of(data: bytes) -> str:
        if data[:2] != SINGLE_OBJECT_MAGIC or len(data) < 10:
            raise ValueError("not Avro single-object encoding (expected C3 01 and an 8-byte fingerprint)")
        (value,) = struct.unpack("<Q", data[2:10])
        return f"{value:016x}"

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

"""What a consumer does with pgbridge's registry-less output, for the encode tests.

``SchemaLog`` stands in for ``{prefix}._schemas``: it records every announcement in order and
decodes a single-object record by looking its fingerprint up there, exactly as a consumer would.
"""

from __future__ import annotations

import io
import json
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from pgbridge.encode.wire import SINGLE_OBJECT_MAGIC, fingerprint_hex
from tests.support.relations import relation as relation  # the encode tests import it from here


class SchemaLog:
    """The ``_schemas`` topic as a list of (key, value) pairs, plus a decoder over it."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str]] = []

    def announce(self, fingerprint: str, schema: str) -> None:
        self.records.append((fingerprint, schema))

    def schema(self, fingerprint: str) -> dict[str, Any]:
        for key, value in self.records:
            if key == fingerprint:
                parsed: dict[str, Any] = json.loads(value)
                return parsed
        raise KeyError(f"fingerprint {fingerprint} was never announced")

    def schema_of(self, data: bytes) -> dict[str, Any]:
        assert data[:2] == SINGLE_OBJECT_MAGIC
        return self.schema(fingerprint_hex(int.from_bytes(data[2:10], "little")))

    def decode(self, data: bytes | None, *, logical: bool = True) -> Any:
        """Decode a framed key or value; ``logical=False`` reads logical types as their raw
        integers (``±infinity`` timestamps do not fit Python's ``datetime``)."""
        if data is None:
            return None
        schema = self.schema_of(data)
        if not logical:
            schema = strip_logical_types(schema)
        return schemaless_reader(io.BytesIO(data[10:]), parse_schema(schema), None)


def strip_logical_types(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [strip_logical_types(v) for v in schema]
    return schema


def fastavro_bytes(schema: Any, datum: Any) -> bytes:
    """The Avro binary fastavro writes for ``datum``: the reference the hand-written writer must equal."""
    buffer = io.BytesIO()
    schemaless_writer(buffer, parse_schema(schema), datum)
    return buffer.getvalue()



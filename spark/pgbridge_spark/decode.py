"""Avro bytes of pgbridge records → Python values shaped for Spark (Arrow-ready).

Both encodings of the contract are read, told apart by their first byte:

* single-object (``C3 01`` + 8-byte little-endian CRC-64-AVRO fingerprint): the schema id is the
  fingerprint as 16 lowercase hex digits, the key under which ``{prefix}._schemas`` holds it;
* Confluent wire format (``00`` + 4-byte big-endian id): the schema id is the registry's id in
  decimal, fetched from ``GET {registry}/schemas/ids/{id}``.

The driver resolves every schema id a micro-batch uses (``SchemaCatalog``) and ships the JSON
texts to the executors inside the decode function, so executors never talk to Kafka or the
registry. Values are decoded with fastavro from a copy of the writer schema *without* logical
types: timestamps and dates stay the integers Avro stores, which Arrow takes as they are (exact
over Spark's whole range, Postgres ``infinity`` included), and decimals are rebuilt from their
unscaled bytes. ``conformer`` then fits each value into the table's latest Spark type
(``schemas`` explains the evolution rules).
"""

from __future__ import annotations

import io
import json
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Context, Decimal, InvalidOperation
from typing import Any, Final

from fastavro import parse_schema, schemaless_reader
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
)

from pgbridge.encode.wire import (
    SINGLE_OBJECT_MAGIC,
    fingerprint_hex,
    read_confluent_schema_id,
    read_single_object_fingerprint,
)
from pgbridge_spark.schemas import AvroSchema, EnvelopeSchema, avro_to_spark, nullable_branch, resolve_named


class DecodeError(ValueError):
    """A record that is not pgbridge Avro, or whose schema is unknown."""


# --- framing --------------------------------------------------------------------------------------


def schema_id_of(data: bytes) -> tuple[str, int]:
    """``(schema id, body offset)`` of a framed key or value."""
    if data[:2] == SINGLE_OBJECT_MAGIC and len(data) >= 10:
        return fingerprint_hex(read_single_object_fingerprint(data)), 10
    if data[:1] == b"\x00" and len(data) >= 5:
        return str(read_confluent_schema_id(data)), 5
    raise DecodeError("record is neither Avro single-object encoding (C3 01) nor Confluent wire format (00): "
                      f"starts with {bytes(data[:10]).hex()}")


def header_schema_id(header: bytes | None) -> str | None:
    """The schema id from the first bytes of a record (``None`` for a null key or value)."""
    if header is None:
        return None
    return schema_id_of(bytes(header))[0]


# --- resolving schema ids -------------------------------------------------------------------------


class SchemaCatalog:
    """Schema id → writer schema JSON, from ``{prefix}._schemas`` and/or a Schema Registry.

    ``refresh`` is called with the ids a batch needs; missing single-object ids make it read
    ``_schemas`` again (``load_schemas``), missing registry ids are fetched one by one.
    """

    def __init__(self, *, load_schemas: Callable[[], Mapping[str, str]] | None = None,
                 registry_url: str | None = None, timeout_s: float = 10.0) -> None:
        self._load = load_schemas
        self._registry = registry_url.rstrip("/") if registry_url else None
        self._timeout = timeout_s
        self._texts: dict[str, str] = {}

    def add(self, schema_id: str, text: str) -> None:
        self._texts[schema_id] = text

    def texts(self, ids: Iterable[str]) -> dict[str, str]:
        """JSON text of each id, loading what is missing; raises ``DecodeError`` for unknown ids."""
        wanted = set(ids)
        missing = wanted - self._texts.keys()
        fingerprints = {i for i in missing if len(i) == 16}
        if fingerprints and self._load is not None:
            self._texts.update(self._load())
        for schema_id in missing - fingerprints:
            if self._registry is None:
                raise DecodeError(f"record in Confluent wire format (schema id {schema_id}) but no "
                                  "schema registry URL is configured")
            self._texts[schema_id] = fetch_registry_schema(self._registry, int(schema_id), self._timeout)
        unknown = sorted(wanted - self._texts.keys())
        if unknown:
            raise DecodeError(f"writer schema(s) {', '.join(unknown)} not found in _schemas; "
                              "is the topic prefix right?")
        return {i: self._texts[i] for i in wanted}


def fetch_registry_schema(url: str, schema_id: int, timeout_s: float) -> str:
    """``GET {url}/schemas/ids/{id}`` → the schema JSON text (Confluent Schema Registry API)."""
    with urllib.request.urlopen(f"{url}/schemas/ids/{schema_id}", timeout=timeout_s) as response:
        body = json.loads(response.read())
    schema = body["schema"]
    return schema if isinstance(schema, str) else json.dumps(schema)


# --- decoding -------------------------------------------------------------------------------------


def strip_logical_types(schema: Any) -> Any:
    """A copy of a schema without ``logicalType``: fastavro then returns the stored values."""
    if isinstance(schema, list):
        return [strip_logical_types(b) for b in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if "fields" in schema:
        out["fields"] = [{**f, "type": strip_logical_types(f["type"])} for f in schema["fields"]]
    return out


class WriterSchema:
    """A writer schema prepared for decoding: resolved tree and fastavro's parsed form."""

    __slots__ = ("parsed", "resolved")

    def __init__(self, text: str) -> None:
        original = json.loads(text)
        self.resolved = resolve_named(original)
        # fastavro gets the original (named types defined once), logical types stripped
        self.parsed = parse_schema(strip_logical_types(original), _write_hint=False, _force=True)

    def read(self, data: bytes, offset: int) -> Any:
        return schemaless_reader(io.BytesIO(memoryview(data)[offset:]), self.parsed, None)


class Decoder:
    """Decodes framed records with the writer schemas it was given (by schema id)."""

    def __init__(self, texts: Mapping[str, str]) -> None:
        self._texts = dict(texts)
        self._writers: dict[str, WriterSchema] = {}

    def writer(self, schema_id: str) -> WriterSchema:
        writer = self._writers.get(schema_id)
        if writer is None:
            text = self._texts.get(schema_id)
            if text is None:
                raise DecodeError(f"writer schema {schema_id} was not resolved for this batch")
            writer = self._writers[schema_id] = WriterSchema(text)
        return writer

    def decode(self, data: bytes) -> tuple[str, WriterSchema, Any]:
        schema_id, offset = schema_id_of(data)
        writer = self.writer(schema_id)
        return schema_id, writer, writer.read(data, offset)


# --- fitting values into Spark types ---------------------------------------------------------------

Convert = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _base_converter(schema: AvroSchema) -> Convert:
    """Raw fastavro value (logical types stripped) → the Arrow-ready value of ``avro_to_spark``."""
    inner, _ = nullable_branch(schema)
    if isinstance(inner, (str, list)):
        return _identity
    kind, logical = inner["type"], inner.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        scale = int(inner.get("scale", 0))
        as_text = avro_to_spark(inner)[0] == StringType()

        def decimal(raw: bytes) -> Any:
            value = Decimal(f"{int.from_bytes(raw, 'big', signed=True)}e{-scale}")  # exact: no context
            return str(value) if as_text else value
        return decimal
    if kind == "long" and logical in ("timestamp-millis", "local-timestamp-millis"):
        return lambda raw: raw * 1000
    if kind in ("record", "error"):
        fields = [(f["name"], _base_converter(f["type"])) for f in inner["fields"]]
        return lambda raw: {name: None if raw[name] is None else convert(raw[name]) for name, convert in fields}
    if kind == "array":
        item = _base_converter(inner["items"])
        return lambda raw: [None if x is None else item(x) for x in raw]
    if kind == "map":
        value = _base_converter(inner["values"])
        return lambda raw: {k: None if v is None else value(v) for k, v in raw.items()}
    return _identity


def _to_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# Arithmetic context of decimal rescaling: Python's default (28 digits) would round Spark's 38-digit
# decimals; 200 digits hold any decimal a Spark type can, and anything wider fails (→ null) exactly.
_WIDE: Final = Context(prec=200)

_WIDENINGS: Final = {(IntegerType(), LongType()), (FloatType(), DoubleType()), (IntegerType(), DoubleType()),
                     (LongType(), DoubleType()), (IntegerType(), FloatType())}


def conformer(writer: AvroSchema, target: DataType) -> Convert:
    """Raw value written with ``writer`` → a value of Spark type ``target`` (``None`` if no exact form).

    The returned function is only called with non-null values.
    """
    inner, _ = nullable_branch(writer)
    source_type, _ = avro_to_spark(inner)
    base = _base_converter(inner)
    if source_type == target:
        return base
    if isinstance(target, StructType) and isinstance(inner, dict) and inner.get("type") in ("record", "error"):
        return record_conformer(inner, target)
    if isinstance(target, ArrayType) and isinstance(inner, dict) and inner.get("type") == "array":
        item = conformer(inner["items"], target.elementType)
        return lambda raw: [None if x is None else item(x) for x in raw]
    if isinstance(target, MapType) and isinstance(inner, dict) and inner.get("type") == "map":
        value = conformer(inner["values"], target.valueType)
        return lambda raw: {k: None if v is None else value(v) for k, v in raw.items()}
    if isinstance(target, StringType):
        return lambda raw: _to_text(base(raw))
    if (source_type, target) in _WIDENINGS:
        return lambda raw: float(base(raw)) if isinstance(target, (DoubleType, FloatType)) else base(raw)
    if isinstance(target, DecimalType) and isinstance(source_type, (DecimalType, IntegerType, LongType, StringType)):
        quantum = Decimal(1).scaleb(-target.scale)
        limit = Decimal(10) ** (target.precision - target.scale)

        def rescale(raw: Any) -> Decimal | None:
            try:
                value = Decimal(base(raw))
                exact = value.quantize(quantum, context=_WIDE)
            except (InvalidOperation, ValueError):
                return None
            return exact if exact == value and abs(exact) < limit else None
        return rescale
    return lambda raw: None


def record_conformer(record: Mapping[str, Any], target: StructType) -> Convert:
    """A record value → a dict with exactly ``target``'s fields (missing ones null). A field the
    writer has under one of the target field's ``aliases`` (a renamed column) fills it."""
    by_name = {f["name"]: f for f in record["fields"]}
    plan: list[tuple[str, str, Convert | None]] = []
    for field in target.fields:
        names = [field.name, *field.metadata.get("aliases", [])]
        source = next((by_name[n] for n in names if n in by_name), None)
        if source is None:
            plan.append((field.name, field.name, None))
        else:
            plan.append((field.name, source["name"], conformer(source["type"], field.dataType)))

    def convert(raw: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for name, written, fit in plan:
            value = raw.get(written) if fit is not None else None
            out[name] = None if value is None or fit is None else fit(value)
        return out
    return convert


# --- change records ------------------------------------------------------------------------------


class ChangeDecoder:
    """Decodes one table topic's records into rows of ``schemas.change_type(row_type, key_type)``.

    Built on the executor from what the driver shipped; converters are compiled once per writer
    schema id and reused for every record that carries it.
    """

    def __init__(self, texts: Mapping[str, str], row_type: StructType, key_type: StructType | None) -> None:
        self._decoder = Decoder(texts)
        self._row_type = row_type
        self._key_type = key_type
        self._rows: dict[str, Convert] = {}
        self._keys: dict[str, Convert] = {}

    def _row_converter(self, schema_id: str, writer: WriterSchema) -> Convert:
        convert = self._rows.get(schema_id)
        if convert is None:
            envelope = EnvelopeSchema.parse(writer.resolved)
            convert = self._rows[schema_id] = record_conformer(envelope.row, self._row_type)
        return convert

    def _key_converter(self, schema_id: str, writer: WriterSchema) -> Convert:
        convert = self._keys.get(schema_id)
        if convert is None:
            assert self._key_type is not None
            convert = self._keys[schema_id] = record_conformer(writer.resolved, self._key_type)
        return convert

    def decode(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes) -> dict[str, Any]:
        schema_id, writer, envelope = self._decoder.decode(value)
        row = self._row_converter(schema_id, writer)
        before, after, transaction = envelope["before"], envelope["after"], envelope["transaction"]
        source = envelope["source"]
        out: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset, "schema_id": schema_id}
        if self._key_type is not None:
            decoded_key = None
            if key is not None:
                key_id, key_writer, raw_key = self._decoder.decode(key)
                decoded_key = self._key_converter(key_id, key_writer)(raw_key)
            out["key"] = decoded_key
        return {
            **out, "op": envelope["op"],
            "before": None if before is None else row(before),
            "after": None if after is None else row(after),
            "source": source, "transaction": transaction,
            "unchanged_toast_columns": envelope["unchanged_toast_columns"],
            "unrepresentable": envelope.get("unrepresentable"),  # absent from writers before it
            "commit_lsn": source["commit_lsn"],
            "total_order": 0 if transaction is None else transaction["total_order"],
        }


def decode_boundaries(texts: Mapping[str, str], values: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """``{prefix}.transactions`` values → dicts (``status``, ``id``, ``event_count``, ``data_collections``...)."""
    decoder = Decoder(texts)
    for value in values:
        yield decoder.decode(value)[2]


# --- the Python decoder on a DataFrame -------------------------------------------------------------


def _arrow_decoder(texts: Mapping[str, str], row_type: StructType, key_type: StructType | None,
                   out_type: StructType, timezone: str) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function: only JSON texts are captured, so it pickles small. Timestamps
    go to Arrow as UTC instants (pyspark 4.1's ``to_arrow_schema``), which Spark reads back as the
    same instants whatever ``timezone`` the session has."""
    texts = dict(texts)
    row_json, key_json, out_json = row_type.json(), key_type.json() if key_type else None, out_type.json()

    def decode(batches: Iterable[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        arrow_schema = to_arrow_schema(StructType.fromJson(json.loads(out_json)), timestamp_utc=True)
        decoder = ChangeDecoder(texts, StructType.fromJson(json.loads(row_json)),
                                StructType.fromJson(json.loads(key_json)) if key_json else None)
        for batch in batches:
            columns = batch.to_pydict()
            rows = [decoder.decode(t, p, o, k, v) for t, p, o, k, v in zip(
                columns["topic"], columns["partition"], columns["offset"], columns["key"], columns["value"],
                strict=True)]
            yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)
    return decode


def python_change_frame(records: DataFrame, *, texts: Mapping[str, str], row_type: StructType,
                        key_type: StructType | None, out_type: StructType, timezone: str) -> DataFrame:
    """Records of one table topic (``topic``, ``partition``, ``offset``, ``key``, ``value``) → rows
    of ``out_type`` (``schemas.change_type``), decoded by fastavro on the executors (``mapInArrow``)."""
    return records.mapInArrow(_arrow_decoder(texts, row_type, key_type, out_type, timezone), out_type)

"""The compiled plan of one Relation version: how its rows, keys and envelopes are written.

``ChangeEncoder`` compiles one ``TablePlan`` per Relation version (column encoders, key columns,
schemas, framing headers); the plan then writes each change's Avro binary with a handful of
appends and one ``join``, directly in the field order of ``schemas/envelope.avsc`` (checked at
start-up by ``schemas.check_envelope_layout``). The compiled kernel (``encode/_native.pyx``)
writes the same bytes when it is built; the Python writer here is its reference and fallback,
and ``native_code`` / ``native_binary_code`` choose each column's conversion in it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from pgbridge import native as _native_switch
from pgbridge.decode.messages import (
    KIND_BINARY,
    KIND_NULL,
    KIND_TEXT,
    KIND_UNCHANGED_TOAST,
    Relation,
    TupleData,
)
from pgbridge.encode.schemas import Schema
from pgbridge.encode.types import EncodeError, TypeCodec, Unrepresentable
from pgbridge.encode.wire import (
    EMPTY_ARRAY,
    FALSE,
    NULL_BRANCH,
    TRUE,
    VALUE_BRANCH,
    write_long,
    write_string,
    write_string_array,
    write_string_map,
)

_native: Any = _native_switch.load("pgbridge.encode._native")


def kernel_built() -> bool:
    """Whether the compiled kernel is loaded (``pgbridge.native``: built, and not switched off)."""
    return _native is not None


class OutRecord(NamedTuple):
    """A Kafka record: topic, framed Avro key (``None``: a null key), framed value (``None``: a
    tombstone)."""

    topic: str
    key: bytes | None
    value: bytes | None


_RawEncoder = Callable[[Any], bytes]

_CONVERSION_ERRORS: Final = (ValueError, OverflowError, ArithmeticError, IndexError, struct.error, TypeError)
_ROW_ERRORS: Final = (EncodeError, *_CONVERSION_ERRORS)
OP_CREATE: Final = write_string("c")  # the envelope's ``op`` of an insert, an update, a delete
OP_UPDATE: Final = write_string("u")
OP_DELETE: Final = write_string("d")
VALUE_KINDS: Final = (KIND_TEXT, KIND_BINARY)
_SETTINGS_HINT: Final = ("pgbridge reads values as Postgres prints them with client_encoding=UTF8 and "
                         "DateStyle=ISO; check the replication connection's settings")
_KEY_HINT: Final = ("the replica identity must include the Kafka key columns: ALTER TABLE ... REPLICA IDENTITY "
                    "USING INDEX <primary key index> (or DEFAULT with a primary key, or FULL)")


def native_code(codec: TypeCodec) -> tuple[str, int]:
    """The compiled kernel's conversion for ``codec``'s text values, and the decimal scale.

    Read from the codec's declaration (``TypeCodec.kernel``): a codec declares a conversion only
    where it is built, next to the converters that conversion replaces, so a codec with other
    converters goes through its Python field encoder ("fallback"), never through a conversion
    written for something else."""
    if codec.kernel is None:
        return "fallback", 0
    if codec.kernel == "decimal":
        avro = codec.avro
        assert isinstance(avro, dict), "a decimal codec's Avro type is a bytes/decimal fragment"
        return "decimal", int(avro["scale"])
    return codec.kernel, 0


def native_binary_code(codec: TypeCodec) -> str:
    """The compiled kernel's conversion for ``codec``'s binary (send format) values."""
    return codec.kernel_binary or "fallback"


class _NativePlan(NamedTuple):
    """A plan's inputs to the compiled kernel (``encode/_native.pyx``): its ``Columns`` of the row
    (nullable fields) and of the key (bare values, except companion codecs' ``["null", T,
    "string"]`` fields, written with their union branch)."""

    row: Any
    key: Any


def _native_plan(codecs: tuple[TypeCodec, ...], key_indexes: tuple[int, ...], text_fields: tuple[_RawEncoder, ...],
                 binary_fields: tuple[_RawEncoder, ...], key_text: dict[int, _RawEncoder],
                 key_binary: dict[int, _RawEncoder]) -> _NativePlan | None:
    if _native is None:
        return None
    codes = _native.CODES
    text = [native_code(codec) for codec in codecs]
    binary = [codes[native_binary_code(codec)] for codec in codecs]
    nulls = (NULL_BRANCH,) * len(codecs)
    row = _native.Columns(bytes(codes[name] for name, _ in text), bytes(scale for _, scale in text), text_fields,
                          bytes(binary), binary_fields, nulls)
    bare = [0 if codecs[i].companion else codes["bare"] for i in key_indexes]
    key = _native.Columns(bytes(codes[text[i][0]] | flag for i, flag in zip(key_indexes, bare, strict=True)),
                          bytes(text[i][1] for i in key_indexes), tuple(key_text[i] for i in key_indexes),
                          bytes(binary[i] | flag for i, flag in zip(key_indexes, bare, strict=True)),
                          tuple(key_binary[i] for i in key_indexes), tuple(nulls[i] for i in key_indexes),
                          key_indexes)
    return _NativePlan(row, key)


class TablePlan:
    """Everything needed to write one Relation version's records, computed once."""

    __slots__ = (
        "after_labels",
        "all_text",
        "before_labels",
        "binary_fields",
        "column_names",
        "kernel_change",
        "kernel_only",
        "key_binary",
        "key_header",
        "key_indexes",
        "key_schema",
        "key_text",
        "native",
        "ncols",
        "pg_types",
        "source_head",
        "table",
        "text_fields",
        "toast_policy",
        "topic",
        "value_header",
        "value_schema",
    )

    def __init__(self, *, relation: Relation, topic: str, database: str, codecs: tuple[TypeCodec, ...],
                 key_indexes: tuple[int, ...], key_schema: Schema | None, value_schema: Schema,
                 key_header: bytes, value_header: bytes, toast_policy: str,
                 native: bool = True) -> None:
        self.table = f"{relation.namespace}.{relation.name}"
        self.topic = topic
        self.column_names = tuple(c.name for c in relation.columns)
        self.ncols = len(relation.columns)
        self.all_text = bytes([KIND_TEXT]) * self.ncols
        self.pg_types = tuple(codec.pg_type for codec in codecs)
        # Row fields: each encoder writes the union branch and the value, so the row loop is one
        # call and one append per column; a companion codec's encoder raises ``Unrepresentable``
        # for a value its field cannot hold (the slow loop writes the null and records the text).
        self.text_fields: tuple[_RawEncoder, ...] = tuple(codec.field_text_encoder() for codec in codecs)
        self.binary_fields: tuple[_RawEncoder, ...] = tuple(codec.field_binary_encoder() for codec in codecs)
        # The ``unrepresentable`` map's keys: ``before.<column>`` / ``after.<column>`` (Postgres names).
        self.before_labels = tuple(f"before.{name}" for name in self.column_names)
        self.after_labels = tuple(f"after.{name}" for name in self.column_names)
        # Key fields are bare values, except companion codecs' (``["null", T, "string"]``).
        self.key_text: dict[int, _RawEncoder] = {i: codecs[i].key_text_encoder() for i in key_indexes}
        self.key_binary: dict[int, _RawEncoder] = {i: codecs[i].key_binary_encoder() for i in key_indexes}
        self.key_indexes = key_indexes
        self.key_schema = key_schema
        self.value_schema = value_schema
        self.key_header = key_header
        self.value_header = value_header
        self.toast_policy = toast_policy
        self.source_head = write_string(database) + write_string(relation.namespace) + write_string(relation.name)
        self.native = (_native_plan(codecs, key_indexes, self.text_fields, self.binary_fields, self.key_text,
                                    self.key_binary) if native else None)
        # A row change's records written by the compiled kernel alone (``_native.RowWriter.change``:
        # a ``RowChange``, its transaction's context bytes, total and collection order, snapshot →
        # the records as ``ChangeEncoder.encode_row`` lays them out, or ``None`` for that Python
        # path, which names a bad value, records an unrepresentable one, or finds a key column
        # missing or left to an unchanged TOAST value). One C call a row: no Python frame around it.
        self.kernel_change: Callable[..., list[OutRecord] | None] | None = None
        if self.native is not None:
            self.kernel_change = _native.RowWriter(
                topic, value_header, key_header, self.source_head, self.native.row, self.native.key,
                bool(key_indexes), OutRecord, (*_ROW_ERRORS, Unrepresentable), (OP_CREATE, OP_UPDATE, OP_DELETE)).change
        # Whether a row change is the kernel's alone: set by the encoder, which knows whether the
        # table's TOAST policy leaves the rows as they come.
        self.kernel_only = False

    def write_row(self, row: TupleData, parts: list[bytes], labels: tuple[str, ...],
                  unrepresentable: list[tuple[str, str]]) -> list[str] | None:
        """Append the ``Value`` record of ``row``; return the unchanged-TOAST column names, if any.

        A value its field cannot hold is written as null and ``(label, text)`` appended to
        ``unrepresentable`` (``labels`` are this image's map keys, one per column)."""
        kinds = row.kinds
        append = parts.append
        if kinds == self.all_text:  # the common case: every column sent as text
            start = len(parts)
            try:
                for raw, encode in zip(row.values, self.text_fields, strict=True):
                    append(encode(raw))
                return None
            except Unrepresentable:
                del parts[start:]  # rare: written again below, column by column
            except _ROW_ERRORS as exc:
                raise self.locate_error(row, exc) from exc
        elif len(kinds) != self.ncols:
            raise EncodeError(f"row of {self.table} has {len(kinds)} columns, its relation {self.ncols}",
                              hint="the relation cache is out of step with the stream; restart pgbridge")
        unchanged: list[str] | None = None
        try:
            for kind, raw, text, binary, name, label in zip(kinds, row.values, self.text_fields, self.binary_fields,
                                                            self.column_names, labels, strict=True):
                if kind in VALUE_KINDS:
                    try:
                        append(text(raw) if kind == KIND_TEXT else binary(raw))
                    except Unrepresentable as exc:
                        append(NULL_BRANCH)
                        unrepresentable.append((label, _text_of(exc)))
                elif kind == KIND_NULL:
                    append(NULL_BRANCH)
                elif kind == KIND_UNCHANGED_TOAST:
                    append(NULL_BRANCH)
                    if unchanged is None:
                        unchanged = []
                    unchanged.append(name)
                else:
                    raise EncodeError(f"{self.table}.{name}: unknown tuple column kind {kind!r}",
                                      hint="the replication stream is corrupt; report this as a pgbridge bug")
        except _ROW_ERRORS as exc:
            raise self.locate_error(row, exc) from exc
        return unchanged

    def locate_error(self, row: TupleData, exc: Exception) -> EncodeError:
        """Name the column whose value failed. The hot loop does not track the column index, so
        the (deterministic) converters are re-run one by one until one fails again."""
        for i, (kind, raw) in enumerate(zip(row.kinds, row.values, strict=False)):
            try:
                if kind == KIND_TEXT:
                    self.text_fields[i](raw)
                elif kind == KIND_BINARY:
                    self.binary_fields[i](raw)
            except Unrepresentable:
                continue  # written as null with its text: not an error
            except _ROW_ERRORS as again:
                return self.column_error(i, again)
        return exc if isinstance(exc, EncodeError) else EncodeError(f"cannot encode a row of {self.table}: {exc}",
                                                                    hint=_SETTINGS_HINT)

    def key_of(self, row: TupleData, fallback: TupleData | None) -> bytes | None:
        """The framed Avro key of ``row`` (``fallback`` fills unchanged-TOAST key columns), or
        ``None`` when a key column's value is not in the row."""
        native = self.native
        if native is not None:
            try:
                key: bytes | None = _native.encode_key(self.key_header, row, native.key)
            except _ROW_ERRORS:
                key = None  # the Python loop below raises the same error, naming the column
            if key is not None:
                return key
        parts = [self.key_header]
        i = 0
        try:
            for i in self.key_indexes:
                kind = row.kinds[i]
                raw = row.values[i]
                if kind == KIND_UNCHANGED_TOAST and fallback is not None:
                    kind = fallback.kinds[i]
                    raw = fallback.values[i]
                if kind == KIND_TEXT:
                    parts.append(self.key_text[i](raw))
                elif kind == KIND_BINARY:
                    parts.append(self.key_binary[i](raw))
                else:
                    return None
        except _ROW_ERRORS as exc:
            raise self.column_error(i, exc) from exc
        return b"".join(parts)

    def required_key(self, row: TupleData, fallback: TupleData | None, op: str) -> bytes | None:
        if not self.key_indexes:
            return None
        key = self.key_of(row, fallback)
        if key is None:
            missing = [self.column_names[i] for i in self.key_indexes if row.kinds[i] not in VALUE_KINDS]
            raise EncodeError(f"{op} on {self.table} does not carry the key column(s) {', '.join(missing)}",
                              hint=_KEY_HINT)
        return key

    def column_error(self, i: int, exc: Exception) -> EncodeError:
        column = f"{self.column_names[i]} ({self.pg_types[i]})" if i < self.ncols else f"column #{i}"
        hint = exc.hint if isinstance(exc, EncodeError) else _SETTINGS_HINT
        return EncodeError(f"cannot encode {self.table}.{column}: {exc}", hint=hint)

    def envelope(self, op: bytes, before: TupleData | None, after: TupleData | None, lsn: int,
                 context: tuple[bytes, bytes, bytes], total_order: int, collection_order: int, snapshot: bool,
                 in_transaction: bool) -> bytes:
        """The framed envelope of one change; ``context`` is the transaction's (commit_lsn + xid +
        ts_us, origin, transaction id) bodies, which the encoder caches per transaction."""
        source_tail, origin, transaction_id = context
        native = self.native
        if native is not None:
            try:
                value: bytes | None = _native.encode_envelope(
                    self.value_header, before, after, native.row, op, self.source_head, lsn, source_tail, snapshot,
                    origin, transaction_id if in_transaction else None, total_order, collection_order)
            except (*_ROW_ERRORS, Unrepresentable):
                # the Python path below raises the same error, naming the column, or records the
                # unrepresentable value's text in the envelope's map
                value = None
            if value is not None:
                return value
        parts = [self.value_header]
        unrepresentable: list[tuple[str, str]] = []
        if before is None:
            parts.append(NULL_BRANCH)
        else:
            parts.append(VALUE_BRANCH)
            self.write_row(before, parts, self.before_labels, unrepresentable)
        unchanged = None
        if after is None:
            parts.append(NULL_BRANCH)
        else:
            parts.append(VALUE_BRANCH)
            unchanged = self.write_row(after, parts, self.after_labels, unrepresentable)
        parts += (op, self.source_head, write_long(lsn), source_tail, TRUE if snapshot else FALSE, origin)
        if in_transaction:
            parts += (VALUE_BRANCH, transaction_id, write_long(total_order), write_long(collection_order))
        else:
            parts.append(NULL_BRANCH)
        parts.append(EMPTY_ARRAY if unchanged is None else write_string_array(unchanged))
        parts.append(VALUE_BRANCH + write_string_map(unrepresentable) if unrepresentable else NULL_BRANCH)
        return b"".join(parts)


def _text_of(exc: Unrepresentable) -> str:
    """The text an unrepresentable value is published as (row field encoders always set it)."""
    if exc.text is None:
        raise EncodeError("a value has no Avro form and no text to publish it as",
                          hint="report this as a pgbridge bug with the column's type") from exc
    return exc.text

"""Assembled changes → Kafka records (topic, Avro key, Avro value), as the contract lays them out.

``ChangeEncoder`` is pure apart from the registrar it is given: it compiles one ``_TablePlan``
per Relation version (column encoders, key columns, schemas, framing headers) and then writes
each change with a handful of appends and one ``join``. The envelope's Avro binary is written
here directly in the field order of ``schemas/envelope.avsc`` (checked at start-up by
``schemas.check_envelope_layout``); the low-volume records (messages, transaction boundaries) go
through fastavro's ``schemaless_writer`` and follow their ``.avsc`` files by construction.

Records per change:

* insert ``c``, snapshot read ``r``: one record under the row's key.
* update ``u``: one record under the new key; if Postgres sent the old key and it differs, a
  tombstone for the old key comes first, so compaction forgets the row's previous identity.
* delete ``d``: the delete record, then a tombstone with the same key (keyed tables only).
* truncate ``t``: one record per table, null key, ``before`` and ``after`` null.

Keys are the columns named by the ``KeyResolver`` (primary key, else replica identity index);
none means a null Kafka key. The key of a change is read from the new row, falling back to the
old key image for a key column whose TOASTed value Postgres did not resend.
"""

from __future__ import annotations

import io
import struct
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple, Protocol

from fastavro import parse_schema, schemaless_writer

from pgbridge import native as _native_switch
from pgbridge.assemble.units import RowChange, TruncateChange
from pgbridge.config import DEFAULT_TOAST_CACHE_ROWS
from pgbridge.decode.messages import (
    IDENTITY_FULL,
    IDENTITY_INDEX,
    KIND_BINARY,
    KIND_NULL,
    KIND_TEXT,
    KIND_UNCHANGED_TOAST,
    Relation,
    TupleData,
)
from pgbridge.encode import schemas
from pgbridge.encode.schemas import Schema
from pgbridge.encode.types import (
    EncodeError,
    NumericPolicy,
    TypeCatalog,
    TypeCodec,
    TypeNames,
    Unrepresentable,
)
from pgbridge.encode.wire import (
    EMPTY_ARRAY,
    FALSE,
    NULL_BRANCH,
    TRUE,
    VALUE_BRANCH,
    SchemaRegistrar,
    fingerprint64,
    write_long,
    write_string,
    write_string_array,
    write_string_map,
)
from pgbridge.errors import SchemaError
from pgbridge.publish.routing import TopicRouter, with_table_field
from pgbridge.publish.topics import messages_topic, transactions_topic

_native: Any = _native_switch.load("pgbridge.encode._native")

# --- what callers pass and get --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EventContext:
    """Where an event sits: its transaction (for ``source`` and ``transaction``) and its order.

    ``ts_us`` is the commit time in microseconds since the Unix epoch. ``total_order`` and
    ``collection_order`` are 1-based positions in the transaction overall and within the table;
    together with ``commit_lsn`` they make an event identifiable across re-deliveries.
    """

    commit_lsn: int
    xid: int
    ts_us: int
    origin: str | None
    total_order: int
    collection_order: int
    snapshot: bool = False


class OutRecord(NamedTuple):
    topic: str
    key: bytes | None
    value: bytes | None


KeyResolver = Callable[[Relation], tuple[str, ...]]
"""Names of a relation's Kafka key columns, in key order; empty means a null key."""


def default_key_columns(relation: Relation) -> tuple[str, ...]:
    """The columns pgoutput flags as key: the replica identity's columns.

    Under ``REPLICA IDENTITY FULL`` every column is flagged, which identifies nothing useful as
    a Kafka key, so such tables get a null key unless a resolver names their primary key.
    """
    if relation.replica_identity == IDENTITY_FULL:
        return ()
    return tuple(c.name for c in relation.columns if c.is_key)


# --- TOAST policy and observation ----------------------------------------------------------------

TOAST_MARKER: Final = "marker"
"""Unchanged TOASTed columns are null in ``after`` and listed in ``unchanged_toast_columns``."""
TOAST_OLD_TUPLE: Final = "old_tuple"
"""Fill them from the old row when Postgres sent it (``REPLICA IDENTITY FULL``), else mark them."""
TOAST_CACHE: Final = "cache"
"""Fill them from the old row, else from a bounded local cache of the last row seen per key."""
TOAST_POLICIES: Final = (TOAST_MARKER, TOAST_OLD_TUPLE, TOAST_CACHE)


@dataclass(frozen=True, slots=True)
class ToastPolicy:
    """Which policy each table (``schema.table``) gets; ``default`` for the rest."""

    default: str = TOAST_MARKER
    tables: Mapping[str, str] = field(default_factory=dict)
    cache_rows: int = DEFAULT_TOAST_CACHE_ROWS

    def for_table(self, table: str) -> str:
        return self.tables.get(table, self.default)


class EncodeObserver(Protocol):
    """What the encoder reports for metrics and logs (the pipeline bridges it to ``Metrics``)."""

    def toast_cache(self, hit: bool) -> None: ...

    def schema_changed(self, table: str, compatibility: str, reason: str | None) -> None: ...


class _NoObserver:
    def toast_cache(self, hit: bool) -> None:
        pass

    def schema_changed(self, table: str, compatibility: str, reason: str | None) -> None:
        pass


COMPATIBILITY_COMPATIBLE: Final = "compatible"
COMPATIBILITY_INCOMPATIBLE: Final = "incompatible"


# --- the compiled plan of one Relation version ----------------------------------------------------

_RawEncoder = Callable[[Any], bytes]
_OP_CREATE: Final = write_string("c")
_OP_UPDATE: Final = write_string("u")
_OP_DELETE: Final = write_string("d")
_OP_READ: Final = write_string("r")
_OP_TRUNCATE: Final = write_string("t")
_CONVERSION_ERRORS: Final = (ValueError, OverflowError, ArithmeticError, IndexError, struct.error, TypeError)
_ROW_ERRORS: Final = (EncodeError, *_CONVERSION_ERRORS)
_VALUE_KINDS: Final = (KIND_TEXT, KIND_BINARY)
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


class _TablePlan:
    """Everything needed to write one Relation version's records, computed once."""

    __slots__ = ("after_labels", "all_text", "before_labels", "binary_fields", "column_names", "key_binary",
                 "key_header", "key_indexes", "key_schema", "key_text", "native", "ncols", "pg_types", "source_head",
                 "table", "text_fields", "toast_policy", "topic", "value_header", "value_schema")

    def __init__(self, *, relation: Relation, topic: str, database: str, codecs: tuple[TypeCodec, ...],
                 key_indexes: tuple[int, ...], key_schema: Schema | None, value_schema: Schema,
                 key_header: bytes, value_header: bytes, toast_policy: str = TOAST_MARKER,
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
                if kind in _VALUE_KINDS:
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
            missing = [self.column_names[i] for i in self.key_indexes if row.kinds[i] not in _VALUE_KINDS]
            raise EncodeError(f"{op} on {self.table} does not carry the key column(s) {', '.join(missing)}",
                              hint=_KEY_HINT)
        return key

    def column_error(self, i: int, exc: Exception) -> EncodeError:
        column = f"{self.column_names[i]} ({self.pg_types[i]})" if i < self.ncols else f"column #{i}"
        hint = exc.hint if isinstance(exc, EncodeError) else _SETTINGS_HINT
        return EncodeError(f"cannot encode {self.table}.{column}: {exc}", hint=hint)


# --- the encoder ----------------------------------------------------------------------------------


class _TableSchemas(NamedTuple):
    codecs: tuple[TypeCodec, ...]
    key_indexes: tuple[int, ...]
    key: Schema | None
    value: Schema


_PLAN_CACHE_SIZE: Final = 4096


class ChangeEncoder:
    """Encodes assembled changes of one database into ``OutRecord``s.

    ``registrar`` frames bodies and makes writer schemas known (see ``wire.SchemaRegistrar``);
    it is asked once per (subject, schema), when a Relation version is first used, so in
    registry-less mode the schema is durable in ``_schemas`` before the first record using it.
    ``numeric`` maps ``numeric`` without precision to a decimal (``types.NumericPolicy``) instead
    of its exact string. ``native=False`` keeps to the Python row writer even where the compiled kernel is built (the
    tests compare the two).
    """

    def __init__(self, *, topic_prefix: str, database: str, registrar: SchemaRegistrar,
                 key_resolver: KeyResolver | None = None, type_names: TypeNames | None = None,
                 type_catalog: TypeCatalog | None = None, toast: ToastPolicy | None = None,
                 observer: EncodeObserver | None = None, native: bool = True,
                 numeric: NumericPolicy | None = None, router: TopicRouter | None = None) -> None:
        schemas.check_envelope_layout()
        self._native = native and _native is not None
        self._numeric = numeric
        self._prefix = topic_prefix
        self._router = router or TopicRouter(topic_prefix)  # topic names: publish/topics.py, routing.py
        self._database = database
        self._registrar = registrar
        self._key_resolver = key_resolver or default_key_columns
        self._type_names = type_names
        self._type_catalog = type_catalog
        self._toast = toast or ToastPolicy()
        self._observer: EncodeObserver = observer or _NoObserver()
        self._toast_cache: OrderedDict[tuple[str, bytes, bytes], TupleData] = OrderedDict()
        self._value_schemas: dict[str, Schema] = {}  # table → the last value schema compiled for it
        self._headers: dict[tuple[str, int], bytes] = {}
        self._by_identity: dict[int, tuple[Relation, _TablePlan]] = {}
        self._by_shape: dict[tuple[Any, ...], _TablePlan] = {}
        self._context_key: tuple[int, int, int, str | None] | None = None
        self._context_bytes: tuple[bytes, bytes, bytes] = (b"", b"", b"")
        self.messages_topic = messages_topic(topic_prefix)
        self.transactions_topic = transactions_topic(topic_prefix)
        self._fixed = {name: _FixedRecord(schemas.standalone_schema(name))
                       for name in ("message", "message_key", "transaction_boundary", "transaction_key")}
        self._buffer = io.BytesIO()

    # -- schemas ---------------------------------------------------------------------------------

    def topic_for(self, relation: Relation) -> str:
        """The table's topic (``TopicRouter``: its route, else ``{prefix}.{schema}.{table}``)."""
        return self._router.route(relation.namespace, relation.name).topic

    def table_of(self, relation: Relation) -> str:
        """``schema.table`` of a Relation version, from its plan (one identity look-up per row)."""
        return self._plan(relation).table

    def key_schema(self, relation: Relation) -> dict[str, Any] | None:
        """The Avro key schema of ``relation``, ``None`` for a null key (for ``pgbridge schemas``)."""
        return self._schemas(relation).key

    def value_schema(self, relation: Relation) -> dict[str, Any]:
        """The Avro value (envelope) schema of ``relation`` (for ``pgbridge schemas``)."""
        return self._schemas(relation).value

    def _key_indexes(self, relation: Relation) -> tuple[int, ...]:
        positions = {c.name: i for i, c in enumerate(relation.columns)}
        names = self._key_resolver(relation)
        identity = tuple(c.name for c in relation.columns if c.is_key)
        if relation.replica_identity == IDENTITY_INDEX and not set(names) <= set(identity):
            # REPLICA IDENTITY USING INDEX on columns other than the primary key: deletes (and key
            # changes) carry only the index's columns, so they are the only key every op can give.
            names = identity
        unknown = [n for n in names if n not in positions]
        if unknown:
            raise EncodeError(f"key column(s) {', '.join(unknown)} of {relation.namespace}.{relation.name} "
                              "are not in the published columns",
                              hint="publish the key columns (publication column lists must include them)")
        return tuple(positions[n] for n in names)

    def _schemas(self, relation: Relation) -> _TableSchemas:
        codecs = schemas.column_codecs(relation, self._type_names, self._type_catalog, self._numeric)
        names = schemas.field_names(relation.columns)
        namespace = schemas.table_namespace(self._prefix, relation.namespace, relation.name)
        key_indexes = self._key_indexes(relation)
        key = schemas.key_schema(namespace, relation, codecs, names, key_indexes)
        if key is not None and self._router.route(relation.namespace, relation.name).table_key:
            key = with_table_field(key)  # several tables on one topic: the key names its table
        value = schemas.envelope_schema(namespace, schemas.row_schema(namespace, relation, codecs, names))
        return _TableSchemas(codecs, key_indexes, key, value)

    def _header(self, subject: str, schema: Schema) -> bytes:
        cache_key = (subject, fingerprint64(schema))
        header = self._headers.get(cache_key)
        if header is None:
            header = self._registrar.header_for(subject, schema)
            self._headers[cache_key] = header
        return header

    def _compile(self, relation: Relation) -> _TablePlan:
        codecs, key_indexes, key, value = self._schemas(relation)
        for schema in (key, value):
            if schema is not None:
                try:
                    parse_schema(schema)
                except Exception as exc:  # fastavro raises plain exceptions of several kinds
                    raise SchemaError(f"writer schema of {relation.namespace}.{relation.name} is invalid: {exc}",
                                      hint="report this as a pgbridge bug with the table's definition") from exc
        topic, table_key = self._router.route(relation.namespace, relation.name)
        table = f"{relation.namespace}.{relation.name}"
        self._note_schema_change(table, value)
        key_header = self._header(f"{topic}-key", key) + (write_string(table) if table_key else b"") if key else b""
        value_header = self._header(f"{topic}-value", value)
        return _TablePlan(relation=relation, topic=topic, database=self._database, codecs=codecs,
                          key_indexes=key_indexes, key_schema=key, value_schema=value,
                          key_header=key_header, value_header=value_header,
                          toast_policy=self._toast.for_table(table), native=self._native)

    def _note_schema_change(self, table: str, value: Schema) -> None:
        """Report a table's new writer schema as compatible when a consumer holding the previous
        one can still read it by Avro schema resolution, else as incompatible (still published)."""
        previous = self._value_schemas.get(table)
        self._value_schemas[table] = value
        if previous is None or fingerprint64(previous) == fingerprint64(value):
            return
        problem = schemas.resolution_problem(writer=value, reader=previous)
        self._observer.schema_changed(table, COMPATIBILITY_COMPATIBLE if problem is None
                                      else COMPATIBILITY_INCOMPATIBLE, problem)

    def _plan(self, relation: Relation) -> _TablePlan:
        """The plan of a Relation version: by identity first (the relation cache hands out the
        same object), then by content without ``xid`` (a streamed transaction re-sends an equal
        Relation carrying its xid; that must not compile or register again)."""
        entry = self._by_identity.get(id(relation))
        if entry is not None and entry[0] is relation:
            return entry[1]
        shape = (relation.rel_id, relation.namespace, relation.name, relation.replica_identity, relation.columns)
        plan = self._by_shape.get(shape)
        if plan is None:
            plan = self._compile(relation)
            if len(self._by_shape) >= _PLAN_CACHE_SIZE:
                del self._by_shape[next(iter(self._by_shape))]
            self._by_shape[shape] = plan
        if len(self._by_identity) >= _PLAN_CACHE_SIZE:
            self._by_identity.clear()
        self._by_identity[id(relation)] = (relation, plan)  # holds the object, so its id stays unique
        return plan

    # -- row changes -----------------------------------------------------------------------------

    def _context(self, ctx: EventContext) -> tuple[bytes, bytes, bytes]:
        """(commit_lsn + xid + ts_us, origin, transaction id) bodies; cached per transaction."""
        key = (ctx.commit_lsn, ctx.xid, ctx.ts_us, ctx.origin)
        if key != self._context_key:
            origin = NULL_BRANCH if ctx.origin is None else VALUE_BRANCH + write_string(ctx.origin)
            self._context_bytes = (write_long(ctx.commit_lsn) + write_long(ctx.xid) + write_long(ctx.ts_us),
                                   origin, write_string(f"{ctx.xid}:{ctx.commit_lsn}"))
            self._context_key = key
        return self._context_bytes

    def _envelope(self, plan: _TablePlan, op: bytes, before: TupleData | None, after: TupleData | None,
                  lsn: int, ctx: EventContext, snapshot: bool, in_transaction: bool) -> bytes:
        native = plan.native
        if native is not None:
            source_tail, origin, transaction_id = self._context(ctx)
            try:
                value: bytes | None = _native.encode_envelope(
                    plan.value_header, before, after, native.row, op, plan.source_head, lsn, source_tail, snapshot,
                    origin, transaction_id if in_transaction else None, ctx.total_order, ctx.collection_order)
            except (*_ROW_ERRORS, Unrepresentable):
                # the Python path below raises the same error, naming the column, or records the
                # unrepresentable value's text in the envelope's map
                value = None
            if value is not None:
                return value
        parts = [plan.value_header]
        unrepresentable: list[tuple[str, str]] = []
        if before is None:
            parts.append(NULL_BRANCH)
        else:
            parts.append(VALUE_BRANCH)
            plan.write_row(before, parts, plan.before_labels, unrepresentable)
        unchanged = None
        if after is None:
            parts.append(NULL_BRANCH)
        else:
            parts.append(VALUE_BRANCH)
            unchanged = plan.write_row(after, parts, plan.after_labels, unrepresentable)
        source_tail, origin, transaction_id = self._context(ctx)
        parts += (op, plan.source_head, write_long(lsn), source_tail, TRUE if snapshot else FALSE, origin)
        if in_transaction:
            parts += (VALUE_BRANCH, transaction_id, write_long(ctx.total_order), write_long(ctx.collection_order))
        else:
            parts.append(NULL_BRANCH)
        parts.append(EMPTY_ARRAY if unchanged is None else write_string_array(unchanged))
        parts.append(VALUE_BRANCH + write_string_map(unrepresentable) if unrepresentable else NULL_BRANCH)
        return b"".join(parts)

    def encode_row(self, change: RowChange, ctx: EventContext) -> list[OutRecord]:
        """Records of an insert, update or delete, in the order they must be produced."""
        plan = self._plan(change.relation)
        op = change.op
        if op == "c":
            new = _require(change.new, "insert", plan)
            value = self._envelope(plan, _OP_CREATE, None, new, change.lsn, ctx, ctx.snapshot, True)
            key = plan.required_key(new, None, "insert")
            if plan.toast_policy == TOAST_CACHE and key is not None:
                self._remember(plan, key, new)
            return [OutRecord(plan.topic, key, value)]
        if op == "u":
            new = _require(change.new, "update", plan)
            old = change.old if change.old_kind is not None else None
            key = plan.required_key(new, old, "update")
            if plan.toast_policy != TOAST_MARKER:
                new = self._fill_unchanged_toast(plan, key, new, old)
            value = self._envelope(plan, _OP_UPDATE, old, new, change.lsn, ctx, ctx.snapshot, True)
            record = OutRecord(plan.topic, key, value)
            if old is not None and key is not None:
                # Without every old key column (a replica identity narrower than the key) a change
                # of key cannot be seen; with them, a different old key is tombstoned first.
                old_key = plan.key_of(old, None)
                if old_key is not None and old_key != key:
                    self._toast_cache.pop((plan.topic, plan.value_header, old_key), None)
                    return [OutRecord(plan.topic, old_key, None), record]
            return [record]
        if op == "d":
            old = _require(change.old, "delete", plan)
            key = plan.required_key(old, None, "delete")
            if plan.toast_policy == TOAST_CACHE and key is not None:
                self._toast_cache.pop((plan.topic, plan.value_header, key), None)
            value = self._envelope(plan, _OP_DELETE, old, None, change.lsn, ctx, ctx.snapshot, True)
            if key is None:
                return [OutRecord(plan.topic, None, value)]
            return [OutRecord(plan.topic, key, value), OutRecord(plan.topic, key, None)]
        raise EncodeError(f"unknown change op {op!r} on {plan.table}")

    def encode_snapshot_row(self, relation: Relation, row: TupleData, ctx: EventContext) -> OutRecord:
        """A row read by the initial snapshot: op ``r``, ``source.snapshot`` true, no transaction
        block, ``source.lsn`` the snapshot's LSN (``ctx.commit_lsn``)."""
        plan = self._plan(relation)
        value = self._envelope(plan, _OP_READ, None, row, ctx.commit_lsn, ctx, True, False)
        key = plan.required_key(row, None, "snapshot read")
        if plan.toast_policy == TOAST_CACHE and key is not None:
            self._remember(plan, key, row)
        return OutRecord(plan.topic, key, value)

    def encode_truncate(self, change: TruncateChange, relation: Relation, ctx: EventContext) -> OutRecord:
        """The truncate event of one of ``change.relations``: null key, ``before``/``after`` null."""
        plan = self._plan(relation)
        value = self._envelope(plan, _OP_TRUNCATE, None, None, change.lsn, ctx, ctx.snapshot, True)
        if plan.toast_policy == TOAST_CACHE:
            for cached in [k for k in self._toast_cache if k[0] == plan.topic]:
                del self._toast_cache[cached]
        return OutRecord(plan.topic, None, value)

    # -- unchanged TOAST -------------------------------------------------------------------------

    def _remember(self, plan: _TablePlan, key: bytes, row: TupleData) -> None:
        """Keep ``row`` as the last one of ``key``; entries are per Relation version (the value
        header), so a row cached before an ALTER TABLE is never read with the new column layout."""
        cache = self._toast_cache
        entry = (plan.topic, plan.value_header, key)
        cache[entry] = row
        cache.move_to_end(entry)
        if len(cache) > self._toast.cache_rows:
            cache.popitem(last=False)

    def _fill_unchanged_toast(self, plan: _TablePlan, key: bytes | None, new: TupleData,
                              old: TupleData | None) -> TupleData:
        """``new`` with unchanged-TOAST columns filled from the old row (sent under REPLICA
        IDENTITY FULL) or, with the cache policy, from the last row seen for the key. Columns that
        neither source has stay marked: a value is never guessed."""
        use_cache = plan.toast_policy == TOAST_CACHE and key is not None
        if KIND_UNCHANGED_TOAST not in new.kinds:
            if use_cache:
                assert key is not None
                self._remember(plan, key, new)
            return new
        kinds = bytearray(new.kinds)
        values = list(new.values)
        cached = self._toast_cache.get((plan.topic, plan.value_header, key)) if use_cache and key is not None else None
        for i, kind in enumerate(new.kinds):
            if kind != KIND_UNCHANGED_TOAST:
                continue
            for source in (old, cached):
                if source is not None and source.kinds[i] in _VALUE_KINDS:
                    kinds[i] = source.kinds[i]
                    values[i] = source.values[i]
                    if source is cached:
                        self._observer.toast_cache(True)
                    break
            else:
                if use_cache:
                    self._observer.toast_cache(False)
        filled = TupleData(bytes(kinds), tuple(values))
        if use_cache:
            assert key is not None
            self._remember(plan, key, filled)
        return filled

    # -- messages and transaction boundaries -----------------------------------------------------

    def _fixed_record(self, topic: str, key_name: str, key: Mapping[str, Any], value_name: str,
                      value: Mapping[str, Any]) -> OutRecord:
        key_record, value_record = self._fixed[key_name], self._fixed[value_name]
        key_header = self._header(f"{topic}-key", key_record.schema)
        value_header = self._header(f"{topic}-value", value_record.schema)
        return OutRecord(topic, key_record.write(key_header, key, self._buffer),
                         value_record.write(value_header, value, self._buffer))

    def encode_message(self, prefix: str, content: bytes, lsn: int, ctx: EventContext | None,
                       transactional: bool) -> OutRecord:
        """A ``pg_logical_emit_message`` to ``{prefix}.messages``, keyed by its prefix.

        ``ctx`` is the enclosing transaction (``None`` for a non-transactional message, whose
        commit fields and transaction block are then null).
        """
        value: dict[str, Any] = {"prefix": prefix, "content": bytes(content), "transactional": transactional,
                                 "db": self._database, "lsn": lsn, "commit_lsn": None, "xid": None,
                                 "ts_us": None, "origin": None, "transaction": None}
        if ctx is not None:
            value.update(commit_lsn=ctx.commit_lsn, xid=ctx.xid, ts_us=ctx.ts_us, origin=ctx.origin,
                         transaction={"id": f"{ctx.xid}:{ctx.commit_lsn}", "total_order": ctx.total_order,
                                      "data_collection_order": ctx.collection_order})
        return self._fixed_record(self.messages_topic, "message_key", {"prefix": prefix}, "message", value)

    def encode_tx_boundary(self, *, status: Literal["BEGIN", "END"], xid: int, commit_lsn: int, ts_us: int,
                           event_count: int, per_table: Mapping[str, int]) -> OutRecord:
        """BEGIN or END of a transaction to ``{prefix}.transactions``, keyed by the transaction id.

        As in Debezium, counts are only on END (``event_count`` and ``per_table`` are ignored for
        BEGIN): a plain transaction's BEGIN is published before its changes are known.
        ``per_table`` keeps the caller's order (first event of each table).
        """
        if status not in ("BEGIN", "END"):
            raise ValueError(f"transaction boundary status must be BEGIN or END, not {status!r}")
        transaction_id = f"{xid}:{commit_lsn}"
        end = status == "END"
        value = {"status": status, "id": transaction_id, "event_count": event_count if end else None,
                 "data_collections": [{"data_collection": table, "event_count": count}
                                      for table, count in per_table.items()] if end else None,
                 "ts_us": ts_us, "commit_lsn": commit_lsn, "xid": xid}
        return self._fixed_record(self.transactions_topic, "transaction_key", {"id": transaction_id},
                                  "transaction_boundary", value)


class _FixedRecord:
    """A fixed-layout record written with fastavro (low volume: exact over fast)."""

    __slots__ = ("parsed", "schema")

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.parsed = parse_schema(schema)

    def write(self, header: bytes, datum: Mapping[str, Any], buffer: io.BytesIO) -> bytes:
        buffer.seek(0)
        buffer.truncate()
        buffer.write(header)
        schemaless_writer(buffer, self.parsed, datum)
        return buffer.getvalue()


def _text_of(exc: Unrepresentable) -> str:
    """The text an unrepresentable value is published as (row field encoders always set it)."""
    if exc.text is None:
        raise EncodeError("a value has no Avro form and no text to publish it as",
                          hint="report this as a pgbridge bug with the column's type") from exc
    return exc.text


def _require(row: TupleData | None, op: str, plan: _TablePlan) -> TupleData:
    if row is None:
        raise EncodeError(f"{op} on {plan.table} arrived without its row image",
                          hint="the assembled change is malformed; report this as a pgbridge bug")
    return row

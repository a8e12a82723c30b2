"""Assembled changes → Kafka records (topic, Avro key, Avro value), as the contract lays them out.

``ChangeEncoder`` is pure apart from the registrar it is given: it compiles one ``TablePlan``
(``plan``) per Relation version, which writes the envelope's Avro binary directly, and maps each
event to its records here; unchanged TOASTed columns are filled as ``ToastPolicy`` says
(``toast``). The low-volume records (messages, transaction boundaries) go
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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, Protocol

from fastavro import parse_schema, schemaless_writer

from pgbridge.assemble.units import RowChange, TruncateChange
from pgbridge.config import DEFAULT_TOAST_CACHE_ROWS
from pgbridge.decode.messages import IDENTITY_FULL, IDENTITY_INDEX, Relation, TupleData
from pgbridge.encode import schemas
from pgbridge.encode.plan import OP_CREATE, OP_DELETE, OP_UPDATE, OutRecord, TablePlan, kernel_built
from pgbridge.encode.renames import ColumnAliases
from pgbridge.encode.schemas import Schema
from pgbridge.encode.subjects import SubjectNameStrategy, subject_name
from pgbridge.encode.toast import TOAST_CACHE, TOAST_MARKER, TOAST_OLD_TUPLE, TOAST_POLICIES, ToastCache
from pgbridge.encode.types import EncodeError, NumericPolicy, TypeCatalog, TypeCodec, TypeNames
from pgbridge.encode.wire import (
    NULL_BRANCH,
    VALUE_BRANCH,
    SchemaRegistrar,
    fingerprint64,
    schema_json,
    write_long,
    write_string,
)
from pgbridge.errors import SchemaError

if TYPE_CHECKING:
    from pgbridge.encode.schema_change import SchemaChanges

__all__ = ["COMPATIBILITY_COMPATIBLE", "COMPATIBILITY_INCOMPATIBLE", "TOAST_CACHE", "TOAST_MARKER", "TOAST_OLD_TUPLE",
           "TOAST_POLICIES", "ChangeEncoder", "EncodeObserver", "EventContext", "KeyResolver", "OutRecord",
           "RecordTopics", "ToastPolicy", "default_key_columns"]

# --- what callers pass and get --------------------------------------------------------------------


@dataclass(slots=True)
class EventContext:
    """Where an event sits: its transaction (for ``source`` and ``transaction``) and its order.

    ``ts_us`` is the commit time in microseconds since the Unix epoch. ``total_order`` and
    ``collection_order`` are 1-based positions in the transaction overall and within the table;
    together with ``commit_lsn`` they make an event identifiable across re-deliveries.

    Its order fields are mutable on purpose: the dispatcher keeps one context per open
    transaction and advances them before each event (publish/dispatch.py,
    ``OpenTransaction.next_context``), since a new object per row cost ~5% of the bridge's CPU.
    The transaction fields (``commit_lsn``, ``xid``, ``ts_us``, ``origin``, ``snapshot``) are
    never changed in place: a new origin is a new context. The encoder caches a context's wire
    bytes by identity on that promise.
    """

    commit_lsn: int
    xid: int
    ts_us: int
    origin: str | None
    total_order: int
    collection_order: int
    snapshot: bool = False


class RecordTopics(Protocol):
    """Where the encoder's records go; publish/routing.py's ``TopicRouter`` is the one namer of
    topics, the encoder only asks it."""

    messages: str  # logical messages
    transactions: str  # transaction boundaries

    def route(self, schema: str, table: str) -> tuple[str, bool]:
        """The table's topic, and whether its keys name the table (``schemas.TABLE_KEY_FIELD``)."""
        ...


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


# --- the encoder ----------------------------------------------------------------------------------


class _TableSchemas(NamedTuple):
    codecs: tuple[TypeCodec, ...]
    key_indexes: tuple[int, ...]
    key: Schema | None
    value: Schema


_PLAN_CACHE_SIZE: Final = 4096
_OP_CREATE: Final = OP_CREATE
_OP_UPDATE: Final = OP_UPDATE
_OP_DELETE: Final = OP_DELETE
_OP_READ: Final = write_string("r")
_OP_TRUNCATE: Final = write_string("t")


class ChangeEncoder:
    """Encodes assembled changes of one database into ``OutRecord``s.

    ``registrar`` frames bodies and makes writer schemas known (see ``wire.SchemaRegistrar``);
    it is asked once per (subject, schema), when a Relation version is first used, so in
    registry-less mode the schema is durable in ``_schemas`` before the first record using it.
    ``router`` names the topics (publish/routing.py's ``TopicRouter``). ``subject_strategy`` names
    the subjects (``encode.subjects``: ``topic``, ``record``, ``topic_record``). ``numeric`` maps
    ``numeric`` without precision to a decimal (``types.NumericPolicy``) instead of its exact
    string. ``native=False`` keeps to the Python row writer even where the compiled kernel is built
    (the tests compare the two).
    """

    def __init__(self, *, topic_prefix: str, database: str, registrar: SchemaRegistrar, router: RecordTopics,
                 key_resolver: KeyResolver | None = None, type_names: TypeNames | None = None,
                 type_catalog: TypeCatalog | None = None, toast: ToastPolicy | None = None,
                 observer: EncodeObserver | None = None, native: bool = True,
                 numeric: NumericPolicy | None = None, subject_strategy: SubjectNameStrategy = "topic") -> None:
        schemas.check_envelope_layout()
        self._subject_strategy: SubjectNameStrategy = subject_strategy  # encode/subjects.py
        self._native = native and kernel_built()
        self._numeric = numeric
        self._prefix = topic_prefix
        self._router = router  # topic names: publish/routing.py
        self._database = database
        self._registrar = registrar
        self._key_resolver = key_resolver or default_key_columns
        self._type_names = type_names
        self._type_catalog = type_catalog
        self._toast = toast or ToastPolicy()
        self._observer: EncodeObserver = observer or _NoObserver()
        self._toast_cache = ToastCache(self._toast.cache_rows, self._observer)
        self._value_schemas: dict[str, Schema] = {}  # table → the last value schema compiled for it
        self._headers: dict[tuple[str, str], bytes] = {}
        self._fixed_headers: dict[tuple[str, str, str], tuple[bytes, bytes]] = {}
        self._by_identity: dict[int, tuple[Relation, TablePlan]] = {}
        self._by_shape: dict[tuple[Any, ...], TablePlan] = {}
        self._last: tuple[Relation, TablePlan] | None = None  # the last plan asked for
        self._context_key: tuple[int, int, int, str | None] | None = None
        self._context_of: EventContext | None = None  # the context whose bytes are cached
        self._context_bytes: tuple[bytes, bytes, bytes] = (b"", b"", b"")
        self.messages_topic = router.messages
        self.transactions_topic = router.transactions
        self._fixed = {name: _FixedRecord(schemas.standalone_schema(name))
                       for name in ("message", "message_key", "transaction_boundary", "transaction_key")}
        self._buffer = io.BytesIO()
        # postgres.ddl_events: earlier names of renamed columns as field aliases (encode/renames.py),
        # and the DDL messages' records (encode/schema_change.py); both set by the pipeline
        self.column_aliases: ColumnAliases | None = None
        self.schema_changes: SchemaChanges | None = None

    # -- schemas ---------------------------------------------------------------------------------

    def topic_for(self, relation: Relation) -> str:
        """The table's topic (``TopicRouter``: its route, else ``{prefix}.{schema}.{table}``)."""
        return self.topic_of(relation.namespace, relation.name)

    def topic_of(self, schema: str, table: str) -> str:
        return self._router.route(schema, table)[0]

    @property
    def database(self) -> str:
        return self._database

    def forget(self, rel_id: int) -> None:
        """Drop the compiled plans of table ``rel_id``, whose rename history just changed, so its
        next Relation compiles with the new aliases (encode/schema_change.py; rare: DDL only)."""
        self._by_shape = {shape: plan for shape, plan in self._by_shape.items() if shape[0] != rel_id}
        self._by_identity.clear()
        self._last = None

    def check_tables(self, relations: Iterable[Relation]) -> None:
        """Refuse at start what the first row of a published table would be refused for: nothing
        here (``relations`` is not even read); a column policy's encoder checks its rules
        (encode/columns.py)."""

    def table_of(self, relation: Relation) -> str:
        """``schema.table`` of a Relation version, from its plan (one identity look-up per row)."""
        last = self._last
        if last is not None and relation is last[0]:  # asked for every row: the last plan first
            return last[1].table
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
        aliases = None if self.column_aliases is None else self.column_aliases.aliases(relation)
        key = schemas.key_schema(namespace, relation, codecs, names, key_indexes, aliases)
        if key is not None and self._router.route(relation.namespace, relation.name)[1]:
            key = schemas.with_table_field(key)  # several tables on one topic: the key names its table
        value = schemas.envelope_schema(namespace, schemas.row_schema(namespace, relation, codecs, names, aliases))
        return _TableSchemas(codecs, key_indexes, key, value)

    def subject(self, topic: str, schema: Schema, *, key: bool) -> str:
        """The registry subject of a key or value schema on ``topic`` (``encode.subjects``)."""
        return subject_name(self._subject_strategy, topic, schema, key=key)

    def subjects(self, relation: Relation) -> tuple[str | None, str]:
        """The key subject (``None`` for a null key) and the value subject of ``relation``, as ``run``
        registers them (for ``pgbridge schemas``)."""
        tables = self._schemas(relation)
        topic = self.topic_for(relation)
        return (None if tables.key is None else self.subject(topic, tables.key, key=True),
                self.subject(topic, tables.value, key=False))

    def fixed_schemas(self) -> list[tuple[str, str, Schema]]:
        """(topic, subject, schema) of the records not of a table: transaction boundaries and logical
        messages, keys first (for ``pgbridge schemas --subjects``)."""
        out: list[tuple[str, str, Schema]] = []
        for topic, key_name, value_name in ((self.transactions_topic, "transaction_key", "transaction_boundary"),
                                            (self.messages_topic, "message_key", "message")):
            for name, is_key in ((key_name, True), (value_name, False)):
                schema = self._fixed[name].schema
                out.append((topic, self.subject(topic, schema, key=is_key), schema))
        return out

    def _header(self, subject: str, schema: Schema) -> bytes:
        # By the whole text, not the fingerprint: aliases are not in the Parsing Canonical Form, and a
        # schema that differs only by them must be registered (announced) with them.
        cache_key = (subject, schema_json(schema))
        header = self._headers.get(cache_key)
        if header is None:
            header = self._registrar.header_for(subject, schema)
            self._headers[cache_key] = header
        return header

    def _compile(self, relation: Relation) -> TablePlan:
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
        key_header = (self._header(self.subject(topic, key, key=True), key) + (write_string(table) if table_key else b"")
                      if key else b"")
        value_header = self._header(self.subject(topic, value, key=False), value)
        plan = TablePlan(relation=relation, topic=topic, database=self._database, codecs=codecs,
                         key_indexes=key_indexes, key_schema=key, value_schema=value,
                         key_header=key_header, value_header=value_header,
                         toast_policy=self._toast.for_table(table), native=self._native)
        plan.kernel_only = plan.kernel_change is not None and plan.toast_policy == TOAST_MARKER
        return plan

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

    def _plan(self, relation: Relation) -> TablePlan:
        """The plan of a Relation version: by identity first (the relation cache hands out the
        same object), then by content without ``xid`` (a streamed transaction re-sends an equal
        Relation carrying its xid; that must not compile or register again)."""
        last = self._last
        if last is not None and relation is last[0]:  # the row path asks twice a row (table_of, encode_row)
            return last[1]
        entry = self._by_identity.get(id(relation))
        if entry is not None and entry[0] is relation:
            self._last = entry
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
        self._by_identity[id(relation)] = self._last = (relation, plan)  # holds the object: its id stays unique
        return plan

    # -- row changes -----------------------------------------------------------------------------

    def context_bytes(self, ctx: EventContext) -> tuple[bytes, bytes, bytes]:
        """(commit_lsn + xid + ts_us, origin, transaction id) bodies; cached per transaction: a
        context's transaction fields never change in place (``EventContext``), so the same
        context object has the same bytes."""
        if ctx is self._context_of:
            return self._context_bytes
        self._context_of = ctx
        key = (ctx.commit_lsn, ctx.xid, ctx.ts_us, ctx.origin)
        if key != self._context_key:
            origin = NULL_BRANCH if ctx.origin is None else VALUE_BRANCH + write_string(ctx.origin)
            self._context_bytes = (write_long(ctx.commit_lsn) + write_long(ctx.xid) + write_long(ctx.ts_us),
                                   origin, write_string(f"{ctx.xid}:{ctx.commit_lsn}"))
            self._context_key = key
        return self._context_bytes

    def _envelope(self, plan: TablePlan, op: bytes, before: TupleData | None, after: TupleData | None,
                  lsn: int, ctx: EventContext, snapshot: bool, in_transaction: bool) -> bytes:
        return plan.envelope(op, before, after, lsn, self.context_bytes(ctx), ctx.total_order, ctx.collection_order,
                             snapshot, in_transaction)

    def encode_row(self, change: RowChange, ctx: EventContext) -> list[OutRecord]:
        """Records of an insert, update or delete, in the order they must be produced.

        A table whose unchanged TOAST values are published as they come (the marker policy) has
        its changes written by the compiled kernel in one call (``TablePlan.kernel_change``);
        anything that kernel leaves (or any other policy) takes the Python path below.
        """
        last, relation = self._last, change.relation
        plan = last[1] if last is not None and relation is last[0] else self._plan(relation)  # ``_plan``'s first check
        if plan.kernel_only:  # the TOAST marker policy: the cache never holds this table's rows
            context = self._context_bytes if ctx is self._context_of else self.context_bytes(ctx)
            written = plan.kernel_change(change, context, ctx.total_order, ctx.collection_order,  # type: ignore[misc]
                                         ctx.snapshot)
            if written is not None:
                return written
        op = change.op
        if op == "c":
            new = _require(change.new, "insert", plan)
            value = self._envelope(plan, _OP_CREATE, None, new, change.lsn, ctx, ctx.snapshot, True)
            key = plan.required_key(new, None, "insert")
            if plan.toast_policy == TOAST_CACHE and key is not None:
                self._toast_cache.remember(plan, key, new)
            return [OutRecord(plan.topic, key, value)]
        if op == "u":
            new = _require(change.new, "update", plan)
            old = change.old if change.old_kind is not None else None
            key = plan.required_key(new, old, "update")
            if plan.toast_policy != TOAST_MARKER:
                new = self._toast_cache.fill(plan, key, new, old)
            value = self._envelope(plan, _OP_UPDATE, old, new, change.lsn, ctx, ctx.snapshot, True)
            record = OutRecord(plan.topic, key, value)
            if old is not None and key is not None:
                # Without every old key column (a replica identity narrower than the key) a change
                # of key cannot be seen; with them, a different old key is tombstoned first.
                old_key = plan.key_of(old, None)
                if old_key is not None and old_key != key:
                    self._toast_cache.forget(plan, old_key)
                    return [OutRecord(plan.topic, old_key, None), record]
            return [record]
        if op == "d":
            old = _require(change.old, "delete", plan)
            key = plan.required_key(old, None, "delete")
            if plan.toast_policy == TOAST_CACHE and key is not None:
                self._toast_cache.forget(plan, key)
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
            self._toast_cache.remember(plan, key, row)
        return OutRecord(plan.topic, key, value)

    def encode_truncate(self, change: TruncateChange, relation: Relation, ctx: EventContext) -> OutRecord:
        """The truncate event of one of ``change.relations``: null key, ``before``/``after`` null."""
        plan = self._plan(relation)
        value = self._envelope(plan, _OP_TRUNCATE, None, None, change.lsn, ctx, ctx.snapshot, True)
        if plan.toast_policy == TOAST_CACHE:
            self._toast_cache.forget_topic(plan.topic)
        return OutRecord(plan.topic, None, value)

    # -- messages and transaction boundaries -----------------------------------------------------

    def _fixed_schema(self, name: str) -> _FixedRecord:
        fixed = self._fixed.get(name)
        if fixed is None:
            fixed = self._fixed[name] = _FixedRecord(schemas.standalone_schema(name))
        return fixed

    def fixed_record(self, topic: str, key_name: str, key: Mapping[str, Any], value_name: str,
                     value: Mapping[str, Any]) -> OutRecord:
        """A record of fixed-layout schemas (``schemas/{key_name}.avsc``, ``schemas/{value_name}.avsc``)."""
        key_record, value_record = self._fixed_schema(key_name), self._fixed_schema(value_name)
        # A fixed record's schema never changes: its headers are looked up once per topic, not
        # fingerprinted per record (a boundary pair per transaction is on the hot path).
        headers = self._fixed_headers.get((topic, key_name, value_name))
        if headers is None:
            headers = self._fixed_headers[(topic, key_name, value_name)] = (
                self._header(self.subject(topic, key_record.schema, key=True), key_record.schema),
                self._header(self.subject(topic, value_record.schema, key=False), value_record.schema))
        key_header, value_header = headers
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
        return self.fixed_record(self.messages_topic, "message_key", {"prefix": prefix}, "message", value)

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
        return self.fixed_record(self.transactions_topic, "transaction_key", {"id": transaction_id},
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


def _require(row: TupleData | None, op: str, plan: TablePlan) -> TupleData:
    if row is None:
        raise EncodeError(f"{op} on {plan.table} arrived without its row image",
                          hint="the assembled change is malformed; report this as a pgbridge bug")
    return row

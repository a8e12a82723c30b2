"""Composite types as Avro records of their attributes, ``pgbridge.types.<schema>.<type>``.

A composite's attributes come from the catalog (``source/type_catalog.py``); each gets its own
codec. Text follows ``record_in``/``record_out``, binary ``record_send``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

from pgbridge.encode.naming import avro_name, define_named_types_once, distinct_avro_names
from pgbridge.encode.types.base import BINARY_HINT, EncodeError, TypeCodec, Unrepresentable, unpack_int4
from pgbridge.encode.types.ranges import read_token
from pgbridge.encode.wire import NULL_BRANCH, VALUE_BRANCH
from pgbridge.source.type_catalog import CompositeAttribute, PgTypeInfo

_RECORD_QUOTE_TRIGGERS: Final = frozenset('"\\(),') | frozenset(" \t\n\v\f\r")  # C isspace


def parse_record_literal(text: bytes) -> list[bytes | None]:
    r"""``record_out`` text ``(1,"a b",,"")`` → the fields' texts, ``None`` for NULL.

    Follows ``record_in``: a field is NULL only when it is empty and unquoted; inside double quotes
    ``""`` is a quote and ``\x`` is ``x``, outside them ``\x`` is ``x``; nothing is trimmed. Raises
    ``ValueError`` on a malformed literal. A one-field record holding NULL and a record of no
    fields both print ``()``: this returns ``[None]``, the caller knows how many fields it has.
    """
    if text[:1] != b"(":
        raise ValueError("record literal must start with '('")
    fields: list[bytes | None] = []
    pos, n = 1, len(text)
    while True:
        value, pos = read_token(text, pos, b",)")
        if pos >= n:
            raise ValueError("unterminated record literal")
        fields.append(value)
        pos += 1
        if text[pos - 1] == 0x29:  # ')'
            break
    if pos != n:
        raise ValueError("junk after record literal")
    return fields


def quote_record_field(text: str) -> str:
    """A field as ``record_out`` writes it: double-quoted (``"`` and ``\\`` doubled) when empty or
    when it holds a quote, backslash, parenthesis, comma or white space."""
    if text and not any(c in _RECORD_QUOTE_TRIGGERS for c in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '""') + '"'


def record_literal(fields: list[str | None]) -> str:
    """The ``record_out`` text of the fields' texts (``None`` for NULL)."""
    return "(" + ",".join("" if f is None else quote_record_field(f) for f in fields) + ")"


_unpack_record_field = struct.Struct("!Ii").unpack_from


def _record_fields_of_binary(raw: bytes) -> list[tuple[int, bytes | None]]:
    """``record_send``: field count, then per live attribute its type OID and length-prefixed value."""
    (count,) = unpack_int4(raw[:4])
    pos = 4
    out: list[tuple[int, bytes | None]] = []
    for _ in range(count):
        oid, size = _unpack_record_field(raw, pos)
        pos += 8
        if size < 0:
            out.append((oid, None))
        else:
            out.append((oid, raw[pos:pos + size]))
            pos += size
    return out


CompositeMember = tuple[CompositeAttribute, TypeCodec]
Printers = Callable[[int], "Callable[[bytes], str] | None"]
"""``oid → text_of_binary`` of a builtin type (``None`` when it has none or is not builtin)."""


def _composite_avro(info: PgTypeInfo, members: list[CompositeMember]) -> dict[str, Any]:
    """A record ``pgbridge.types.<schema>.<type>`` of nullable fields in attribute order; renamed
    fields keep the attribute's name in ``pg_name``, like row fields do."""
    fields = []
    for field_name, (attribute, codec) in zip(distinct_avro_names([a.name for a, _ in members]), members,
                                              strict=True):
        avro_field: dict[str, Any] = {"name": field_name, "type": ["null", codec.avro], "default": None,
                                      "pg_type": codec.pg_type}
        if field_name != attribute.name:
            avro_field["pg_name"] = attribute.name
        avro_field.update(codec.attributes)
        fields.append(avro_field)
    record = {"type": "record", "name": avro_name(info.name),
              "namespace": f"pgbridge.types.{avro_name(info.namespace)}", "fields": fields}
    result: dict[str, Any] = define_named_types_once(record, set())
    return result


def composite_codec(name: str, info: PgTypeInfo, members: list[CompositeMember],
                    builtin_printer: Printers) -> TypeCodec:
    """A composite as an Avro record of its attributes.

    Always a companion: a value the record cannot hold exactly goes whole, as its ``record_out``
    literal, to the envelope's ``unrepresentable`` map (the field is null). That covers an attribute value its field cannot hold
    (``infinity`` in a date attribute) and a value whose shape no longer matches the attributes
    read from the catalog (``ALTER TYPE ... ADD/DROP ATTRIBUTE`` reaches the encoder only with the
    next Relation message, which Postgres does not send for it). Such a value's fields are printed
    by the ``builtin_printer`` of their type OID, as ``record_send`` names it.
    """
    count = len(members)
    oids = [attribute.type_oid for attribute, _ in members]
    texts = [codec.from_text for _, codec in members]
    binaries = [codec.from_binary for _, codec in members]
    texts_of_binary = [codec.text_of_binary for _, codec in members]
    writers = [codec.write for _, codec in members]

    def from_text(raw: bytes) -> tuple[Any, ...]:
        try:
            fields = parse_record_literal(raw)
            if len(fields) != count:
                raise Unrepresentable()
            return tuple(None if f is None else convert(f) for f, convert in zip(fields, texts, strict=True))
        except (Unrepresentable, ValueError):
            raise Unrepresentable() from None

    def field_text(oid: int, value: bytes, known: Callable[[bytes], str] | None) -> str:
        convert = known
        if convert is None:
            convert = builtin_printer(oid)
        if convert is None:
            raise Unrepresentable()
        return convert(value)

    def text_of_binary(raw: bytes) -> str:
        fields = _record_fields_of_binary(raw)
        matching = [oid for oid, _ in fields] == oids
        return record_literal([None if value is None else
                               field_text(oid, value, texts_of_binary[i] if matching else None)
                               for i, (oid, value) in enumerate(fields)])

    def literal_or_none(raw: bytes) -> str | None:
        try:
            return text_of_binary(raw)
        except Unrepresentable:
            return None

    def from_binary(raw: bytes) -> tuple[Any, ...]:
        fields = _record_fields_of_binary(raw)
        if [oid for oid, _ in fields] != oids:
            raise Unrepresentable(literal_or_none(raw))
        try:
            return tuple(None if value is None else convert(value)  # type: ignore[misc]
                         for (_, value), convert in zip(fields, binaries, strict=True))
        except Unrepresentable:
            raise Unrepresentable(literal_or_none(raw)) from None

    def write(value: tuple[Any, ...]) -> bytes:
        return b"".join(NULL_BRANCH if v is None else VALUE_BRANCH + w(v) for v, w in zip(value, writers, strict=True))

    def text_of_binary_or_raise(raw: bytes) -> str:
        text = literal_or_none(raw)
        if text is None:
            raise EncodeError(f"a binary value of type {name} has an attribute pgbridge cannot print as text",
                              hint=BINARY_HINT)
        return text

    return TypeCodec(name, _composite_avro(info, members), from_text,
                     from_binary if all(b is not None for b in binaries) else None, write, companion=True,
                     text_of_binary=text_of_binary_or_raise if all(t is not None for t in texts_of_binary) else None)

"""Postgres types → Avro: one table row per builtin type OID, the catalog for the rest.

One module per type family, as psycopg lays out ``psycopg/types/``: ``base`` (``TypeCodec``, errors,
type modifiers), ``scalars``, ``numeric``, ``datetime``, ``interval``, ``arrays``, ``ranges``,
``composite``, ``printers`` and ``textsearch`` (binary forms of types published as text),
``extensions`` (catalog types), and ``registry`` (the builtin table and ``codec_for``).

Each column gets a ``TypeCodec``: the Avro schema fragment of its (non-null) value, a converter
from Postgres's text output to the Avro datum, one from the binary (``send``) form, and the
writer of the datum's Avro binary body. A datum is the value as Avro stores it, not a rich
Python object: an ``int`` of microseconds for timestamps, of days for dates, the *unscaled*
``int`` for decimals, a ``list`` for arrays, a ``tuple`` for records. Converting straight to that
form keeps the hot loop free of ``datetime``/``Decimal`` objects that would only be taken apart.

A value must never be silently wrong, and one odd value must not stop the stream. Some types
have values their natural Avro type cannot hold: ``±infinity`` dates and timestamps, ``NaN`` and
``±Infinity`` in a constrained ``numeric``, arrays with several dimensions or a lower bound other
than 1, ranges with an infinite bound, ``infinity`` intervals (Postgres 17+). Such a type's codec
is marked ``companion``: its row field keeps the natural type (so Spark sees a real ``date``,
``timestamp`` or ``decimal`` column) and the row record keeps exactly one field per column; for
a value the natural type cannot hold the field is null and the envelope's ``unrepresentable``
map carries a Postgres literal of the value (its text output; ``'infinity'``, ``'NaN'``,
``'{{1,2},{3,4}}'``) under ``before.<column>`` / ``after.<column>``. As a key field such a type is
``["null", T, "string"]``, the text in the string branch. Converters signal this with
``Unrepresentable``. The full table with the reasons is ``docs/types.md``.

Other choices, in short:

* Unconstrained ``numeric`` is a ``string`` with Postgres's exact text: its values carry any
  scale (up to 16383 fraction digits) and ``NaN``/``±Infinity``, so no single decimal scale holds
  them without rounding. ``numeric(p,s)`` is an exact ``decimal(p,s)`` (negative scales and
  scales above the precision, Postgres 15+, get ``scale = max(s, 0)`` and room for every value).
* ``interval`` is a record ``(months, days, microseconds)``: Postgres's own three fields, which
  no single duration can express (a month has no fixed length). Ranges are records ``(lower,
  upper, lower_inclusive, upper_inclusive, empty)`` with a null bound for an unbounded side;
  multiranges are arrays of those records.
* Text forms are parsed as Postgres prints them with ``DateStyle=ISO``, ``IntervalStyle=postgres``,
  ``bytea_output`` hex or escape and ``client_encoding=UTF8`` (see ``source/connection.py``).
* Domains encode as their base type (named after the domain); arrays of catalog types as arrays
  of their element's codec; composite types as records of their attributes (a companion: a value
  the record cannot hold goes whole to the ``unrepresentable`` map); enums, ``money``, geometric, network and
  text-search types, and any unknown OID are ``string`` with Postgres's text: always exact and
  decodable.
* Binary (pgoutput ``binary 'true'``, a session-wide option) sends every type that has a send
  function in binary. Every type in the table that has a natural Avro type has a binary decoder,
  as have text-like catalog types (enums, ``citext``, ``hstore``); so do the network, bit-string,
  geometric, text-search, ``pg_lsn``, ``tid``, vector, snapshot and ``jsonpath`` types, whose
  converters rebuild exactly the text their output function prints. A type pgbridge cannot read
  in binary (``money``: its text depends on ``lc_monetary``; ``reg*``: a catalog name; unknown
  extension types; composites with such an attribute) stops with an ``EncodeError`` naming the
  column: turn ``postgres.binary`` off for such tables (``pgbridge check`` reports them up front).
"""

from __future__ import annotations

from pgbridge.encode.types.arrays import parse_array_literal, quote_array_element, split_array_bounds
from pgbridge.encode.types.base import (
    BINARY_HINT,
    Converter,
    EncodeError,
    FieldEncoder,
    KernelBinary,
    KernelText,
    TypeCodec,
    Unrepresentable,
    Writer,
    length_typmod,
    numeric_typmod,
    string_raw_to_avro,
    text_codec,
    text_from_utf8,
)
from pgbridge.encode.types.composite import parse_record_literal, quote_record_field, record_literal
from pgbridge.encode.types.datetime import (
    civil_to_unix_days,
    date_from_text,
    format_date,
    format_time,
    format_timestamp,
    time_from_text,
    timestamp_from_text,
    timestamptz_from_text,
    unix_days_to_civil,
)
from pgbridge.encode.types.interval import INTERVAL_AVRO, interval_from_text
from pgbridge.encode.types.numeric import NumericPolicy, decimal_unscaled, numeric_text_from_binary
from pgbridge.encode.types.printers import float4_text, float8_text
from pgbridge.encode.types.ranges import RangeDatum, parse_range_literal, split_multirange_literal
from pgbridge.encode.types.registry import (
    ARRAY_ELEMENTS,
    BUILTIN_TYPES,
    Builder,
    BuiltinType,
    TypeCatalog,
    TypeNames,
    codec_for,
)
from pgbridge.encode.types.scalars import bytea_from_text

__all__ = [
    "ARRAY_ELEMENTS",
    "BINARY_HINT",
    "BUILTIN_TYPES",
    "INTERVAL_AVRO",
    "Builder",
    "BuiltinType",
    "Converter",
    "EncodeError",
    "FieldEncoder",
    "KernelBinary",
    "KernelText",
    "NumericPolicy",
    "RangeDatum",
    "TypeCatalog",
    "TypeCodec",
    "TypeNames",
    "Unrepresentable",
    "Writer",
    "bytea_from_text",
    "civil_to_unix_days",
    "codec_for",
    "date_from_text",
    "decimal_unscaled",
    "float4_text",
    "float8_text",
    "format_date",
    "format_time",
    "format_timestamp",
    "interval_from_text",
    "length_typmod",
    "numeric_text_from_binary",
    "numeric_typmod",
    "parse_array_literal",
    "parse_range_literal",
    "parse_record_literal",
    "quote_array_element",
    "quote_record_field",
    "record_literal",
    "split_array_bounds",
    "split_multirange_literal",
    "string_raw_to_avro",
    "text_codec",
    "text_from_utf8",
    "time_from_text",
    "timestamp_from_text",
    "timestamptz_from_text",
    "unix_days_to_civil",
]

"""The codec of one Postgres type, its errors and type modifiers: what every type family builds on.

A ``TypeCodec`` says how one column's values become Avro: the schema fragment, converters from the
text and binary (``send``) forms to the Avro datum, the datum's writer, and which conversion of the
compiled kernel (``encode/_native.pyx``), if any, does the same job (``kernel``/``kernel_binary``).
The families (``numeric``, ``datetime``, ``interval``, ``arrays``, ``ranges``, ``composite``, the
binary printers) build codecs; ``registry`` picks one per column.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from pgbridge.encode.wire import VALUE_BRANCH, AvroSchema, write_length, write_long, write_string
from pgbridge.errors import FatalError

# --- errors ---------------------------------------------------------------------------------------


class EncodeError(FatalError):
    """A value or relation that cannot be written faithfully in the contract's Avro form.

    Raised instead of writing a value that would misrepresent the row; the encoder adds the table
    and column. With the envelope's ``unrepresentable`` map this is left for malformed input and
    for binary values of types pgbridge cannot read in binary.
    """


class Unrepresentable(Exception):
    """The value is valid but its codec's Avro type cannot hold it: its field is null and its text
    goes to the envelope's ``unrepresentable`` map.

    ``text`` is a Postgres literal of the value when the converter knows one (always in binary
    mode when it can be built); in text mode the encoder uses the raw text itself. The row field
    encoders of ``TypeCodec`` raise it again with ``text`` always set, for the row writer to record.
    """

    def __init__(self, text: str | None = None) -> None:
        super().__init__(text)
        self.text = text


BINARY_HINT: Final = "set postgres.binary to false: pgbridge reads this type only in text format"

# --- type modifiers -------------------------------------------------------------------------------

INT32_MIN: Final = -(1 << 31)
INT32_MAX: Final = (1 << 31) - 1
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
_VARHDRSZ: Final = 4


def numeric_typmod(typmod: int) -> tuple[int, int] | None:
    """``(precision, scale)`` of ``numeric(p,s)``, or ``None`` for unconstrained numeric.

    The modifier is ``((p << 16) | (s & 0x7FF)) + 4``; the scale is an 11-bit signed field since
    Postgres 15 (negative scales), which reads the same for the non-negative scales of older ones.
    """
    if typmod < _VARHDRSZ:
        return None
    t = typmod - _VARHDRSZ
    return (t >> 16) & 0xFFFF, ((t & 0x7FF) ^ 0x400) - 0x400


def length_typmod(typmod: int) -> int | None:
    """Declared length of ``varchar(n)``/``char(n)`` (the modifier is ``n + 4``), else ``None``."""
    return typmod - _VARHDRSZ if typmod >= _VARHDRSZ else None


# --- codecs ---------------------------------------------------------------------------------------

Converter = Callable[[bytes], Any]
Writer = Callable[[Any], bytes]
FieldEncoder = Callable[[bytes], bytes]
KernelText = Literal["string", "long", "bool", "double", "float", "decimal", "timestamptz", "timestamp", "date"]
"""The compiled kernel's conversions of text values (``_native.CODES``)."""
KernelBinary = Literal["binary_string", "binary_int2", "binary_int4", "binary_int8", "binary_oid", "binary_float4",
                       "binary_float8", "binary_bool", "binary_timestamp", "binary_date", "binary_decimal"]
"""The compiled kernel's conversions of binary (send format) values (``_native.CODES``)."""
KEY_TEXT_BRANCH: Final = b"\x04"
"""Union branch 2 (``"string"``) of a companion codec's key field ``["null", T, "string"]``."""


@dataclass(frozen=True, slots=True)
class TypeCodec:
    """How one Postgres type (with its modifier) becomes Avro.

    ``avro`` is the non-null fragment; row fields wrap it as ``["null", avro]``. ``text_to_avro``
    is an optional fused fast path equal to ``write(from_text(raw))``. ``companion`` codecs may
    raise ``Unrepresentable``: their row field is then null and the value's text goes to the
    envelope's ``unrepresentable`` map; as key fields they are ``["null", avro, "string"]`` with
    the text in the string branch (``key_avro``). ``text_of_binary`` turns a binary value into a
    Postgres literal (for unrepresentable values and for arrays' element texts).

    ``kernel`` and ``kernel_binary`` name the compiled kernel's conversion that writes exactly what
    this codec's field encoders write, declared where the codec is built; ``None`` leaves the column
    to the Python field encoder. A ``"decimal"`` kernel takes its scale from the ``avro`` fragment
    and checks no precision: only ``numeric(p,s)``, whose values Postgres keeps within the precision,
    declares it. Codecs derived from another (``renamed``) keep the declaration, as they keep the
    converters; codecs built around another (arrays, ranges, composites) declare none.
    """

    pg_type: str
    avro: AvroSchema
    from_text: Converter
    from_binary: Converter | None
    write: Writer
    attributes: Mapping[str, Any] = field(default_factory=dict)
    text_to_avro: Callable[[bytes], bytes] | None = None
    companion: bool = False
    text_of_binary: Callable[[bytes], str] | None = None
    kernel: KernelText | None = None
    kernel_binary: KernelBinary | None = None

    def __post_init__(self) -> None:
        if self.kernel_binary is not None and self.from_binary is None:
            raise ValueError(f"codec of {self.pg_type} declares a binary kernel conversion but reads no binary")

    def renamed(self, pg_type: str, **attributes: Any) -> TypeCodec:
        return replace(self, pg_type=pg_type, attributes={**self.attributes, **attributes})

    def text_encoder(self) -> Callable[[bytes], bytes]:
        """Raw text bytes → Avro body of the value (may raise ``Unrepresentable``)."""
        if self.text_to_avro is not None:
            return self.text_to_avro
        convert, write = self.from_text, self.write
        return lambda raw: write(convert(raw))

    def binary_encoder(self) -> Callable[[bytes], bytes]:
        """Raw binary (send) bytes → Avro body; raises ``EncodeError`` if the type has none."""
        convert = self.from_binary
        if convert is None:
            pg_type = self.pg_type

            def unsupported(raw: bytes) -> bytes:
                raise EncodeError(f"binary format of type {pg_type} is not supported", hint=BINARY_HINT)

            return unsupported
        write = self.write
        return lambda raw: write(convert(raw))

    @property
    def key_avro(self) -> AvroSchema:
        """The key field's type: the bare ``avro``, or for a companion codec ``["null", avro,
        "string"]``, so an unrepresentable key value keeps its exact text and distinct rows keep
        distinct Kafka keys (a null would collapse every ``infinity`` key onto one)."""
        if not self.companion:
            return self.avro
        if self.avro == "string":
            raise ValueError(f"codec of {self.pg_type} is a companion but already a string")
        return ["null", self.avro, "string"]

    def field_text_encoder(self) -> FieldEncoder:
        """Raw text → the bytes of the nullable row field.

        The hot path of the encoder: each is one call per column, fused where a type allows. A
        companion codec's encoder raises ``Unrepresentable`` carrying the raw text for a value its
        field cannot hold; the row writer writes the null and records the text."""
        convert, write = self.from_text, self.write
        if not self.companion:
            fused = _FUSED_TEXT_FIELDS.get(self.text_to_avro) if self.text_to_avro is not None else None
            if fused is not None:
                return fused
            body = self.text_to_avro
            if body is not None:
                return lambda raw: VALUE_BRANCH + body(raw)
            return lambda raw: VALUE_BRANCH + write(convert(raw))

        def encode(raw: bytes) -> bytes:
            try:
                return VALUE_BRANCH + write(convert(raw))
            except Unrepresentable:
                raise Unrepresentable(text_from_utf8(raw)) from None

        return encode

    def field_binary_encoder(self) -> FieldEncoder:
        """Raw binary → the bytes of the nullable row field; as ``field_text_encoder``, with the
        text rebuilt from the binary value (``EncodeError`` when pgbridge cannot print it)."""
        body = self.binary_encoder()
        if not self.companion:
            return lambda raw: VALUE_BRANCH + body(raw)
        pg_type = self.pg_type

        def encode(raw: bytes) -> bytes:
            try:
                return VALUE_BRANCH + body(raw)
            except Unrepresentable as exc:
                if exc.text is None:
                    raise EncodeError(f"a binary value of type {pg_type} has no Avro form and pgbridge "
                                      "cannot print it as text", hint=BINARY_HINT) from None
                raise Unrepresentable(exc.text) from None

        return encode

    def key_text_encoder(self) -> FieldEncoder:
        """Raw text → the bytes of the key field (``key_avro``): the bare value, or a companion's
        union branch with the value or, for an unrepresentable value, its text."""
        if not self.companion:
            return self.text_encoder()
        return _key_encoder(self.field_text_encoder())

    def key_binary_encoder(self) -> FieldEncoder:
        """Raw binary → the bytes of the key field, as ``key_text_encoder``."""
        if not self.companion:
            return self.binary_encoder()
        return _key_encoder(self.field_binary_encoder())


def _key_encoder(field_encoder: FieldEncoder) -> FieldEncoder:
    def encode(raw: bytes) -> bytes:
        try:
            return field_encoder(raw)
        except Unrepresentable as exc:
            assert exc.text is not None, "row field encoders always name the text"
            return KEY_TEXT_BRANCH + write_string(exc.text)

    return encode


# --- converters shared by the families ------------------------------------------------------------

unpack_int2 = struct.Struct("!h").unpack
unpack_int4 = struct.Struct("!i").unpack
unpack_uint4 = struct.Struct("!I").unpack
unpack_int8 = struct.Struct("!q").unpack
unpack_float4 = struct.Struct("!f").unpack
unpack_float8 = struct.Struct("!d").unpack


def text_from_utf8(raw: bytes) -> str:
    return raw.decode()


def string_raw_to_avro(raw: bytes) -> bytes:
    """Text output is already UTF-8 (client_encoding=UTF8): validate and write it unchanged."""
    if not raw.isascii():
        raw.decode()  # raises UnicodeDecodeError on bytes that are not UTF-8
    return write_length(len(raw)) + raw


def long_text_to_avro(raw: bytes) -> bytes:
    return write_long(int(raw))


def _string_text_field(raw: bytes) -> bytes:
    if not raw.isascii():
        raw.decode()
    return VALUE_BRANCH + write_length(len(raw)) + raw


def _long_text_field(raw: bytes) -> bytes:
    return VALUE_BRANCH + write_long(int(raw))


_FUSED_TEXT_FIELDS: Final[Mapping[Callable[[bytes], bytes], FieldEncoder]] = {
    string_raw_to_avro: _string_text_field, long_text_to_avro: _long_text_field}


def text_codec(name: str, text_of_binary: Callable[[bytes], str] | None = None) -> TypeCodec:
    """The sound fallback: Postgres's own text representation, as an Avro string.

    ``text_of_binary`` rebuilds that text from the send form when pgbridge can read it (else binary
    values of the type stop with an ``EncodeError``)."""
    return TypeCodec(name, "string", text_from_utf8, text_of_binary, write_string, text_to_avro=string_raw_to_avro,
                     text_of_binary=text_of_binary, kernel="string")


def utf8_text_codec(name: str) -> TypeCodec:
    """The text codec of a type whose send form is its text in the client encoding (``text``, enums,
    ``citext``): the kernel copies such binary values as they are."""
    return replace(text_codec(name, text_from_utf8), kernel_binary="binary_string")

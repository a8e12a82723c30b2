# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled row writer: a row of pgoutput values (text or binary) → the Avro bytes of the envelope.

The pure-Python encoder (``plan.TablePlan.write_row`` and ``TablePlan.envelope``) is the
reference and the fallback; this module must write exactly the same bytes (``tests/unit/encode/
test_native.py`` compares them over generated values). Each column carries a small code naming a
conversion done here in C (``plan.native_code`` chooses it from the codec); anything the fast
parser does not recognise as Postgres's canonical output (a sign it never prints, a year outside
1000-9999, ``NaN``, ``BC``...) goes to the column's Python field encoder instead, so the C side only
ever handles values whose result it can compute exactly.

Binary (``postgres.binary``) values of integers, floats, bool, ``numeric(p,s)``, timestamps, dates
and text-like types are converted here too (``plan.native_binary_code``). ``encode_envelope`` returns ``None`` when a row holds an
unchanged-TOAST column: the Python path handles those (they need per-column bookkeeping). A value
its field cannot hold (``infinity``, ``NaN``, ...) makes the column's Python field encoder raise
``Unrepresentable``; it leaves this module and the caller writes the whole envelope in Python,
which writes the null field and the value's text in the envelope's ``unrepresentable`` map. The
kernel itself always writes that map as null.

``RowWriter.change`` (a plan's ``kernel_change``) is the row path's one call per change: the
envelope, the key(s) and the ``OutRecord``s of an insert, update or delete, laid out as
``ChangeEncoder.encode_row``'s Python path lays them out, or ``None`` for that path.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_SET_ITEM
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy

cdef extern from "Python.h":
    double PyOS_string_to_double(const char *s, char **endptr, object overflow_exception) except? -1.0
    # Raw forms: the heap buffer is a bytes object held by pointer (``Buf.heap``), resized in place.
    PyObject *new_bytes "PyBytes_FromStringAndSize" (const char *v, Py_ssize_t size) except NULL
    char *bytes_data "PyBytes_AS_STRING" (PyObject *b)
    int _PyBytes_Resize(PyObject **b, Py_ssize_t size) except -1
    PyObject *PyType_GenericAlloc(PyTypeObject *type, Py_ssize_t nitems) except NULL

# Codes (``plan.native_code``); 0x80 on a code means a bare value (a key field) with no union branch.
cdef enum:
    C_FALLBACK = 0
    C_STRING = 1
    C_LONG = 2
    C_DECIMAL = 3
    C_TIMESTAMPTZ = 4
    C_TIMESTAMP = 5
    C_DATE = 6
    C_BOOL = 7
    C_DOUBLE = 8
    C_FLOAT = 9
    # binary (send format) values
    B_INT2 = 20
    B_INT4 = 21
    B_INT8 = 22
    B_OID = 23
    B_FLOAT4 = 24
    B_FLOAT8 = 25
    B_BOOL = 26
    B_TIMESTAMP = 27
    B_DATE = 28
    B_STRING = 29
    B_DECIMAL = 30
    BARE = 0x80
    STACK = 1024
    GROW_MAX = 1 << 20

CODES = {"fallback": C_FALLBACK, "string": C_STRING, "long": C_LONG, "decimal": C_DECIMAL,
         "timestamptz": C_TIMESTAMPTZ, "timestamp": C_TIMESTAMP, "date": C_DATE, "bool": C_BOOL,
         "double": C_DOUBLE, "float": C_FLOAT, "bare": BARE,
         "binary_int2": B_INT2, "binary_int4": B_INT4, "binary_int8": B_INT8, "binary_oid": B_OID,
         "binary_float4": B_FLOAT4, "binary_float8": B_FLOAT8, "binary_bool": B_BOOL,
         "binary_timestamp": B_TIMESTAMP, "binary_date": B_DATE, "binary_string": B_STRING,
         "binary_decimal": B_DECIMAL}


cdef union union_bits:
    double d
    uint64_t u64
    float f
    uint32_t u32

cdef struct Buf:
    char *data
    Py_ssize_t length
    Py_ssize_t capacity
    PyObject *heap  # NULL while ``data`` is the caller's stack; then an owned bytes object holding ``data``


cdef inline int reserve(Buf *b, Py_ssize_t extra) except -1:
    """Room for ``extra`` more bytes. Past the stack the buffer is a bytes object grown in place, so
    the finished record is that object (``buf_bytes``): a row holding a huge value (issue 16: a
    500 MB text) is never copied from a buffer into the result, which would hold it twice more."""
    cdef Py_ssize_t need = b.length + extra
    cdef Py_ssize_t capacity
    if need <= b.capacity:
        return 0
    capacity = b.capacity * 2
    if capacity > need + GROW_MAX:
        capacity = need + GROW_MAX  # a huge row's buffer grows by at most 1 MiB past what it needs
    if capacity < need:
        capacity = need
    if b.heap != NULL:
        _PyBytes_Resize(&b.heap, capacity)  # on failure it frees the object and sets b.heap to NULL
    else:
        b.heap = new_bytes(NULL, capacity)
        memcpy(bytes_data(b.heap), b.data, b.length)
    b.data = bytes_data(b.heap)
    b.capacity = capacity
    return 0


cdef inline object buf_bytes(Buf *b):
    """What was written, as bytes: the heap buffer itself cut to length, or a copy of the stack."""
    if b.heap == NULL:
        return PyBytes_FromStringAndSize(b.data, b.length)
    _PyBytes_Resize(&b.heap, b.length)
    result = <object>b.heap
    b.heap = NULL
    Py_DECREF(result)  # the buffer's own reference: ``result`` is the only one left
    return result


cdef inline void buf_free(Buf *b):
    Py_XDECREF(b.heap)
    b.heap = NULL


cdef inline void put_byte(Buf *b, char c):
    b.data[b.length] = c
    b.length += 1


cdef inline void put_varint(Buf *b, uint64_t z):
    while z >= 0x80:
        b.data[b.length] = <char>((z & 0x7F) | 0x80)
        b.length += 1
        z >>= 7
    b.data[b.length] = <char>z
    b.length += 1


cdef inline void put_long(Buf *b, int64_t n):
    put_varint(b, (<uint64_t>n << 1) ^ <uint64_t>(n >> 63))


cdef inline void put_branch(Buf *b, bint branch):
    """The value branch of a ``["null", T]`` field; nothing for a bare (key) value."""
    if branch:
        put_byte(b, 2)


cdef inline void put_branch_long(Buf *b, bint branch, int64_t value):
    """A date/time field holding ``value``: the union's value branch (also the natural branch of a
    companion key field ``["null", T, "string"]``, which is never bare) and the long."""
    put_branch(b, branch)
    put_long(b, value)


cdef inline void buf_init(Buf *b, char *stack, Py_ssize_t size):
    b.data = stack
    b.length = 0
    b.capacity = size
    b.heap = NULL


cdef inline int put_bytes(Buf *b, bytes data) except -1:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    reserve(b, n)
    memcpy(b.data + b.length, PyBytes_AS_STRING(data), n)
    b.length += n
    return 0


# --- parsers of Postgres's canonical text output: 1 = parsed, 0 = not canonical (use Python) ------

cdef inline int parse_long(const unsigned char *p, Py_ssize_t n, int64_t *out):
    cdef bint negative = False
    cdef uint64_t value = 0
    cdef Py_ssize_t i = 0
    cdef uint64_t limit
    if n > 0 and p[0] == 45:  # '-'
        negative = True
        i = 1
    if i >= n or n - i > 19:
        return 0
    while i < n:
        if p[i] < 48 or p[i] > 57:
            return 0
        value = value * 10 + (p[i] - 48)
        i += 1
    limit = (<uint64_t>1 << 63) if negative else ((<uint64_t>1 << 63) - 1)
    if value > limit:
        return 0
    out[0] = <int64_t>(0 - value) if negative else <int64_t>value
    return 1


cdef inline int digits(const unsigned char *p, Py_ssize_t n, int *out):
    cdef int value = 0
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] < 48 or p[i] > 57:
            return 0
        value = value * 10 + (p[i] - 48)
    out[0] = value
    return 1


cdef int64_t POW10[19]
POW10[0] = 1
for _i in range(1, 19):
    POW10[_i] = POW10[_i - 1] * 10


cdef inline int parse_decimal(const unsigned char *p, Py_ssize_t n, int scale, int64_t *out):
    """``[-]d+[.d+]`` with at most ``scale`` fraction digits and 18 digits in all."""
    cdef bint negative = False
    cdef uint64_t value = 0
    cdef Py_ssize_t i = 0
    cdef int whole = 0
    cdef int frac = -1  # -1: no point seen
    cdef unsigned char c
    if scale < 0 or scale > 18:
        return 0
    if n > 0 and p[0] == 45:
        negative = True
        i = 1
    if i >= n or p[i] < 48 or p[i] > 57:
        return 0
    while i < n:
        c = p[i]
        if c == 46:  # '.'
            if frac >= 0:
                return 0
            frac = 0
        elif 48 <= c <= 57:
            value = value * 10 + (c - 48)
            if frac >= 0:
                frac += 1
            else:
                whole += 1
        else:
            return 0
        i += 1
    if frac == 0 or frac > scale:  # "1." or a fraction needing rounding: Python decides
        return 0
    if frac < 0:
        frac = 0
    if whole + scale > 18:
        return 0
    value *= <uint64_t>POW10[scale - frac]
    out[0] = -<int64_t>value if negative else <int64_t>value
    return 1


cdef inline int64_t days_from_civil(int64_t year, int month, int day):
    # Hinnant's days_from_civil, for years 1000-9999 only (no negative division here).
    cdef int64_t era, yoe, doy, doe
    if month <= 2:
        year -= 1
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef inline int days_in_month(int year, int month):
    if month == 2:
        return 29 if (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)) else 28
    if month == 4 or month == 6 or month == 9 or month == 11:
        return 30
    return 31


cdef inline int parse_date(const unsigned char *p, Py_ssize_t n, int64_t *days):
    """``YYYY-MM-DD``, years 1000-9999 (other years, BC and infinity go to Python)."""
    cdef int year, month, day
    if n < 10 or p[4] != 45 or p[7] != 45:
        return 0
    if not digits(p, 4, &year) or not digits(p + 5, 2, &month) or not digits(p + 8, 2, &day):
        return 0
    if year < 1000 or month < 1 or month > 12 or day < 1 or day > days_in_month(year, month):
        return 0
    days[0] = days_from_civil(year, month, day)
    return 1


cdef inline int parse_timestamp(const unsigned char *p, Py_ssize_t n, bint with_zone, int64_t *out):
    """``YYYY-MM-DD HH:MM:SS[.f{1,6}]`` and, with a zone, ``±HH[:MM[:SS]]``."""
    cdef int64_t days
    cdef int hour, minute, second, frac = 0, width = 0, oh, om = 0, osec = 0
    cdef Py_ssize_t i = 19
    cdef int64_t offset = 0
    cdef int sign
    if n < 19 or p[10] != 32 or p[13] != 58 or p[16] != 58:
        return 0
    if not parse_date(p, 10, &days):
        return 0
    if not digits(p + 11, 2, &hour) or not digits(p + 14, 2, &minute) or not digits(p + 17, 2, &second):
        return 0
    if hour > 23 or minute > 59 or second > 59:
        return 0
    if i < n and p[i] == 46:  # '.'
        i += 1
        while i < n and 48 <= p[i] <= 57:
            if width == 6:
                return 0
            frac = frac * 10 + (p[i] - 48)
            width += 1
            i += 1
        if width == 0:
            return 0
        while width < 6:
            frac *= 10
            width += 1
    if with_zone:
        if i >= n or (p[i] != 43 and p[i] != 45):
            return 0
        sign = -1 if p[i] == 45 else 1
        if n - i == 3:
            if not digits(p + i + 1, 2, &oh):
                return 0
        elif n - i == 6 and p[i + 3] == 58:
            if not digits(p + i + 1, 2, &oh) or not digits(p + i + 4, 2, &om):
                return 0
        elif n - i == 9 and p[i + 3] == 58 and p[i + 6] == 58:
            if not digits(p + i + 1, 2, &oh) or not digits(p + i + 4, 2, &om) or not digits(p + i + 7, 2, &osec):
                return 0
        else:
            return 0
        offset = sign * (oh * 3600 + om * 60 + osec)
    elif i != n:
        return 0
    out[0] = ((days * 86400 + hour * 3600 + minute * 60 + second) - offset) * 1000000 + frac
    return 1


cdef inline int put_branch_decimal(Buf *b, bint branch, int64_t v):
    """A ``numeric(p,s)`` field holding the unscaled ``v``: value branch, the Avro decimal bytes as
    ``wire.write_decimal_bytes`` writes them (width ``bit_length // 8 + 1``)."""
    cdef uint64_t magnitude = <uint64_t>(-v) if v < 0 else <uint64_t>v
    cdef int bits = 0
    cdef int size, k
    while magnitude:
        bits += 1
        magnitude >>= 1
    size = (bits + 8) // 8
    put_branch(b, branch)
    put_varint(b, <uint64_t>(size * 2))
    for k in range(size - 1, -1, -1):
        put_byte(b, <char>((v >> (8 * k)) & 0xFF))
    return 0


cdef inline void put_le(Buf *b, uint64_t bits, int size):
    cdef int k
    for k in range(size):
        put_byte(b, <char>((bits >> (8 * k)) & 0xFF))


cdef inline bint is_ascii(const unsigned char *p, Py_ssize_t n) noexcept:
    """No byte with the high bit set: eight bytes a test (the wide benchmark's ten text columns
    of some 180 bytes a row spent 7 % of the streaming thread in a byte-a-test loop)."""
    cdef Py_ssize_t i = 0
    cdef uint64_t word
    while i + 8 <= n:
        memcpy(&word, p + i, 8)
        if word & 0x8080808080808080ULL:
            return False
        i += 8
    while i < n:
        if p[i] >= 0x80:
            return False
        i += 1
    return True


cdef int write_text_field(Buf *b, int code, int scale, bytes raw, object fallback) except -1:
    """One column's field bytes: the union branch (unless bare) and the value; ``fallback`` (the
    column's Python field encoder) for anything else, which may raise ``Unrepresentable``."""
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(raw)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(raw)
    cdef int64_t value
    cdef bint branch = not (code & BARE)
    cdef char *end
    cdef double d
    cdef float f
    cdef union_bits u
    code &= 0x7F
    reserve(b, 24)
    if code == C_STRING:
        if not is_ascii(p, n):
            return put_bytes(b, fallback(raw))  # UTF-8 validation is Python's
        put_branch(b, branch)
        put_varint(b, <uint64_t>(n * 2))
        reserve(b, n)
        memcpy(b.data + b.length, p, n)
        b.length += n
        return 0
    if code == C_LONG:
        if parse_long(p, n, &value):
            put_branch(b, branch)
            put_long(b, value)
            return 0
    elif code == C_DECIMAL:
        if parse_decimal(p, n, scale, &value):
            put_branch_decimal(b, branch, value)
            return 0
    elif code == C_BOOL:
        if n == 1 and (p[0] == 116 or p[0] == 102):  # 't' / 'f'
            put_branch(b, branch)
            put_byte(b, 1 if p[0] == 116 else 0)
            return 0
    elif code == C_TIMESTAMPTZ or code == C_TIMESTAMP:
        if parse_timestamp(p, n, code == C_TIMESTAMPTZ, &value):
            put_branch_long(b, branch, value)
            return 0
    elif code == C_DATE:
        if n == 10 and parse_date(p, n, &value):
            put_branch_long(b, branch, value)
            return 0
    elif code == C_DOUBLE or code == C_FLOAT:
        if n > 0 and (48 <= p[0] <= 57 or p[0] == 45):
            d = PyOS_string_to_double(<const char *>p, &end, None)
            if end == <char *>p + n:
                put_branch(b, branch)
                if code == C_DOUBLE:
                    u.d = d
                    put_le(b, u.u64, 8)
                    return 0
                f = <float>d
                if f - f == 0:  # finite after narrowing (Postgres's float4 text always is)
                    u.f = f
                    put_le(b, u.u32, 4)
                    return 0
                b.length -= branch
    return put_bytes(b, fallback(raw))


cdef inline uint64_t read_be(const unsigned char *p, int size):
    cdef uint64_t v = 0
    cdef int k
    for k in range(size):
        v = (v << 8) | p[k]
    return v


cdef inline int numeric_binary_unscaled(const unsigned char *p, Py_ssize_t n, int scale, int64_t *out):
    """``numeric_send`` bytes → the unscaled value at ``scale``, as ``decimal_unscaled`` of
    ``numeric_text_from_binary`` computes it: digits past the display scale are dropped as the text
    drops them, a non-zero digit past ``scale`` or a value of 19+ digits goes to Python."""
    cdef int ndigits, weight, sign, dscale, k, d, e, digit
    cdef uint64_t acc = 0
    cdef int group
    if n < 8:
        return 0
    ndigits = <int>read_be(p, 2)
    weight = <int16_t>read_be(p + 2, 2)
    sign = <int>read_be(p + 4, 2)
    dscale = <int>read_be(p + 6, 2)
    if n != 8 + 2 * ndigits or (sign != 0 and sign != 0x4000) or scale < 0 or scale > 18:
        return 0
    for k in range(ndigits):
        group = <int>read_be(p + 8 + 2 * k, 2)
        if group > 9999:
            return 0
        for d in range(4):
            digit = (group // <int>POW10[3 - d]) % 10
            e = 4 * (weight + 1) - 1 - (4 * k + d)  # decimal exponent of this digit
            if digit == 0 or e < -dscale:
                continue
            if e < -scale or e + scale > 17:
                return 0
            acc += <uint64_t>digit * <uint64_t>POW10[e + scale]
    out[0] = -<int64_t>acc if sign == 0x4000 else <int64_t>acc
    return 1


cdef int write_binary_field(Buf *b, int code, int scale, bytes raw, object fallback) except -1:
    """A binary (send format) column's field bytes; as ``write_text_field`` for text."""
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(raw)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(raw)
    cdef bint branch = not (code & BARE)
    cdef int64_t value
    cdef union_bits u
    cdef double d
    cdef Py_ssize_t i
    code &= 0x7F
    reserve(b, 24)
    if code == B_INT2 and n == 2:
        value = <int16_t>read_be(p, 2)
    elif code == B_INT4 and n == 4:
        value = <int32_t>read_be(p, 4)
    elif code == B_INT8 and n == 8:
        value = <int64_t>read_be(p, 8)
    elif code == B_OID and n == 4:
        value = <int64_t>read_be(p, 4)
    elif code == B_BOOL and n == 1:
        put_branch(b, branch)
        put_byte(b, 1 if p[0] else 0)
        return 0
    elif code == B_FLOAT8 and n == 8:
        put_branch(b, branch)
        put_le(b, read_be(p, 8), 8)
        return 0
    elif code == B_FLOAT4 and n == 4:
        # What struct.unpack('!f') then struct.pack('<f') give: the same bits, except that a
        # signalling NaN comes back quiet (the float -> double conversion sets the quiet bit).
        # Written as bits: a C compiler may fold float -> double -> float into nothing.
        u.u32 = <uint32_t>read_be(p, 4)
        if (u.u32 & 0x7f800000u) == 0x7f800000u and (u.u32 & 0x007fffffu) != 0:
            u.u32 |= 0x00400000u
        put_branch(b, branch)
        put_le(b, u.u32, 4)
        return 0
    elif code == B_TIMESTAMP and n == 8:
        value = <int64_t>read_be(p, 8)
        if -(1 << 62) < value < (1 << 62):  # ±infinity and the far edges: Python's rules
            put_branch_long(b, branch, value + 946684800000000)  # 2000-01-01 in Unix microseconds
            return 0
        return put_bytes(b, fallback(raw))
    elif code == B_DATE and n == 4:
        value = <int32_t>read_be(p, 4)
        if -(1 << 30) < value < (1 << 30):
            put_branch_long(b, branch, value + 10957)  # 2000-01-01 in Unix days
            return 0
        return put_bytes(b, fallback(raw))
    elif code == B_STRING:
        return write_text_field(b, C_STRING | (0 if branch else BARE), 0, raw, fallback)
    elif code == B_DECIMAL:
        if numeric_binary_unscaled(p, n, scale, &value):
            put_branch_decimal(b, branch, value)
            return 0
        return put_bytes(b, fallback(raw))
    else:
        return put_bytes(b, fallback(raw))
    put_branch(b, branch)
    put_long(b, value)
    return 0


cdef class Columns:
    """Per column of a Relation version (or of its key): the kernel's text and binary conversion
    codes, the decimal scale, the Python field encoders they fall back to, and the null field."""

    cdef bytes codes
    cdef bytes scales
    cdef tuple fns
    cdef bytes bcodes
    cdef tuple bfns
    cdef tuple nulls
    cdef tuple indexes  # the row positions of these columns (a key's), or None for all

    def __init__(self, codes: bytes, scales: bytes, fns: tuple, bcodes: bytes, bfns: tuple, nulls: tuple,
                 indexes: tuple | None = None) -> None:
        if not (len(codes) == len(scales) == len(fns) == len(bcodes) == len(bfns) == len(nulls)):
            raise ValueError("per-column codes, encoders and null fields differ in length")
        if indexes is not None and len(indexes) != len(codes):
            raise ValueError("one row position per column")
        self.codes = codes
        self.scales = scales
        self.fns = fns
        self.bcodes = bcodes
        self.bfns = bfns
        self.nulls = nulls
        self.indexes = indexes


cdef int write_columns(Buf *b, object row, Columns cols, bint nulls_allowed) except -1:
    """The columns' fields from ``row``; 1 when written, 0 when a column needs the Python path
    (unchanged TOAST, a null where none may be, a malformed row)."""
    cdef bytes kinds = row.kinds
    cdef tuple values = row.values
    cdef const unsigned char *k = <const unsigned char *>PyBytes_AS_STRING(kinds)
    cdef const unsigned char *codes = <const unsigned char *>PyBytes_AS_STRING(cols.codes)
    cdef const unsigned char *scales = <const unsigned char *>PyBytes_AS_STRING(cols.scales)
    cdef const unsigned char *bcodes = <const unsigned char *>PyBytes_AS_STRING(cols.bcodes)
    cdef Py_ssize_t ncols = PyTuple_GET_SIZE(cols.fns)
    cdef Py_ssize_t nkinds = PyBytes_GET_SIZE(kinds)
    cdef Py_ssize_t j, i
    cdef object value
    if PyTuple_GET_SIZE(values) != nkinds or (cols.indexes is None and nkinds != ncols):
        return 0
    for j in range(ncols):
        i = j if cols.indexes is None else <Py_ssize_t><object>PyTuple_GET_ITEM(cols.indexes, j)
        if i >= nkinds:
            return 0
        if k[i] == 116 or k[i] == 98:  # 't', 'b'
            value = <object>PyTuple_GET_ITEM(values, i)
            if type(value) is not bytes:
                return 0
            if k[i] == 116:
                write_text_field(b, codes[j], scales[j], <bytes>value, <object>PyTuple_GET_ITEM(cols.fns, j))
            else:
                write_binary_field(b, bcodes[j], scales[j], <bytes>value, <object>PyTuple_GET_ITEM(cols.bfns, j))
        elif k[i] == 110 and nulls_allowed:  # 'n'
            put_bytes(b, <bytes>PyTuple_GET_ITEM(cols.nulls, j))
        else:
            return 0
    return 1


cdef int write_image(Buf *b, object image, Columns row) except -1:
    """``before``/``after``: the null branch, or the value branch and the row; 0 → the Python path."""
    reserve(b, 1)
    if image is None:
        put_byte(b, 0)
        return 1
    put_byte(b, 2)
    return write_columns(b, image, row, True)


def encode_envelope(bytes header, object before, object after, Columns row, bytes op, bytes source_head,
                    int64_t lsn, bytes source_tail, bint snapshot, bytes origin, object transaction_id,
                    int64_t total_order, int64_t collection_order):
    """The framed envelope (see ``TablePlan.envelope``), or ``None`` for the Python path."""
    return _envelope(header, before, after, row, op, source_head, lsn, source_tail, snapshot, origin, transaction_id,
                     total_order, collection_order)


cdef object _envelope(bytes header, object before, object after, Columns row, bytes op, bytes source_head,
                      int64_t lsn, bytes source_tail, bint snapshot, bytes origin, object transaction_id,
                      int64_t total_order, int64_t collection_order):
    cdef char stack[STACK]
    cdef Buf b
    buf_init(&b, stack, STACK)
    try:
        put_bytes(&b, header)
        if not write_image(&b, before, row) or not write_image(&b, after, row):
            return None
        put_bytes(&b, op)
        put_bytes(&b, source_head)
        reserve(&b, 10)
        put_long(&b, lsn)
        put_bytes(&b, source_tail)
        reserve(&b, 1)
        put_byte(&b, 1 if snapshot else 0)
        put_bytes(&b, origin)
        reserve(&b, 24)
        if transaction_id is None:
            put_byte(&b, 0)
        else:
            put_byte(&b, 2)
            put_bytes(&b, <bytes>transaction_id)
            reserve(&b, 20)
            put_long(&b, total_order)
            put_long(&b, collection_order)
        reserve(&b, 2)
        put_byte(&b, 0)  # unchanged_toast_columns: empty (no 'u' column reaches this path)
        put_byte(&b, 0)  # unrepresentable: null (an unrepresentable value raised in its fallback)
        return buf_bytes(&b)
    finally:
        buf_free(&b)


def encode_key(bytes header, object row, Columns key):
    """The framed key (``_TablePlan.key_of``), or ``None`` for the Python path."""
    return _key(header, row, key)


cdef object _key(bytes header, object row, Columns key):
    cdef char stack[256]
    cdef Buf b
    buf_init(&b, stack, 256)
    try:
        put_bytes(&b, header)
        if not write_columns(&b, row, key, False):
            return None
        return buf_bytes(&b)
    finally:
        buf_free(&b)


from pgbridge.assemble.units import RowChange as _RowChange

if _RowChange._fields != ("op", "relation", "lsn", "old_kind", "old", "new"):
    raise TypeError("RowChange's fields changed: RowWriter.change reads them by position")


cdef class RowWriter:
    """A Relation version's row changes → their Kafka records, in one call (``TablePlan.kernel_change``):
    the records ``ChangeEncoder.encode_row``'s Python path makes, in the same order, or ``None``
    for that path; the old image only as Postgres sent it (``old_kind`` set).

    Every insert, update and delete of a table whose rows need nothing but this kernel comes here
    from ``ChangeEncoder.encode_row``, so the envelope, the key(s) and the records are made without
    a Python frame between them. ``errors`` are the exceptions that hand a change to the Python
    path (a value the fallback encoders reject or cannot represent: the Python path names or
    records it); ``record`` is the record type (``plan.OutRecord``), ``ops`` the envelope's op
    fields of an insert, an update and a delete."""

    cdef object topic
    cdef bytes value_header
    cdef bytes key_header
    cdef bytes source_head
    cdef Columns row
    cdef Columns key
    cdef bint keyed
    cdef object record
    cdef tuple errors
    cdef bytes op_create
    cdef bytes op_update
    cdef bytes op_delete

    def __init__(self, topic: str, value_header: bytes, key_header: bytes, source_head: bytes, Columns row,
                 Columns key, bint keyed, record: type, errors: tuple, ops: tuple) -> None:
        self.topic = topic
        self.value_header = value_header
        self.key_header = key_header
        self.source_head = source_head
        self.row = row
        self.key = key
        self.keyed = keyed
        if not issubclass(record, tuple) or record.__basicsize__ != tuple.__basicsize__:
            raise TypeError("the record type must be a named tuple (a tuple subclass without a __dict__)")
        self.record = record
        self.errors = errors
        self.op_create, self.op_update, self.op_delete = ops

    cdef inline object _record(self, object key, object value):
        """An ``OutRecord`` made as ``tuple.__new__`` makes it, without that call's argument tuples."""
        cdef PyObject *made = PyType_GenericAlloc(<PyTypeObject *>self.record, 3)
        record = <object>made
        Py_DECREF(record)  # ``record`` holds its own reference
        Py_INCREF(self.topic)
        PyTuple_SET_ITEM(record, 0, self.topic)
        Py_INCREF(key)
        PyTuple_SET_ITEM(record, 1, key)
        Py_INCREF(value)
        PyTuple_SET_ITEM(record, 2, value)
        return record

    def change(self, object change, tuple context, int64_t total_order, int64_t collection_order, bint snapshot):
        """The records of ``change`` (an ``assemble.units.RowChange``) in its transaction (the
        bodies ``context``) at these orders, or ``None``."""
        cdef object before, after, value, key, old_key
        cdef bytes code
        if not isinstance(change, tuple) or PyTuple_GET_SIZE(change) != 6:
            raise TypeError("a RowChange was expected")
        cdef str op = <str>PyTuple_GET_ITEM(change, 0)
        cdef int64_t lsn = <object>PyTuple_GET_ITEM(change, 2)
        cdef object old = None if <object>PyTuple_GET_ITEM(change, 3) is None else <object>PyTuple_GET_ITEM(change, 4)
        cdef object new = <object>PyTuple_GET_ITEM(change, 5)
        if op == "c":
            before, after, code = None, new, self.op_create
        elif op == "u":
            before, after, code = old, new, self.op_update
        elif op == "d":
            before, after, code = old, None, self.op_delete
        else:
            return None
        if after is None and op != "d":
            return None  # the Python path names the missing new row
        source_tail, origin, transaction_id = context
        try:
            value = _envelope(self.value_header, before, after, self.row, code, self.source_head, lsn, source_tail,
                              snapshot, origin, transaction_id, total_order, collection_order)
            if value is None:
                return None
            if not self.keyed:
                return [self._record(None, value)]
            key = _key(self.key_header, old if op == "d" else new, self.key)
            if key is None:
                return None
            if op == "c" or old is None:
                return [self._record(key, value)]
            if op == "d":
                return [self._record(key, value), self._record(key, None)]
            old_key = _key(self.key_header, old, self.key)
        except self.errors:
            return None
        if old_key is None:
            return None
        if old_key == key:
            return [self._record(key, value)]
        return [self._record(old_key, None), self._record(key, value)]

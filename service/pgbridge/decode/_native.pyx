# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled row decoder: the twin of ``pgoutput``'s Insert/Update/Delete decoders and of
``pgoutput._tuple``'s loop.

``read_tuple`` returns ``(kinds, values, end)`` exactly as the Python loop builds them;
``read_row`` returns the ``Insert``, ``Update`` or ``Delete`` message of a row outside a stream
block exactly as the Python decoders build it. Both return ``None`` when the data is malformed
(truncated, an unknown kind byte or part marker, trailing bytes): the Python decoder then runs on
the same bytes and raises the ``DecodeError`` that names the field, so there is one owner of
error messages. The messages are built as ``pgbridge.slotted`` builds them, by setting every
slot of a new object.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport uint32_t


cdef extern from "Python.h":
    int PyObject_GenericSetAttr(object o, object name, object value) except -1


from pgbridge.decode.messages import Delete as _Delete, Insert as _Insert, TupleData as _TupleData, Update as _Update

cdef object _new = object.__new__


cdef inline uint32_t _u32(const unsigned char *p):
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef object _tuple_data(bytes buf, Py_ssize_t *pos, Py_ssize_t count):
    """A ``TupleData`` of ``count`` columns at ``pos[0]`` (advanced past it), or ``None``."""
    parsed = read_tuple(buf, pos[0], count)
    if parsed is None:
        return None
    data = _new(_TupleData)
    PyObject_GenericSetAttr(data, "kinds", parsed[0])
    PyObject_GenericSetAttr(data, "values", parsed[1])
    pos[0] = parsed[2]
    return data


def read_row(bytes buf):
    """The Insert, Update or Delete message ``buf`` (outside a stream block: no xid), or ``None``."""
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(buf)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(buf)
    cdef Py_ssize_t pos = 8
    cdef unsigned char tag, marker
    cdef Py_ssize_t count
    cdef object old = None, old_kind = None, new = None, msg
    if n < 8:
        return None
    tag = p[0]
    marker = p[5]
    count = (<Py_ssize_t>p[6] << 8) | p[7]
    if tag == 73:  # 'I'
        if marker != 78:  # 'N'
            return None
    elif tag == 85 or tag == 68:  # 'U', 'D'
        if marker == 75 or marker == 79:  # 'K', 'O'
            old_kind = "K" if marker == 75 else "O"
            old = _tuple_data(buf, &pos, count)
            if old is None:
                return None
            if tag == 85:
                if pos + 3 > n or p[pos] != 78:
                    return None
                count = (<Py_ssize_t>p[pos + 1] << 8) | p[pos + 2]
                pos += 3
        elif tag == 68 or marker != 78:
            return None
    else:
        return None
    if tag != 68:
        new = _tuple_data(buf, &pos, count)
        if new is None:
            return None
    if pos != n:
        return None
    rel_id = _u32(p + 1)
    if tag == 73:
        msg = _new(_Insert)
    elif tag == 85:
        msg = _new(_Update)
        PyObject_GenericSetAttr(msg, "old_kind", old_kind)
        PyObject_GenericSetAttr(msg, "old", old)
    else:
        msg = _new(_Delete)
        PyObject_GenericSetAttr(msg, "old_kind", old_kind)
        PyObject_GenericSetAttr(msg, "old", old)
    PyObject_GenericSetAttr(msg, "xid", None)
    PyObject_GenericSetAttr(msg, "rel_id", rel_id)
    if tag != 68:
        PyObject_GenericSetAttr(msg, "new", new)
    return msg


def read_tuple(bytes buf, Py_ssize_t pos, Py_ssize_t count):
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(buf)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(buf)
    cdef tuple values = PyTuple_New(count)
    cdef bytearray kinds = None
    cdef Py_ssize_t i
    cdef unsigned char kind
    cdef uint32_t length
    cdef object value
    for i in range(count):
        if pos >= n:
            return None
        kind = p[pos]
        if kind == 116 or kind == 98:  # 't', 'b'
            if pos + 5 > n:
                return None
            length = (<uint32_t>p[pos + 1] << 24) | (<uint32_t>p[pos + 2] << 16) | (<uint32_t>p[pos + 3] << 8) | p[pos + 4]
            pos += 5
            if length > <uint32_t>(n - pos):
                return None
            value = PyBytes_FromStringAndSize(<const char *>p + pos, length)
            pos += length
        elif kind == 110 or kind == 117:  # 'n', 'u'
            value = None
            pos += 1
        else:
            return None
        Py_INCREF(value)
        PyTuple_SET_ITEM(values, i, value)
        if kind != 116:
            if kinds is None:
                kinds = bytearray(b"t" * count)
            kinds[i] = kind
    if pos > n:  # only when asked to start past the end: the Python loop names it
        return None
    return (b"t" * count if kinds is None else bytes(kinds)), values, pos

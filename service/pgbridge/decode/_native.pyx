# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled TupleData reader, the twin of ``pgoutput._tuple``'s loop.

Returns ``(kinds, values, end)`` exactly as the Python loop builds them, or ``None`` when the data
is malformed (truncated, an unknown kind byte): the Python loop then runs on the same bytes and
raises the ``DecodeError`` that names the field, so there is one owner of error messages.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport uint32_t


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

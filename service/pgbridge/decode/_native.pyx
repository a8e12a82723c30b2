# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled row decoder: the twin of ``pgoutput``'s Insert/Update/Delete decoders and of
``pgoutput._tuple``'s loop.

``read_tuple`` returns ``(kinds, values, end)`` exactly as the Python loop builds them;
``read_row`` returns the ``Insert``, ``Update`` or ``Delete`` message of a row outside a stream
block exactly as the Python decoders build it, read in place from any buffer at any offset (the
streaming loop hands it the XLogData frame: ``PgoutputDecoder.decode_row``). Both return ``None`` when the data is malformed
(truncated, an unknown kind byte or part marker, trailing bytes): the Python decoder then runs on
the same bytes and raises the ``DecodeError`` that names the field, so there is one owner of
error messages. The messages are built as ``pgbridge.slotted`` builds them, by setting every
slot of a new object (here at the slot's offset, ``_put``).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport uint32_t


cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member
    PyObject *PyType_GenericAlloc(PyTypeObject *type, Py_ssize_t nitems) except NULL


from pgbridge.decode.messages import Delete as _Delete, Insert as _Insert, TupleData as _TupleData, Update as _Update
from pgbridge.slotted import slot_setters as _checked

# The messages are frozen slotted dataclasses (``pgbridge.slotted``): a new one is allocated and its
# slots are written at their offsets, read once here from the classes' slot descriptors. Setting
# them by name (``PyObject_GenericSetAttr``) cost more than reading the whole row.
member_descriptor = type(_TupleData.kinds)


cdef Py_ssize_t _slot(type cls, str name) except -1:
    descriptor = cls.__dict__[name]
    if type(descriptor) is not member_descriptor:
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    return (<PyMemberDescrObject *><PyObject *>descriptor).d_member.offset


cdef Py_ssize_t KINDS = _slot(_TupleData, "kinds")
cdef Py_ssize_t VALUES = _slot(_TupleData, "values")
cdef Py_ssize_t INS_XID = _slot(_Insert, "xid")
cdef Py_ssize_t INS_REL = _slot(_Insert, "rel_id")
cdef Py_ssize_t INS_NEW = _slot(_Insert, "new")
cdef Py_ssize_t UPD_XID = _slot(_Update, "xid")
cdef Py_ssize_t UPD_REL = _slot(_Update, "rel_id")
cdef Py_ssize_t UPD_OLD_KIND = _slot(_Update, "old_kind")
cdef Py_ssize_t UPD_OLD = _slot(_Update, "old")
cdef Py_ssize_t UPD_NEW = _slot(_Update, "new")
cdef Py_ssize_t DEL_XID = _slot(_Delete, "xid")
cdef Py_ssize_t DEL_REL = _slot(_Delete, "rel_id")
cdef Py_ssize_t DEL_OLD_KIND = _slot(_Delete, "old_kind")
cdef Py_ssize_t DEL_OLD = _slot(_Delete, "old")
# Every field of each class is set, or the object is half built: checked as pgbridge.slotted checks it.
_checked(_TupleData, "kinds", "values")
_checked(_Insert, "xid", "rel_id", "new")
_checked(_Update, "xid", "rel_id", "old_kind", "old", "new")
_checked(_Delete, "xid", "rel_id", "old_kind", "old")


cdef object _alloc(type cls):
    """A new instance of a slotted class, every slot empty (``object.__new__(cls)``)."""
    cdef PyObject *obj = PyType_GenericAlloc(<PyTypeObject *>cls, 0)
    result = <object>obj  # a reference of its own: drop the one the allocation made
    Py_DECREF(result)
    return result


cdef inline void _put(object obj, Py_ssize_t offset, object value):
    """Fill an empty slot (of an object made by ``_alloc``)."""
    Py_INCREF(value)
    (<PyObject **>((<char *><PyObject *>obj) + offset))[0] = <PyObject *>value


cdef inline uint32_t _u32(const unsigned char *p):
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef object _tuple_data(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, Py_ssize_t count):
    """A ``TupleData`` of ``count`` columns at ``pos[0]`` (advanced past it), or ``None``."""
    cdef tuple values = PyTuple_New(count)
    kinds = _columns(p, n, pos, count, values)
    if kinds is None:
        return None
    data = _alloc(_TupleData)
    _put(data, KINDS, kinds)
    _put(data, VALUES, values)
    return data


def read_row(object buf, Py_ssize_t start=0):
    """The Insert, Update or Delete message at ``start`` of ``buf`` (outside a stream block: no
    xid), or ``None``. ``buf`` is any contiguous buffer: the streaming loop passes the XLogData
    frame as it arrived (a memoryview) with the message's offset in it, and no copy of the frame
    is made, since each column value is copied out once anyway."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if start < 0 or start > view.len:
            return None
        return _row(<const unsigned char *>view.buf + start, view.len - start)
    finally:
        PyBuffer_Release(&view)


cdef object _row(const unsigned char *p, Py_ssize_t n):
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
            old = _tuple_data(p, n, &pos, count)
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
        new = _tuple_data(p, n, &pos, count)
        if new is None:
            return None
    if pos != n:
        return None
    rel_id = _u32(p + 1)
    if tag == 73:
        msg = _alloc(_Insert)
        _put(msg, INS_XID, None)
        _put(msg, INS_REL, rel_id)
        _put(msg, INS_NEW, new)
    elif tag == 85:
        msg = _alloc(_Update)
        _put(msg, UPD_XID, None)
        _put(msg, UPD_REL, rel_id)
        _put(msg, UPD_OLD_KIND, old_kind)
        _put(msg, UPD_OLD, old)
        _put(msg, UPD_NEW, new)
    else:
        msg = _alloc(_Delete)
        _put(msg, DEL_XID, None)
        _put(msg, DEL_REL, rel_id)
        _put(msg, DEL_OLD_KIND, old_kind)
        _put(msg, DEL_OLD, old)
    return msg


def read_tuple(bytes buf, Py_ssize_t pos, Py_ssize_t count):
    """``(kinds, values, end)`` of ``count`` columns at ``pos`` of ``buf``, or ``None``."""
    cdef tuple values = PyTuple_New(count)
    kinds = _columns(<const unsigned char *>PyBytes_AS_STRING(buf), PyBytes_GET_SIZE(buf), &pos, count, values)
    if kinds is None:
        return None
    return kinds, values, pos


# The kinds of an all-text row (the common case) of up to 64 columns, made once.
cdef tuple ALL_TEXT = tuple(b"t" * i for i in range(65))


cdef object _columns(const unsigned char *p, Py_ssize_t n, Py_ssize_t *at, Py_ssize_t count, tuple values):
    """Read ``count`` columns at ``at[0]`` (advanced past them) into ``values`` (a new tuple of
    ``count``); their kinds, or ``None`` (``values`` is then left part-filled, to be dropped)."""
    cdef Py_ssize_t pos = at[0]
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
    at[0] = pos
    if kinds is not None:
        return bytes(kinds)
    return ALL_TEXT[count] if count <= 64 else b"t" * count

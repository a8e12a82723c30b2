"""Building frozen slotted dataclasses in the hot loop without their ``__init__``.

A dataclass ``__init__`` with keyword arguments costs about a microsecond; the row path builds
such objects per row (``TupleData``, the change message; the compiled row decoder builds them the
same way, ``decode/_native.pyx``; ``RowChange`` is a named tuple). Setting the fields
through their slot descriptors on ``object.__new__(cls)`` is equivalent only while the class is a
slotted dataclass whose fields are exactly the ones set and that has no ``__post_init__``; that is
checked when the setters are made (at import), so a change to the class fails loudly instead of
producing half-built objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

SlotSet = Callable[[object, object], None]
new_instance = object.__new__


def slot_setters(cls: type[Any], *names: str) -> tuple[SlotSet, ...]:
    """The descriptor setters of ``cls``'s fields ``names``, which must be all of its fields, in
    order: for building instances, never for changing one (a type changed in place is mutable)."""
    actual = tuple(field.name for field in dataclasses.fields(cls))
    if actual != names or hasattr(cls, "__post_init__") or "__slots__" not in vars(cls):
        raise RuntimeError(f"{cls.__name__} fields are {actual}, a slotted dataclass with {names} was expected")
    return tuple(cast(SlotSet, vars(cls)[name].__set__) for name in names)

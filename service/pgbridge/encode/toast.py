"""Unchanged TOASTed columns: the policy names, and the encoder's fill and cache of their values.

Postgres does not resend a TOASTed value an UPDATE left unchanged (pgoutput's ``u`` kind). Under
the marker policy such a column is null in ``after`` and listed in ``unchanged_toast_columns``;
the other policies fill it from the old row Postgres sent (``REPLICA IDENTITY FULL``) and, with
the cache policy, from the last row this encoder saw for the key (``ToastCache``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final, Protocol

from pgbridge.decode.messages import KIND_UNCHANGED_TOAST, TupleData
from pgbridge.encode.plan import VALUE_KINDS, TablePlan

TOAST_MARKER: Final = "marker"
"""Unchanged TOASTed columns are null in ``after`` and listed in ``unchanged_toast_columns``."""
TOAST_OLD_TUPLE: Final = "old_tuple"
"""Fill them from the old row when Postgres sent it (``REPLICA IDENTITY FULL``), else mark them."""
TOAST_CACHE: Final = "cache"
"""Fill them from the old row, else from a bounded local cache of the last row seen per key."""
TOAST_POLICIES: Final = (TOAST_MARKER, TOAST_OLD_TUPLE, TOAST_CACHE)


class ToastObserver(Protocol):
    """Where cache hits and misses are reported (``envelope.EncodeObserver`` is one)."""

    def toast_cache(self, hit: bool) -> None: ...


class ToastCache:
    """The last row seen per key, at most ``rows`` of them (the least recently written goes first):
    bounded, because a table's hot rows are what it is for."""

    __slots__ = ("_cache", "_observer", "_rows")

    def __init__(self, rows: int, observer: ToastObserver) -> None:
        self._cache: OrderedDict[tuple[str, bytes, bytes], TupleData] = OrderedDict()
        self._rows = rows
        self._observer = observer

    def forget(self, plan: TablePlan, key: bytes) -> None:
        """Drop the row of ``key`` (deleted, or its key changed)."""
        self._cache.pop((plan.topic, plan.value_header, key), None)

    def forget_topic(self, topic: str) -> None:
        """Drop every row of a topic's table (truncated)."""
        for cached in [k for k in self._cache if k[0] == topic]:
            del self._cache[cached]

    def remember(self, plan: TablePlan, key: bytes, row: TupleData) -> None:
        """Keep ``row`` as the last one of ``key``; entries are per Relation version (the value
        header), so a row cached before an ALTER TABLE is never read with the new column layout."""
        cache = self._cache
        entry = (plan.topic, plan.value_header, key)
        cache[entry] = row
        cache.move_to_end(entry)
        if len(cache) > self._rows:
            cache.popitem(last=False)

    def fill(self, plan: TablePlan, key: bytes | None, new: TupleData, old: TupleData | None) -> TupleData:
        """``new`` with unchanged-TOAST columns filled from the old row (sent under REPLICA
        IDENTITY FULL) or, with the cache policy, from the last row seen for the key. Columns that
        neither source has stay marked: a value is never guessed."""
        use_cache = plan.toast_policy == TOAST_CACHE and key is not None
        if KIND_UNCHANGED_TOAST not in new.kinds:
            if use_cache:
                assert key is not None
                self.remember(plan, key, new)
            return new
        kinds = bytearray(new.kinds)
        values = list(new.values)
        cached = self._cache.get((plan.topic, plan.value_header, key)) if use_cache and key is not None else None
        for i, kind in enumerate(new.kinds):
            if kind != KIND_UNCHANGED_TOAST:
                continue
            for source in (old, cached):
                if source is not None and source.kinds[i] in VALUE_KINDS:
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
            self.remember(plan, key, filled)
        return filled

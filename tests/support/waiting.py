"""Wait on a condition with a deadline instead of sleeping a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, TypeVar

T = TypeVar("T")

_NOTHING = object()


def wait_until(
    predicate: Callable[[], T | Literal[False] | None],
    *,
    timeout: float,
    interval: float = 0.1,
    message: str,
) -> T:
    """Call ``predicate`` until it returns a truthy value and return that value.

    The ``False`` and ``None`` a predicate returns for "not yet" are never returned, so they are
    stripped from the result type: ``lambda: ok and text`` waits for a ``str``.

    Exceptions raised by ``predicate`` count as "not yet". On timeout raise ``AssertionError`` with
    ``message``, the last value returned and the last exception raised (chained as the cause).
    The predicate is always called at least once, and once more at the deadline.
    """
    deadline = time.monotonic() + timeout
    last_value: object = _NOTHING
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
        except Exception as exc:
            last_error = exc
        else:
            if value:
                return value
            last_value = value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(interval, remaining))
    details = []
    if last_value is not _NOTHING:
        details.append(f"last value: {last_value!r}")
    if last_error is not None:
        details.append(f"last error: {type(last_error).__name__}: {last_error}")
    suffix = f" ({'; '.join(details)})" if details else ""
    raise AssertionError(f"timed out after {timeout:g}s: {message}{suffix}") from last_error

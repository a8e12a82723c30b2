"""tests/support/waiting.py, the suite's one way to wait for a condition."""

from __future__ import annotations

import pytest

from tests.support.waiting import wait_until


def test_wait_until_returns_the_first_truthy_value_or_fails_with_the_message() -> None:
    values = iter([0, None, 7])
    assert wait_until(lambda: next(values), timeout=5, interval=0.01, message="a value") == 7
    with pytest.raises(AssertionError, match=r"the answer.*last value: 0"):
        wait_until(lambda: 0, timeout=0.05, interval=0.01, message="the answer")

"""How many examples a property test runs: its own number under the suite's profile, scaled down
with a profile that asks for fewer (``floor``, the minimum-versions run: tests/conftest.py)."""

from __future__ import annotations

from typing import Final

from hypothesis import settings

DEFAULT_EXAMPLES: Final = 100  # Hypothesis' own default, which the suite's profile keeps


def examples(n: int) -> int:
    """``n`` under the suite's profile; ``n`` times the loaded profile's share of the default otherwise."""
    loaded = settings.default
    assert loaded is not None  # tests/conftest.py loads a profile before any test module is imported
    return max(1, n * loaded.max_examples // DEFAULT_EXAMPLES)

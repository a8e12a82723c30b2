"""How many examples a property test runs: its own number under the suite's profile, scaled down
with a profile that asks for fewer (``floor``, the minimum-versions run: tests/conftest.py)."""

from __future__ import annotations

from hypothesis import settings


def examples(n: int) -> int:
    """``n`` under the suite's profile (``pgbridge``); scaled by the loaded profile's share of its examples."""
    loaded = settings.default
    assert loaded is not None  # tests/conftest.py loads a profile before any test module is imported
    return max(1, n * loaded.max_examples // settings.get_profile("pgbridge").max_examples)

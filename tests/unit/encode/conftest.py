from __future__ import annotations

from tests.support.kernels import kernel_fixture

kernel = kernel_fixture("pgbridge.encode.plan", "pgbridge.encode._native")

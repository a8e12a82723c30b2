"""Which Postgres versions an integration test runs on (tests/conftest.py): 18, and 15 too only for
a test marked ``each_pg_version``, the ``pg_cluster`` fixture and a ``pg_version`` argument alike."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _collected(*modules: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *(f"tests/integration/{module}" for module in modules)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line.split("::", 1)[1] for line in done.stdout.splitlines() if "::" in line]


def test_a_test_runs_on_18_and_a_marked_one_on_15_and_18_grouped_by_version() -> None:
    items = _collected("test_replica_identity.py", "test_origin.py", "test_shutdown.py", "test_harness.py")
    assert "test_key_and_before_follow_each_replica_identity[pg18]" in items  # pg_cluster, unmarked
    assert not [item for item in items if "replica_identity" in item and "pg15" in item]
    assert "test_sigterm_mid_workload_confirms_the_end_of_the_last_delivered_transaction[pg18]" in items  # pg_version
    for version in ("pg15", "pg18"):  # marked: the module, and pg_cluster with another parameter
        assert f"test_origin_is_carried_or_filtered[{version}-none]" in items
        assert f"test_killed_cluster_recovers_committed_rows[{version}]" in items
    # the tests sharing pg_cluster come grouped by version, so each version's cluster starts once
    own_clusters = ("test_sigterm", "test_cluster_factory", "test_killed_cluster")  # pg_version only
    shared = [item.split("[")[1][:4] for item in items if "[pg" in item and not item.startswith(own_clusters)]
    changes = sum(1 for before, after in itertools.pairwise(shared) if before != after)
    assert changes == 1, shared

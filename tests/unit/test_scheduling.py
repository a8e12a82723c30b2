"""How ``make test`` splits the suite over its workers (tests/conftest.py): tests sharing a costly
session fixture form one scheduling unit, so that fixture starts on one worker only; the Spark tests
are two units, so two workers start a local Spark session."""

from __future__ import annotations

from tests.conftest import worker_group


def test_tests_sharing_a_costly_fixture_are_one_unit_and_the_others_each_their_own() -> None:
    assert worker_group("tests/spark/test_cluster_mirror.py::test_driver[hdfs-pg18]") == "spark-cluster"
    assert worker_group("tests/spark/test_cluster_mirror.py::test_driver[s3a-pg18]") == "spark-cluster"
    assert worker_group("tests/spark/test_changelog.py::test_changelog[pg18]") == "spark-cluster"
    # the other Spark tests: one unit, one local Spark session
    assert worker_group("tests/spark/test_mirror_end_to_end.py::test_mirror[pg18-delta]") == "spark-local"
    assert worker_group("tests/spark/test_delta_plans.py::test_plan") == "spark-local"
    assert worker_group("tests/packaging/test_distribution.py::test_the_sdist") == "packaging"
    alone = "tests/integration/test_failover.py::test_bridge_continues"
    assert worker_group(alone) == alone

"""How ``make test`` splits the suite over its workers (tests/conftest.py): tests sharing a costly
session fixture form one scheduling unit, so that fixture starts on one worker only."""

from __future__ import annotations

from tests.conftest import worker_group


def test_tests_sharing_a_costly_fixture_are_one_unit_and_the_others_each_their_own() -> None:
    assert worker_group("tests/spark/test_cluster_mirror.py::test_driver[hdfs-pg18]") == "spark-cluster"
    assert worker_group("tests/spark/test_cluster_mirror.py::test_driver[s3a-pg18]") == "spark-cluster"
    spark_alone = "tests/spark/test_changelog.py::test_changelog[pg18]"
    assert worker_group(spark_alone) == spark_alone
    assert worker_group("tests/packaging/test_distribution.py::test_the_sdist") == "packaging"
    alone = "tests/integration/test_failover.py::test_bridge_continues"
    assert worker_group(alone) == alone

"""The cluster test infrastructure itself: a job submitted to the standalone cluster runs its tasks
in two executor JVMs (one per worker, none in the driver) and writes to and reads from HDFS.

The mirror's cluster tests rely on exactly this; when it breaks, this test says which half.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.support.hdfs import Hdfs
from tests.support.spark_cluster import SparkCluster

APPS = Path(__file__).parent / "apps"
SUBMIT_TIMEOUT_S = 300

pytestmark = [pytest.mark.spark, pytest.mark.cluster]


def test_a_job_on_the_cluster_runs_in_two_executors_and_round_trips_through_hdfs(
        spark_cluster: SparkCluster, hdfs: Hdfs) -> None:
    # given
    path = f"/roundtrip-{uuid.uuid4().hex[:8]}"
    command = spark_cluster.submit_command(APPS / "roundtrip.py", [f"{hdfs.uri}{path}"])
    # when
    done = subprocess.run(command, env=spark_cluster.env(), capture_output=True, text=True,
                          timeout=SUBMIT_TIMEOUT_S, check=False)
    # then
    assert done.returncode == 0, f"{done.stderr[-4000:]}\n{spark_cluster.logs()}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert (report["rows"], report["sum"]) == (1000, 999000)
    task_dirs = [Path(task_dir) for task_dir in report["task_dirs"]]
    workers = {task_dir.relative_to(spark_cluster.group.workdir).parts[0] for task_dir in task_dirs}
    assert workers == {"worker-1", "worker-2"}, report
    assert Path(report["driver_dir"]) not in task_dirs
    parts = [name for name in hdfs.list_names(path) if name.startswith("part-")]
    assert len(parts) == 4, hdfs.list_names(path)

"""The Apache Kafka launcher's pure parts: cluster ids the storage tool accepts, replication by size."""

from __future__ import annotations

import re
from pathlib import Path

from pgbridge.embedded.apache_kafka import cluster_id, node_properties


def test_cluster_ids_never_look_like_an_option() -> None:
    ids = [cluster_id() for _ in range(3000)]  # ~47 would start with '-' if drawn blindly
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", cid) for cid in ids)
    assert len(set(ids)) == len(ids)


def test_three_nodes_replicate_three_times_with_two_in_sync() -> None:
    props = node_properties(2, 9092, "1@h:1,2@h:2,3@h:3", Path("/tmp/x"), 9093, 3)
    assert props["default.replication.factor"] == "3" and props["min.insync.replicas"] == "2"
    assert props["transaction.state.log.min.isr"] == "2" and props["offsets.topic.replication.factor"] == "3"
    single = node_properties(1, 9092, "1@h:1", Path("/tmp/x"), 9093, 1)
    assert single["default.replication.factor"] == "1" and single["min.insync.replicas"] == "1"

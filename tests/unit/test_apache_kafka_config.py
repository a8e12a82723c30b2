"""The Apache Kafka launcher's pure parts: cluster ids the storage tool accepts, replication by size."""

from __future__ import annotations

import re
from pathlib import Path

from pgbridge.embedded.apache_kafka import cluster_id, node_properties, scram_arguments


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


def test_extra_listeners_are_bound_advertised_and_mapped_beside_plaintext() -> None:
    props = node_properties(1, 9092, "1@h:1", Path("/tmp/x"), 9093, 1,
                            extra_listeners={"MTLS": ("SSL", 9094), "SCRAM": ("SASL_SSL", 9095)})
    assert props["listeners"] == ("PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,"
                                  "MTLS://127.0.0.1:9094,SCRAM://127.0.0.1:9095")
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092,MTLS://127.0.0.1:9094,SCRAM://127.0.0.1:9095"
    assert props["listener.security.protocol.map"].endswith(",MTLS:SSL,SCRAM:SASL_SSL")
    assert props["inter.broker.listener.name"] == "PLAINTEXT"  # readiness probes and brokers stay plain


def test_scram_users_become_format_arguments() -> None:
    assert scram_arguments({"u": "p1", "v": "p2"}) == [
        "--add-scram", "SCRAM-SHA-512=[name=u,password=p1]", "--add-scram", "SCRAM-SHA-512=[name=v,password=p2]"]
    assert scram_arguments({}) == []

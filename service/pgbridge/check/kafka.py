"""``pgbridge check`` against Kafka and the Schema Registry: reachability, the copies and min ISR of
the topics, the ACLs the bridge needs, the registry's credentials."""

from __future__ import annotations

import threading
import time
from typing import Final

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ClusterMetadata,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

from pgbridge.check.problem import Problem
from pgbridge.config import KafkaConfig, Settings
from pgbridge.errors import PgbridgeError
from pgbridge.logs import LibrdkafkaLog
from pgbridge.publish.producer import admin_config
from pgbridge.publish.topics import (
    ATTEMPT_S,
    SAFE_REPLICATION_FACTOR,
    default_min_insync,
    offsets_topic,
    sanitize,
)
from pgbridge.publish.transactions import OFFSETS_GROUP, transactional_id
from pgbridge.snapshot.progress import progress_topic


def _cluster_metadata(admin: AdminClient, all_down: threading.Event, timeout_s: float) -> ClusterMetadata:
    """The cluster's metadata within ``timeout_s``; raises at once when librdkafka reports every
    bootstrap broker down (connections refused: nothing listens there), rather than after the
    whole timeout, so ``check`` answers in a second for a stopped broker or a wrong port. (``run``
    lists topics through ``TopicManager``, which keeps waiting: there a broker may be coming up.)"""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return admin.list_topics(timeout=max(0.1, min(ATTEMPT_S, deadline - time.monotonic())))
        except KafkaException:
            admin.poll(0)  # serves error_cb
            if all_down.is_set() or time.monotonic() >= deadline:
                raise


def check_kafka(settings: Settings, timeout_s: float = 10.0) -> list[Problem]:
    all_down = threading.Event()

    def on_error(error: KafkaError) -> None:
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            all_down.set()

    config = admin_config(settings.kafka)
    config["error_cb"] = on_error
    admin = AdminClient(config, logger=LibrdkafkaLog())
    try:
        metadata = _cluster_metadata(admin, all_down, timeout_s)
    except Exception as exc:
        return [Problem("error", f"Kafka at {settings.kafka.bootstrap_servers} is unreachable ({exc})",
                        "check kafka.bootstrap_servers and that the broker is up")]
    topics = sorted(name for name, meta in metadata.topics.items()
                    if meta.error is None and name.startswith(sanitize(f"{settings.kafka.topic_prefix}.")))
    replicas = {name: min((len(p.replicas) for p in metadata.topics[name].partitions.values()), default=0)
                for name in topics}
    return (replication_problems(admin, settings.kafka, len(metadata.brokers), replicas, timeout_s)
            + acl_problems(admin, settings, topics, timeout_s, broker_id=min(metadata.brokers, default=None)))


# Durability pgbridge expects of its topics (publish/topics.py creates them so): three copies, two
# of them in sync for a write to count (acks=all).
SAFE_MIN_INSYNC: Final = 2
_LISTED: Final = 8  # topics named in one line; the rest are counted


def _names(topics: list[str]) -> str:
    more = len(topics) - _LISTED
    return ", ".join(topics[:_LISTED]) + (f" and {more} more" if more > 0 else "")


def replication_problems(admin: AdminClient, kafka: KafkaConfig, brokers: int, replicas: dict[str, int],
                         timeout_s: float) -> list[Problem]:
    """The copies of the topics that exist under the prefix (``replicas``: topic → replication
    factor) and their ``min.insync.replicas``: a warning for one copy, and on a cluster of 3 or
    more brokers for fewer than 3 copies or fewer than 2 in sync; with the shape ``run`` gives the
    topics it creates."""
    factor = kafka.topic_replication_factor
    problems: list[Problem] = []
    if factor is None:
        factor = min(SAFE_REPLICATION_FACTOR, max(1, brokers))
        minimum = kafka.topic_min_insync_replicas or default_min_insync(factor)
        if factor < SAFE_REPLICATION_FACTOR:
            problems.append(Problem("warning", f"the Kafka cluster has {brokers} broker(s): topics run creates get "
                                    f"replication factor {factor} (min.insync.replicas {minimum}), and a broker "
                                    "lost loses what only it holds", "run 3 brokers or more; or set "
                                    f"kafka.topic_replication_factor to {factor} to say it is meant"))
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in replicas]
    in_sync: dict[str, int] = {}
    if resources:
        try:
            for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items():
                entry = future.result(timeout=timeout_s).get("min.insync.replicas")
                if entry is not None and entry.value is not None:
                    in_sync[resource.name] = int(entry.value)
        except Exception as exc:
            problems.append(Problem("warning", f"cannot read the configs of the topics under the prefix ({exc}): "
                                    "their min.insync.replicas is not checked",
                                    "grant DESCRIBE_CONFIGS on the topics to pgbridge's principal"))
    single = [name for name, copies in replicas.items() if copies == 1]
    few = [name for name, copies in replicas.items() if 1 < copies < SAFE_REPLICATION_FACTOR] if brokers >= 3 else []
    lax = [name for name, minimum in in_sync.items() if minimum < SAFE_MIN_INSYNC and replicas[name] > 1] \
        if brokers >= 3 else []
    if single:
        problems.append(Problem("warning", f"topics with a single copy (replication factor 1): {_names(single)}; "
                                "with acks=all a write still rests on one broker, and losing it loses the records",
                                "give each partition 3 replicas (kafka-reassign-partitions.sh --execute with a "
                                "reassignment listing 3 brokers per partition) and set min.insync.replicas=2"))
    if few:
        problems.append(Problem("warning", f"topics with fewer than {SAFE_REPLICATION_FACTOR} copies on a cluster of "
                                f"{brokers} brokers: {_names(few)}", "give each partition 3 replicas "
                                "(kafka-reassign-partitions.sh --execute)"))
    if lax:
        problems.append(Problem("warning", f"topics with min.insync.replicas below {SAFE_MIN_INSYNC} on a cluster of "
                                f"{brokers} brokers: {_names(lax)}; acks=all is then satisfied by the leader alone",
                                f"kafka-configs.sh --bootstrap-server {kafka.bootstrap_servers} --alter --entity-type "
                                f"topics --entity-name <topic> --add-config min.insync.replicas={SAFE_MIN_INSYNC}"))
    return problems


def _acl_command(kafka: KafkaConfig, operations: list[str], resource: str) -> str:
    ops = " ".join(f"--operation {op}" for op in operations)
    return (f"kafka-acls.sh --bootstrap-server {kafka.bootstrap_servers} --add --allow-principal User:<pgbridge> "
            f"{ops} {resource}")


def _has_authorizer(admin: AdminClient, broker_id: int | None, timeout_s: float) -> bool:
    """Whether the brokers check ACLs: a broker's ``authorizer.class.name`` (empty without one); a
    principal that may not read it is itself the answer. Without a broker to ask, the ACL listing
    (an error SECURITY_DISABLED without an authorizer)."""
    def refused(exc: KafkaException) -> bool:
        error = exc.args[0]
        return isinstance(error, KafkaError) and error.code() in (KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                                                                   KafkaError.TOPIC_AUTHORIZATION_FAILED)
    if broker_id is not None:
        resource = ConfigResource(ResourceType.BROKER, str(broker_id))
        try:
            entries = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(timeout=timeout_s)
        except KafkaException as exc:
            if refused(exc):
                return True
            raise
        entry = entries.get("authorizer.class.name")
        if entry is not None:
            return bool(entry.value)
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                                  AclOperation.ANY, AclPermissionType.ANY)
    try:
        admin.describe_acls(everything, request_timeout=timeout_s).result(timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0]
        if isinstance(error, KafkaError) and error.code() == KafkaError.SECURITY_DISABLED:
            return False
        if refused(exc):
            return True
        raise
    return True


def acl_problems(admin: AdminClient, settings: Settings, topics: list[str], timeout_s: float,
                 broker_id: int | None = None) -> list[Problem]:
    """The Kafka ACLs ``run`` needs (docs/operations.md, "Kafka ACLs"), from the operations the
    brokers say pgbridge's principal may perform (authorized operations of the cluster and of each
    existing topic under the prefix). A broker without an authorizer allows everything."""
    kafka = settings.kafka
    by_hand = "check them by hand (docs/operations.md, \"Kafka ACLs\")"
    try:
        if not _has_authorizer(admin, broker_id, timeout_s):
            return [Problem("info", "no authorizer: ACLs not checked", "none needed: the brokers allow every client "
                            "everything (docs/operations.md lists the ACLs to grant when they get one)")]
    except Exception as exc:
        return [Problem("warning", f"cannot tell whether Kafka checks ACLs ({exc}): ACLs not checked", by_hand)]
    try:
        cluster = admin.describe_cluster(include_authorized_operations=True,
                                         request_timeout=timeout_s).result(timeout=timeout_s)
        allowed: dict[str, set[AclOperation]] = {}
        if topics:
            described = admin.describe_topics(TopicCollection(topics), include_authorized_operations=True,
                                              request_timeout=timeout_s)
            for name, future in described.items():
                allowed[name] = set(future.result(timeout=timeout_s).authorized_operations or [])
    except Exception as exc:
        return [Problem("warning", f"Kafka checks ACLs but did not say what pgbridge may do ({exc})", by_hand)]
    prefixed = f"--topic {sanitize(kafka.topic_prefix + '.')} --resource-pattern-type prefixed"
    problems: list[Problem] = []
    if cluster.authorized_operations is None:  # the brokers tell it only to a principal with DESCRIBE on it
        problems.append(Problem("info", "Kafka does not tell pgbridge's principal what it may do on the cluster "
                                "(no DESCRIBE on it): CREATE and IDEMPOTENT_WRITE on the cluster not checked",
                                _acl_command(kafka, ["Describe"], "--cluster") + " lets pgbridge check see them"))
    else:
        on_cluster = set(cluster.authorized_operations)
        if AclOperation.CREATE not in on_cluster and not any(AclOperation.CREATE in ops for ops in allowed.values()):
            problems.append(Problem("warning", "pgbridge's principal may not create topics (no CREATE on the cluster "
                                    "or on the prefix): a table's first change fails unless its topic exists",
                                    _acl_command(kafka, ["Create"], prefixed) + "; or create every topic beforehand"))
        if AclOperation.IDEMPOTENT_WRITE not in on_cluster:
            problems.append(Problem("warning", "pgbridge's principal has no IDEMPOTENT_WRITE on the cluster: brokers "
                                    "before Kafka 3.0 refuse its idempotent producer (3.0+ accept WRITE on the "
                                    "topic)", _acl_command(kafka, ["IdempotentWrite"], "--cluster")))
    lacking = [name for name, ops in allowed.items() if not {AclOperation.WRITE, AclOperation.DESCRIBE} <= ops]
    if lacking:
        problems.append(Problem("error", f"pgbridge's principal may not WRITE or DESCRIBE topics {_names(lacking)}",
                                _acl_command(kafka, ["Write", "Describe"], prefixed)))
    read = [progress_topic(kafka.topic_prefix)] + ([offsets_topic(kafka.topic_prefix)] if kafka.exactly_once else [])
    unreadable = [name for name in read if name in allowed and AclOperation.READ not in allowed[name]]
    if unreadable:
        problems.append(Problem("error", f"pgbridge's principal may not READ {_names(unreadable)}, which it reads "
                                "back at start", _acl_command(kafka, ["Read"], prefixed)))
    if kafka.exactly_once:
        problems.append(Problem("info", "exactly-once needs WRITE and DESCRIBE on transactional id "
                                f"{transactional_id(kafka.topic_prefix, settings.postgres.slot)} and READ on group "
                                f"{OFFSETS_GROUP}, which no client can query",
                                _acl_command(kafka, ["Write", "Describe"], "--transactional-id "
                                             f"{transactional_id(kafka.topic_prefix, settings.postgres.slot)}") +
                                "; " + _acl_command(kafka, ["Read"], f"--group {OFFSETS_GROUP}")))
    return problems


def check_schema_registry(settings: Settings) -> list[Problem]:
    """With ``schema_registry.url`` set: the registry answers, and accepts the credentials."""
    if not settings.schema_registry.url:
        return []
    from pgbridge.publish.registry import ConfluentRegistrar

    try:
        ConfluentRegistrar.connect(settings.schema_registry).close()
    except PgbridgeError as exc:
        fix = exc.hint or "check schema_registry.url and that the Schema Registry is up"
        return [Problem("error", str(exc), fix)]
    return []



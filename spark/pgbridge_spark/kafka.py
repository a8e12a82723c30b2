"""Kafka I/O with confluent-kafka: partitions of a subscription, end offsets, reading a range.

Used on the driver to read ``{prefix}._schemas`` (the records themselves come through Spark's
``kafka`` source). The user's ``--kafka-option`` properties are the Java consumer's, as Spark's
source takes them; ``schema_reader_options`` turns them into this reader's librdkafka ones.

Two broker facts shape it:

* Metadata is always asked for *all* topics: some brokers (Tansu) create a topic that a metadata
  request names, and a reader must never create topics.
* A high watermark is a lower bound of the end, not the end: some brokers (Tansu) report only the
  first record of the last batch written. ``end_offsets`` therefore *probes*: it reads from just
  below the watermark to the real end (one fetch on a correct broker) unless told to trust it.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

_TOPIC_INVALID: Final = re.compile(r"[^A-Za-z0-9._-]")

# How long the broker may hold a fetch that finds no record, for both of the job's readers (the
# schema reader here: librdkafka's ``fetch.wait.max.ms``; Spark's ``kafka`` source: the Java
# consumer's ``fetch.max.wait.ms``, source.py). Kafka's default is 500 ms, and a read that reaches
# the end of what it wants ends on such a fetch: measured on the job, a one-record micro-batch's
# read task took 514 ms, 8.6 ms of it on the CPU, and 69 ms with 50 (docs/spark.md, "The Kafka
# fetch wait"; SPARK-44012's log line shows the same 504 ms for one record). A fetch that finds
# records returns at once whatever this is, so large reads are as before.
FETCH_MAX_WAIT_MS: Final = 50


def topic_name(*parts: str) -> str:
    """pgbridge's topic naming: parts joined with dots, other characters as ``_``."""
    return _TOPIC_INVALID.sub("_", ".".join(parts))


def table_topic_pattern(prefix: str) -> str:
    """Regex (Java and Python) of every table topic of ``prefix``: ``{prefix}.{schema}.{table}``.

    pgbridge's own topics (``messages``, ``transactions``, ``_schemas``, ``_snapshot``) have one
    part after the prefix, table topics at least two.
    """
    return rf"{re.escape(prefix)}\.[^.]+\..+"


# pgbridge's kafka.topic_routes: the key field naming the real table ("schema.table") on a topic that
# holds several tables (publish/routing.py in the service).
TABLE_KEY_FIELD: Final = "__pgbridge_table"


class MultiTableTopic(ValueError):
    """A topic several tables were routed onto: one mirror directory holds one table's rows."""


def refuse_multi_table(topic: str, key_schema: str | None, value_schemas: Iterable[str]) -> None:
    """Raise ``MultiTableTopic`` if ``topic``'s records come from several tables: its key schema
    (JSON) has ``TABLE_KEY_FIELD``, or its value schemas (JSON) name more than one table (each
    table's envelope has the namespace ``{prefix}.{schema}.{table}``)."""
    tables = sorted({json.loads(text).get("namespace", "") for text in value_schemas})
    keyed = key_schema is not None and any(f.get("name") == TABLE_KEY_FIELD
                                           for f in json.loads(key_schema).get("fields", []))
    if keyed or len(tables) > 1:
        seen = f" (records of {', '.join(tables)})" if len(tables) > 1 else f" (its keys carry {TABLE_KEY_FIELD})"
        raise MultiTableTopic(f"topic {topic} holds several tables{seen}: pgbridge's kafka.topic_routes put them "
                              "on one topic, and a mirror or changelog holds one table per topic; route each table "
                              "to a topic of its own to mirror it")


def consumer_config(bootstrap: str, options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An assign-only consumer: no group membership, no commits, never creates topics."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"pgbridge-spark-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "allow.auto.create.topics": False,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": FETCH_MAX_WAIT_MS,
        "topic.metadata.refresh.interval.ms": 1000,
        # Exactly-once topics (kafka.exactly_once): never read records of aborted Kafka transactions.
        # Harmless on at-least-once topics, which have none.
        "isolation.level": "read_committed",
    }
    config.update(options or {})
    return config


class UnsupportedKafkaOption(ValueError):
    """A ``--kafka-option`` (a Java consumer property) the schema reader cannot be given."""


# Java consumer properties that mean the same to librdkafka under the same name. Every other
# property is the Java consumer's only: tuning (fetch sizes, timeouts, poll records) that the
# schema reader, reading one small topic once, has no use for.
_SAME_IN_BOTH: Final = frozenset({"security.protocol", "sasl.mechanism", "client.id", "client.rack",
                                  "sasl.kerberos.service.name"})
_JAAS: Final = re.compile(r"^\s*(?P<module>[\w.$]+)\s+required(?P<pairs>.*?);?\s*$", re.DOTALL)
_PASSWORD_MODULES: Final = frozenset({"org.apache.kafka.common.security.plain.PlainLoginModule",
                                      "org.apache.kafka.common.security.scram.ScramLoginModule"})
_OAUTH_MODULE: Final = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# Kafka's login callback handler that fetches tokens from sasl.oauthbearer.token.endpoint.url
# (KIP-768; in ...oauthbearer.secured before Kafka 3.4, where it still is as a subclass)
_OIDC_HANDLER: Final = re.compile(r"org\.apache\.kafka\.common\.security\.oauthbearer\.(?:secured\.)?"
                                  r"OAuthBearerLoginCallbackHandler")
_JAAS_PAIR: Final = re.compile(r'(?P<key>[A-Za-z_.]+)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"')
_HOW_TO_BYPASS: Final = ("give the schema reader its librdkafka properties with --schema-reader-option (they "
                         "replace what the job derives from --kafka-option), or read schemas from a Schema "
                         "Registry (--schema-registry-url)")


@dataclass(frozen=True)
class JavaStore:
    """A Java key or trust store file (JKS, PKCS12, ...) named by ``--kafka-option``. librdkafka
    reads none of them but PKCS12 key stores; the driver's JVM reads them all (``java_stores``)."""

    location: str
    kind: str  # ssl.truststore.type / ssl.keystore.type, Kafka's default JKS
    password: str | None = None  # the store's
    key_password: str | None = None  # the private key's (key stores); None: the store's


@dataclass(frozen=True)
class PemStore:
    """What librdkafka is given instead of a Java store: certificates, and a key store's private key."""

    certificates: str  # PEM: a trust store's trusted certificates, or a key store's chain
    key: str | None = None  # PEM, PKCS#8, unencrypted (held in memory, never written)


StoreReader = Callable[[JavaStore, bool], PemStore]  # (store, is a key store) -> its PEM


def schema_reader_options(kafka_options: Mapping[str, str], reader_options: Mapping[str, str] | None = None,
                          read_store: StoreReader | None = None) -> dict[str, str]:
    """librdkafka properties for the schema reader, from the job's ``--kafka-option`` properties.

    ``--kafka-option`` takes the Java consumer's properties, as Spark's ``kafka`` source does; the
    schema reader is librdkafka, whose names differ where it matters most: credentials and trust.
    The connection settings are translated (a PLAIN or SCRAM ``sasl.jaas.config`` to
    ``sasl.username``/``sasl.password``, an OAUTHBEARER one to librdkafka's ``oidc`` method or
    unsecured token (``_oauthbearer``), PEM trust and key stores to ``ssl.ca.location`` /
    ``ssl.certificate.location`` / ``ssl.key.location``, a PKCS#12 key store as it is) and the
    tuning left to Spark's consumer. A store librdkafka cannot read (JKS, Kafka's default type; a
    PKCS#12 trust store) is read by ``read_store`` into ``ssl.ca.pem`` / ``ssl.certificate.pem`` +
    ``ssl.key.pem``; without a reader (the check at start, before the JVM is up) such a store is
    left out. A setting librdkafka has no equivalent for (GSSAPI, another login module or handler) raises
    ``UnsupportedKafkaOption`` naming the way around it: ``reader_options``, when given, are the
    reader's properties instead and nothing is translated.
    """
    if reader_options:
        return dict(reader_options)
    out = {key: value for key, value in kafka_options.items() if key in _SAME_IN_BOTH}
    if "sasl.jaas.config" in kafka_options:
        out.update(_login(kafka_options))
    out.update(_trust(kafka_options, read_store))
    out.update(_identity(kafka_options, read_store))
    algorithm = kafka_options.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = algorithm.lower() or "none"
    return out


def _login(java: Mapping[str, str]) -> dict[str, str]:
    """librdkafka's credentials from the Java login module (``sasl.jaas.config``): a PLAIN or SCRAM
    username and password, or OAUTHBEARER (``_oauthbearer``)."""
    jaas = java["sasl.jaas.config"]
    match = _JAAS.match(jaas)
    module = match["module"] if match else (jaas.split() or ["(empty)"])[0]
    pairs = ({m["key"]: re.sub(r"\\(.)", r"\1", m["value"]) for m in _JAAS_PAIR.finditer(match["pairs"])}
             if match else {})
    if match and module == _OAUTH_MODULE:
        return _oauthbearer(java, pairs)
    if not match or module not in _PASSWORD_MODULES or "username" not in pairs or "password" not in pairs:
        raise UnsupportedKafkaOption(
            f"--kafka-option sasl.jaas.config: the job's schema reader (librdkafka) takes the username and "
            f"password of PlainLoginModule or ScramLoginModule, or OAuthBearerLoginModule, not {module}; "
            f"{_HOW_TO_BYPASS}")
    return {"sasl.username": pairs["username"], "sasl.password": pairs["password"]}


def _oauthbearer(java: Mapping[str, str], pairs: Mapping[str, str]) -> dict[str, str]:
    """OAUTHBEARER as the Java client logs in, in librdkafka's words.

    With Kafka's ``OAuthBearerLoginCallbackHandler`` the Java client fetches tokens from
    ``sasl.oauthbearer.token.endpoint.url`` with the client credentials grant (``clientId``,
    ``clientSecret``, ``scope`` in the login module, or Kafka 4.1's
    ``sasl.oauthbearer.client.credentials.*`` properties): librdkafka's ``oidc`` method does the
    same. Without a login callback handler it makes an unsecured token for
    ``unsecuredLoginStringClaim_sub`` (development brokers): librdkafka's unsecured JWT. SASL
    extensions (``extension_NAME``) go along either way. Another handler or grant is refused."""
    handler = java.get("sasl.login.callback.handler.class", "").strip()
    extensions = {key.removeprefix("extension_"): value for key, value in pairs.items()
                  if key.startswith("extension_")}
    if not handler:
        if "unsecuredLoginStringClaim_sub" in pairs:
            config = " ".join([f"principal={pairs['unsecuredLoginStringClaim_sub']}",
                               *(f"extension_{k}={v}" for k, v in extensions.items())])
            return {"enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": config}
        refused = "a login without unsecuredLoginStringClaim_sub or a callback handler"
    elif not _OIDC_HANDLER.fullmatch(handler):
        refused = f"the handler {handler}"
    elif "JwtBearer" in java.get("sasl.oauthbearer.jwt.retriever.class", ""):
        refused = "the JWT bearer grant (sasl.oauthbearer.jwt.retriever.class)"
    else:
        endpoint = java.get("sasl.oauthbearer.token.endpoint.url")
        client_id = pairs.get("clientId") or java.get("sasl.oauthbearer.client.credentials.client.id")
        secret = pairs.get("clientSecret") or java.get("sasl.oauthbearer.client.credentials.client.secret")
        if endpoint and client_id and secret:
            out = {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": endpoint,
                   "sasl.oauthbearer.client.id": client_id, "sasl.oauthbearer.client.secret": secret}
            scope = pairs.get("scope") or java.get("sasl.oauthbearer.scope")
            if scope:
                out["sasl.oauthbearer.scope"] = scope
            if extensions:
                out["sasl.oauthbearer.extensions"] = ",".join(f"{k}={v}" for k, v in extensions.items())
            return out
        refused = "a login missing the token endpoint URL, the client id or the client secret"
    raise UnsupportedKafkaOption(
        "--kafka-option sasl.jaas.config: the job's schema reader (librdkafka) takes OAuthBearerLoginModule with "
        "Kafka's OAuthBearerLoginCallbackHandler, sasl.oauthbearer.token.endpoint.url and a client id and secret "
        f"(the client credentials grant), or unsecuredLoginStringClaim_sub without a callback handler, not {refused}; "
        f"{_HOW_TO_BYPASS}")


def _trust(java: Mapping[str, str], read_store: StoreReader | None) -> dict[str, str]:
    """The CA certificates librdkafka verifies the broker with, from the Java trust store settings."""
    if "ssl.truststore.certificates" in java:
        return {"ssl.ca.pem": java["ssl.truststore.certificates"]}
    if "ssl.truststore.location" not in java:
        return {}
    kind = java.get("ssl.truststore.type", "JKS").upper()
    if kind == "PEM":
        return {"ssl.ca.location": java["ssl.truststore.location"]}
    if read_store is None:
        return {}
    store = JavaStore(java["ssl.truststore.location"], kind, java.get("ssl.truststore.password"))
    return {"ssl.ca.pem": read_store(store, False).certificates}


def _identity(java: Mapping[str, str], read_store: StoreReader | None) -> dict[str, str]:
    """The client certificate and key (mutual TLS), from the Java key store settings."""
    out: dict[str, str] = {}
    if "ssl.keystore.certificate.chain" in java:
        out["ssl.certificate.pem"] = java["ssl.keystore.certificate.chain"]
    if "ssl.keystore.key" in java:
        out["ssl.key.pem"] = java["ssl.keystore.key"]
    if "ssl.keystore.location" in java:
        kind = java.get("ssl.keystore.type", "JKS").upper()
        location = java["ssl.keystore.location"]
        if kind == "PKCS12":
            out["ssl.keystore.location"] = location
            if "ssl.keystore.password" in java:
                out["ssl.keystore.password"] = java["ssl.keystore.password"]
        elif kind == "PEM":  # Kafka's PEM key store: the key and its certificate chain in one file
            out["ssl.certificate.location"] = location
            out["ssl.key.location"] = location
        elif read_store is not None:  # the key comes out decrypted: ssl.key.password is not passed on
            pem = read_store(JavaStore(location, kind, java.get("ssl.keystore.password"),
                                       java.get("ssl.key.password")), True)
            return {"ssl.certificate.pem": pem.certificates, "ssl.key.pem": pem.key or ""}
    if "ssl.key.password" in java and ("ssl.key.location" in out or "ssl.key.pem" in out):
        out["ssl.key.password"] = java["ssl.key.password"]
    return out


def partitions_of(consumer: Consumer, *, topics: Iterable[str] = (), pattern: str | None = None,
                  timeout: float = 10.0) -> list[tuple[str, int]]:
    """``(topic, partition)`` of the existing topics named or matching ``pattern`` (full match)."""
    metadata = consumer.list_topics(timeout=timeout)
    wanted = set(topics)
    regex = re.compile(pattern) if pattern else None
    out: list[tuple[str, int]] = []
    for name, topic in metadata.topics.items():
        if topic.error is not None or not (name in wanted or (regex is not None and regex.fullmatch(name))):
            continue
        out.extend((name, p) for p in topic.partitions)
    return sorted(out)


def end_offsets(consumer: Consumer, partitions: Iterable[tuple[str, int]], *, floor: Mapping[tuple[str, int], int],
                probe: bool = True, probe_idle_s: float = 0.15, timeout: float = 10.0) -> dict[tuple[str, int], int]:
    """The offset after the last record of each partition (``floor``: known lower bounds)."""
    ends: dict[tuple[str, int], int] = {}
    for tp in partitions:
        _low, high = consumer.get_watermark_offsets(TopicPartition(tp[0], tp[1]), timeout=timeout, cached=False)
        ends[tp] = max(high, floor.get(tp, 0))
    if not probe:
        return ends
    start = {tp: max(end - 1, 0) for tp, end in ends.items()}
    consumer.assign([TopicPartition(t, p, o) for (t, p), o in start.items()])
    try:
        last_record = time.monotonic()
        deadline = last_record + timeout
        while time.monotonic() - last_record < probe_idle_s and time.monotonic() < deadline:
            message = consumer.poll(probe_idle_s / 3)
            if message is None:
                continue
            if message.error() is not None:
                _raise_fatal(message)
                continue
            topic, partition, offset = _coordinates(message)
            ends[(topic, partition)] = max(ends[(topic, partition)], offset + 1)
            last_record = time.monotonic()
    finally:
        consumer.unassign()
    return ends


def read_range(consumer: Consumer, topic: str, partition: int, start: int, end: int, *,
               timeout: float = 60.0) -> Iterator[Message]:
    """Records of ``topic``/``partition`` with ``start <= offset < end``, in offset order.

    Gaps (compaction, transaction markers) are fine: reading stops once the consumer's position
    reaches ``end``. Raises ``TimeoutError`` if it stalls for ``timeout`` seconds before that.
    """
    if end <= start:
        return
    tp = TopicPartition(topic, partition, start)
    consumer.assign([tp])
    stalled_since = time.monotonic()
    try:
        while True:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                _topic, _partition, offset = _coordinates(message)
                if offset >= end:
                    return
                if offset >= start:
                    yield message
                stalled_since = time.monotonic()
                if offset >= end - 1:
                    return
                continue
            if message is not None:
                _raise_fatal(message)
            position = consumer.position([TopicPartition(topic, partition)])[0].offset
            if position >= end:
                return
            if time.monotonic() - stalled_since > timeout:
                raise TimeoutError(f"{topic}[{partition}]: no record between offsets {max(position, start)} and "
                                   f"{end} within {timeout:g}s (records deleted by retention?)")
    finally:
        consumer.unassign()


def read_all(consumer: Consumer, topic: str, *, idle_s: float = 0.3, timeout: float = 30.0) -> list[Message]:
    """Every record of ``topic`` (all partitions) up to its end (see ``end_offsets``)."""
    partitions = partitions_of(consumer, topics=[topic], timeout=timeout)
    ends = end_offsets(consumer, partitions, floor={}, probe_idle_s=idle_s, timeout=timeout)
    out: list[Message] = []
    for (name, partition), end in ends.items():
        out.extend(read_range(consumer, name, partition, 0, end, timeout=timeout))
    return out


def read_schema_topic(bootstrap: str, prefix: str, options: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{prefix}._schemas`` as ``{fingerprint hex: schema JSON}``."""
    consumer = Consumer(consumer_config(bootstrap, options))
    try:
        records = read_all(consumer, topic_name(prefix, "_schemas"))
    finally:
        consumer.close()
    out = {}
    for record in records:
        key, value = record.key(), record.value()
        if key is not None and value is not None:
            out[key.decode() if isinstance(key, bytes) else key] = (
                value.decode() if isinstance(value, bytes) else value)
    return out


def _coordinates(message: Message) -> tuple[str, int, int]:
    """Topic, partition and offset of a consumed record (set on every record without an error)."""
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if topic is None or partition is None or offset is None:
        raise RuntimeError(f"consumed record without coordinates: topic={topic!r} partition={partition!r} "
                           f"offset={offset!r}")
    return topic, partition, offset


def _raise_fatal(message: Message) -> None:
    error = message.error()
    if error is None or error.code() == KafkaError._PARTITION_EOF:
        return
    if error.fatal() or error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED):
        raise KafkaException(error)

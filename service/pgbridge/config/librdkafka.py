"""librdkafka property names: which keys ``kafka.properties`` may hold, and their environment form.

librdkafka itself is the authority on which names exist: ``is_librdkafka_property`` asks the
installed library (a throw-away configuration that is never turned into a client), so a property a
newer librdkafka adds is accepted without a pgbridge release. ``LIBRDKAFKA_PROPERTIES`` lists the
names users set (callbacks and internal pointers left out) of the librdkafka pgbridge is tested
with; it only supplies the "did you mean" suggestion of an unknown key. ``tests/unit/config``
checks it against the installed library.

A dotted name is not a valid shell variable name (``PGBRIDGE_KAFKA__PROPERTIES__SASL.PASSWORD``),
so the environment may spell it with underscores: ``PGBRIDGE_KAFKA__PROPERTIES__SASL_PASSWORD`` is
``sasl.password``. That is unambiguous because librdkafka's settable names use dots between words;
the few with underscores (``log_level``, ``enable_sasl_queue``, ``enabled_events``) have no dotted
twin, and a key librdkafka knows as written is always kept as written.
"""

from __future__ import annotations

import difflib
from functools import cache
from typing import Final

from confluent_kafka import KafkaException, Producer

# The librdkafka release ``LIBRDKAFKA_PROPERTIES`` was taken from: on another release a few names
# differ (2.12, the floor, lacks three newer ones), so the list is exact only against this one.
LISTED_FROM_VERSION: Final = "2.16.0"

# A name no librdkafka has: set after the probed one, it makes the probe fail without creating a client.
_PROBE_STOP: Final = "pgbridge.probe.never.a.property"

LIBRDKAFKA_PROPERTIES: Final = frozenset({
    "acks", "allow.auto.create.topics", "api.version.fallback.ms", "api.version.request",
    "api.version.request.timeout.ms", "auto.commit.enable", "auto.commit.interval.ms", "auto.offset.reset",
    "batch.num.messages", "batch.size", "bootstrap.servers", "broker.address.family", "broker.address.ttl",
    "broker.version.fallback", "builtin.features", "check.crcs", "client.dns.lookup", "client.id",
    "client.rack", "client.software.name", "client.software.version", "compression.codec", "compression.level",
    "compression.type", "connections.max.idle.ms", "consume.callback.max.messages",
    "coordinator.query.interval.ms", "debug", "delivery.report.only.error", "delivery.timeout.ms",
    "enable.auto.commit", "enable.auto.offset.store", "enable.gapless.guarantee", "enable.idempotence",
    "enable.metrics.push", "enable.partition.eof", "enable.random.seed",
    "enable.sasl.oauthbearer.unsecure.jwt", "enable.sparse.connections", "enable.ssl.certificate.verification",
    "enable_sasl_queue", "enabled_events", "fetch.error.backoff.ms", "fetch.max.bytes",
    "fetch.message.max.bytes", "fetch.min.bytes", "fetch.queue.backoff.ms", "fetch.wait.max.ms", "group.id",
    "group.instance.id", "group.protocol", "group.protocol.type", "group.remote.assignor",
    "heartbeat.interval.ms", "https.ca.location", "https.ca.pem", "internal.termination.signal",
    "isolation.level", "linger.ms", "log.connection.close", "log.queue", "log.thread.name", "log_level",
    "max.in.flight", "max.in.flight.requests.per.connection", "max.partition.fetch.bytes",
    "max.poll.interval.ms", "max.poll.records", "message.copy.max.bytes", "message.max.bytes",
    "message.send.max.retries", "message.timeout.ms", "metadata.broker.list", "metadata.max.age.ms",
    "metadata.recovery.rebootstrap.trigger.ms", "metadata.recovery.strategy", "metadata.request.timeout.ms",
    "offset.store.method", "offset.store.path", "offset.store.sync.interval.ms",
    "partition.assignment.strategy", "partitioner", "plugin.library.paths", "produce.offset.report",
    "queue.buffering.backpressure.threshold", "queue.buffering.max.kbytes", "queue.buffering.max.messages",
    "queue.buffering.max.ms", "queued.max.messages.kbytes", "queued.min.messages", "queuing.strategy",
    "receive.message.max.bytes", "reconnect.backoff.jitter.ms", "reconnect.backoff.max.ms",
    "reconnect.backoff.ms", "request.required.acks", "request.timeout.ms", "retries", "retry.backoff.max.ms",
    "retry.backoff.ms", "sasl.jaas.config", "sasl.kerberos.keytab", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal", "sasl.kerberos.service.name",
    "sasl.mechanism", "sasl.mechanisms", "sasl.oauthbearer.assertion.algorithm",
    "sasl.oauthbearer.assertion.claim.aud", "sasl.oauthbearer.assertion.claim.exp.seconds",
    "sasl.oauthbearer.assertion.claim.iss", "sasl.oauthbearer.assertion.claim.jti.include",
    "sasl.oauthbearer.assertion.claim.nbf.seconds", "sasl.oauthbearer.assertion.claim.sub",
    "sasl.oauthbearer.assertion.file", "sasl.oauthbearer.assertion.jwt.template.file",
    "sasl.oauthbearer.assertion.private.key.file", "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem", "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config", "sasl.oauthbearer.extensions",
    "sasl.oauthbearer.grant.type", "sasl.oauthbearer.metadata.authentication.type", "sasl.oauthbearer.method",
    "sasl.oauthbearer.scope", "sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.token.endpoint.url",
    "sasl.password", "sasl.username", "security.protocol", "session.timeout.ms", "share.acknowledgement.mode",
    "socket.blocking.max.ms", "socket.connection.setup.timeout.ms", "socket.keepalive.enable",
    "socket.max.fails", "socket.nagle.disable", "socket.receive.buffer.bytes", "socket.send.buffer.bytes",
    "socket.timeout.ms", "ssl.ca.certificate.stores", "ssl.ca.location", "ssl.ca.pem",
    "ssl.certificate.location", "ssl.certificate.pem", "ssl.cipher.suites", "ssl.crl.location",
    "ssl.curves.list", "ssl.endpoint.identification.algorithm", "ssl.engine.id", "ssl.engine.location",
    "ssl.key.location", "ssl.key.password", "ssl.key.pem", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.providers", "ssl.sigalgs.list", "ssl.truststore.location", "statistics.interval.ms",
    "sticky.partitioning.linger.ms", "test.mock.broker.rtt", "test.mock.num.brokers", "transaction.timeout.ms",
    "transactional.id",
})


@cache
def is_librdkafka_property(name: str) -> bool:
    """Whether the installed librdkafka (or confluent-kafka's own layer) knows ``name``.

    librdkafka sets a configuration's properties in order and stops at the first failure, so
    ``{name: "", STOP: ""}`` fails on ``name`` only if ``name`` does not exist (or has no valid
    empty value), and otherwise on ``STOP``: no client is ever created.
    """
    try:
        Producer({name: "", _PROBE_STOP: ""})
    except KafkaException as exc:
        message = str(exc)
        return _PROBE_STOP in message or "No such configuration property" not in message
    except (TypeError, ValueError):  # confluent-kafka's own keys (callbacks) want other types
        return True
    return True  # not reached: the stop key always fails


def property_name(key: str) -> str | None:
    """The librdkafka name of a ``kafka.properties`` key: itself if librdkafka knows it, else its
    environment spelling with ``_`` for ``.`` (``sasl_password`` → ``sasl.password``); ``None``
    if neither exists."""
    name = key.strip().lower()
    if is_librdkafka_property(name):
        return name
    dotted = name.replace("_", ".")
    if dotted != name and is_librdkafka_property(dotted):
        return dotted
    return None


def closest_property(key: str) -> str | None:
    """The known property name closest to ``key`` (``sasl.pasword`` → ``sasl.password``)."""
    name = key.strip().lower().replace("_", ".")
    known = sorted(n for n in LIBRDKAFKA_PROPERTIES if is_librdkafka_property(n))  # never a newer release's name
    found = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return found[0] if found else None

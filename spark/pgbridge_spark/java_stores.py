"""Java key and trust stores read into PEM by the driver's JVM, for the job's schema reader.

Spark's ``kafka`` source is the Java consumer: it reads a trust or key store of any type the JVM
knows (JKS, Kafka's default; PKCS12; a provider's own). The job's other Kafka client, the reader
of ``{prefix}._schemas``, is librdkafka, which reads PEM (and PKCS#12 key stores). Rather than ask
users for a second copy of their stores, the job opens the same file with the same type and
passwords through ``java.security.KeyStore`` in the driver's JVM, where Spark's source reads it
too, and hands librdkafka the certificates and the key as PEM text (``ssl.ca.pem``,
``ssl.certificate.pem``, ``ssl.key.pem``). The key stays in memory: nothing is written to disk.

Which certificates a trust store yields follows the JDK's own trust managers: every trusted
certificate entry, and the first certificate of each key entry's chain.
"""

from __future__ import annotations

import base64
import logging
import textwrap
from typing import Any

from pyspark.sql import SparkSession

from pgbridge_spark.kafka import JavaStore, PemStore, StoreReader, UnsupportedKafkaOption

log = logging.getLogger("pgbridge_spark.java_stores")


def pem(kind: str, der: bytes) -> str:
    """One PEM block (``kind``: ``CERTIFICATE``, ``PRIVATE KEY``) of DER bytes."""
    body = "\n".join(textwrap.wrap(base64.b64encode(der).decode("ascii"), 64))
    return f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n"


def jvm_store_reader(spark: SparkSession) -> StoreReader:
    """A ``kafka.StoreReader`` that opens stores with ``spark``'s JVM (the driver's)."""
    def read(store: JavaStore, key_store: bool) -> PemStore:
        return read_store(spark, store, key_store=key_store)

    return read


def read_store(spark: SparkSession, store: JavaStore, *, key_store: bool) -> PemStore:
    """The store's certificates (a trust store) or its private key and chain (a key store) as PEM.

    Raises ``UnsupportedKafkaOption`` naming the store (never a password) when the JVM cannot open
    it or a key store holds no private key."""
    gateway: Any = spark.sparkContext._gateway
    jvm = gateway.jvm
    what = "ssl.keystore.location" if key_store else "ssl.truststore.location"
    try:
        keystore = jvm.java.security.KeyStore.getInstance(store.kind)
        stream = jvm.java.io.FileInputStream(store.location)
        try:
            keystore.load(stream, _chars(gateway, store.password))
        finally:
            stream.close()
        aliases = sorted(_aliases(keystore))
        if key_store:
            return _identity(gateway, keystore, aliases, store)
        return PemStore("".join(_trusted(keystore, aliases)))
    except UnsupportedKafkaOption:
        raise
    except Exception as exc:  # py4j's Py4JJavaError: the Java exception's class and message
        java = getattr(exc, "java_exception", None)
        reason = java.toString() if java is not None else str(exc).splitlines()[0]
        raise UnsupportedKafkaOption(
            f"--kafka-option {what}: the driver could not read the {store.kind} store {store.location} for the "
            f"job's schema reader: {reason}") from None


def _chars(gateway: Any, text: str | None) -> Any:
    """A Java ``char[]`` (a store's password), or null. Filled a char at a time: py4j hands every
    Java ``String`` back as a Python ``str``, so ``String.toCharArray`` cannot be reached."""
    if text is None:
        return None
    chars = gateway.new_array(gateway.jvm.char, len(text))
    for i, char in enumerate(text):
        chars[i] = char
    return chars


def _key_bytes(gateway: Any, key: Any) -> bytes | None:
    """``key.getEncoded()`` (PKCS#8 for a private key) called through ``java.security.Key``: the
    JDK's key classes live in packages its modules do not export, where py4j's reflection on the
    object's own class is refused (IllegalAccessException)."""
    jvm = gateway.jvm
    method = jvm.java.lang.Class.forName("java.security.Key").getMethod(
        "getEncoded", gateway.new_array(jvm.java.lang.Class, 0))
    encoded = method.invoke(key, gateway.new_array(jvm.java.lang.Object, 0))
    return None if encoded is None else bytes(encoded)


def _aliases(keystore: Any) -> list[str]:
    found = []
    names = keystore.aliases()
    while names.hasMoreElements():
        found.append(str(names.nextElement()))
    return found


def _trusted(keystore: Any, aliases: list[str]) -> list[str]:
    certificates = []
    for alias in aliases:
        if keystore.isCertificateEntry(alias):
            certificates.append(pem("CERTIFICATE", bytes(keystore.getCertificate(alias).getEncoded())))
        elif keystore.isKeyEntry(alias):
            chain = keystore.getCertificateChain(alias)
            if chain is not None and len(chain):
                certificates.append(pem("CERTIFICATE", bytes(chain[0].getEncoded())))
    return certificates


def _identity(gateway: Any, keystore: Any, aliases: list[str], store: JavaStore) -> PemStore:
    keys = [alias for alias in aliases if keystore.isKeyEntry(alias)]
    if not keys:
        raise UnsupportedKafkaOption(
            f"--kafka-option ssl.keystore.location: the {store.kind} store {store.location} holds no private key "
            "(a client certificate needs its key)")
    if len(keys) > 1:
        log.warning("the key store holds several keys; the schema reader uses the first alias",
                    extra={"location": store.location, "aliases": keys, "used": keys[0]})
    password = store.key_password if store.key_password is not None else store.password
    key = keystore.getKey(keys[0], _chars(gateway, password))
    encoded = _key_bytes(gateway, key) if key is not None else None
    if encoded is None:
        raise UnsupportedKafkaOption(
            f"--kafka-option ssl.keystore.location: the key {keys[0]!r} of {store.location} cannot be exported "
            "for the job's schema reader (a hardware or non-exportable key)")
    chain = keystore.getCertificateChain(keys[0])
    certificates = "".join(pem("CERTIFICATE", bytes(c.getEncoded())) for c in chain)
    return PemStore(certificates, pem("PRIVATE KEY", bytes(encoded)))

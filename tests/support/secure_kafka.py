"""Apache Kafka with secured listeners for the security tests: TLS (server verification), mutual TLS
and SASL/SCRAM-SHA-512 over TLS, on listeners of their own beside PLAINTEXT; and two OAUTHBEARER
listeners (``OAUTH_MODES``): one verifying tokens of an OpenID Connect identity provider
(``tests.support.oidc``) with Kafka's ``OAuthBearerValidatorCallbackHandler``, one taking Kafka's
unsecured development tokens.

One broker serves all three (``pgbridge.embedded.apache_kafka``: extra listeners and SCRAM
credentials created at format time), with certificates from a throwaway CA (``tests.support.tls``).
``SecureKafka`` gives each mode's client settings twice: as librdkafka properties (pgbridge's
``kafka.properties``) and as the Java consumer's (the Spark job's ``--kafka-option``).
"""

from __future__ import annotations

import secrets
from pathlib import Path

from jvm.fetch import classpath

from pgbridge.embedded.apache_kafka import KafkaCluster, start_kafka
from tests.support.oidc import AUDIENCE, ISSUER, IdentityProvider
from tests.support.tls import CertificateAuthority, Issued, jks_key_store, jks_trust_store

SCRAM_USER = "pgbridge"
MODES = ("tls", "mtls", "scram")
OAUTH_MODES = ("oidc", "devjwt")
OIDC_CLIENT = "pgbridge-mirror"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


class SecureKafka:
    """The broker, its CA, a client certificate (key encrypted) and the SCRAM password."""

    def __init__(self, cluster: KafkaCluster, ca: CertificateAuthority, client: Issued, key_password: str,
                 scram_password: str, idp: IdentityProvider) -> None:
        self.cluster = cluster
        self.idp = idp
        self.ca = ca
        self.client = client
        self.key_password = key_password
        self.scram_password = scram_password

    def bootstrap(self, mode: str) -> str:
        """The address of ``mode``'s listener."""
        return self.cluster.bootstrap_for(mode.upper())

    def properties(self, mode: str) -> dict[str, str]:
        """librdkafka settings of ``mode`` (the keys users put under ``kafka.properties``)."""
        tls = {"ssl.ca.location": str(self.ca.ca_cert)}
        if mode == "tls":
            return {"security.protocol": "SSL", **tls}
        if mode == "mtls":
            return {"security.protocol": "SSL", **tls, "ssl.certificate.location": str(self.client.cert),
                    "ssl.key.location": str(self.client.key), "ssl.key.password": self.key_password}
        return {"security.protocol": "SASL_SSL", **tls, "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": SCRAM_USER, "sasl.password": self.scram_password}

    def java_properties(self, mode: str) -> dict[str, str]:
        """The Java consumer's settings of ``mode``, as a Spark user writes them (PEM stores)."""
        tls = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca.ca_cert)}
        if mode == "tls":
            return {"security.protocol": "SSL", **tls}
        if mode == "mtls":
            return {"security.protocol": "SSL", **tls, "ssl.keystore.type": "PEM",
                    "ssl.keystore.location": str(self.client.chain), "ssl.key.password": self.key_password}
        if mode == "oidc":  # Kafka's token endpoint login (KIP-768), as the IdP's documentation gives it
            return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                    "sasl.login.callback.handler.class":
                        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
                    "sasl.oauthbearer.token.endpoint.url": self.idp.token_url,
                    "sasl.jaas.config": (f'{_OAUTH_MODULE} required clientId="{OIDC_CLIENT}" '
                                         f'clientSecret="{self.idp.client_secret}" scope="kafka";')}
        if mode == "devjwt":
            return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                    "sasl.jaas.config": f'{_OAUTH_MODULE} required unsecuredLoginStringClaim_sub="mirror";'}
        return {"security.protocol": "SASL_SSL", **tls, "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": ("org.apache.kafka.common.security.scram.ScramLoginModule required "
                                     f'username="{SCRAM_USER}" password="{self.scram_password}";')}

    def java_store_properties(self, mode: str, directory: Path) -> dict[str, str]:
        """``java_properties`` with JKS stores made under ``directory``: Kafka's default store type,
        so ``ssl.truststore.type`` is not given. The stores have passwords of their own."""
        store_password, key_password = secrets.token_hex(8), secrets.token_hex(8)
        properties = {key: value for key, value in self.java_properties(mode).items()
                      if not key.startswith(("ssl.truststore.", "ssl.keystore.", "ssl.key."))}
        trust = jks_trust_store(self.ca.ca_cert, directory / f"{mode}-trust.jks", store_password)
        properties |= {"ssl.truststore.location": str(trust), "ssl.truststore.password": store_password}
        if mode == "mtls":
            keys = jks_key_store(self.client, self.key_password, directory / f"{mode}-keys.jks", store_password,
                                 key_password)
            properties |= {"ssl.keystore.location": str(keys), "ssl.keystore.password": store_password,
                           "ssl.key.password": key_password}
        return properties

    def close(self) -> None:
        self.cluster.close()
        self.idp.close()


def broker_security(server: Issued, ca: CertificateAuthority, idp: IdentityProvider) -> dict[str, str]:
    """Broker overrides: PEM keystores for the three TLS listeners, client auth on MTLS, SCRAM on
    SCRAM; OAUTHBEARER verified against ``idp``'s key set on OIDC, unsecured tokens on DEVJWT."""
    props: dict[str, str] = {"sasl.enabled.mechanisms": "SCRAM-SHA-512"}
    for name in MODES:
        prefix = f"listener.name.{name}."
        props[prefix + "ssl.keystore.type"] = "PEM"
        props[prefix + "ssl.keystore.location"] = str(server.chain)
        props[prefix + "ssl.truststore.type"] = "PEM"
        props[prefix + "ssl.truststore.location"] = str(ca.ca_cert)
        props[prefix + "ssl.client.auth"] = "required" if name == "mtls" else "none"
    props["listener.name.scram.sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
    props["listener.name.scram.scram-sha-512.sasl.jaas.config"] = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;")
    for name in OAUTH_MODES:
        props[f"listener.name.{name}.sasl.enabled.mechanisms"] = "OAUTHBEARER"
        props[f"listener.name.{name}.oauthbearer.sasl.jaas.config"] = f"{_OAUTH_MODULE} required;"
    props["listener.name.oidc.oauthbearer.sasl.server.callback.handler.class"] = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler")
    props["listener.name.oidc.oauthbearer.sasl.oauthbearer.jwks.endpoint.url"] = idp.jwks_url
    props["listener.name.oidc.oauthbearer.sasl.oauthbearer.expected.audience"] = AUDIENCE
    props["listener.name.oidc.oauthbearer.sasl.oauthbearer.expected.issuer"] = ISSUER
    return props


def start_secure_kafka(directory: Path) -> SecureKafka:
    """A one-node broker with the three secured listeners, its CA and client credentials under ``directory``."""
    ca = CertificateAuthority(directory)
    server = ca.issue("broker", "localhost", hosts=("localhost", "127.0.0.1"))
    key_password = secrets.token_hex(8)
    client = ca.issue("client", "pgbridge", client=True, password=key_password)
    scram_password = secrets.token_hex(12)
    idp = IdentityProvider(OIDC_CLIENT, secrets.token_hex(12))
    try:
        cluster = start_kafka(classpath("kafka"), 1, overrides=broker_security(server, ca, idp),
                              listeners={"TLS": "SSL", "MTLS": "SSL", "SCRAM": "SASL_SSL", "OIDC": "SASL_PLAINTEXT",
                                         "DEVJWT": "SASL_PLAINTEXT"},
                              scram_users={SCRAM_USER: scram_password},
                              system_properties={"org.apache.kafka.sasl.oauthbearer.allowed.urls": idp.jwks_url})
    except BaseException:
        idp.close()
        raise
    return SecureKafka(cluster, ca, client, key_password, scram_password, idp)

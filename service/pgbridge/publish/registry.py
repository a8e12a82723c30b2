"""Making writer schemas known to consumers: ``{prefix}._schemas`` or a Confluent Schema Registry.

Registry-less mode: ``schema_announcer`` produces each schema to ``{prefix}._schemas`` and waits
for Kafka's acknowledgement before the first record that uses it is produced.

Registry mode (``schema_registry.url`` set): ``ConfluentRegistrar`` registers each writer schema
under its subject (``encode.subjects``: ``{topic}-key`` / ``{topic}-value`` by default) through
confluent-kafka's ``SchemaRegistryClient`` and frames records with the Confluent wire format
(``encode.wire.confluent_header``). With ``schema_registry.auto_register: false`` it only looks the
schema up under the subject (``POST /subjects/{subject}``) and never registers; a schema the subject
does not hold is a ``SchemaError`` naming the subject, raised before the record is produced. Registration
happens when a table's Relation version is first used, before any record with that schema is
produced, so a rejected schema stops the stream *before* the change that needed it: nothing at or
after that change is confirmed, and the change is read again after the operator fixed the cause.

Registry failures are classified here, where the client's error is seen (``registry_error``):

* 409, the subject's compatibility level rejected the schema → ``SchemaError`` (fatal) naming the
  subject and the registry's reason; 422, an invalid schema → ``SchemaError``.
* 401 / 403 → ``FatalError`` pointing at ``schema_registry.basic_auth_user_info``.
* unreachable, timeout, 408 / 429 / 5xx → ``RegistryUnavailable`` (transient): the pipeline's
  reconnect loop retries with capped exponential backoff.

The client retries a failed request only once, briefly: a longer outage belongs to the reconnect
loop, which logs it and keeps the walsender connection from timing out meanwhile.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError

from pgbridge.config import SchemaRegistryConfig
from pgbridge.encode.wire import SchemaRegistrar, SingleObjectRegistrar, confluent_header, schema_json
from pgbridge.errors import ConfigError, FatalError, PgbridgeError, RegistryUnavailable, SchemaError
from pgbridge.publish.producer import KafkaPublisher
from pgbridge.publish.topics import schemas_topic

# Inside one session the client retries a request once, after at most half a second; anything
# longer is an outage for the reconnect loop (BACKOFF_* in supervisor.py) to wait out.
_CLIENT_RETRIES: Final = 1
_CLIENT_RETRY_WAIT_MS: Final = 200
_CLIENT_RETRY_MAX_WAIT_MS: Final = 500
_TRANSIENT_STATUS: Final = frozenset({408, 429, 500, 502, 503, 504})
_SUBJECT_NOT_FOUND: Final = 40401  # the registry's error code of a 404 for an unknown subject (40403: schema)
_USERINFO: Final = re.compile(r"(://)[^/@\s]+@")
# The HTTP library under confluent-kafka's registry client: httpx, or its successor httpx2 that
# 2.16 prefers when installed. Both are looked up by their public names (never through the client's
# private modules, which differ between releases), and every one present is handled.
_HTTP_LIBRARIES: Final = ("httpx2", "httpx")


def _http_libraries() -> tuple[ModuleType, ...]:
    found = []
    for name in _HTTP_LIBRARIES:
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return tuple(found)


def _transport_errors() -> tuple[type[Exception], ...]:
    """The HTTP libraries' base error (connection refused, DNS, TLS, timeout: nothing answered)."""
    return tuple(library.HTTPError for library in _http_libraries())


def registrar_for(config: SchemaRegistryConfig,
                  publisher: KafkaPublisher) -> tuple[SchemaRegistrar, ConfluentRegistrar | None]:
    """How writer schemas are made known: a Schema Registry when ``schema_registry.url`` is set
    (Confluent wire format; an unreachable registry retries), else registry-less single-object
    encoding announcing each schema on ``{prefix}._schemas``. The registry, when there is one, is
    returned too: the session closes it."""
    if config.url:
        registry = ConfluentRegistrar.connect(config)
        return registry, registry
    return SingleObjectRegistrar(schema_announcer(publisher, publisher.config.topic_prefix)), None


def schema_announcer(publisher: KafkaPublisher, prefix: str) -> Callable[[str, str], None]:
    topic = schemas_topic(prefix)
    announced: set[str] = set()

    def announce(fingerprint_hex: str, schema_json: str) -> None:
        if schema_json in announced:  # by text: aliases are not part of the fingerprint
            return
        publisher.topics.ensure(topic, compacted=True)
        publisher.produce_sync(topic, fingerprint_hex.encode(), schema_json.encode())
        announced.add(schema_json)

    return announce


def public_url(url: str) -> str:
    """The registry URL as it may be logged: credentials in ``user:password@`` removed."""
    return _USERINFO.sub(r"\1", url)


def registry_client(config: SchemaRegistryConfig) -> SchemaRegistryClient:
    """A ``SchemaRegistryClient`` for ``config``; a malformed URL or user info is a ``ConfigError``."""
    if config.url is None:
        raise ConfigError("schema_registry.url is not set")
    conf: dict[str, Any] = {"url": config.url, "timeout": config.timeout_s, "max.retries": _CLIENT_RETRIES,
                            "retries.wait.ms": _CLIENT_RETRY_WAIT_MS,
                            "retries.max.wait.ms": _CLIENT_RETRY_MAX_WAIT_MS}
    if config.basic_auth_user_info is not None:
        conf["basic.auth.user.info"] = config.basic_auth_user_info.get_secret_value()
    if config.ssl_ca_location is not None:
        conf["ssl.ca.location"] = config.ssl_ca_location
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # httpx logs every request at INFO; registrations are already visible as schema ids.
        for library in _http_libraries():
            logging.getLogger(library.__name__).setLevel(logging.WARNING)
    try:
        return SchemaRegistryClient(conf)
    except (ValueError, TypeError, OSError) as exc:
        # The client's messages name the property, never its value.
        raise ConfigError(f"schema_registry settings are invalid: {exc}",
                          hint="schema_registry.url is http(s)://host:port, basic_auth_user_info is "
                          "user:password, ssl_ca_location an existing CA file or directory") from None


def close_client(client: SchemaRegistryClient) -> None:
    """Close the client's HTTP session: its context-manager exit, which every supported release has
    (``close()`` itself only appeared in confluent-kafka 2.15)."""
    with client:
        pass


def registry_error(exc: Exception, url: str, subject: str | None = None) -> PgbridgeError:
    """Classify a failure of a Schema Registry request (see the module docstring)."""
    where = f"Schema Registry at {public_url(url)}"
    about = f" for subject {subject}" if subject else ""
    if isinstance(exc, SchemaRegistryError):
        status, reason = exc.http_status_code, exc.error_message
        if status == 409:
            return SchemaError(
                f"{where} rejected the writer schema{about} as incompatible: {reason}",
                hint="the table changed in a way the subject's compatibility level forbids; changes already "
                "written in the new shape need this schema, so relax the subject's level "
                f"(PUT {public_url(url)}/config/{subject or '{subject}'} with "
                '{"compatibility": "NONE"}) and restart pgbridge: the rejected change was not confirmed and '
                "is read again; from then on evolve tables compatibly (add or drop nullable columns, keep "
                "column types)")
        if status == 422:
            return SchemaError(f"{where} refused the writer schema{about} as invalid: {reason}",
                               hint="report this as a pgbridge bug with the table's definition")
        if status in (401, 403):
            verb = "rejected the credentials" if status == 401 else "denied access"
            return FatalError(f"{where} {verb}{about}: {reason} (HTTP {status})",
                              hint="set schema_registry.basic_auth_user_info to user:password of a principal "
                              "allowed to read and register schemas of these subjects")
        if status in _TRANSIENT_STATUS or status >= 500:
            return RegistryUnavailable(f"{where} failed{about}: {reason} (HTTP {status})")
        return FatalError(f"{where} refused the request{about}: {reason} (HTTP {status})",
                          hint="check that schema_registry.url points at a Confluent-compatible Schema Registry")
    if isinstance(exc, _transport_errors()):  # connection refused, DNS, TLS, timeout: nothing was answered
        return RegistryUnavailable(f"{where} is unreachable{about}: {type(exc).__name__}: {exc}")
    if isinstance(exc, ValueError):  # a 2xx answer that is not JSON: something else listens there
        return FatalError(f"{where} answered{about} with something that is not a Schema Registry response",
                          hint="check schema_registry.url (scheme, host, port and path)")
    raise exc  # not a registry failure (a bug): let it surface as itself


class ConfluentRegistrar:
    """Registry mode's ``SchemaRegistrar``: register, then frame as ``00`` + 4-byte schema id.

    The encoder asks once per (subject, schema) and caches the header; the client caches ids as
    well, so a schema is registered once per session. Registering a schema the subject already
    holds returns its existing id, which is what makes a restart re-use the ids it had.
    """

    def __init__(self, client: SchemaRegistryClient, url: str, *, auto_register: bool = True) -> None:
        self._client = client
        self._url = url
        self._auto_register = auto_register

    @classmethod
    def connect(cls, config: SchemaRegistryConfig) -> ConfluentRegistrar:
        """Build the client and probe the registry, so an unreachable registry fails the session at
        start (and is retried) rather than in the middle of the first transaction."""
        registrar = cls(registry_client(config), config.url or "", auto_register=config.auto_register)
        try:
            registrar.probe()
        except BaseException:
            registrar.close()
            raise
        return registrar

    def probe(self) -> None:
        """One cheap authenticated request (``GET /schemas/types``)."""
        try:
            self._client.get_schema_types()
        except Exception as exc:
            raise registry_error(exc, self._url) from None

    def header_for(self, subject: str, schema: dict[str, Any]) -> bytes:
        if not self._auto_register:
            return confluent_header(self._look_up(subject, schema))
        try:
            schema_id = self._client.register_schema(subject, Schema(schema_json(schema), "AVRO"))
        except Exception as exc:
            raise registry_error(exc, self._url, subject) from None
        return confluent_header(int(schema_id))

    def _look_up(self, subject: str, schema: dict[str, Any]) -> int:
        """The id of ``schema`` under ``subject`` (``schema_registry.auto_register: false``): the
        exact text first, then normalized by the registry, as a registry may match text exactly
        (Apicurio) and the operator may have registered the schema formatted differently."""
        try:
            try:
                registered = self._client.lookup_schema(subject, Schema(schema_json(schema), "AVRO"))
            except SchemaRegistryError as exc:
                if exc.http_status_code != 404 or exc.error_code == _SUBJECT_NOT_FOUND:
                    raise
                registered = self._client.lookup_schema(subject, Schema(schema_json(schema), "AVRO"),
                                                        normalize_schemas=True)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                missing = ("has no subject" if exc.error_code == _SUBJECT_NOT_FOUND
                           else "has no matching schema under subject")
                raise SchemaError(
                    f"Schema Registry at {public_url(self._url)} {missing} {subject}, and "
                    "schema_registry.auto_register is false, so pgbridge does not register it",
                    hint=f"register the writer schema under {subject} (pgbridge schemas --subjects prints every "
                    "subject and schema run needs) and restart pgbridge: the change that needed it was not "
                    "confirmed and is read again; or set schema_registry.auto_register to true") from None
            raise registry_error(exc, self._url, subject) from None
        except Exception as exc:
            raise registry_error(exc, self._url, subject) from None
        if registered.schema_id is None:
            raise FatalError(f"Schema Registry at {public_url(self._url)} answered the look-up of subject {subject} "
                             "without a schema id",
                             hint="check that schema_registry.url points at a Confluent-compatible Schema Registry")
        return int(registered.schema_id)

    def close(self) -> None:
        close_client(self._client)


"""Configuration: one pydantic model per section, read from a YAML file and ``PGBRIDGE_`` variables.

Environment variables (prefix ``PGBRIDGE_``, nested with ``__``) override the YAML file given by
``--config`` or ``PGBRIDGE_CONFIG``. Unknown keys are errors, so a typo never silently falls back to
a default. Secrets are ``SecretStr`` and never appear in ``repr`` or logs.

The sections live in ``postgres``, ``kafka`` (with ``outbox`` and ``schema_registry``) and
``sections``; ``loading`` reads them. Everything is importable from here.
"""

from __future__ import annotations

from pgbridge.config.kafka import (
    DEFAULT_DELIVERY_TIMEOUT_MS,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_IN_FLIGHT_BYTES,
    DEFAULT_REGISTRY_TIMEOUT_S,
    KafkaConfig,
    OutboxConfig,
    SchemaRegistryConfig,
    TopicRoute,
)
from pgbridge.config.loading import (
    FILE_SUFFIX,
    REDACTED,
    Settings,
    effective_settings,
    env_name,
    load_settings,
    resolve_file_secrets,
)
from pgbridge.config.postgres import (
    DEFAULT_HEARTBEAT_INTERVAL_S,
    DEFAULT_SLOT_CHECK_INTERVAL_S,
    DEFAULT_STATUS_INTERVAL_S,
    PostgresConfig,
)
from pgbridge.config.sections import (
    DEFAULT_BUFFER_MEMORY_BYTES,
    DEFAULT_LEASE_S,
    DEFAULT_PUBLICATION_CHECK_S,
    DEFAULT_SIGNAL_PREFIX,
    DEFAULT_SNAPSHOT_CHUNK_ROWS,
    DEFAULT_SNAPSHOT_WORKERS,
    DEFAULT_STALL_S,
    DEFAULT_STANDBY_RETRY_S,
    DEFAULT_TOAST_CACHE_ROWS,
    BufferConfig,
    ColumnsConfig,
    HaConfig,
    HttpConfig,
    LogConfig,
    SnapshotConfig,
    ToastConfig,
    TypesConfig,
    WatchdogConfig,
)

__all__ = [
    "DEFAULT_BUFFER_MEMORY_BYTES",
    "DEFAULT_DELIVERY_TIMEOUT_MS",
    "DEFAULT_HEARTBEAT_INTERVAL_S",
    "DEFAULT_LEASE_S",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_IN_FLIGHT_BYTES",
    "DEFAULT_PUBLICATION_CHECK_S",
    "DEFAULT_REGISTRY_TIMEOUT_S",
    "DEFAULT_SIGNAL_PREFIX",
    "DEFAULT_SLOT_CHECK_INTERVAL_S",
    "DEFAULT_SNAPSHOT_CHUNK_ROWS",
    "DEFAULT_SNAPSHOT_WORKERS",
    "DEFAULT_STALL_S",
    "DEFAULT_STANDBY_RETRY_S",
    "DEFAULT_STATUS_INTERVAL_S",
    "DEFAULT_TOAST_CACHE_ROWS",
    "FILE_SUFFIX",
    "REDACTED",
    "BufferConfig",
    "ColumnsConfig",
    "HaConfig",
    "HttpConfig",
    "KafkaConfig",
    "LogConfig",
    "OutboxConfig",
    "PostgresConfig",
    "SchemaRegistryConfig",
    "Settings",
    "SnapshotConfig",
    "ToastConfig",
    "TopicRoute",
    "TypesConfig",
    "WatchdogConfig",
    "effective_settings",
    "env_name",
    "load_settings",
    "resolve_file_secrets",
]

"""Reading the settings: the YAML file, ``PGBRIDGE_`` variables, ``_FILE`` secrets, readable errors."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from pgbridge.config.kafka import KafkaConfig, OutboxConfig, SchemaRegistryConfig
from pgbridge.config.postgres import PostgresConfig
from pgbridge.config.sections import (
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
from pgbridge.errors import ConfigError


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PGBRIDGE_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        case_sensitive=False,
    )

    postgres: PostgresConfig
    kafka: KafkaConfig
    schema_registry: SchemaRegistryConfig = SchemaRegistryConfig()
    snapshot: SnapshotConfig = SnapshotConfig()
    toast: ToastConfig = ToastConfig()
    types: TypesConfig = TypesConfig()
    columns: ColumnsConfig = ColumnsConfig()
    http: HttpConfig = HttpConfig()
    buffer: BufferConfig = BufferConfig()
    log: LogConfig = LogConfig()
    ha: HaConfig = HaConfig()
    watchdog: WatchdogConfig = WatchdogConfig()
    outbox: OutboxConfig = OutboxConfig()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment first (wins), then the YAML file passed in as init kwargs. ``load_settings``
        # may hand a mapping of its own (file secrets resolved, or a test's); os.environ is never touched.
        environ = _ENVIRON.get()
        return (env_settings if environ is None else _MappingEnvSource(settings_cls, environ), init_settings)


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source reading a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)
        self.env_vars = self._load_env_vars()  # whatever the base class loaded in __init__

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # Settings are case-insensitive (model_config): keys are matched lower-cased
        return {key.lower(): value for key, value in getattr(self, "_environ", {}).items()}


# The environment ``load_settings`` builds from, for the duration of one ``Settings(...)`` call.
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("pgbridge_settings_environ", default=None)


_ENV_KEYS_IGNORED: Final = {"PGBRIDGE_CONFIG", "PGBRIDGE_PURE_PYTHON"}  # see pgbridge.native


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}",
                          hint="pass an existing YAML file with --config") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}",
                          hint="fix the YAML syntax") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections",
                          hint="start the file with keys such as postgres: and kafka:")
    return data


def env_name(path: tuple[str, ...]) -> str:
    """The environment variable of a setting: ``("postgres", "dsn")`` → ``PGBRIDGE_POSTGRES__DSN``."""
    return "PGBRIDGE_" + "__".join(part.upper() for part in path)


def _required_settings(model: type[BaseModel], path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The required leaf settings under ``path``: a whole missing section stands for the settings
    in it that have no default (``postgres`` → ``postgres.dsn``), the ones a user has to set."""
    leaves: list[tuple[str, ...]] = []
    for name, field in model.model_fields.items():
        if not field.is_required():
            continue
        inner = field.annotation
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            leaves.extend(_required_settings(inner, (*path, name)))
        else:
            leaves.append((*path, name))
    return leaves


def _missing(loc: tuple[str, ...]) -> list[tuple[str, ...]]:
    model: type[BaseModel] = Settings
    for part in loc:
        annotation = model.model_fields[part].annotation if part in model.model_fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return [loc]
        model = annotation
    return _required_settings(model, loc) or [loc]


def _describe(error: ValidationError) -> str:
    """Every problem of the configuration in one line: all missing settings with their variables
    (a first run with nothing set learns everything it needs at once), then unknown and invalid ones."""
    missing: list[tuple[str, ...]] = []
    problems: list[str] = []
    for item in error.errors():
        loc = tuple(str(part) for part in item["loc"])
        path = ".".join(loc) or "(root)"
        if item["type"] == "missing":
            missing.extend(leaf for leaf in _missing(loc) if leaf not in missing)
        elif item["type"] == "extra_forbidden":
            problems.append(f"unknown setting {path} (remove it; see the configuration table in README)")
        else:
            problems.append(f"invalid setting {path}: {_message(item['msg'])}")
    if missing:
        names = ", ".join(f"{'.'.join(leaf)} ({env_name(leaf)})" for leaf in missing)
        noun = "setting" if len(missing) == 1 else "settings"
        problems.insert(0, f"missing required {noun} {names}: set the variables or add them to the config file")
    return "; ".join(problems)


def _message(text: str) -> str:
    """A validator's own sentence without pydantic's "Value error, " in front of it."""
    return text.removeprefix("Value error, ")


FILE_SUFFIX: Final = "_FILE"


def resolve_file_secrets(env: dict[str, str]) -> dict[str, str]:
    """``PGBRIDGE_X_FILE=/path`` → ``PGBRIDGE_X=<file content>``, for secrets mounted as files.

    The Docker/Kubernetes convention (``POSTGRES_PASSWORD_FILE``): the value never enters the
    environment of the orchestrator. One trailing newline is dropped. Setting both ``X`` and
    ``X_FILE`` is an error rather than a silent precedence rule.
    """
    out = dict(env)
    for key, value in env.items():
        upper = key.upper()
        if not upper.startswith("PGBRIDGE_") or not upper.endswith(FILE_SUFFIX) or upper == "PGBRIDGE_CONFIG":
            continue
        target = key[: -len(FILE_SUFFIX)]
        if any(other.upper() == target.upper() for other in env):
            raise ConfigError(f"both {target} and {key} are set", hint="keep only one of them")
        try:
            content = Path(value).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {key}={value}: {exc.strerror}",
                              hint="mount the secret file or unset the variable") from None
        del out[key]
        out[target] = content[:-1] if content.endswith("\n") else content
    return out


_PROPERTIES_VARIABLE: Final = "PGBRIDGE_KAFKA__PROPERTIES"


def _spread_json_properties(env: dict[str, str]) -> dict[str, str]:
    """``PGBRIDGE_KAFKA__PROPERTIES='{"sasl.password": "..."}'`` → one ``PGBRIDGE_KAFKA__PROPERTIES__<key>``
    per entry, so the JSON form and the per-key form combine whatever the environment's order (left
    to pydantic-settings, the one read last would replace the other); a key in both is an error."""
    variable = next((key for key in env if key.upper() == _PROPERTIES_VARIABLE), None)
    if variable is None:
        return env
    try:
        entries = json.loads(env[variable])
    except ValueError:
        entries = None
    if not isinstance(entries, dict):
        raise ConfigError(f"{variable} is not a JSON object",
                          hint='write it as {"sasl.password": "...", "security.protocol": "SASL_SSL"}')
    out = {key: value for key, value in env.items() if key != variable}
    for key, value in entries.items():
        target = f"{_PROPERTIES_VARIABLE}__{key}"
        if any(other.upper() == target.upper() for other in out):
            raise ConfigError(f"{key} is set both in {variable} and as {target}", hint="keep only one of them")
        out[target] = value if isinstance(value, str) else json.dumps(value)
    return out


def load_settings(config_file: str | Path | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Build the settings from an optional YAML file and the environment; raise ``ConfigError``."""
    env = dict(os.environ if environ is None else environ)
    resolved = _spread_json_properties(resolve_file_secrets(env))
    if resolved != env:
        env = environ = resolved
    path = config_file or env.get("PGBRIDGE_CONFIG")
    file_data = _read_yaml(Path(path)) if path else {}
    unknown_env = sorted(
        key for key in env
        if key.upper().startswith("PGBRIDGE_") and key.upper() not in _ENV_KEYS_IGNORED
        and key.upper().split("__")[0][len("PGBRIDGE_"):].lower() not in Settings.model_fields
    )
    if unknown_env:
        raise ConfigError(f"unknown environment variable {unknown_env[0]}",
                          hint="remove it; see the configuration table in README")
    token = _ENVIRON.set(environ)
    try:
        return Settings(**file_data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    finally:
        _ENVIRON.reset(token)


REDACTED: Final = "**********"
# librdkafka properties whose values `pgbridge config` prints: everything else may hold a secret.
_SECRET_PROPERTY_PARTS: Final = ("password", "secret", "jaas", "token", "credential", "pem", "oauthbearer.config",
                                 "user.info")


def effective_settings(settings: Settings) -> dict[str, Any]:
    """The settings in force as plain data for ``pgbridge config``, with every secret redacted:
    the DSN keeps host, port, user and database but not its password, a registry URL loses its
    user info, and secret-looking librdkafka properties and ``SecretStr`` values become
    ``**********``."""
    from pgbridge.logs import redact

    data = settings.model_dump(mode="json", by_alias=True)
    data["postgres"]["dsn"] = redact(settings.postgres.dsn.get_secret_value())
    if settings.postgres.primary_dsn is not None:
        data["postgres"]["primary_dsn"] = redact(settings.postgres.primary_dsn.get_secret_value())
    data["kafka"]["properties"] = {
        key: REDACTED if any(part in key.lower() for part in _SECRET_PROPERTY_PARTS) else value.get_secret_value()
        for key, value in settings.kafka.properties.items()}
    url = settings.schema_registry.url
    if url is not None:
        data["schema_registry"]["url"] = redact(url)
    return data

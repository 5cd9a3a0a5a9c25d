"""The configuration: a TOML file, ``CAUCUS_*`` variables and command-line options, validated once.

Precedence, highest first: a command-line option, a ``CAUCUS_*`` environment variable, the
configuration file, the default. The file is ``--config PATH`` or ``CAUCUS_CONFIG``, else
``caucus.toml`` in the working directory if there is one. Every value is checked here (pydantic):
a bad one stops the command with exit 2 and a message naming the setting, where the value came
from and the rule it breaks, instead of a traceback wherever the value is first used.

In the file, settings may be written flat (``kafka_security_protocol = "SASL_SSL"``, the variable's
name without ``CAUCUS_``) or in sections::

    data_dir = "/var/lib/caucus"
    database = "postgresql://caucus@db/caucus"

    [kafka]
    bootstrap = "broker1:9093,broker2:9093"
    security_protocol = "SASL_SSL"
    sasl_mechanism = "SCRAM-SHA-512"
    sasl_username = "caucus"
    sasl_password = "..."
    ssl_cafile = "/etc/caucus/ca.pem"

    [kafka.client]            # any other kafka-python client property, passed through
    request_timeout_ms = 30000

    [logging]
    level = "INFO"
    format = "json"

``caucus config show`` prints the effective settings and where each came from, secrets masked.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from ledger.config import DEFAULT_DATA_DIR, DEFAULT_TOPIC, Settings, results_topic_for
from ledger.files import check_file_mode

__all__ = ["CaucusSettings", "LoadedSettings", "SettingsError", "load_settings", "DEFAULT_CONFIG_FILE", "ENV_PREFIX"]

ENV_PREFIX = "CAUCUS_"
DEFAULT_CONFIG_FILE = "caucus.toml"
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HOST_PORT = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")
_SECRET_WORDS = ("password", "secret", "token", "key_password")

_OTHER_VARIABLES = {ENV_PREFIX + "CONFIG", ENV_PREFIX + "PG_DSN", ENV_PREFIX + "RUN_DIR", ENV_PREFIX + "KEY_HOME"}
"""Variables that are not settings: the configuration file itself, the signing key's home (kept out of
every configuration a data directory may carry), and the test and broker helpers'."""

FLAGS = {
    "data_dir": "--data-dir", "kafka": "--kafka", "topic": "--topic", "database": "--database",
    "partitions": "--partitions", "log_level": "--log-level", "log_format": "--log-format",
}
"""Settings that also have a global command-line option."""

_SECTIONS: dict[str, dict[str, str]] = {
    "kafka": {"bootstrap": "kafka", "topic": "topic", "results_topic": "results_topic", "partitions": "partitions",
              "client": "kafka_client", "replication": "kafka_replication",
              "library": "kafka_library"},
    "logging": {"level": "log_level", "format": "log_format"},
    "checkpoint": {"key": "checkpoint_key", "public_key": "checkpoint_public_key"},
}


class SettingsError(ValueError):
    """A setting breaks a rule, or the configuration file cannot be read; the message says which."""


class CaucusSettings(BaseSettings):
    """Every setting, with its rule. Field names are the variable names without ``CAUCUS_``."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid",
                                      case_sensitive=False, validate_default=True)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only what :func:`load_settings` merged: it reads the environment it is given (a test's, or the
        process's) once, in its own layer; pydantic reading ``os.environ`` and ``.env`` again would let the
        process's variables into a load that named another environment, and cost a millisecond per load."""
        return (init_settings,)

    data_dir: Path = Field(DEFAULT_DATA_DIR, description="Embedded data directory: the SQLite log, store, intake state, keys.")
    kafka: str | None = Field(None, description="Kafka bootstrap servers HOST:PORT[,HOST:PORT...] for the log; unset: the embedded log.")
    topic: str = Field(DEFAULT_TOPIC, description="Event topic name.")
    results_topic: str | None = Field(None, description="Results feed topic name (default: caucus.results beside the default topic, else TOPIC.results).")
    database: str | None = Field(None, description="PostgreSQL URL for the projection store; unset: the embedded store.")
    backend: Literal["memory"] | None = Field(
        None, description="memory: the log and the projection store in this process's memory (tests, `caucus demo`); unset: as kafka and database say.")
    partitions: int = Field(8, ge=1, le=10_000, description="Partitions when a log is created (an existing embedded log keeps its own).")
    kafka_replication: int = Field(1, ge=1, le=32, description="Replication factor of the topics the ledger creates.")
    kafka_library: Literal["kafka-python", "confluent"] = Field(
        "kafka-python", description="Kafka client of the log: kafka-python, or confluent (librdkafka; pip install caucus-ledger[confluent]; consumer groups stay on kafka-python).")
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] | None = Field(
        None, description="How clients talk to the brokers.")
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"] | None = Field(
        None, description="SASL mechanism (with a SASL_* security protocol).")
    kafka_sasl_username: str | None = Field(None, description="SASL user (PLAIN, SCRAM).")
    kafka_sasl_password: SecretStr | None = Field(None, description="SASL password (PLAIN, SCRAM).")
    kafka_ssl_cafile: Path | None = Field(None, description="CA certificates (PEM) to trust for the brokers' TLS certificates.")
    kafka_ssl_certfile: Path | None = Field(None, description="Client certificate (PEM) for mutual TLS.")
    kafka_ssl_keyfile: Path | None = Field(None, description="Client private key (PEM) for mutual TLS.")
    kafka_ssl_password: SecretStr | None = Field(None, description="Password of the client private key.")
    kafka_client: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Other kafka-python client properties, passed through (e.g. request_timeout_ms).")
    file_mode: str = Field("0600", description="Permissions of the data files created (0600; 0640 for a group of readers).")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field("WARNING", description="Diagnostics logged to stderr from this level up.")
    log_format: Literal["text", "json"] = Field("text", description="Diagnostics as text lines or JSON objects.")
    credentials: Path | None = Field(None, description="Credential store file (default: DATA_DIR/credentials.json).")
    token: SecretStr | None = Field(None, description="Your credential, for commands that submit or write.")
    intake_token: SecretStr | None = Field(None, description="An official's token for `caucus simulate send --url`.")
    checkpoint_key: Path | None = Field(None, description="Ed25519 signing key for checkpoints (default: checkpoint-key.pem in CAUCUS_KEY_HOME, else ~/.config/caucus; never the data directory).")
    checkpoint_public_key: str | None = Field(None, description="Public keys to trust when verifying, paths separated by ':'.")

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("kafka_security_protocol", "kafka_sasl_mechanism", mode="before")
    @classmethod
    def _upper_or_none(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("kafka")
    @classmethod
    def _bootstrap(cls, value: str | None) -> str | None:
        if value is None:
            return None
        hosts = [h.strip() for h in value.split(",")]
        for host in hosts:
            if not _HOST_PORT.match(host) or not 0 < int(host.rsplit(":", 1)[1]) < 65536:
                raise ValueError(f"{host!r} is not HOST:PORT (give one or more, comma-separated, e.g. broker1:9092,broker2:9092)")
        return ",".join(hosts)

    @field_validator("topic", "results_topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        if value is None:
            return None  # results_topic: follows the topic (``_consistent``)
        if not _TOPIC.match(value) or value in (".", ".."):
            raise ValueError(f"{value!r} is not a Kafka topic name (1 to 249 of letters, digits, '.', '_', '-')")
        return value

    @field_validator("database")
    @classmethod
    def _database(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scheme = urlsplit(value).scheme
        if scheme not in ("postgresql", "postgres"):
            raise ValueError("must be a PostgreSQL URL: postgresql://USER@HOST[:PORT]/DATABASE")
        return value

    @field_validator("file_mode", mode="before")
    @classmethod
    def _file_mode(cls, value: Any) -> str:
        text = str(value).strip()
        if isinstance(value, int) and not isinstance(value, bool):
            text = f"{value:o}" if value > 0o777 or value < 100 else str(value)  # 384 (=0o600) or 600 written bare
        if not re.fullmatch(r"0?o?[0-7]{3,4}", text):
            raise ValueError(f"{value!r} is not an octal permission mode such as 0600 or 0640")
        mode = int(text.replace("o", ""), 8)
        check_file_mode(mode)
        return f"{mode:04o}"

    @field_validator("kafka_client")
    @classmethod
    def _client(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            return value
        from ledger.log.kafka import normalise_options  # kafka-python loads in ~0.1 s: only when a client property is given

        return normalise_options(value)

    @field_validator("data_dir", mode="before")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():  # a Path of "" is ".": an empty setting must not mean here
            raise ValueError("is empty: give a directory (`.` for this one)")
        return value

    @field_validator("data_dir")
    @classmethod
    def _a_directory(cls, value: Path) -> Path:
        if value.exists() and not value.is_dir():  # else every command names a file inside it that is not there
            raise ValueError(f"{value} is a file, not a directory")
        return value

    @field_validator("kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"no such file: {value}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> CaucusSettings:
        if self.results_topic is None:
            derived = results_topic_for(self.topic)
            if not _TOPIC.match(derived):
                raise ValueError(f"results_topic: the default {derived[:40]}... (TOPIC.results) is not a Kafka topic name "
                                 "(at most 249 characters); set results_topic")
            self.results_topic = derived
        protocol = self.kafka_security_protocol
        sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        if self.kafka_sasl_mechanism is not None and not sasl:
            raise ValueError("kafka_sasl_mechanism needs kafka_security_protocol SASL_PLAINTEXT or SASL_SSL")
        if sasl and self.kafka_sasl_mechanism is None:
            raise ValueError(f"kafka_security_protocol {protocol} needs kafka_sasl_mechanism (e.g. SCRAM-SHA-512)")
        if self.kafka_sasl_mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and (
            not self.kafka_sasl_username or self.kafka_sasl_password is None
        ):
            raise ValueError(f"SASL {self.kafka_sasl_mechanism} needs kafka_sasl_username and kafka_sasl_password")
        tls_files = [n for n in ("kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile") if getattr(self, n)]
        if tls_files and protocol not in ("SSL", "SASL_SSL"):
            raise ValueError(f"{tls_files[0]} needs kafka_security_protocol SSL or SASL_SSL")
        for name in ("security_protocol", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
                     "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password"):
            if name in self.kafka_client:
                raise ValueError(f"kafka_client.{name}: give it as its own setting (kafka_{name.replace('_plain', '')})")
        return self

    def kafka_options(self) -> dict[str, Any]:
        """Every kafka-python client property these settings ask for."""
        out: dict[str, Any] = dict(self.kafka_client)
        pairs = {
            "security_protocol": self.kafka_security_protocol,
            "sasl_mechanism": self.kafka_sasl_mechanism,
            "sasl_plain_username": self.kafka_sasl_username,
            "sasl_plain_password": self.kafka_sasl_password.get_secret_value() if self.kafka_sasl_password else None,
            "ssl_cafile": str(self.kafka_ssl_cafile) if self.kafka_ssl_cafile else None,
            "ssl_certfile": str(self.kafka_ssl_certfile) if self.kafka_ssl_certfile else None,
            "ssl_keyfile": str(self.kafka_ssl_keyfile) if self.kafka_ssl_keyfile else None,
            "ssl_password": self.kafka_ssl_password.get_secret_value() if self.kafka_ssl_password else None,
        }
        out.update({k: v for k, v in pairs.items() if v is not None})
        return out

    def to_settings(self) -> Settings:
        return Settings(
            data_dir=self.data_dir, kafka=self.kafka, topic=self.topic, results_topic=self.results_topic or "",
            database=self.database, backend=self.backend, partitions=self.partitions, kafka_options=self.kafka_options(),
            partitions_chosen="partitions" in self.model_fields_set,
            kafka_replication=self.kafka_replication, kafka_library=self.kafka_library, file_mode=int(self.file_mode, 8), credentials=self.credentials,
            token=self.token.get_secret_value() if self.token else None,
            intake_token=self.intake_token.get_secret_value() if self.intake_token else None,
            checkpoint_key=self.checkpoint_key, checkpoint_public_key=self.checkpoint_public_key,
        )


@dataclass(frozen=True)
class LoadedSettings:
    """The effective settings, the validated model, the file read (if any) and each value's source."""

    settings: Settings
    model: CaucusSettings
    config_file: Path | None
    sources: Mapping[str, str]
    unknown_variables: tuple[str, ...] = ()
    """``CAUCUS_*`` variables that name no setting (a typo is otherwise silently ignored)."""

    def show(self) -> dict[str, dict[str, Any]]:
        """Every setting for ``caucus config show``: value (secrets masked), source, variable, option."""
        out: dict[str, dict[str, Any]] = {}
        for name, info in CaucusSettings.model_fields.items():
            out[name] = {
                "value": _masked(name, getattr(self.model, name)),
                "source": self.sources.get(name, "default"),
                "env": ENV_PREFIX + name.upper(),
                "flag": FLAGS.get(name),
                "description": info.description or "",
            }
        return out


class _Env(EnvSettingsSource):
    """The ``CAUCUS_*`` variables of a given mapping (the process environment unless one is given)."""

    def __init__(self, env: Mapping[str, str] | None) -> None:
        self._given = env
        super().__init__(CaucusSettings)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        from pydantic_settings.sources.utils import parse_env_vars

        return parse_env_vars(dict(os.environ if self._given is None else self._given), False, True, None)


def _flatten(doc: Mapping[str, Any], file: Path) -> dict[str, Any]:
    """The file's settings under their field names (sections and flat keys both accepted)."""
    out: dict[str, Any] = {}
    fields = CaucusSettings.model_fields
    for key, value in doc.items():
        if key in _SECTIONS and isinstance(value, dict):
            for sub, val in value.items():
                name = _SECTIONS[key].get(sub) or f"{key}_{sub}"
                if name not in fields:
                    raise SettingsError(f"{file}: unknown setting [{key}] {sub} (known in [{key}]: "
                                        f"{', '.join(sorted(set(_SECTIONS[key]) | _prefixed(key)))})")
                out[name] = val
        elif key in fields:
            out[key] = value
        else:
            raise SettingsError(f"{file}: unknown setting {key!r} (known: {', '.join(sorted(fields))}; "
                                f"sections: {', '.join(f'[{s}]' for s in _SECTIONS)})")
    return out


def _prefixed(section: str) -> set[str]:
    return {n[len(section) + 1 :] for n in CaucusSettings.model_fields if n.startswith(section + "_")} - {"client", "replication"}


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise SettingsError(f"configuration file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"configuration file {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        # TOML is UTF-8 (tomllib decodes it and lets the decoding error through): a user's file, not a bug.
        raise SettingsError(f"configuration file {path} is not UTF-8 (byte {exc.start}): TOML files must be UTF-8") from None
    except OSError as exc:
        raise SettingsError(f"cannot read configuration file {path}: {exc}") from None
    return _flatten(doc, path)


def _config_path(given: Path | None, env: Mapping[str, str]) -> tuple[Path | None, str]:
    if given is not None:
        return given, "--config"
    if env.get(ENV_PREFIX + "CONFIG"):
        return Path(env[ENV_PREFIX + "CONFIG"]), f"{ENV_PREFIX}CONFIG"
    default = Path(DEFAULT_CONFIG_FILE)
    return (default, "working directory") if default.is_file() else (None, "")


def load_settings(
    flags: Mapping[str, Any] | None = None, *, config: Path | None = None, env: Mapping[str, str] | None = None
) -> LoadedSettings:
    """Read, merge and validate the configuration (see module docstring); SettingsError says what is wrong."""
    environ: Mapping[str, str] = os.environ if env is None else env
    path, how = _config_path(config, environ)
    layers: list[tuple[str, dict[str, Any]]] = []
    if path is not None:
        layers.append((f"file {path}", _read_file(path)))
    # pydantic's source costs about a millisecond even when no variable is ours (empty ones are ignored)
    ours = any(value and name.upper().startswith(ENV_PREFIX) for name, value in environ.items())
    try:
        from_env = _Env(environ)() if ours else {}
    except Exception as exc:  # noqa: BLE001 -- pydantic-settings raises plain errors for bad JSON in a variable
        found = re.search(r'field "(\w+)"', str(exc))
        name = found.group(1) if found else "?"
        raise SettingsError(f"invalid configuration: setting {name} (from env {ENV_PREFIX}{name.upper()}): not valid "
                            'JSON; give an object such as {"request_timeout_ms": 30000}') from None
    layers.append(("env", from_env))
    layers.append(("flag", {k: v for k, v in (flags or {}).items() if v is not None}))
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for label, values in layers:
        for name, value in values.items():
            merged[name] = value
            sources[name] = (f"env {ENV_PREFIX}{name.upper()}" if label == "env"
                             else f"flag {FLAGS.get(name, name)}" if label == "flag" else label)
    try:
        model = CaucusSettings.model_validate(merged)
    except ValidationError as exc:
        raise SettingsError(_explain(exc, merged, sources)) from None
    known = {ENV_PREFIX + name.upper() for name in CaucusSettings.model_fields} | _OTHER_VARIABLES
    unknown = tuple(sorted(k for k in environ if k.upper().startswith(ENV_PREFIX) and k.upper() not in known))
    return LoadedSettings(model.to_settings(), model, path, sources, unknown)


def _explain(exc: ValidationError, merged: Mapping[str, Any], sources: Mapping[str, str]) -> str:
    lines = []
    for err in exc.errors():
        loc = [str(part) for part in err["loc"]]
        name = loc[0] if loc else ""
        message = err["msg"].removeprefix("Value error, ")
        if name in CaucusSettings.model_fields:
            value = merged.get(name)
            shown = "(secret)" if _secret(name) else repr(str(value) if isinstance(value, Path) else value)
            where = sources.get(name, "default")
            suffix = f".{'.'.join(loc[1:])}" if len(loc) > 1 else ""
            lines.append(f"setting {name}{suffix} = {shown} (from {where}): {message}")
        elif err["type"] == "extra_forbidden":
            lines.append(f"unknown setting {name!r}")
        else:
            lines.append(f"settings: {message}")
    return "invalid configuration: " + "; ".join(lines)


def _secret(name: str) -> bool:
    return any(word in name for word in _SECRET_WORDS)


def _masked(name: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, SecretStr):
        return "********"
    if name == "database":  # a password in the user part, or in the query (?password=, which libpq reads too)
        parts = urlsplit(value)
        if parts.password:
            parts = parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":********@"))
        query = [(k, "********" if "password" in k.lower() else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
        return urlunsplit(parts._replace(query=urlencode(query, safe="*"))) if parts.query else urlunsplit(parts)
    if isinstance(value, dict):
        return {k: ("********" if _secret(k) else v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value

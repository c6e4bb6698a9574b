"""Named pipelines and defaults read from a TOML config file.

Precedence for every scalar setting follows kubectl: flags beat `STREAMCTL_*` environment
variables, which beat the config file's `[defaults]`, which beat the built-in default
(see `setting`). Only this module reads the file; inspectors get plain values.

Where the file is:

1. an explicit path: the root `--config` option or the `STREAMCTL_CONFIG` environment
   variable (cli/app.py stores it in `streamctl.console.context.CONFIG_PATH`). It must exist;
2. otherwise `config.toml` in `typer.get_app_dir("streamctl")` (XDG-aware:
   `~/.config/streamctl/config.toml` on Linux), if it exists;
3. otherwise no file: an empty config.

Format::

    [defaults]
    format = "table"          # table | plain | markdown | json
    kafka_timeout = 10        # seconds

    [pipelines.orders]
    checkpoint = "s3://bucket/chk/orders"
    sink = "s3://bucket/tables/orders"
    sink_kind = "delta"       # optional
    app_id = "..."            # optional
    [pipelines.orders.kafka]  # passed to the Kafka client; secrets are redacted on output
    bootstrap = "broker:9092"
    "sasl.plain.password" = "secret"

Every problem is a `UsageError` (exit 2) with a one-line message that names the file.
Messages name keys and types but never quote values from the file, so a secret that
lands in the wrong place is not echoed to a terminal or a CI log.
"""
from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional, TypeVar

from streamctl.formats.errors import UsageError

T = TypeVar("T")

CONFIG_FILE_NAME = "config.toml"
ENV_CONFIG = "STREAMCTL_CONFIG"
ENV_FORMAT = "STREAMCTL_FORMAT"
ENV_KAFKA_TIMEOUT = "STREAMCTL_KAFKA_TIMEOUT"

FORMATS: tuple[str, ...] = ("table", "wide", "plain", "markdown", "json")

PIPELINE_KEYS: tuple[str, ...] = ("checkpoint", "sink", "sink_kind", "app_id", "target_spark", "kafka")
TOP_LEVEL_TABLES: tuple[str, ...] = ("defaults", "pipelines")

# What a redacted Kafka setting shows; which settings are secret: inspectors/kafka.py is_secret_key.
REDACTED = "***"

# A pipeline name must not look like a path or a URI, otherwise `resolve_checkpoint`
# could never tell the two apart.
_PATHLIKE_CHARS = ("/", "\\", ":")


@dataclass(frozen=True, slots=True)
class Pipeline:
    """One `[pipelines.NAME]` table: where a query keeps its checkpoint and its sink.

    `kafka` holds the client settings verbatim (values as strings, secrets included):
    show it only through `redacted_kafka()`. `repr()` is redacted too.
    """

    name: str
    checkpoint: str | None
    sink: str | None
    sink_kind: str | None
    app_id: str | None
    kafka: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    target_spark: str | None = None  # the Spark line that restarts this pipeline (inspectors/lines.py)

    def __post_init__(self) -> None:
        # a read-only copy, so a Pipeline built by hand is as immutable as a loaded one
        object.__setattr__(self, "kafka", MappingProxyType(dict(self.kafka)))

    def redacted_kafka(self) -> dict[str, str]:
        """The Kafka settings with every credential's value replaced by "***"."""
        from streamctl.inspectors.kafka import is_secret_key  # the one rule (lazy: keeps --help instant)

        return {key: (REDACTED if is_secret_key(key) else value) for key, value in self.kafka.items()}

    def __repr__(self) -> str:
        return (
            f"Pipeline(name={self.name!r}, checkpoint={self.checkpoint!r}, sink={self.sink!r}, "
            f"sink_kind={self.sink_kind!r}, app_id={self.app_id!r}, kafka={self.redacted_kafka()!r})"
        )


@dataclass(frozen=True, slots=True)
class Config:
    """The parsed config file. `path` is None when no file was read (an empty config).

    `defaults` holds validated, converted values (e.g. `kafka_timeout` as a float).
    """

    path: str | None
    defaults: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    pipelines: Mapping[str, Pipeline] = field(default_factory=lambda: MappingProxyType({}), hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "defaults", MappingProxyType(dict(self.defaults)))
        object.__setattr__(self, "pipelines", MappingProxyType(dict(self.pipelines)))


EMPTY_CONFIG = Config(path=None)


# ----------------------------------------------------------------------------- settings


def _plain(value: object) -> object:
    """A typer Enum choice becomes its value, so flags and files convert alike."""
    return value.value if isinstance(value, enum.Enum) else value


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"a {type(value).__name__}"


class InvalidValue(ValueError):
    """Raised by a setting converter. `reason` never quotes the value, so it is safe for
    values read from the file; str() adds the value (for flags and env vars, which the
    user just typed)."""

    def __init__(self, reason: str, got: object = None) -> None:
        shown = f" (got {str(got)[:40]!r})" if got is not None else ""
        super().__init__(reason + shown)
        self.reason = reason


def to_format(value: object, *, parse_text: bool = True) -> str:
    """An output format name: one of FORMATS."""
    value = _plain(value)
    if not isinstance(value, str):
        raise InvalidValue(f"must be a string, not {_type_name(value)}")
    if value not in FORMATS:
        raise InvalidValue(f"must be one of {', '.join(FORMATS)}", value)
    return value


def to_float(value: object, *, parse_text: bool = True) -> float:
    """A finite number. With `parse_text` (flags, env vars) a string is parsed too."""
    value = _plain(value)
    if isinstance(value, str) and parse_text:
        try:
            number = float(value.strip())
        except ValueError:
            raise InvalidValue("must be a number", value) from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise InvalidValue(f"must be a number, not {_type_name(value)}")
    if number != number or number in (float("inf"), float("-inf")):
        raise InvalidValue("must be a finite number")
    return number


def to_positive_float(value: object, *, parse_text: bool = True) -> float:
    """A number greater than zero (e.g. seconds). With `parse_text` a string is parsed too."""
    number = to_float(value, parse_text=parse_text)
    if not number > 0:
        raise InvalidValue("must be a number greater than 0", f"{number:g}")
    return number


def to_nonnegative_float(value: object, *, parse_text: bool = True) -> float:
    """A finite number of at least zero (e.g. a quiet period, where 0 turns a check off)."""
    number = to_float(value, parse_text=parse_text)
    if number < 0:
        raise InvalidValue("must be a number of at least 0", f"{number:g}")
    return number


def to_bool(value: object, *, parse_text: bool = True) -> bool:
    """A boolean. With `parse_text`, 1/0, true/false, yes/no, on/off are accepted."""
    value = _plain(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and parse_text:
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise InvalidValue("must be true or false", value)
    raise InvalidValue(f"must be true or false, not {_type_name(value)}")


def to_int(value: object, *, parse_text: bool = True) -> int:
    """An integer. With `parse_text` a string is parsed too."""
    value = _plain(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and parse_text:
        try:
            return int(value.strip())
        except ValueError:
            raise InvalidValue("must be an integer", value) from None
    raise InvalidValue(f"must be an integer, not {_type_name(value)}")


def to_str(value: object, *, parse_text: bool = True) -> str:
    """A string."""
    value = _plain(value)
    if not isinstance(value, str):
        raise InvalidValue(f"must be a string, not {_type_name(value)}")
    return value


Converter = Callable[..., Any]
"""`convert(value, *, parse_text: bool) -> converted`, raising InvalidValue. `parse_text`
is False for values from the TOML file, which has real types: `kafka_timeout = "10"` is
the wrong type there, while `STREAMCTL_KAFKA_TIMEOUT=10` is fine."""

# Every key allowed in [defaults], with its converter. A command that wants a new
# file-configurable setting registers it here (its env var goes to `setting(...)`).
SETTINGS: dict[str, Converter] = {
    "format": to_format,
    "kafka_timeout": to_positive_float,
    "quiet_period": to_nonnegative_float,
    "target_spark": to_str,  # a Spark line (3.5, 4.3.0) or installed; checked by inspectors/lines.py
}


def _converter_for(name: str, default: object) -> Converter:
    if name in SETTINGS:
        return SETTINGS[name]
    if isinstance(default, bool):
        return to_bool
    if isinstance(default, int):
        return to_int
    if isinstance(default, float):
        return to_float
    if isinstance(default, str):
        return to_str
    return lambda value, *, parse_text=True: value


def format_setting(flag: str | None, config: Config, env: Mapping[str, str] | None = None) -> str:
    """The output format: `--format`, else STREAMCTL_FORMAT, else the config file's, else table.
    One rule for the commands and for the Error document of a failing run (console/errors.py)."""
    return setting("format", flag, ENV_FORMAT, config, "table", env=env, flag="--format")


def setting(
    name: str,
    flag_value: T | None,
    env_var: str | None,
    config: Config,
    default: T,
    *,
    env: Mapping[str, str] | None = None,
    flag: str | None = None,
) -> T:
    """Resolve one scalar setting: flag, else environment variable, else file, else default.

    `flag_value` is None when the flag was not given. An empty environment variable counts
    as unset. Values are converted with the converter registered in `SETTINGS` for `name`
    (e.g. "kafka_timeout" -> float > 0), or else one inferred from the type of `default`;
    `default` itself is returned unconverted. `env` defaults to `os.environ`.

    Raises UsageError naming where the bad value came from: the flag (`flag`, by default
    `--NAME` with hyphens), the environment variable, or the config file (whose values
    are never quoted).

    Example::

        fmt = setting("format", output, ENV_FORMAT, config, "table", flag="-o/--output")
    """
    convert = _converter_for(name, default)
    environ = os.environ if env is None else env
    if flag_value is not None:
        source = flag or "--" + name.replace("_", "-")
        return _convert(convert, flag_value, f"invalid value for {source}: ")
    if env_var:
        raw = environ.get(env_var)
        if raw is not None and raw != "":
            return _convert(convert, raw, f"invalid value in environment variable {env_var}: ")
    if name in config.defaults:
        return _convert(
            convert, config.defaults[name], f"config file {config.path}: [defaults] {name} ", from_file=True
        )
    return default


def _convert(convert: Converter, value: object, prefix: str, *, from_file: bool = False) -> Any:
    try:
        return convert(value, parse_text=not from_file)
    except InvalidValue as exc:
        raise UsageError(prefix + (exc.reason if from_file else str(exc))) from None
    except ValueError as exc:  # a converter that does not use InvalidValue: do not echo file values
        raise UsageError(prefix + ("has an invalid value" if from_file else str(exc))) from None


# ----------------------------------------------------------------------------- loading


def default_config_path() -> str:
    """Where the config file is looked for when no explicit path is given.

    typer (click) reads XDG_CONFIG_HOME / HOME / APPDATA from the process environment.
    """
    import typer  # deferred: only needed when no explicit path is given

    return os.path.join(typer.get_app_dir("streamctl"), CONFIG_FILE_NAME)


def load_config(explicit: str | None, env: Mapping[str, str] | None = None) -> Config:
    """Read and validate the config file; see the module docstring for where it is looked for.

    `explicit` is the `--config` value (None when not given). `env` defaults to
    `os.environ`; `STREAMCTL_CONFIG` in it is used when `explicit` is None (the CLI
    already passes it through `--config`'s envvar; library callers get the same rule).

    Raises UsageError for a missing explicit file, unreadable file, invalid TOML (with
    the line number), an unknown table or key, or a value of the wrong type.
    """
    environ = os.environ if env is None else env
    if not explicit:
        explicit = environ.get(ENV_CONFIG) or None
    if explicit:
        path = os.path.expanduser(explicit)
        if not os.path.exists(path):
            raise UsageError(f"config file {explicit}: no such file")
    else:
        path = default_config_path()
        if not os.path.isfile(path):
            return EMPTY_CONFIG
    return parse_config(_read(path), path)


def _toml_loads() -> Callable[[str], dict[str, Any]]:
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise UsageError(
                "reading a config file needs Python 3.11+ or the 'tomli' package (pip install tomli)"
            ) from None
    return tomllib.loads


def _read(path: str) -> str:
    if os.path.isdir(path):
        raise UsageError(f"config file {path}: is a directory")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise UsageError(f"config file {path}: cannot read: {exc.strerror or type(exc).__name__}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"config file {path}: not valid UTF-8") from None


_POSITION = re.compile(r"^(?P<msg>.*) \(at line (?P<line>\d+), column (?P<column>\d+)\)$", re.S)
# tomllib quotes the offending character in these; it may be a character of a secret.
_QUOTES_A_CHARACTER = re.compile(r"^(Found invalid character|Illegal character)\b.*$", re.S)


def parse_config(text: str, path: str) -> Config:
    """Parse and validate config `text` read from `path` (used only in messages)."""
    loads = _toml_loads()
    try:
        data = loads(text)
    except ValueError as exc:  # tomllib.TOMLDecodeError (and tomli's) subclass ValueError
        raise UsageError(f"config file {path}: invalid TOML{_toml_position(str(exc))}") from None

    for key, value in data.items():
        if key not in TOP_LEVEL_TABLES:
            kind = "table" if isinstance(value, dict) else "key"
            raise UsageError(
                f"config file {path}: unknown top-level {kind} {key!r} (expected {_either(TOP_LEVEL_TABLES)})"
            )
        if not isinstance(value, dict):
            raise UsageError(f"config file {path}: {key} must be a table, not {_type_name(value)}")

    defaults = _parse_defaults(data.get("defaults", {}), path)
    pipelines = {name: _parse_pipeline(name, table, path) for name, table in data.get("pipelines", {}).items()}
    return Config(path=path, defaults=MappingProxyType(defaults), pipelines=MappingProxyType(pipelines))


def _toml_position(message: str) -> str:
    match = _POSITION.match(message)
    if not match:
        return ""
    problem = _QUOTES_A_CHARACTER.sub(lambda m: m.group(1), match.group("msg").strip())
    return f" at line {match.group('line')}, column {match.group('column')}: {problem}"


def _either(names: tuple[str, ...]) -> str:
    return ", ".join(sorted(names))


def _parse_defaults(table: dict[str, Any], path: str) -> dict[str, object]:
    defaults: dict[str, object] = {}
    for key, value in table.items():
        if key not in SETTINGS:
            raise UsageError(f"config file {path}: unknown key {key!r} in [defaults] (expected {_either(tuple(SETTINGS))})")
        defaults[key] = _convert(SETTINGS[key], value, f"config file {path}: [defaults] {key} ", from_file=True)
    return defaults


def _parse_pipeline(name: str, table: object, path: str) -> Pipeline:
    where = f"config file {path}: [pipelines.{name}]"
    if not isinstance(table, dict):
        raise UsageError(f"config file {path}: pipelines.{name} must be a table, not {_type_name(table)}")
    if not name or name in (".", "..") or any(char in name for char in _PATHLIKE_CHARS):
        raise UsageError(
            f"config file {path}: pipeline name {name!r} must not be empty, '.' or '..', "
            "or contain '/', '\\' or ':' (it would read as a path)"
        )
    for key in table:
        if key not in PIPELINE_KEYS:
            raise UsageError(f"{where}: unknown key {key!r} (expected {_either(PIPELINE_KEYS)})")

    strings: dict[str, str | None] = {}
    for key in ("checkpoint", "sink", "sink_kind", "app_id", "target_spark"):
        value = table.get(key)
        if value is not None and not isinstance(value, str):
            raise UsageError(f"{where}: {key} must be a string, not {_type_name(value)}")
        if value == "":
            raise UsageError(f"{where}: {key} must not be empty")
        strings[key] = value
    if strings["sink_kind"] is not None:
        from streamctl.inspectors.sinks import SINK_KINDS

        if strings["sink_kind"] not in SINK_KINDS:
            raise UsageError(f"{where}: sink_kind must be one of {', '.join(SINK_KINDS)}")

    kafka_table = table.get("kafka", {})
    if not isinstance(kafka_table, dict):
        raise UsageError(f"{where}: kafka must be a table, not {_type_name(kafka_table)}")
    kafka: dict[str, str] = {}
    for key, value in kafka_table.items():
        # Numbers and booleans are accepted and passed on as the strings Kafka clients expect.
        if isinstance(value, bool):
            kafka[key] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            kafka[key] = str(value)
        else:
            raise UsageError(
                f"config file {path}: [pipelines.{name}.kafka] {key!r} must be a string, not {_type_name(value)}"
            )

    return Pipeline(
        name=name,
        checkpoint=strings["checkpoint"],
        sink=strings["sink"],
        sink_kind=strings["sink_kind"],
        app_id=strings["app_id"],
        kafka=MappingProxyType(kafka),
        target_spark=strings["target_spark"],
    )


# ----------------------------------------------------------------------------- pipelines


def is_pathlike(arg: str) -> bool:
    """True when `arg` can only be a path or URI, never a pipeline name."""
    return arg in (".", "..") or any(char in arg for char in _PATHLIKE_CHARS)


def resolve_checkpoint(arg: str, config: Config) -> tuple[str, Pipeline | None]:
    """Turn a checkpoint argument into a checkpoint location and, if named, its pipeline.

    An argument with no '/', '\\' or ':' (and not '.' or '..') that names a configured
    pipeline resolves to that pipeline's `checkpoint`; anything else is returned
    unchanged, as a local path or a URI, with no pipeline.

    To name a local folder that has the same name as a pipeline, write ``./name``.

    Raises UsageError if the named pipeline has no `checkpoint`.
    """
    if is_pathlike(arg) or arg not in config.pipelines:
        return arg, None
    pipeline = config.pipelines[arg]
    if pipeline.checkpoint is None:
        raise UsageError(
            f"pipeline {arg!r} has no checkpoint in config file {config.path} "
            f"(to use a local folder named {arg!r}, write ./{arg})"
        )
    return pipeline.checkpoint, pipeline


@dataclass(frozen=True, slots=True)
class Target:
    """What a command acts on: a checkpoint and (maybe) its sink, the sink's kind and app id."""

    checkpoint: str
    sink: Optional[str]
    sink_kind: str
    app_id: Optional[str]
    pipeline: Optional[Pipeline]


def resolve_target(arg: str, sink: Optional[str], sink_kind: Any, app_id: Optional[str], config: Config) -> Target:
    """The one rule every command follows: ARG is a checkpoint (path or URI) or a pipeline name
    (see `resolve_checkpoint`). A named pipeline brings its sink, sink kind and app id unless
    `sink` names another sink; then the kind and the app id come from the flags alone.
    `sink_kind` may be the flag's enum member or its value ("auto" lets the sink tell)."""
    location, pipeline = resolve_checkpoint(arg, config)
    kind = str(getattr(sink_kind, "value", sink_kind))
    if sink is None and pipeline is not None:
        t = Target(location, pipeline.sink, pipeline.sink_kind if kind == "auto" and pipeline.sink_kind else kind,
                   app_id or pipeline.app_id, pipeline)
    else:
        t = Target(location, sink, kind, app_id, pipeline)
    return _catalog_tables(t)


def _catalog_tables(t: Target) -> Target:
    """A sink (or, for `inspect sink`, the argument) named `catalog:<name>/<namespace>.<table>`:
    the Iceberg table's location, as its catalog says (inspectors/iceberg.py)."""
    if not (t.checkpoint.startswith("catalog:") or (t.sink or "").startswith("catalog:")):
        return t  # the common case imports nothing
    from streamctl.inspectors.iceberg import CATALOG_PREFIX, resolve_catalog_sink

    if t.sink is not None and t.sink.startswith(CATALOG_PREFIX):
        return Target(t.checkpoint, resolve_catalog_sink(t.sink), "iceberg" if t.sink_kind == "auto" else t.sink_kind,
                      t.app_id, t.pipeline)
    if t.checkpoint.startswith(CATALOG_PREFIX):
        return Target(resolve_catalog_sink(t.checkpoint), t.sink, "iceberg" if t.sink_kind == "auto" else t.sink_kind,
                      t.app_id, t.pipeline)
    return t

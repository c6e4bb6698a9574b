"""console/config.py: where the file is, what it may hold, precedence, and that secrets stay hidden."""
from __future__ import annotations

import enum
import os
from pathlib import Path

import pytest

from streamctl.console import config as cfg
from streamctl.console.config import Config, Pipeline, load_config, resolve_checkpoint, setting
from streamctl.formats.errors import UsageError

SECRET = "hunter2-Zq9"  # must never appear in a message or in redacted output

FULL = f"""\
[defaults]
format = "json"
kafka_timeout = 10

[pipelines.orders]
checkpoint = "s3://bucket/chk/orders"
sink = "s3://bucket/tables/orders"
sink_kind = "delta"
app_id = "orders-app"
[pipelines.orders.kafka]
bootstrap = "broker:9092"
"security.protocol" = "SASL_SSL"
"sasl.mechanism" = "PLAIN"
"sasl.plain.username" = "svc"
"sasl.plain.password" = "{SECRET}"
"request.timeout.ms" = 30000
"enable.auto.commit" = false

[pipelines.bare]
sink = "/data/bare"
"""


def write(tmp_path: Path, text: str, name: str = "config.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def usage_error(explicit: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(UsageError) as info:
        load_config(explicit, env=env or {})
    message = str(info.value)
    assert "\n" not in message
    assert SECRET not in message
    return message


# ---------------------------------------------------------------- location


def test_config_explicit_file_is_parsed(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    config = load_config(path, env={})
    assert config.path == path
    assert dict(config.defaults) == {"format": "json", "kafka_timeout": 10.0}
    assert set(config.pipelines) == {"orders", "bare"}
    orders = config.pipelines["orders"]
    assert orders == Pipeline(
        name="orders",
        checkpoint="s3://bucket/chk/orders",
        sink="s3://bucket/tables/orders",
        sink_kind="delta",
        app_id="orders-app",
        kafka=orders.kafka,
    )
    assert orders.kafka["sasl.plain.password"] == SECRET
    assert orders.kafka["request.timeout.ms"] == "30000"
    assert orders.kafka["enable.auto.commit"] == "false"
    bare = config.pipelines["bare"]
    assert (bare.checkpoint, bare.sink, bare.sink_kind, bare.app_id, dict(bare.kafka)) == (
        None, "/data/bare", None, None, {},
    )


def test_config_is_immutable(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), env={})
    with pytest.raises(AttributeError):
        config.path = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.pipelines["new"] = config.pipelines["orders"]  # type: ignore[index]
    with pytest.raises(TypeError):
        config.pipelines["orders"].kafka["bootstrap"] = "x"  # type: ignore[index]
    hash(config.pipelines["orders"])
    kafka = {"bootstrap": "b:9092"}
    by_hand = Pipeline("p", "chk", None, None, None, kafka)
    kafka["bootstrap"] = "changed"
    assert by_hand.kafka["bootstrap"] == "b:9092"
    with pytest.raises(TypeError):
        Config(path=None, defaults={"format": "json"}).defaults["format"] = "plain"  # type: ignore[index]


def test_config_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    message = usage_error(str(tmp_path / "nope.toml"))
    assert "nope.toml" in message and "no such file" in message


def test_config_explicit_directory_is_an_error(tmp_path: Path) -> None:
    message = usage_error(str(tmp_path))
    assert str(tmp_path) in message and "directory" in message


def test_config_env_var_is_an_explicit_path(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    assert load_config(None, env={"STREAMCTL_CONFIG": path}).path == path
    with pytest.raises(UsageError, match="missing.toml"):
        load_config(None, env={"STREAMCTL_CONFIG": str(tmp_path / "missing.toml")})


def test_config_explicit_path_beats_env_var(tmp_path: Path) -> None:
    flag_file = write(tmp_path, FULL, "flag.toml")
    env_file = write(tmp_path, "", "env.toml")
    assert load_config(flag_file, env={"STREAMCTL_CONFIG": env_file}).path == flag_file


@pytest.fixture()
def user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point typer.get_app_dir at an empty folder; return where config.toml is looked for."""
    import typer

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("APPDATA", str(home))
    monkeypatch.delenv("STREAMCTL_CONFIG", raising=False)
    path = Path(typer.get_app_dir("streamctl")) / "config.toml"
    assert str(home) in str(path)
    assert cfg.default_config_path() == str(path)
    return path


def test_config_default_location_missing_gives_empty_config(user_config: Path) -> None:
    config = load_config(None, env={})
    assert config == Config(path=None)
    assert dict(config.defaults) == {} and dict(config.pipelines) == {}
    assert load_config(None) == Config(path=None)  # os.environ by default


def test_config_default_location_used_when_present(user_config: Path) -> None:
    user_config.parent.mkdir(parents=True)
    user_config.write_text(FULL, encoding="utf-8")
    config = load_config(None, env={})
    assert config.path == str(user_config)
    assert "orders" in config.pipelines


def test_config_explicit_path_beats_default_location(user_config: Path, tmp_path: Path) -> None:
    user_config.parent.mkdir(parents=True)
    user_config.write_text(FULL, encoding="utf-8")
    other = write(tmp_path, "", "other.toml")
    assert load_config(other, env={}).path == other
    assert load_config(None, env={"STREAMCTL_CONFIG": other}).path == other


def test_config_empty_file_is_fine(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""), env={})
    assert dict(config.defaults) == {} and dict(config.pipelines) == {}


# ---------------------------------------------------------------- errors


def test_config_bad_toml_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, '[defaults]\nformat = "json"\nthis is not toml\n')
    message = usage_error(path)
    assert path in message
    assert "invalid TOML at line 3" in message


def test_config_bad_toml_never_quotes_a_secret(tmp_path: Path) -> None:
    # unquoted and half-quoted secrets: the parser error must not echo any of it
    for text in (
        f"[pipelines.a.kafka]\n\"sasl.plain.password\" = {SECRET}\n",
        f"[pipelines.a.kafka]\n\"sasl.plain.password\" = \"{SECRET}\n",
        f"[pipelines.a.kafka]\n\"sasl.plain.password\" = \"{SECRET}\" {SECRET}\n",
        f"[pipelines.a.kafka]\n\"sasl.plain.password\" = '{SECRET}\x01'\n",
    ):
        message = usage_error(write(tmp_path, text))
        assert "invalid TOML at line 2" in message
        for char in set(SECRET) - set("invalid TOML at line column config file"):
            assert f"'{char}'" not in message, message


def test_config_unknown_top_level_table(tmp_path: Path) -> None:
    message = usage_error(write(tmp_path, "[pipeline.orders]\ncheckpoint = 'x'\n"))
    assert "unknown top-level table 'pipeline'" in message
    assert "defaults, pipelines" in message


def test_config_unknown_top_level_key(tmp_path: Path) -> None:
    message = usage_error(write(tmp_path, "format = 'json'\n"))
    assert "unknown top-level key 'format'" in message


def test_config_defaults_must_be_a_table(tmp_path: Path) -> None:
    message = usage_error(write(tmp_path, "defaults = 3\n"))
    assert "defaults must be a table, not a number" in message


def test_config_unknown_default_key(tmp_path: Path) -> None:
    message = usage_error(write(tmp_path, "[defaults]\nformt = 'json'\n"))
    assert "unknown key 'formt' in [defaults]" in message
    assert "format, kafka_timeout" in message


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("format = 3", "[defaults] format must be a string, not a number"),
        ("format = 'xml'", "[defaults] format must be one of table, wide, plain, markdown, json"),
        ("kafka_timeout = '10'", "[defaults] kafka_timeout must be a number, not a string"),
        ("kafka_timeout = true", "[defaults] kafka_timeout must be a number, not a boolean"),
        ("kafka_timeout = 0", "[defaults] kafka_timeout must be a number greater than 0"),
        ("kafka_timeout = [1]", "[defaults] kafka_timeout must be a number, not an array"),
    ],
)
def test_config_default_wrong_type(tmp_path: Path, line: str, expected: str) -> None:
    path = write(tmp_path, f"[defaults]\n{line}\n")
    message = usage_error(path)
    assert path in message
    assert expected in message
    assert "got" not in message  # values from the file are never quoted


def test_config_unknown_pipeline_key(tmp_path: Path) -> None:
    path = write(tmp_path, "[pipelines.orders]\ncheckpoint = 'x'\nchekpoint = 'y'\n")
    message = usage_error(path)
    assert path in message
    assert "[pipelines.orders]: unknown key 'chekpoint'" in message
    assert "app_id, checkpoint, kafka, sink, sink_kind" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[pipelines.orders]\ncheckpoint = 3\n", "[pipelines.orders]: checkpoint must be a string, not a number"),
        ("[pipelines.orders]\nsink = ['a']\n", "[pipelines.orders]: sink must be a string, not an array"),
        ("[pipelines.orders]\nsink_kind = {a = 1}\n", "[pipelines.orders]: sink_kind must be a string, not a table"),
        ("[pipelines.orders]\napp_id = 1979-05-27\n", "[pipelines.orders]: app_id must be a string, not a date"),
        ("[pipelines.orders]\ncheckpoint = ''\n", "[pipelines.orders]: checkpoint must not be empty"),
        ("[pipelines.orders]\nkafka = 'broker:9092'\n", "[pipelines.orders]: kafka must be a table, not a string"),
        ("pipelines = 3\n", "pipelines must be a table, not a number"),
        ("[pipelines]\norders = 'x'\n", "pipelines.orders must be a table, not a string"),
        (
            f"[pipelines.orders.kafka]\n\"sasl.plain.password\" = ['{SECRET}']\n",
            "[pipelines.orders.kafka] 'sasl.plain.password' must be a string, not an array",
        ),
    ],
)
def test_config_pipeline_wrong_type(tmp_path: Path, text: str, expected: str) -> None:
    message = usage_error(write(tmp_path, text))
    assert expected in message


@pytest.mark.parametrize("name", ["a/b", "s3:x", ".", "..", "a\\\\b", ""])
def test_config_pipeline_name_that_reads_as_a_path_is_rejected(tmp_path: Path, name: str) -> None:
    message = usage_error(write(tmp_path, f'[pipelines."{name}"]\ncheckpoint = "x"\n'))
    assert "pipeline name" in message and "would read as a path" in message


def test_config_unreadable_file(tmp_path: Path) -> None:
    """Root reads any file, so the check runs as `nobody` (setpriv) on a 0600 root-owned file."""
    import shutil
    import subprocess
    import sys
    import tempfile

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        path = write(tmp_path, FULL)
        os.chmod(path, 0)
        try:
            message = usage_error(path)
            assert path in message and "cannot read" in message
        finally:
            os.chmod(path, 0o600)
        return
    base = tempfile.mkdtemp(prefix="streamctl-cfg-")
    try:
        os.chmod(base, 0o755)
        path = write(Path(base), FULL)
        os.chmod(path, 0o600)
        code = ("import sys\nfrom streamctl.console.config import load_config\n"
                "from streamctl.formats.errors import UsageError\n"
                "try:\n    load_config(sys.argv[1])\nexcept UsageError as e:\n    print(e)\n")
        r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                            sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60)
        assert r.stdout.strip() == f"config file {path}: cannot read: Permission denied", r
        assert SECRET not in r.stdout + r.stderr
    finally:
        shutil.rmtree(base)


def test_config_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"[defaults]\nformat = '\xff'\n")
    message = usage_error(str(path))
    assert "not valid UTF-8" in message


def test_config_error_messages_never_contain_secret_values(tmp_path: Path) -> None:
    texts = [
        FULL + "\n[extra]\n",
        FULL.replace("[pipelines.bare]", "[pipelines.bare]\npassword = 'x'"),
        FULL.replace('"sasl.plain.password" = "', '"sasl.plain.password" = ["').replace(f'{SECRET}"', f'{SECRET}"]'),
        f'[defaults]\nformat = "{SECRET}"\n'.replace(SECRET, SECRET * 3),
    ]
    for text in texts:
        with pytest.raises(UsageError) as info:
            load_config(write(tmp_path, text), env={})
        assert SECRET not in str(info.value), str(info.value)


# ---------------------------------------------------------------- redaction


def test_pipeline_redacted_kafka_hides_every_credential() -> None:
    kafka = {
        "bootstrap": "broker:9092",
        "sasl.plain.username": "svc",
        "sasl.plain.password": SECRET,
        "ssl.key.password": SECRET,
        "ssl.keystore.password": SECRET,
        "sasl.jaas.config": f"org.apache.kafka...PlainLoginModule required password=\"{SECRET}\";",
        "SASL.OAUTHBEARER.TOKEN": SECRET,
        "client.secret": SECRET,
        "ssl.key": SECRET,
        "ssl.keystore.key": SECRET,
        "ssl.keystore.location": "/etc/ks.jks",
    }
    pipeline = Pipeline("p", "chk", None, None, None, kafka)
    redacted = pipeline.redacted_kafka()
    assert redacted == {
        "bootstrap": "broker:9092",
        "sasl.plain.username": "svc",
        "sasl.plain.password": "***",
        "ssl.key.password": "***",
        "ssl.keystore.password": "***",
        "sasl.jaas.config": "***",
        "SASL.OAUTHBEARER.TOKEN": "***",
        "client.secret": "***",
        "ssl.key": "***",
        "ssl.keystore.key": "***",
        "ssl.keystore.location": "/etc/ks.jks",
    }
    assert SECRET not in repr(redacted)
    assert SECRET not in repr(pipeline)
    assert SECRET not in str(pipeline)
    assert pipeline.kafka["sasl.plain.password"] == SECRET  # the client still gets it


def test_config_repr_is_redacted(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), env={})
    assert SECRET not in repr(config)


# ---------------------------------------------------------------- resolve_checkpoint


@pytest.fixture()
def config(tmp_path: Path) -> Config:
    return load_config(write(tmp_path, FULL), env={})


def test_resolve_checkpoint_pipeline_name(config: Config) -> None:
    location, pipeline = resolve_checkpoint("orders", config)
    assert location == "s3://bucket/chk/orders"
    assert pipeline is config.pipelines["orders"]


@pytest.mark.parametrize(
    "arg",
    ["./orders", "/abs/orders", "orders/", "s3://bucket/orders", "file:orders", "C:\\orders", ".", "..", "unknown", ""],
)
def test_resolve_checkpoint_paths_pass_through(config: Config, arg: str) -> None:
    assert resolve_checkpoint(arg, config) == (arg, None)


def test_resolve_checkpoint_pipeline_without_checkpoint_is_an_error(config: Config) -> None:
    with pytest.raises(UsageError) as info:
        resolve_checkpoint("bare", config)
    message = str(info.value)
    assert "'bare' has no checkpoint" in message
    assert str(config.path) in message
    assert "./bare" in message


def test_resolve_checkpoint_empty_config(tmp_path: Path) -> None:
    assert resolve_checkpoint("orders", Config(path=None)) == ("orders", None)


def test_resolve_checkpoint_docstring_explains_local_folder() -> None:
    assert "./name" in (resolve_checkpoint.__doc__ or "")


# ---------------------------------------------------------------- setting precedence


class Fmt(str, enum.Enum):
    table = "table"
    json = "json"


def test_setting_flag_beats_env_beats_file_beats_default(config: Config) -> None:
    env = {"STREAMCTL_FORMAT": "markdown"}
    empty = Config(path=None)
    assert setting("format", "plain", "STREAMCTL_FORMAT", config, "table", env=env) == "plain"
    assert setting("format", None, "STREAMCTL_FORMAT", config, "table", env=env) == "markdown"
    assert setting("format", None, "STREAMCTL_FORMAT", config, "table", env={}) == "json"
    assert setting("format", None, "STREAMCTL_FORMAT", empty, "table", env={}) == "table"


def test_setting_empty_env_var_counts_as_unset(config: Config) -> None:
    assert setting("format", None, "STREAMCTL_FORMAT", config, "table", env={"STREAMCTL_FORMAT": ""}) == "json"


def test_setting_reads_os_environ_by_default(config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMCTL_KAFKA_TIMEOUT", "2.5")
    assert setting("kafka_timeout", None, "STREAMCTL_KAFKA_TIMEOUT", config, 30.0) == 2.5


def test_setting_converts_types(config: Config) -> None:
    env = {"STREAMCTL_KAFKA_TIMEOUT": " 3 "}
    assert setting("kafka_timeout", None, "STREAMCTL_KAFKA_TIMEOUT", config, 30.0, env=env) == 3.0
    assert setting("kafka_timeout", None, "STREAMCTL_KAFKA_TIMEOUT", config, 30.0, env={}) == 10.0
    assert setting("kafka_timeout", 7, "STREAMCTL_KAFKA_TIMEOUT", config, 30.0, env=env) == 7.0
    assert setting("format", Fmt.table, "STREAMCTL_FORMAT", config, "json", env={}) == "table"
    # unregistered settings convert by the default's type
    assert setting("retries", None, "STREAMCTL_RETRIES", config, 1, env={"STREAMCTL_RETRIES": "4"}) == 4
    assert setting("exit_zero", None, "STREAMCTL_EXIT_ZERO", config, False, env={"STREAMCTL_EXIT_ZERO": "yes"}) is True


def test_setting_bad_flag_names_the_flag(config: Config) -> None:
    with pytest.raises(UsageError, match=r"^invalid value for --format: must be one of"):
        setting("format", "xml", "STREAMCTL_FORMAT", config, "table", env={})
    with pytest.raises(UsageError, match=r"^invalid value for -o/--output: "):
        setting("format", "xml", "STREAMCTL_FORMAT", config, "table", env={}, flag="-o/--output")
    with pytest.raises(UsageError, match=r"^invalid value for --kafka-timeout: must be a number greater than 0"):
        setting("kafka_timeout", -1, "STREAMCTL_KAFKA_TIMEOUT", config, 30.0, env={})


def test_setting_bad_env_var_names_the_variable(config: Config) -> None:
    with pytest.raises(
        UsageError, match=r"^invalid value in environment variable STREAMCTL_KAFKA_TIMEOUT: must be a number \(got 'ten'\)$"
    ):
        setting("kafka_timeout", None, "STREAMCTL_KAFKA_TIMEOUT", config, 30.0, env={"STREAMCTL_KAFKA_TIMEOUT": "ten"})
    with pytest.raises(UsageError, match="STREAMCTL_FORMAT"):
        setting("format", None, "STREAMCTL_FORMAT", config, "table", env={"STREAMCTL_FORMAT": "JSON"})


def test_setting_bad_file_value_names_the_file(tmp_path: Path) -> None:
    # values are validated when the file is loaded, so a bad one never reaches setting();
    # a Config built by hand is still checked and blamed on its file.
    hand_made = Config(path="/etc/streamctl.toml", defaults={"format": "xml", "kafka_timeout": "10"})
    with pytest.raises(UsageError, match=r"^config file /etc/streamctl.toml: \[defaults\] format must be one of") as info:
        setting("format", None, "STREAMCTL_FORMAT", hand_made, "table", env={})
    assert "xml" not in str(info.value)
    with pytest.raises(UsageError, match=r"kafka_timeout must be a number, not a string$"):
        setting("kafka_timeout", None, "STREAMCTL_KAFKA_TIMEOUT", hand_made, 30.0, env={})

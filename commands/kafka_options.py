"""The Kafka options every command that asks a broker shares (`kafka commit-offsets`, `inspect kafka`,
`inspect epochs --bootstrap`), defined once, and how they resolve: flag, environment, the
pipeline's `[pipelines.NAME.kafka]` table (docs/configuration.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import typer

BOOTSTRAP_HELP = "Kafka bootstrap servers (host:port,...). [env: STREAMCTL_KAFKA_BOOTSTRAP; config: [pipelines.X.kafka] bootstrap]"
KAFKA_CONFIG_HELP = "A Kafka client setting KEY=VALUE (security.protocol, sasl.*, ssl.*); repeatable. Secrets never appear in output."
TIMEOUT_HELP = "Seconds to wait for the broker before giving up (exit 3). [env: STREAMCTL_KAFKA_TIMEOUT; default 10]"


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap: str
    config: dict[str, str]
    timeout: float


def kafka_settings(bootstrap: Optional[str], kafka_config: Optional[list[str]], timeout: Optional[float],
                   pipeline: Any, config: Any, required: bool = True,
                   default_bootstrap: Optional[str] = None) -> Optional[KafkaSettings]:
    """Flags beat environment beat the pipeline's [kafka] table beat defaults (`default_bootstrap`:
    the broker an earlier operation's plan names)."""
    import os

    from streamctl.console.config import setting
    from streamctl.formats.errors import UsageError

    piped = dict(pipeline.kafka) if pipeline is not None else {}
    servers = bootstrap or os.environ.get("STREAMCTL_KAFKA_BOOTSTRAP") or piped.pop("bootstrap", None) \
        or piped.pop("bootstrap.servers", None) or default_bootstrap
    piped.pop("bootstrap", None)
    piped.pop("bootstrap.servers", None)
    if not servers:
        if required:
            raise UsageError("no Kafka bootstrap servers: give --bootstrap, STREAMCTL_KAFKA_BOOTSTRAP or a pipeline's kafka.bootstrap")
        return None
    settings = dict(piped)
    for item in kafka_config or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError("invalid value for --kafka-config: expected KEY=VALUE (the value given is not shown: "
                             "it may hold a secret)")
        settings[key.strip()] = value
    seconds = setting("kafka_timeout", timeout, "STREAMCTL_KAFKA_TIMEOUT", config, 10.0, flag="--kafka-timeout")
    return KafkaSettings(servers, settings, float(seconds))


BOOTSTRAP_OPT = typer.Option(None, "--bootstrap", help=BOOTSTRAP_HELP)
KAFKA_CONFIG_OPT = typer.Option(None, "--kafka-config", help=KAFKA_CONFIG_HELP)
KAFKA_TIMEOUT_OPT = typer.Option(None, "--kafka-timeout", help=TIMEOUT_HELP)


def with_kafka_each(queries: list[Any], args: list[str], bootstrap: Optional[str], kafka_config: Optional[list[str]],
                    timeout: Optional[float], config: Any) -> list[Any]:
    """Add Kafka positions and SOURCE_* findings to each query (its pipeline's Kafka settings
    apply when the argument names one)."""
    from streamctl.console.config import resolve_checkpoint
    from streamctl.inspectors.kafka import KafkaBroker, with_kafka

    out = []
    for q, arg in zip(queries, args, strict=True):
        _loc, pipeline = resolve_checkpoint(arg, config)
        ks = kafka_settings(bootstrap, kafka_config, timeout, pipeline, config)
        assert ks is not None
        with KafkaBroker(ks.bootstrap, ks.config, ks.timeout) as broker:
            out.append(with_kafka(q, broker)[0])
    return out


def load(checkpoint: str) -> tuple[Any, Any, str]:
    """The config, the pipeline CHECKPOINT names (or None) and the checkpoint's location."""
    from streamctl.commands import options
    from streamctl.console.config import resolve_checkpoint

    config = options.settings()
    location, pipeline = resolve_checkpoint(checkpoint, config)
    return config, pipeline, location

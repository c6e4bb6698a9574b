"""The options of streamctl's Kafka source (pipeline/kafka_source.py, its docstring's *Options*):
Spark's option names parsed and checked, and the ``kafka.*`` properties turned into kafka-python
``KafkaConsumer`` settings. No option value is ever put into an exception or log message
(passwords are kafka.* options)."""
from __future__ import annotations

import json
import logging
import re
from typing import Any, Mapping, Optional

SHORT_NAME = "streamctl-kafka"

EARLIEST = -2
LATEST = -1

_log = logging.getLogger("streamctl.pipeline.kafka_source")  # the source's one logger, whichever module logs


#: Spark Kafka options this source does not implement (lower case, as Spark hands options over).
_UNSUPPORTED = {
    "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "startingoffsetsbytimestampstrategy": "startingOffsetsByTimestampStrategy",
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
    "includeheaders": "includeHeaders",
}
_KNOWN = {"subscribe", "subscribepattern", "assign", "startingoffsets", "maxoffsetspertrigger",
          "polltimeoutms", "failondataloss", "path"}

#: kafka-python settings the source sets itself, or that are not plain strings.
_MANAGED = {
    "key_deserializer", "value_deserializer", "enable_auto_commit", "auto_offset_reset",
    "consumer_timeout_ms", "kafka_client", "selector", "socket_options", "ssl_context",
    "partition_assignment_strategy", "default_offset_commit_callback", "metric_reporters",
    "sasl_oauth_token_provider", "interceptor_classes",
}
_JAVA_ONLY = {
    "key.deserializer", "value.deserializer", "enable.auto.commit", "auto.offset.reset",
    "interceptor.classes",
}


def _parse_bool(name: str, raw: str) -> bool:
    value = str(raw).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ValueError(f"{SHORT_NAME}: option {name!r} must be true or false")


def _jaas_credentials(raw: str) -> dict[str, str]:
    """username/password of a PlainLoginModule / ScramLoginModule JAAS line."""
    if not re.search(r"(PlainLoginModule|ScramLoginModule)\s+required", raw):
        raise ValueError(
            f"{SHORT_NAME}: option 'kafka.sasl.jaas.config' is supported only for Kafka's "
            "PlainLoginModule or ScramLoginModule (use kafka.sasl.plain.username/password)")
    found = dict(re.findall(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', raw))
    if "username" not in found or "password" not in found:
        raise ValueError(f"{SHORT_NAME}: option 'kafka.sasl.jaas.config' needs username=\"...\" and password=\"...\"")
    return {"sasl_plain_username": found["username"], "sasl_plain_password": found["password"]}


def consumer_config(kafka_options: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python ``KafkaConsumer`` kwargs from Kafka property names (without the ``kafka.``
    prefix, any case). Raises ValueError naming the offending property, never its value."""
    from kafka import KafkaConsumer

    defaults = KafkaConsumer.DEFAULT_CONFIG
    props = {str(k).lower(): v for k, v in kafka_options.items()}
    cfg: dict[str, Any] = {}
    truststore_type = str(props.pop("ssl.truststore.type", "")).upper()
    for name, raw in props.items():
        label = f"kafka.{name}"
        if name in _JAVA_ONLY:
            raise ValueError(f"{SHORT_NAME}: option {label!r} is not supported: the source manages it")
        if name == "sasl.jaas.config":
            cfg.update(_jaas_credentials(str(raw)))
            continue
        if name == "ssl.endpoint.identification.algorithm":
            cfg["ssl_check_hostname"] = bool(str(raw).strip())
            continue
        if name == "ssl.truststore.location":
            if truststore_type != "PEM":
                raise ValueError(
                    f"{SHORT_NAME}: option {label!r} needs kafka.ssl.truststore.type=PEM (JKS/PKCS12 "
                    "stores are not readable by kafka-python); or use kafka.ssl.cafile")
            cfg["ssl_cafile"] = str(raw)
            continue
        if name == "ssl.key.password":
            cfg["ssl_password"] = str(raw)
            continue
        key = name.replace(".", "_").replace("-", "_")
        if key in _MANAGED:
            raise ValueError(f"{SHORT_NAME}: option {label!r} is not supported: the source manages it")
        if key not in defaults:
            raise ValueError(f"{SHORT_NAME}: unknown Kafka option {label!r} (kafka-python's KafkaConsumer "
                             f"has no setting {key!r})")
        default = defaults[key]
        try:
            if key == "bootstrap_servers":
                value: Any = [s.strip() for s in str(raw).split(",") if s.strip()]
            elif key == "api_version":
                value = tuple(int(p) for p in str(raw).strip().split("."))
            elif isinstance(default, bool):
                value = _parse_bool(label, str(raw))
            elif isinstance(default, int) or key in ("receive_buffer_bytes", "send_buffer_bytes"):
                value = int(str(raw).strip())
            else:
                value = str(raw)
        except ValueError:
            raise ValueError(f"{SHORT_NAME}: option {label!r} has a value of the wrong type") from None
        cfg[key] = value
    if not cfg.get("bootstrap_servers"):
        raise ValueError(f"{SHORT_NAME}: option 'kafka.bootstrap.servers' is required")
    return cfg


class KafkaSourceOptions:
    """The parsed source options. Holds the consumer settings (which may include secrets): its
    repr shows the bootstrap servers and topics only."""

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = {str(k).lower(): v for k, v in dict(options).items()}
        for key, name in _UNSUPPORTED.items():
            if key in opts:
                raise ValueError(f"{SHORT_NAME}: option {name!r} is not supported")
        kafka_opts = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
        for key in opts:
            if not key.startswith("kafka.") and key not in _KNOWN:
                _log.warning("%s: ignoring unknown option %r", SHORT_NAME, key)
        self.consumer: dict[str, Any] = consumer_config(kafka_opts)
        self.bootstrap = ",".join(self.consumer["bootstrap_servers"])

        chosen = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
        if len(chosen) != 1:
            raise ValueError(f"{SHORT_NAME}: set exactly one of 'subscribe', 'subscribePattern', 'assign'")
        self.subscribe: Optional[list[str]] = None
        self.pattern: Optional[str] = None
        self.assign: Optional[dict[str, list[int]]] = None
        if chosen[0] == "subscribe":
            topics = sorted({t.strip() for t in str(opts["subscribe"]).split(",") if t.strip()})
            if not topics:
                raise ValueError(f"{SHORT_NAME}: option 'subscribe' names no topic")
            self.subscribe = topics
        elif chosen[0] == "subscribepattern":
            self.pattern = str(opts["subscribepattern"])
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"{SHORT_NAME}: option 'subscribePattern' is not a valid regex: {exc}") from None
        else:
            self.assign = _parse_assign(str(opts["assign"]))

        self.starting = _parse_starting(opts.get("startingoffsets", "latest"))
        raw_limit = opts.get("maxoffsetspertrigger")
        self.max_offsets: Optional[int] = None
        if raw_limit not in (None, ""):
            try:
                self.max_offsets = int(str(raw_limit).strip())
            except ValueError:
                raise ValueError(f"{SHORT_NAME}: option 'maxOffsetsPerTrigger' must be a positive integer") from None
            if self.max_offsets <= 0:
                raise ValueError(f"{SHORT_NAME}: option 'maxOffsetsPerTrigger' must be a positive integer")
        try:
            self.poll_timeout_ms = int(str(opts.get("polltimeoutms", 120000)).strip())
        except ValueError:
            raise ValueError(f"{SHORT_NAME}: option 'pollTimeoutMs' must be an integer (milliseconds)") from None
        if self.poll_timeout_ms <= 0:
            raise ValueError(f"{SHORT_NAME}: option 'pollTimeoutMs' must be positive")
        self.fail_on_data_loss = _parse_bool("failOnDataLoss", str(opts.get("failondataloss", "true")))

    def __repr__(self) -> str:
        what = self.subscribe or self.pattern or self.assign
        return f"KafkaSourceOptions(bootstrap={self.bootstrap!r}, topics={what!r})"

    def new_consumer(self, role: str) -> Any:
        """A KafkaConsumer with the user's settings; no auto commit, no offset reset."""
        from kafka import KafkaConsumer

        cfg = dict(self.consumer)
        cfg.setdefault("client_id", f"{SHORT_NAME}-{role}")
        cfg["enable_auto_commit"] = False
        cfg["auto_offset_reset"] = "none"
        cfg.setdefault("allow_auto_create_topics", False)
        return KafkaConsumer(**cfg)


def _parse_assign(raw: str) -> dict[str, list[int]]:
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or not data:
            raise ValueError
        out = {}
        for topic, parts in sorted(data.items()):
            if not isinstance(parts, list) or not parts or not all(isinstance(p, int) and p >= 0 for p in parts):
                raise ValueError
            out[str(topic)] = sorted(set(parts))
        return out
    except ValueError:
        raise ValueError(f"{SHORT_NAME}: option 'assign' must be JSON like {{\"topic\": [0, 1]}}") from None


def _parse_starting(raw: Any) -> Any:
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError
        out: dict[str, dict[int, int]] = {}
        for topic, parts in data.items():
            if not isinstance(parts, dict):
                raise ValueError
            out[str(topic)] = {}
            for p, off in parts.items():
                if not isinstance(off, int) or isinstance(off, bool) or off < EARLIEST:
                    raise ValueError
                out[str(topic)][int(p)] = off
        return out
    except ValueError:
        raise ValueError(
            f"{SHORT_NAME}: option 'startingOffsets' must be earliest, latest or JSON like "
            "{\"t\": {\"0\": 23, \"1\": -2}} (-2 earliest, -1 latest)") from None

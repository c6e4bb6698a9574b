"""A real S3 API server for the tests: moto in server mode on loopback (fixture ``s3`` yields
``(pyarrow S3FileSystem, port)`` with a bucket ``chk``), and helpers to move folders in and out.
Loaded by path from the test modules that need it (tests run with --import-mode=importlib)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

moto_server = shutil.which("moto_server", path=str(Path(sys.executable).parent))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([moto_server, "-H", "127.0.0.1", "-p", str(port)], stdout=fh, stderr=fh)
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", region="us-east-1",
                               access_key="testing", secret_key="testing", allow_bucket_creation=True)
        fs.create_dir("chk")
        yield fs, port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def upload(fs, src: Path, prefix: str) -> str:
    for dirpath, _dirs, files in os.walk(src):
        for f in files:
            p = Path(dirpath) / f
            key = f"chk/{prefix}/{p.relative_to(src).as_posix()}"
            with fs.open_output_stream(key) as out:
                out.write(p.read_bytes())
    return prefix


def download(fs, prefix: str, dest: Path) -> None:
    """Replace `dest` with the objects under chk/<prefix>/ (what a mutation on S3 left)."""
    import pyarrow.fs as pafs

    shutil.rmtree(dest, ignore_errors=True)
    base = f"chk/{prefix}"
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=True)):
        if info.type == pafs.FileType.File:
            target = dest / info.path[len(base) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            with fs.open_input_stream(info.path) as fh:
                target.write_bytes(fh.read())


def s3_uri(port: int, prefix: str) -> str:
    return f"s3://chk/{prefix}?endpoint_override=127.0.0.1:{port}&scheme=http"

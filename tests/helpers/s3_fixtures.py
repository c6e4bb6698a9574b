"""A real S3 API server for the tests: moto in server mode on loopback (fixture ``s3`` yields
``(pyarrow S3FileSystem, port)`` with a bucket ``chk``), and helpers to move folders in and out.
Test modules import the fixture into their namespace (module scope: one server per module)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.trees import remove_tree

moto_server = shutil.which("moto_server", path=str(Path(sys.executable).parent))

# The file systems of the moto servers now running, each with its bucket `chk`. A server lives for a
# module, but every test leaves its bucket empty (the autouse fixture `empty_object_store_buckets`
# in conftest.py): moto answers a listing by walking every key of the bucket, so the keys of
# earlier tests would slow every later listing. (fake-gcs-server and Azurite are not registered:
# their listings do not grow so, and pyarrow cannot empty a GCS bucket by its root.)
SERVED: list = []


def empty_buckets() -> None:
    """Delete every object of each running moto server's bucket `chk` (DeleteObjects in batches)."""
    for fs in list(SERVED):
        fs.delete_dir_contents("chk", missing_dir_ok=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([moto_server, "-H", "127.0.0.1", "-p", str(port)], stdout=fh, stderr=fh)
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    fs = None
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
        SERVED.append(fs)
        yield fs, port
    finally:
        SERVED[:] = [f for f in SERVED if f is not fs]
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
    """Replace `dest` (a folder a Spark session may have written) with the objects under
    chk/<prefix>/ (what a mutation on S3 left)."""
    import pyarrow.fs as pafs

    remove_tree(dest)
    base = f"chk/{prefix}"
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=True)):
        if info.type == pafs.FileType.File:
            target = dest / info.path[len(base) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            with fs.open_input_stream(info.path) as fh:
                target.write_bytes(fh.read())


def s3_uri(port: int, prefix: str) -> str:
    return f"s3://chk/{prefix}?endpoint_override=127.0.0.1:{port}&scheme=http"


class CountingProxy:
    """A loopback HTTP proxy in front of the moto server that counts the S3 requests it forwards
    (the real server still answers every one)."""

    def __init__(self, target_port: int, delay: float = 0.0) -> None:
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        proxy = self
        self.requests: list[tuple[str, str]] = []
        self.sent: list[tuple[str, str, int]] = []  # method, path, request body bytes
        self.in_flight = self.max_in_flight = 0
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _body(self) -> tuple[bytes | None, dict[str, str]]:
                """The request body and the headers to forward (a chunked upload, as the AWS SDK
                sends a multipart part, is forwarded whole with its length)."""
                headers = {k: v for k, v in self.headers.items() if k.lower() != "expect"}
                if (self.headers.get("Transfer-Encoding") or "").lower() != "chunked":
                    length = int(self.headers.get("Content-Length") or 0)
                    return (self.rfile.read(length) if length else None), headers
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        break
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                headers = {k: v for k, v in headers.items() if k.lower() != "transfer-encoding"}
                body = b"".join(chunks)
                headers["Content-Length"] = str(len(body))
                return body, headers

            def _forward(self) -> None:
                body, headers = self._body()
                with lock:
                    proxy.requests.append((self.command, self.path))
                    proxy.sent.append((self.command, self.path, len(body or b"")))
                    proxy.in_flight += 1
                    proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
                try:
                    time.sleep(delay)  # a round trip to a real object store
                    conn = http.client.HTTPConnection("127.0.0.1", target_port, timeout=30)
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    with lock:
                        proxy.in_flight -= 1
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                # a HEAD answer carries the object's length, not the (empty) body's
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()

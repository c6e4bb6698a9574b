"""Checkpoints on S3-compatible object storage: a real moto server (server mode, on loopback)
stands in for S3, and streamctl reads it through pyarrow.fs with s3:// URIs."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _load_s3():
    import importlib.util

    spec = importlib.util.spec_from_file_location("streamctl_tests_s3_fixtures", Path(__file__).with_name("s3_fixtures.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_s3f = _load_s3()
moto_server, s3, upload, _free_port = _s3f.moto_server, _s3f.s3, _s3f.upload, _s3f._free_port
pytestmark = pytest.mark.skipif(moto_server is None, reason="moto[server] is installed by ./dev test")

CORPUS = Path(__file__).resolve().parent / "fixtures" / "spark-corpus"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "spark-3.5" / "agg_hdfs" / "checkpoint"


def test_inspect_epochs_and_state_on_s3_match_local(cli, s3):
    fs, port = s3
    upload(fs, FIXTURE, "agg")
    uri = f"s3://chk/agg?endpoint_override=127.0.0.1:{port}&scheme=http"
    remote = cli("inspect", "epochs", uri, "--json")
    local = cli("inspect", "epochs", str(FIXTURE), "--json")
    assert remote.code == local.code == 0, remote
    rq, lq = remote.json()["queries"][0], local.json()["queries"][0]
    for key in ("query_id", "planned", "committed", "state_epoch", "common_window", "verdict", "retained"):
        assert rq[key] == lq[key], key
    rs = cli("inspect", "state", uri, "--json").json()
    ls = cli("inspect", "state", str(FIXTURE), "--json").json()
    assert [s["durable_version"] for s in rs["operators"][0]["stores"]] == \
        [s["durable_version"] for s in ls["operators"][0]["stores"]]


def test_s3_missing_prefix_and_corrupt_file(cli, s3):
    fs, port = s3
    upload(fs, FIXTURE, "bad")
    with fs.open_output_stream("chk/bad/commits/3") as out:
        out.write(b"v1\n{\"nextBatch")
    opts = f"?endpoint_override=127.0.0.1:{port}&scheme=http"
    r = cli("inspect", "epochs", f"s3://chk/bad{opts}", "--json")
    (f,) = [f for f in r.json()["queries"][0]["findings"] if f["code"] == "UNREADABLE"]
    assert r.code == 3 and f["path"] == f"s3://chk/bad/commits/3{opts}"
    r = cli("inspect", "epochs", f"s3://chk/nothing-here{opts}", "--json")
    assert r.code == 3 and "does not exist" in r.stdout


def test_unreachable_endpoint_is_exit_3_one_line(cli, s3):
    port = _free_port()
    t0 = time.time()
    r = cli("inspect", "epochs", f"s3://chk/agg?endpoint_override=127.0.0.1:{port}&scheme=http&connect_timeout=1&request_timeout=2")
    assert r.code == 3, r
    assert "Traceback" not in r.stdout + r.stderr
    assert time.time() - t0 < 60


class _CountingProxy:
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

            def _body(self) -> "tuple[bytes | None, dict[str, str]]":
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


def test_state_listing_is_one_recursive_listing_not_one_request_per_folder(cli, s3):
    """300 partition folders on S3: the request count stays bounded (one paged recursive listing
    of state/, a listing each for the root, offsets/ and commits/, and the few small reads)."""
    import pyarrow.fs as pafs

    fs, port = s3
    parts, versions = 300, 3
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"spark.sql.shuffle.partitions":"300"}}'
    files = {"metadata": '{"id":"44444444-2222-3333-4444-555555555555"}',
             "state/0/_metadata/metadata": 'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"stateStoreSave"},'
                                           '"stateStoreInfo":[{"storeName":"default","numColsPrefixKey":0,"numPartitions":300}]}'}
    for b in range(versions):
        files[f"offsets/{b}"] = f'v1\n{meta}\n{{"logOffset":{b}}}'
        files[f"commits/{b}"] = 'v1\n{"nextBatchWatermarkMs":0}'
    for p in range(parts):
        for v in range(1, versions + 1):
            files[f"state/0/{p}/{v}.delta"] = "x"
    for rel, text in files.items():
        with fs.open_output_stream(f"chk/many/{rel}") as out:
            out.write(text.encode())
    proxy = _CountingProxy(port)
    try:
        uri = f"s3://chk/many?endpoint_override=127.0.0.1:{proxy.port}&scheme=http"
        r = cli("inspect", "epochs", uri, "--json", "--quiet-period", "0")
        q = r.json()["queries"][0]
        assert r.code == 0 and q["verdict"] == "aligned" and q["state_epoch"] == versions - 1, r
        assert len([w for w in q["writers"] if w["kind"] == "state_store"]) == parts
        count = len(proxy.requests)
        assert count <= 25, proxy.requests
        print(f"[requests] inspect epochs on {len(files)} S3 objects ({parts} partitions): {count} requests")
    finally:
        proxy.close()
    assert isinstance(fs, pafs.S3FileSystem)


def test_small_files_are_read_concurrently_within_the_request_bound(cli, s3):
    """The few small files of a checkpoint (metadata, offsets/P and P-1, commits/C) are read at
    once on object stores: with a 100 ms round trip, requests overlap, their number does not
    grow, and the findings are those of the local copy."""
    fs, port = s3
    upload(fs, FIXTURE, "overlap")
    proxy = _CountingProxy(port, delay=0.1)
    try:
        uri = f"s3://chk/overlap?endpoint_override=127.0.0.1:{proxy.port}&scheme=http"
        remote = cli("inspect", "epochs", uri, "--json", "--quiet-period", "0")
        count = len(proxy.requests)
        reads = [p for m, p in proxy.requests if m == "GET" and "list-type" not in p and "prefix=" not in p]
        print(f"[requests] inspect epochs of {FIXTURE.parent.name} on S3: {count} requests, "
              f"{proxy.max_in_flight} at once, {len(reads)} reads")
    finally:
        proxy.close()
    local = cli("inspect", "epochs", str(FIXTURE), "--json", "--quiet-period", "0")
    assert remote.code == local.code == 0, remote
    rq, lq = remote.json()["queries"][0], local.json()["queries"][0]
    assert [(f["code"], f["severity"]) for f in rq["findings"]] == [(f["code"], f["severity"]) for f in lq["findings"]]
    for key in ("query_id", "planned", "committed", "state_epoch", "common_window", "verdict", "retained"):
        assert rq[key] == lq[key], key
    assert count <= 25, proxy.requests
    assert proxy.max_in_flight >= 3, proxy.requests  # metadata with the two listings, then the log files


@pytest.mark.parametrize("scenario,victim,code", [
    ("agg_hdfs", "4.delta", "STATE_UNRESTORABLE"),  # the newest delta of the chain version 4 needs
    ("agg_rocksdb", "3.zip", "STATE_FILE_CORRUPT"),  # the zip the chain starts from (2.zip + changelogs intact)
])
def test_torn_state_file_is_found_on_s3_as_locally(cli, s3, tmp_path, scenario, victim, code):
    """A state file cut short (a crash, a full disk), no checksum companion: judged by its own
    format with ranged reads of its head and tail (docs/formats/state.md#torn-files), on S3 with
    --deep (and in every mutation's inspection) as on the local file system."""
    fs, port = s3
    ck = tmp_path / "checkpoint"
    shutil.copytree(FIXTURE.parent.parent / scenario / "checkpoint", ck)
    store = ck / "state/0/0"
    whole = (store / victim).read_bytes()
    (store / victim).write_bytes(whole[: len(whole) // 2])
    for crc in (store / f".{victim}.crc", store / f"{victim}.crc"):
        crc.unlink(missing_ok=True)
    upload(fs, ck, f"torn-{scenario}")
    uri = f"s3://chk/torn-{scenario}?endpoint_override=127.0.0.1:{port}&scheme=http"
    remote, local = cli("inspect", "epochs", uri, "--json", "--deep"), cli("inspect", "epochs", str(ck), "--json")
    quick = cli("inspect", "epochs", uri, "--json")  # without --deep: no ranged reads of state files on S3
    assert not [f for f in quick.json()["queries"][0]["findings"] if "(torn:" in f["message"]], quick.json()
    for r in (remote, local):
        found = {f["code"]: f for f in r.json()["queries"][0]["findings"]}
        assert r.code == 1 and code in found and f"{victim} (torn:" in found[code]["message"], found
    if code == "STATE_FILE_CORRUPT":  # PySpark 3.5's checkpoint: no sign of a 4.1+ line, the failing outcome
        (f,) = [f for f in remote.json()["queries"][0]["findings"] if f["code"] == code]
        assert f["severity"] == "error" and f["snapshot_aside"] and f["restart"] == "fails", f

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

moto_server = shutil.which("moto_server", path=str(Path(sys.executable).parent))
pytestmark = pytest.mark.skipif(moto_server is None, reason="moto[server] is installed by ./dev test")

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "spark-checkpoints"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "spark-3.5" / "agg_hdfs" / "checkpoint"


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
    assert r.code == 3 and f["path"].endswith("commits/3")
    r = cli("inspect", "epochs", f"s3://chk/nothing-here{opts}", "--json")
    assert r.code == 3 and "does not exist" in r.stdout


def test_unreachable_endpoint_is_exit_3_one_line(cli, s3):
    port = _free_port()
    t0 = time.time()
    r = cli("inspect", "epochs", f"s3://chk/agg?endpoint_override=127.0.0.1:{port}&scheme=http&connect_timeout=1&request_timeout=2")
    assert r.code == 3, r
    assert "Traceback" not in r.stdout + r.stderr
    assert time.time() - t0 < 60

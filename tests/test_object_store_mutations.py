"""Mutations on a real S3 API server (moto, server mode, loopback): the lock is a conditional
write, moves are copy -> verify -> delete under the journal.

Spark cannot reach S3 here (no hadoop-aws jars), so the delivery checks move the pipeline folder
to S3 and back: the real query runs locally, is damaged locally, is uploaded; `streamctl align`
/ `trim` run against the s3:// URIs only; what they left on the S3 server is downloaded over the
local folder and the same real query restarts on it. The coordinated sink keeps relative paths in
its commit records, so nothing is rewritten on the way."""
from __future__ import annotations

import hashlib
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"streamctl_tests_{name}_s3m", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_s3f = _load("s3_fixtures")
ap = _load("align_pipeline")
s3 = _s3f.s3
pytestmark = pytest.mark.skipif(_s3f.moto_server is None, reason="moto[server] is installed by ./dev test")
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "spark-3.5" / "agg_rocksdb" / "checkpoint"


def _objects(fs, prefix: str) -> dict[str, str]:
    import pyarrow.fs as pafs

    out = {}
    base = f"chk/{prefix}"
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=True)):
        if info.type == pafs.FileType.File and "/_streamctl/" not in info.path:
            with fs.open_input_stream(info.path) as fh:
                out[info.path[len(base) + 1:]] = hashlib.sha256(fh.read()).hexdigest()
    return out


def test_the_lock_is_a_conditional_write_on_s3(s3):
    from streamctl.operations.files import Root
    from streamctl.operations.lock import LOCK_FILE, Lock, LockHeld

    fs, port = s3
    root = Root("checkpoint", _s3f.s3_uri(port, "locked"))
    lock = Lock.acquire(root, "align", "op-1")
    assert root.exists(LOCK_FILE)
    assert not root.create_exclusive(LOCK_FILE, b"{}")  # If-None-Match: * -> 412 from the server
    with pytest.raises(LockHeld, match="held by align"):
        Lock.acquire(Root("checkpoint", _s3f.s3_uri(port, "locked")), "align", "op-2")
    lock.release()
    assert not root.exists(LOCK_FILE)
    Lock.acquire(root, "trim", "op-3").release()


def test_trim_on_s3_then_undo_restores_every_object(cli, s3):
    fs, port = s3
    _s3f.upload(fs, FIXTURE, "trim")
    before = _objects(fs, "trim")
    uri = _s3f.s3_uri(port, "trim")
    done = cli("trim", uri, "--keep-epochs", "1", "--execute", "--json")
    assert done.code == 0, done.stderr
    result = done.json()
    assert result["verified"] is True and result["backup"].startswith("s3://chk/trim/_streamctl/backups/")
    after = _objects(fs, "trim")
    removed = set(before) - set(after)
    assert "offsets/0" in removed and "state/0/0/1.changelog" in removed and "offsets/3" in after
    undo = cli("trim", "--undo", result["backup"], "--json")
    assert undo.code == 0, undo.stderr
    assert _objects(fs, "trim") == before


@pytest.mark.spark
def test_align_on_s3_delivers_exactly_once_after_the_restart(cli, spark, s3, tmp_path):
    fs, port = s3
    p = ap.Pipeline(tmp_path, "coordinated", spark)
    p.add_input(0, 3)
    p.run()
    saved = tmp_path / "saved-checkpoint"
    shutil.copytree(p.checkpoint, saved)
    p.add_input(3, 2)
    p.run()
    shutil.rmtree(p.checkpoint)
    shutil.copytree(saved, p.checkpoint)  # a checkpoint restored from an older copy: the sink is ahead
    _s3f.upload(fs, p.checkpoint, "coord/checkpoint")
    _s3f.upload(fs, p.output, "coord/output")
    ck, out = _s3f.s3_uri(port, "coord/checkpoint"), _s3f.s3_uri(port, "coord/output")

    seen = cli("inspect", "epochs", ck, "--sink", out, "--json")
    assert "SINK_AHEAD" in {f["code"] for q in seen.json()["queries"] for f in q["findings"]}
    plan = cli("align", ck, "--sink", out, "--json")
    assert plan.code == 0, plan.stderr
    assert plan.json()["plan"]["classification"] == "exactly-once"
    done = cli("align", ck, "--sink", out, "--execute", "--json")
    assert done.code == 0, done.stderr
    assert done.json()["verified"] is True
    assert "_commits/4.json" not in _objects(fs, "coord/output")

    _s3f.download(fs, "coord/checkpoint", p.checkpoint)
    _s3f.download(fs, "coord/output", p.output)
    shutil.rmtree(p.checkpoint / "_streamctl")  # the backup stays on S3; Spark ignores the folder anyway
    p.add_input(5, 2)
    p.run()
    report = p.delivery()
    assert report["ok"], report


@pytest.mark.spark
def test_drop_sink_on_s3_retires_in_order_and_the_old_query_cannot_restart(cli, spark, s3, tmp_path):
    import json

    fs, port = s3
    p = ap.Pipeline(tmp_path, "coordinated", spark)
    p.add_input(0, 3)
    p.run()
    _s3f.upload(fs, p.checkpoint, "drop/checkpoint")
    _s3f.upload(fs, p.output, "drop/output")
    before_ck, before_out = _objects(fs, "drop/checkpoint"), _objects(fs, "drop/output")
    ck, out = _s3f.s3_uri(port, "drop/checkpoint"), _s3f.s3_uri(port, "drop/output")

    plan = cli("drop-sink", out, "--checkpoint", ck, "--safe", "--quiet-period", "0", "--json")
    assert plan.code == 0, plan.stderr
    assert _objects(fs, "drop/checkpoint") == before_ck and _objects(fs, "drop/output") == before_out
    done = cli("drop-sink", out, "--checkpoint", ck, "--safe", "--execute", "--quiet-period", "0", "--json")
    assert done.code == 0, done.stderr
    doc = done.json()
    assert doc["verified"] is True and doc["final_epoch"] == 2
    archive = doc["archive"]
    assert archive.startswith("s3://chk/drop/checkpoint/_streamctl/retired/")
    prefix = archive.split("?")[0][len("s3://chk/"):]
    kept = _objects(fs, "drop/checkpoint")
    assert set(kept) == {"metadata"}  # only the tombstone is left (the archive is under _streamctl/)
    assert "_commits/2.json" not in _objects(fs, "drop/output")
    with fs.open_input_stream(f"chk/{prefix}/handoff.json") as fh:
        handoff = json.loads(fh.read())
    assert handoff["final_epoch"] == 2 and handoff["sink_epoch"] == 2
    archived = _digests(fs, prefix)
    # every retired object is in the archive byte for byte; the manifest has a sha256 per step
    assert {f"files/checkpoint/{k}": v for k, v in before_ck.items()}.items() <= archived.items()
    assert {f"files/sink/{k}": v for k, v in before_out.items() if k.startswith("_commits/")}.items() <= archived.items()
    manifest = json.loads(_read(fs, f"chk/{prefix}/manifest.json"))
    assert {(m["root"], m["path"]) for m in manifest["files"]} >= {("checkpoint", "offsets"), ("sink", "_commits")}
    assert all(len(m["sha256"]) == 64 for m in manifest["files"] if m["action"] == "moved")

    _s3f.download(fs, "drop/checkpoint", p.checkpoint)
    shutil.rmtree(p.checkpoint / "_streamctl")
    with pytest.raises(Exception):  # the tombstoned checkpoint: a restart of the old query fails loudly
        p.add_input(3, 1)
        p.run()


def _read(fs, path: str) -> bytes:
    with fs.open_input_stream(path) as fh:
        return fh.read()


def _digests(fs, prefix: str) -> dict[str, str]:
    import pyarrow.fs as pafs

    return {i.path[len(f"chk/{prefix}") + 1:]: hashlib.sha256(_read(fs, i.path)).hexdigest()
            for i in fs.get_file_info(pafs.FileSelector(f"chk/{prefix}", recursive=True)) if i.type == pafs.FileType.File}

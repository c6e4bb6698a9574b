"""Mutations on real object-store API servers on loopback — S3 (moto, server mode), GCS
(fake-gcs-server) and Azure Blob (Azurite), every test once per store: the lock is the store's
conditional create (S3 If-None-Match: *, GCS ifGenerationMatch=0, Azure If-None-Match: *), moves
are copy -> verify -> delete under the journal.

Spark cannot reach these stores here (no hadoop-aws/gcs/azure jars), so the delivery checks move
the pipeline folder to the store and back: the real query runs locally, is damaged locally, is uploaded; `streamctl align`
/ `trim` run against the store URIs only; what they left on the server is downloaded over the
local folder and the same real query restarts on it. The coordinated sink keeps relative paths in
its commit records, so nothing is rewritten on the way."""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlparse

import pytest

from helpers import align_pipeline
from helpers import cloud_fixtures as _cf
from helpers import s3_fixtures as _s3f
from helpers.paths import SPARK35
from helpers.s3_fixtures import CountingProxy
from helpers.trees import copy_tree, remove_tree
from streamctl.operations.journal import CRASH_EXIT

ap = align_pipeline
s3, gcs, azure = _s3f.s3, _cf.gcs, _cf.azure
URIS = {"s3": _s3f.s3_uri, "gcs": _cf.gcs_uri, "azure": _cf.azure_uri}


class Store(NamedTuple):
    name: str
    fs: Any
    port: int

    def uri(self, prefix: str) -> str:
        return URIS[self.name](self.port, prefix)


@pytest.fixture(scope="module", params=["s3", "gcs", "azure"])
def store(request) -> Store:
    fs, port = request.getfixturevalue(request.param)
    return Store(request.param, fs, port)


def _upload(store: Store, src: Path, prefix: str) -> None:
    """Upload a local folder. On GCS also the folder placeholder objects (`<folder>/`) that
    Hadoop's GCS connector writes: fake-gcs-server answers a delimited listing without the
    common prefixes real GCS returns, so without them no sub-folder would be listed."""
    _s3f.upload(store.fs, src, prefix)
    if store.name == "gcs":
        store.fs.create_dir(f"chk/{prefix}")
        for dirpath, dirs, _files in os.walk(src):
            for d in dirs:
                store.fs.create_dir(f"chk/{prefix}/{(Path(dirpath) / d).relative_to(src).as_posix()}")


def _prefix(uri: str) -> str:
    """The object prefix of a store URI, below the bucket/container chk."""
    return urlparse(uri).path.strip("/")
FIXTURE = SPARK35 / "agg_rocksdb" / "checkpoint"


def _objects(fs, prefix: str) -> dict[str, str]:
    import pyarrow.fs as pafs

    out = {}
    base = f"chk/{prefix}"
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=True)):
        if info.type == pafs.FileType.File and "/_streamctl/" not in info.path:
            with fs.open_input_stream(info.path) as fh:
                out[info.path[len(base) + 1:]] = hashlib.sha256(fh.read()).hexdigest()
    return out


def test_the_lock_is_the_stores_conditional_create(store):
    from streamctl.operations.files import Root
    from streamctl.operations.lock import LOCK_FILE, Lock, LockHeld

    root = Root("checkpoint", store.uri("locked"))
    lock = Lock.acquire(root, "align", "op-1")
    assert root.exists(LOCK_FILE)
    assert not root.create_exclusive(LOCK_FILE, b"{}")  # the server answers 412 (409 on Azure)
    with pytest.raises(LockHeld, match="held by align"):
        Lock.acquire(Root("checkpoint", store.uri("locked")), "align", "op-2")
    lock.release()
    assert not root.exists(LOCK_FILE)
    Lock.acquire(root, "trim", "op-3").release()


def test_hdfs_stays_refused_for_changes_with_one_line():
    from streamctl.formats.errors import StorageError
    from streamctl.operations.files import Root

    with pytest.raises(StorageError, match="changes on HDFS are refused") as exc:
        Root("checkpoint", "hdfs://namenode:8020/chk")  # refused before any connection is tried
    assert "\n" not in str(exc.value)


def test_trim_then_undo_restores_every_object(cli, store):
    fs = store.fs
    _upload(store, FIXTURE, "trim")
    before = _objects(fs, "trim")
    uri = store.uri("trim")
    done = cli("trim", uri, "--keep-epochs", "1", "--execute", "--json")
    assert done.code == 0, done.stderr
    result = done.json()
    assert result["verified"] is True and _prefix(result["backup"]).startswith("trim/_streamctl/backups/")
    after = _objects(fs, "trim")
    removed = set(before) - set(after)
    assert "offsets/0" in removed and "state/0/0/1.changelog" in removed and "offsets/3" in after
    segments = _journal_objects(fs, _prefix(result["backup"]))  # one object per group commit, no journal.jsonl
    assert sorted(segments) == [f"{n:06d}.jsonl" for n in range(1, len(segments) + 1)] and len(segments) >= 3
    assert _prefix(result["journal"]) == f"{_prefix(result['backup'])}/journal"
    undo = cli("trim", "--undo", result["backup"], "--json")
    assert undo.code == 0, undo.stderr
    assert _objects(fs, "trim") == before


def test_undo_of_a_backup_in_the_single_object_journal_layout(cli, store):
    """A backup written by the previous release on an object store has one journal.jsonl object
    (rewritten whole at every group commit) instead of journal/<n>.jsonl segments: undo reads it,
    appends its own records as segments after it, and a second undo sees the first one."""
    import pyarrow.fs as pafs

    fs = store.fs
    _upload(store, FIXTURE, "legacy")
    before = _objects(fs, "legacy")
    done = cli("trim", store.uri("legacy"), "--keep-epochs", "1", "--execute", "--json")
    assert done.code == 0, done.stderr
    backup = done.json()["backup"]
    folder = f"chk/{_prefix(backup)}"
    segments = sorted(_journal_objects(fs, _prefix(backup)))
    with fs.open_output_stream(f"{folder}/journal.jsonl") as out:  # the earlier layout, record for record
        for name in segments:
            out.write(_read(fs, f"{folder}/journal/{name}"))
    for name in segments:
        fs.delete_file(f"{folder}/journal/{name}")
    assert set(_journal_objects(fs, _prefix(backup))) == {"journal.jsonl"}
    assert _objects(fs, "legacy") != before

    head, _, query = backup.partition("?")
    undo = cli("trim", "--undo", f"{head}/journal.jsonl?{query}", "--json")
    assert undo.code == 0, undo.stderr
    assert _objects(fs, "legacy") == before
    assert set(_journal_objects(fs, _prefix(backup))) >= {"journal.jsonl", "000001.jsonl"}
    again = cli("trim", "--undo", backup, "--json")
    assert again.code == 4 and "was undone" in again.stderr, again
    assert fs.get_file_info(f"{folder}/journal.jsonl").type == pafs.FileType.File  # never rewritten


@pytest.mark.spark
def test_align_delivers_exactly_once_after_the_restart(cli, spark, store, tmp_path):
    fs = store.fs
    p = ap.build(tmp_path, "coordinated", spark, 3)
    saved = tmp_path / "saved-checkpoint"
    copy_tree(p.checkpoint, saved)
    p.add_input(3, 2)
    p.run()
    copy_tree(saved, p.checkpoint, replace=True)  # a checkpoint restored from an older copy: the sink is ahead
    _upload(store, p.checkpoint, "coord/checkpoint")
    _upload(store, p.output, "coord/output")
    ck, out = store.uri("coord/checkpoint"), store.uri("coord/output")

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
    remove_tree(p.checkpoint / "_streamctl")  # the backup stays on the store; Spark ignores the folder anyway
    p.add_input(5, 2)
    p.run()
    report = p.delivery()
    assert report["ok"], report


@pytest.mark.spark
def test_drop_sink_retires_in_order_and_the_old_query_cannot_restart(cli, spark, store, tmp_path):
    import json

    fs = store.fs
    p = ap.build(tmp_path, "coordinated", spark, 3)
    _upload(store, p.checkpoint, "drop/checkpoint")
    _upload(store, p.output, "drop/output")
    before_ck, before_out = _objects(fs, "drop/checkpoint"), _objects(fs, "drop/output")
    ck, out = store.uri("drop/checkpoint"), store.uri("drop/output")

    plan = cli("drop-sink", out, "--checkpoint", ck, "--assume-stopped", "--quiet-period", "0", "--json")
    assert plan.code == 0, plan.stderr
    assert _objects(fs, "drop/checkpoint") == before_ck and _objects(fs, "drop/output") == before_out
    done = cli("drop-sink", out, "--checkpoint", ck, "--assume-stopped", "--execute", "--quiet-period", "0", "--json")
    assert done.code == 0, done.stderr
    doc = done.json()
    assert doc["verified"] is True and doc["final_epoch"] == 2
    archive = doc["archive"]
    prefix = _prefix(archive)
    assert prefix.startswith("drop/checkpoint/_streamctl/retired/")
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
    remove_tree(p.checkpoint / "_streamctl")
    with pytest.raises(Exception):  # noqa: B017 - Spark's own error classes; the tombstoned checkpoint: a restart of the old query fails loudly
        p.add_input(3, 1)
        p.run()


def _read(fs, path: str) -> bytes:
    with fs.open_input_stream(path) as fh:
        return fh.read()


def _digests(fs, prefix: str) -> dict[str, str]:
    import pyarrow.fs as pafs

    return {i.path[len(f"chk/{prefix}") + 1:]: hashlib.sha256(_read(fs, i.path)).hexdigest()
            for i in fs.get_file_info(pafs.FileSelector(f"chk/{prefix}", recursive=True)) if i.type == pafs.FileType.File}


def _many_epochs(fs, prefix: str, epochs: int) -> int:
    """A stateless checkpoint with `epochs` offsets and commits (2 x epochs objects), and the file
    source's log they name (one `.compact` file: Spark's compaction leaves the newest alone)."""
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"spark.sql.shuffle.partitions":"1"}}'
    files = {"metadata": '{"id":"44444444-2222-3333-4444-555555555555"}'}
    for b in range(epochs):
        files[f"offsets/{b}"] = f'v1\n{meta}\n{{"logOffset":{b}}}'
        files[f"commits/{b}"] = 'v1\n{"nextBatchWatermarkMs":0}'
    files[f"sources/0/{epochs - 1}.compact"] = "v1\n" + "\n".join(
        '{"path":"s3://in/part-%d.json","timestamp":1,"batchId":%d}' % (b, b) for b in range(epochs))
    from concurrent.futures import ThreadPoolExecutor

    def put(item: tuple[str, str]) -> None:
        with fs.open_output_stream(f"chk/{prefix}/{item[0]}") as out:
            out.write(item[1].encode())

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(put, files.items()))
    return len(files)


def test_requests_per_moved_and_per_purged_file_on_s3(cli, s3):
    """Counted by a proxy in front of the real S3 server, every request of the command, backup side
    included: a --purge costs one DeleteObjects request per 1,000 files plus the listing (no
    per-object read or delete); a move is read (the begin record's sha256) -> server-side copy ->
    read back -> batched delete, about three requests per file, the copies in parallel (printed
    for BENCHMARKS.md)."""
    fs, port = s3
    counts = {}
    # purge: over 1,000 files, so the purge takes two DeleteObjects requests; move: enough files
    # that the fixed requests (listings, lock, journal) are small beside three per file
    for mode, epochs in (("purge", 530), ("move", 120)):
        prefix = f"many-{mode}"
        _many_epochs(fs, prefix, epochs)
        proxy = CountingProxy(port, delay=0.002)
        try:
            uri = f"s3://chk/{prefix}?endpoint_override=127.0.0.1:{proxy.port}&scheme=http"
            backup = f"s3://chk/{prefix}-backup?endpoint_override=127.0.0.1:{proxy.port}&scheme=http"
            r = cli("trim", uri, "--keep-epochs", "1", "--execute", "--json", "--backup-dir", backup,
                    *(["--purge"] if mode == "purge" else []))
            assert r.code == 0, r.stderr
            steps = len(r.json()["plan"]["steps"])
            reqs = list(proxy.requests)
            in_flight = proxy.max_in_flight
        finally:
            proxy.close()
        left = {i.path.rsplit("/", 1)[1] for i in fs.get_file_info(_fs_selector(f"chk/{prefix}/offsets"))}
        assert left == {str(epochs - 2), str(epochs - 1)}, sorted(left)[:5]
        counts[mode] = (steps, reqs, in_flight)
    steps, reqs, _ = counts["purge"]
    batch_deletes = [p for m, p in reqs if m == "POST" and "delete" in p]
    assert steps > 1000 and len(batch_deletes) == -(-steps // 1000) == 2, batch_deletes
    assert not [p for m, p in reqs if m == "DELETE" and not p.endswith("/lock.json")], "no per-object delete"
    reads = [p for m, p in reqs if m in ("GET", "HEAD") and ("/offsets/" in p or "/commits/" in p)]
    assert len(reads) <= 40, reads  # the few small files each inspection reads, not one per purged file
    assert len(reqs) <= 130, reqs  # listings, those reads, the lock, plan, journal and manifest
    msteps, mreqs, m_in_flight = counts["move"]
    moved = [p for _m, p in mreqs if "/many-move/offsets/" in p or "/many-move/commits/" in p
             or "/many-move-backup/files/" in p]
    kinds = {}
    for m, _p in mreqs:
        kinds[m] = kinds.get(m, 0) + 1
    # per moved file: one read of the source (its sha256 in the begin record), one CopyObject, one
    # read of the copy; the sources go in DeleteObjects of up to 1,000 keys
    assert len(moved) <= 3 * msteps + 40, (len(moved), msteps, kinds)
    assert len(mreqs) <= 3 * msteps + 150, (len(mreqs), msteps, kinds)  # 3 per file, a fixed part
    assert m_in_flight > 1, "the copies run in parallel"
    assert not [p for m, p in mreqs if m == "DELETE" and not p.endswith("/lock.json")], "sources go in batches"
    print(f"[requests] trim --purge of {steps} S3 objects: {len(reqs)} requests ({len(batch_deletes)} DeleteObjects), "
          f"{len(reqs) / steps:.3f} per purged file; trim (move) of {msteps}: {len(mreqs)} requests "
          f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}), {len(mreqs) / msteps:.2f} per moved file, "
          f"at most {m_in_flight} at once")


def _fs_selector(path: str):
    import pyarrow.fs as pafs

    return pafs.FileSelector(path, recursive=False)


def _journal_objects(fs, prefix: str) -> dict[str, int]:
    """Size of every journal object of a backup: the segments journal/<n>.jsonl (and a
    journal.jsonl of the earlier single-object layout)."""
    import pyarrow.fs as pafs

    out = {i.path.rsplit("/", 1)[1]: i.size for i in fs.get_file_info(pafs.FileSelector(f"chk/{prefix}/journal", allow_not_found=True))
           if i.type == pafs.FileType.File}
    single = fs.get_file_info(f"chk/{prefix}/journal.jsonl")
    if single.type == pafs.FileType.File:
        out["journal.jsonl"] = single.size
    return out


def test_the_journal_is_written_once_on_s3_however_many_group_commits(cli, s3):
    """Object stores cannot append: every group commit is its own journal segment object
    (journal/000001.jsonl, ...), never a rewrite of what is already there. Counted by the proxy in
    front of the real S3 server: the journal bytes a trim and its undo send are exactly the
    journal's size at the end, over the group commits of both processes (printed for
    BENCHMARKS.md)."""
    fs, port = s3
    prefix = "journal-bytes"
    _many_epochs(fs, prefix, 20)
    proxy = CountingProxy(port, delay=0.002)
    sent = {}
    try:
        uri = f"s3://chk/{prefix}?endpoint_override=127.0.0.1:{proxy.port}&scheme=http"
        backup = f"s3://chk/{prefix}-backup?endpoint_override=127.0.0.1:{proxy.port}&scheme=http"
        for what, args in (("trim", ("trim", uri, "--keep-epochs", "1", "--execute", "--json", "--backup-dir", backup)),
                           ("undo", ("trim", "--undo", backup, "--json"))):
            start = len(proxy.sent)
            r = cli(*args)
            assert r.code == 0, r.stderr
            sent[what] = [(m, p, n) for m, p, n in proxy.sent[start:] if f"/{prefix}-backup/journal" in p and m == "PUT"]
    finally:
        proxy.close()
    objects = _journal_objects(fs, f"{prefix}-backup")
    written = sum(n for m, p, n in sent["trim"] + sent["undo"])
    print(f"[journal] trim of {r.json()['restored']} S3 objects and its undo: {len(sent['trim'])} + {len(sent['undo'])} journal writes, "
          f"{sum(n for *_x, n in sent['trim']):,} + {sum(n for *_x, n in sent['undo']):,} bytes sent; "
          f"the journal is {sum(objects.values()):,} bytes in {len(objects)} object(s)")
    assert len(sent["trim"]) >= 3 and sent["undo"], sent  # group commits of two processes, each its own object
    assert "journal.jsonl" not in objects and len(objects) == len(sent["trim"]) + len(sent["undo"])
    assert written == sum(objects.values())  # every record sent once, nothing rewritten


def _run(*args: str, crash_after: int | None = None) -> tuple[int, str, str]:
    """`streamctl ...` as a real process (the crash hook ends it like a kill: no cleanup)."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMCTL_")}
    env.update(STREAMCTL_QUIET_PERIOD="0", NO_COLOR="1")
    if crash_after is not None:
        env["STREAMCTL_TEST_CRASH_AFTER"] = str(crash_after)
    p = subprocess.run([str(Path(sys.executable).parent / "streamctl"), *args], env=env, capture_output=True,
                       text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def _backups(fs, prefix: str) -> set[str]:
    """The operation ids with a plan.json under <prefix>/_streamctl/backups/ (one recursive listing:
    fake-gcs-server lists no sub-folders in a delimited listing)."""
    import pyarrow.fs as pafs

    base = f"chk/{prefix}/_streamctl/backups/"
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return {i.path[len(base):].split("/")[0] for i in infos if i.path.endswith("/plan.json")}


def test_crash_after_every_journal_record_then_resume_or_undo_on_the_store(store, tmp_path):
    """A trim killed right after each journal record (the crash hook: the segment being written
    holds the records up to it), on the real store: --resume reaches the promised trim and an undo
    of it restores every object; an --undo of the crashed run restores every object too (odd
    records resume, even ones undo)."""
    import json

    fs, prefix = store.fs, "crash"
    local = tmp_path / "chk"
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"spark.sql.shuffle.partitions":"1"}}'
    files = {"metadata": '{"id":"44444444-2222-3333-4444-555555555555"}'}
    for b in range(3):
        files[f"offsets/{b}"] = f'v1\n{meta}\n{{"logOffset":{b}}}'
        files[f"commits/{b}"] = 'v1\n{"nextBatchWatermarkMs":0}'
        files[f"sources/0/{b}"] = 'v1\n{"path":"s3://in/part-%d.json","timestamp":1,"batchId":%d}' % (b, b)
    for rel, text in files.items():
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_text(text)
    _upload(store, local, prefix)
    uri, before = store.uri(prefix), _objects(fs, prefix)
    trim = ("trim", uri, "--keep-epochs", "1", "--execute", "--json")
    code, out, err = _run(*trim)
    assert code == 0, err
    trimmed = _objects(fs, prefix)
    backup = json.loads(out)["backup"]
    records = sum(len(_read(fs, f"chk/{_prefix(backup)}/journal/{n}").splitlines())
                  for n in _journal_objects(fs, _prefix(backup)))
    assert _run("trim", "--undo", backup)[0] == 0 and _objects(fs, prefix) == before
    assert records == 9, records  # start, 3 begin, 3 done, finished, verified

    failures = []
    # every record on S3; on GCS and Azure (the same journal code, their own conditional create and
    # listing) the boundaries: start alone, every begin, the first done, finished
    for n in range(1, records) if store.name == "s3" else (1, 4, 5, records - 1):
        seen = _backups(fs, prefix)
        code, _out, err = _run(*trim, crash_after=n)
        (op,) = _backups(fs, prefix) - seen
        backup = store.uri(f"{prefix}/_streamctl/backups/{op}")
        if code != CRASH_EXIT:
            failures.append(f"N={n}: the crash run exited {code}: {err[-500:]}")
            continue
        if n % 2:
            code, out, err = _run("trim", "--resume", backup, "--json")
            if code != 0 or json.loads(out).get("verified") is not True or _objects(fs, prefix) != trimmed:
                failures.append(f"N={n}: --resume exited {code} and left another state: {err[-500:]}")
                continue
        code, _out, err = _run("trim", "--undo", backup)
        if code != 0 or _objects(fs, prefix) != before:
            failures.append(f"N={n}: --undo exited {code} and did not restore every object: {err[-500:]}")
            break  # the next runs would start from a damaged checkpoint
    assert not failures, "\n".join(failures)

"""Checkpoints on S3-compatible object storage: a real moto server (server mode, on loopback)
stands in for S3, and streamctl reads it through pyarrow.fs with s3:// URIs."""
from __future__ import annotations

import time

import pytest

from helpers.paths import SPARK35, copy_spark35
from helpers.s3_fixtures import CountingProxy, free_port, moto_server, s3, upload  # noqa: F401, F811  (s3: a fixture)

pytestmark = pytest.mark.skipif(moto_server is None, reason="moto[server] is installed by ./dev test")

FIXTURE = SPARK35 / "agg_hdfs" / "checkpoint"


def test_inspect_epochs_and_state_on_s3_match_local(cli, s3, tmp_path):
    fs, port = s3
    ck = copy_spark35(FIXTURE, tmp_path / "checkpoint")  # its input folder beside it, as on S3 nothing is checked
    upload(fs, ck, "agg")
    uri = f"s3://chk/agg?endpoint_override=127.0.0.1:{port}&scheme=http"
    remote = cli("inspect", "epochs", uri, "--json")
    local = cli("inspect", "epochs", str(ck), "--json")
    assert remote.code == local.code == 0, remote
    rq, lq = remote.json()["queries"][0], local.json()["queries"][0]
    for key in ("query_id", "planned", "committed", "state_epoch", "common_window", "verdict", "retained"):
        assert rq[key] == lq[key], key
    rs = cli("inspect", "state", uri, "--json").json()
    ls = cli("inspect", "state", str(ck), "--json").json()
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
    port = free_port()
    t0 = time.time()
    r = cli("inspect", "epochs", f"s3://chk/agg?endpoint_override=127.0.0.1:{port}&scheme=http&connect_timeout=1&request_timeout=2")
    assert r.code == 3, r
    assert "Traceback" not in r.stdout + r.stderr
    assert time.time() - t0 < 60


def test_state_listing_is_one_recursive_listing_not_one_request_per_folder(cli, s3):
    """300 partition folders on S3: the request count stays bounded (one paged recursive listing
    of state/, a listing each for the root, offsets/ and commits/, the few small reads, and the
    oldest kept batch's offsets file read again for `oldest_time`: 26, one spare for a retry)."""
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
        files[f"sources/0/{b}"] = 'v1\n{"path":"s3://in/part-%d.json","timestamp":1,"batchId":%d}' % (b, b)
    for p in range(parts):
        for v in range(1, versions + 1):
            files[f"state/0/{p}/{v}.delta"] = "x"
    for rel, text in files.items():
        with fs.open_output_stream(f"chk/many/{rel}") as out:
            out.write(text.encode())
    proxy = CountingProxy(port)
    try:
        uri = f"s3://chk/many?endpoint_override=127.0.0.1:{proxy.port}&scheme=http"
        r = cli("inspect", "epochs", uri, "--json", "--quiet-period", "0")
        q = r.json()["queries"][0]
        assert r.code == 0 and q["verdict"] == "aligned" and q["state_epoch"] == versions - 1, r
        assert len([w for w in q["writers"] if w["kind"] == "state_store"]) == parts
        count = len(proxy.requests)
        assert count <= 27, proxy.requests
        listings = [p for m, p in proxy.requests if m == "GET" and "list-type=" in p]
        assert sum("prefix=many%2Fstate%2F" in p for p in listings) == 1, listings  # 900 keys: one page
        print(f"[requests] inspect epochs on {len(files)} S3 objects ({parts} partitions): {count} requests, "
              f"{len(listings)} of them listings (the floor for {len(files)} keys: {-(-len(files) // 1000)})")
    finally:
        proxy.close()
    assert isinstance(fs, pafs.S3FileSystem)


def test_small_files_are_read_concurrently_within_the_request_bound(cli, s3, tmp_path):
    """The few small files of a checkpoint (metadata, offsets/P and P-1, commits/C) are read at
    once on object stores: with a 100 ms round trip, requests overlap, their number does not
    grow, and the findings are those of the local copy."""
    fs, port = s3
    ck = copy_spark35(FIXTURE, tmp_path / "checkpoint")
    upload(fs, ck, "overlap")
    proxy = CountingProxy(port, delay=0.1)
    try:
        uri = f"s3://chk/overlap?endpoint_override=127.0.0.1:{proxy.port}&scheme=http"
        remote = cli("inspect", "epochs", uri, "--json", "--quiet-period", "0")
        count = len(proxy.requests)
        reads = [p for m, p in proxy.requests if m == "GET" and "list-type" not in p and "prefix=" not in p]
        print(f"[requests] inspect epochs of {FIXTURE.parent.name} on S3: {count} requests, "
              f"{proxy.max_in_flight} at once, {len(reads)} reads")
    finally:
        proxy.close()
    local = cli("inspect", "epochs", str(ck), "--json", "--quiet-period", "0")
    assert remote.code == local.code == 0, remote
    rq, lq = remote.json()["queries"][0], local.json()["queries"][0]
    assert [(f["code"], f["severity"]) for f in rq["findings"]] == [(f["code"], f["severity"]) for f in lq["findings"]]
    for key in ("query_id", "planned", "committed", "state_epoch", "common_window", "verdict", "retained"):
        assert rq[key] == lq[key], key
    assert count <= 25, proxy.requests
    # metadata with the listings of offsets/, commits/ and state/ (recursive), then the log files
    assert proxy.max_in_flight >= 4, proxy.requests


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
    copy_spark35(FIXTURE.parent.parent / scenario / "checkpoint", ck)
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


def test_delta_preflight_reads_the_txn_app_ids_on_s3(cli, s3, tmp_path):
    """The Delta pre-flight on S3: deltalake loads the table through the endpoint, and streamctl
    reads the newest checkpoint's `txn` column (ranged reads) and the commits after it on threads."""
    from deltalake import DeltaTable

    from helpers.layouts import QID, delta_table

    fs, port = s3
    table = tmp_path / "table"
    delta_table(table, QID, range(0, 3))
    DeltaTable(str(table)).create_checkpoint()
    delta_table(table, "someone-else", range(0, 12))
    upload(fs, table, "delta")
    opts = f"?endpoint_override=127.0.0.1:{port}&scheme=http"
    r = cli("inspect", "epochs", f"s3://chk/new{opts}", "--sink", f"s3://chk/delta{opts}", "--json")
    (f,) = r.json()["queries"][0]["findings"]
    assert r.code == 1 and f["code"] == "SINK_NEW_QUERY" and f["query_ids"] == sorted([QID, "someone-else"]), r

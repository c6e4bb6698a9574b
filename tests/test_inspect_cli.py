"""`streamctl inspect epochs|state` through the CLI: findings on Spark-layout trees built here,
bad input (exit 3, one line, nothing written), exit codes, output formats, golden JSON."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.golden import check_golden_text
from helpers.layouts import META, QID, build, deltas, healthy_state  # noqa: F401
from helpers.paths import CORPUS, GOLDEN, REPO, SPARK35, copy_spark35


def codes(doc: dict) -> list[str]:
    return sorted(f["code"] for q in doc["queries"] for f in q["findings"]) + sorted(f["code"] for f in doc["findings"])


# --- positions and findings ----------------------------------------------------------------


def test_aligned_stateful_query_exit_0(cli, tmp_path):
    chk = build(tmp_path / "chk", state=healthy_state())
    r = cli("inspect", "epochs", str(chk), "--json")
    assert r.code == 0, r
    q = r.json()["queries"][0]
    assert (q["query_id"], q["planned"], q["committed"], q["state_epoch"], q["verdict"]) == (QID, 3, 3, 3, "aligned")
    assert q["common_window"] == [0, 3]
    assert {w["writer"]: w["status"] for w in q["writers"]} == {
        "offsets": "ok", "commits": "ok", "state/0/0": "ok", "state/0/1": "ok"}
    assert r.stderr == ""


def test_in_flight_is_recoverable_exit_0(cli, tmp_path):
    chk = build(tmp_path / "chk", planned=4, committed=3, state=healthy_state(4))
    r = cli("inspect", "epochs", str(chk), "--json")
    assert r.code == 0
    assert codes(r.json()) == ["IN_FLIGHT"] and r.json()["verdict"] == "recoverable"


def test_commit_ahead_wal_ahead_and_gaps(cli, tmp_path):
    a = build(tmp_path / "a", planned=2, committed=3)
    b = build(tmp_path / "b", planned=6, committed=3, qid="b" * 8 + QID[8:])
    c = build(tmp_path / "c", planned=6, committed=6, offsets_missing=(3,), commits_missing=(4, 5), qid="c" * 8 + QID[8:])
    r = cli("inspect", "epochs", str(a), str(b), str(c), "--json")
    assert r.code == 1
    by_cp = {Path(q["checkpoint"]).name: q for q in r.json()["queries"]}
    assert [f["code"] for f in by_cp["a"]["findings"]] == ["COMMIT_AHEAD"]
    assert [f["code"] for f in by_cp["b"]["findings"]] == ["WAL_AHEAD"]
    gaps = {f["log"]: f["missing"] for f in by_cp["c"]["findings"] if f["code"] == "LOG_GAP"}
    assert gaps == {"offsets": [3], "commits": [4, 5]}


def test_missing_previous_offsets_file_is_a_gap(cli, tmp_path):
    chk = build(tmp_path / "chk", planned=5, committed=5, first=5)
    r = cli("inspect", "epochs", str(chk), "--json")
    (f,) = r.json()["queries"][0]["findings"]
    assert (f["code"], f["missing"]) == ("LOG_GAP", [4])


def test_async_progress_tracking_allows_gaps(cli, tmp_path):
    meta = META.replace('"conf":{', '"conf":{"spark.sql.streaming.asyncProgressTrackingEnabled":"true",')
    chk = build(tmp_path / "chk", planned=5, committed=2, offsets_missing=(1, 3, 4), commits_missing=(1,), meta=meta)
    r = cli("inspect", "epochs", str(chk), "--json")
    q = r.json()["queries"][0]
    assert q["async_progress"] is True
    assert [(f["code"], f["severity"]) for f in q["findings"]] == [("WAL_AHEAD", "warning"), ("ASYNC_PROGRESS", "info")]
    assert q["findings"][1]["evidence"] == "offsets_conf" and q["findings"][1]["missing"] == [1, 3, 4]
    assert r.code == 0 and q["verdict"] == "aligned"


ASYNC_GAPS = (4, 6, 8, 10, 11)  # what PySpark 4.3 left with a 500 ms interval (tests/test_async_progress.py)


def test_async_progress_pattern_is_not_a_log_gap(cli, tmp_path):
    """Spark writes no trace of the writer option: the same gaps in both logs of a stateless
    query are what async progress tracking leaves; a restart without the option fails, and as
    nothing on disk proves the option, the failing outcome is the verdict (an error, exit 1)."""
    chk = build(tmp_path / "chk", planned=12, committed=12, offsets_missing=ASYNC_GAPS, commits_missing=ASYNC_GAPS)
    r = cli("inspect", "epochs", str(chk), "--json")
    q = r.json()["queries"][0]
    assert r.code == 1 and q["verdict"] == "misaligned" and q["async_progress"] is True, q
    (f,) = q["findings"]
    assert (f["code"], f["severity"], f["evidence"]) == ("ASYNC_PROGRESS", "error", "log_pattern")
    assert f["missing"] == list(ASYNC_GAPS) and f["missing_count"] == 5 and f["restart_needs_async"] is True
    assert "batch 11 doesn't exist" in f["message"] and "--async-progress" in f["message"]


def test_async_progress_pattern_with_the_previous_file_is_info(cli, tmp_path):
    """The same pattern with offsets/P-1 on disk: the restart runs with or without the option."""
    chk = build(tmp_path / "chk", planned=12, committed=12, offsets_missing=(4, 6, 8), commits_missing=(4, 6, 8))
    r = cli("inspect", "epochs", str(chk), "--json")
    q = r.json()["queries"][0]
    (f,) = q["findings"]
    assert r.code == 0 and q["verdict"] == "aligned", q
    assert (f["code"], f["severity"], f["restart_needs_async"]) == ("ASYNC_PROGRESS", "info", False)


@pytest.mark.parametrize("case", ["stateful", "commit_without_offsets", "commit_gap_only"])
def test_gaps_unlike_async_progress_stay_log_gaps(cli, tmp_path, case):
    """Stateful queries cannot use async progress tracking; a commit without its offsets file,
    or a commit missing where the offsets file exists, is not its pattern."""
    kw: dict = {"offsets_missing": ASYNC_GAPS, "commits_missing": ASYNC_GAPS}
    if case == "stateful":
        kw["state"] = {"0/0": deltas(1, 13), "0/1": deltas(1, 13)}
    elif case == "commit_without_offsets":
        kw["commits_missing"] = ASYNC_GAPS[1:]
    else:
        kw["commits_missing"] = ASYNC_GAPS + (9,)
    chk = build(tmp_path / "chk", planned=12, committed=12, **kw)
    r = cli("inspect", "epochs", str(chk), "--json")
    q = r.json()["queries"][0]
    assert r.code == 1 and q["async_progress"] is False, q
    assert "LOG_GAP" in {f["code"] for f in q["findings"]} and "ASYNC_PROGRESS" not in {f["code"] for f in q["findings"]}


def test_state_unrestorable_names_operator_partition_store_and_files(cli, tmp_path):
    state = healthy_state(4)
    state["0/1"] = [f for f in state["0/1"] if f != "3.delta"]
    chk = build(tmp_path / "chk", state=state)
    r = cli("inspect", "epochs", str(chk), "--json")
    assert r.code == 1
    (f,) = r.json()["queries"][0]["findings"]
    assert f["code"] == "STATE_UNRESTORABLE" and f["version"] == 4
    assert "state/0/1 (missing 3.delta)" in f["message"]
    assert f["stores"] == [{"partition": 1, "store": "default", "path": str(chk / "state/0/1"), "missing": ["3.delta"]}]


def test_snapshot_restores_without_older_deltas(cli, tmp_path):
    state = {"0/0": ["3.snapshot", "4.delta", "2.delta"], "0/1": deltas(1, 4)}
    chk = build(tmp_path / "chk", state=state)
    r = cli("inspect", "state", str(chk), "--json")
    assert r.code == 0, r
    stores = {s["partition"]: s for s in r.json()["operators"][0]["stores"]}
    assert (stores[0]["first_restorable"], stores[0]["durable_version"], stores[0]["newest_snapshot"]) == (3, 4, 3)
    assert stores[0]["chain"] == "ok"


def test_partition_missing_and_orphans(cli, tmp_path):
    state = {"0/0": deltas(1, 4) + ["7.delta", ".5.delta.0b1c2d3e-aaaa-bbbb-cccc-ddddeeeeffff.tmp", "temp-123"]}
    chk = build(tmp_path / "chk", state=state)
    r = cli("inspect", "epochs", str(chk), "--json")
    findings = {f["code"]: f for f in r.json()["queries"][0]["findings"]}
    assert findings["STATE_PARTITION_MISSING"]["missing_partitions"] == [1]
    orphans = [Path(p).name for p in findings["STATE_ORPHANS"]["files"]]
    assert sorted(orphans) == sorted(["7.delta", ".5.delta.0b1c2d3e-aaaa-bbbb-cccc-ddddeeeeffff.tmp", "temp-123"])
    assert findings["STATE_ORPHANS"]["severity"] == "warning"


def test_join_stores_and_operator_metadata(cli, tmp_path):
    stores = ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"]
    state = {f"0/{p}/{s}": deltas(1, 4) for p in range(2) for s in stores}
    del state["0/1/right-keyToNumValues"]
    chk = build(tmp_path / "chk", state=state)
    meta = {"operatorInfo": {"operatorId": 0, "operatorName": "symmetricHashJoin"},
            "stateStoreInfo": [{"storeName": s, "numColsPrefixKey": 0, "numPartitions": 2} for s in stores]}
    (chk / "state/0/_metadata").mkdir()
    (chk / "state/0/_metadata/metadata").write_text("v1\n" + json.dumps(meta))
    r = cli("inspect", "state", str(chk), "--json")
    op = r.json()["operators"][0]
    assert op["name"] == "symmetricHashJoin" and op["num_partitions_source"] == "operator_metadata"
    assert len(op["stores"]) == 8
    bad = [s for s in op["stores"] if s["chain"] != "ok"]
    assert [(s["partition"], s["store"], s["chain"]) for s in bad] == [(1, "right-keyToNumValues", "unrestorable")]
    assert r.code == 1


def test_checkpoint_format_2_resolves_unique_ids_against_the_commit_log(cli, tmp_path):
    ids = {v: f"id{v}" for v in range(1, 5)}
    files = [f"{v}_{ids[v]}.changelog" for v in range(1, 5)] + ["2_id2.zip", "4_stale.changelog", "5_inflight.changelog"]
    bodies = {b: json.dumps({"nextBatchWatermarkMs": 0, "stateUniqueIds": {"0": [[ids[b + 1]]]}}) for b in range(0, 4)}
    chk = build(tmp_path / "chk", planned=4, committed=3, meta=META.replace('"2"', '"1"'),
                state={"0/0": files}, commit_body=bodies)
    for b in range(0, 4):
        (chk / "commits" / str(b)).write_text("v2\n" + bodies[b])
    r = cli("inspect", "state", str(chk), "--json")
    (store,) = r.json()["operators"][0]["stores"]
    assert store["unique_ids"] is True
    assert store["durable_version"] == 4  # 5_inflight is not named by any commit: not durable
    assert store["orphans"] == ["4_stale.changelog"]
    assert r.json()["checkpoint_format"] == 2
    # the commit log's id for version 4 is gone: version 4 cannot be restored
    (chk / "state/0/0/4_id4.changelog").unlink()
    r = cli("inspect", "state", str(chk), "--json")
    (store,) = r.json()["operators"][0]["stores"]
    assert store["chain"] == "unrestorable" and store["missing"] == ["4_id4.changelog"]


def test_query_id_clash_across_checkpoints(cli, tmp_path):
    a = build(tmp_path / "a", state=healthy_state())
    b = tmp_path / "b"
    shutil.copytree(a, b)
    r = cli("inspect", "epochs", str(a), str(b), "--json")
    doc = r.json()
    assert [f["code"] for f in doc["findings"]] == ["QUERY_ID_CLASH"]
    assert doc["findings"][0]["checkpoints"] == sorted([str(a), str(b)])
    assert doc["verdict"] == "misaligned" and r.code == 1


def test_temp_files_in_logs_are_never_batches(cli, tmp_path):
    chk = build(tmp_path / "chk", planned=2, committed=2)
    (chk / "offsets/.3.8f2c0a4e-1111-2222-3333-444455556666.tmp").write_text("v1\n{}\n")
    (chk / "commits/.1.crc").write_bytes(b"x")
    r = cli("inspect", "epochs", str(chk), "--json")
    q = r.json()["queries"][0]
    assert (q["planned"], q["committed"], q["verdict"]) == (2, 2, "aligned")
    assert q["temp_files"] == ["offsets/.3.8f2c0a4e-1111-2222-3333-444455556666.tmp"]


def test_checksum_left_behind_by_a_deleted_batch(cli, tmp_path):
    """Deleting commits/N by hand leaves .N.crc, and Hadoop then refuses to write N again."""
    chk = build(tmp_path / "chk", planned=3, committed=2)
    (chk / "commits/.3.crc").write_bytes(b"crc")
    r = cli("inspect", "epochs", str(chk), "--json")
    q = r.json()["queries"][0]
    assert r.code == 1 and [f["code"] for f in q["findings"]] == ["STALE_CHECKSUM", "IN_FLIGHT"]
    assert q["findings"][0]["files"] == [str(chk / "commits/.3.crc")]


# --- bad input: exit 3, one line naming the path, nothing written ---------------------------


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda c: (c / "offsets/3").write_bytes(b""), "empty file"),
        (lambda c: (c / "offsets/3").write_bytes(b"v1\n{\"batchWat"), "not valid JSON"),
        (lambda c: (c / "offsets/3").write_bytes(os.urandom(64).replace(b"v", b"x")), "offsets/3"),
        (lambda c: (c / "commits/3").write_text("v99\n{}"), "unsupported log version v99"),
        (lambda c: (c / "metadata").write_bytes(b"\xff\xfe{"), "not UTF-8"),
        (lambda c: (c / "metadata").unlink(), "missing"),
    ],
    ids=["empty", "truncated", "garbage", "v99", "non-utf8", "no-metadata"],
)
def test_bad_files_are_unreadable_findings(cli, tmp_path, tree_snapshot, damage, reason):
    chk = build(tmp_path / "chk", state=healthy_state())
    damage(chk)
    before = tree_snapshot(chk)
    r = cli("inspect", "epochs", str(chk), "--json")
    assert r.code == 3, r
    unreadable = [f for f in r.json()["queries"][0]["findings"] if f["code"] == "UNREADABLE"]
    assert len(unreadable) == 1 and reason in unreadable[0]["message"]
    assert "\n" not in unreadable[0]["message"]
    assert tree_snapshot(chk) == before


def test_missing_folder_file_instead_of_folder_and_symlink_loop(cli, tmp_path):
    (tmp_path / "afile").write_text("x")
    chk = build(tmp_path / "chk")
    shutil.rmtree(chk / "offsets")
    (chk / "offsets").write_text("oops")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for target, reason in [(tmp_path / "nope", "does not exist"), (tmp_path / "afile", "is a file"),
                           (chk, "is a file, expected a folder"), (loop, "symlink loop"),
                           (tmp_path, "not a Spark checkpoint")]:
        r = cli("inspect", "epochs", str(target))
        assert r.code == 3, (target, r)
        assert reason in r.stdout, (target, r)
        assert "Traceback" not in r.stdout + r.stderr


def test_symlink_loop_inside_state(cli, tmp_path):
    chk = build(tmp_path / "chk", state=healthy_state())
    (chk / "state/0/0/loop").symlink_to(chk / "state")
    r = cli("inspect", "state", str(chk), "--json")
    # The scan never descends below a store folder, so the loop is listed once, seen as a store
    # with no state files, and reported; it is never followed round.
    assert r.code == 1 and "Traceback" not in r.stdout + r.stderr
    (f,) = r.json()["findings"]
    assert f["code"] == "STATE_UNRESTORABLE" and "state/0/0/loop (missing 1..4.delta)" in f["message"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to run as nobody")
def test_permission_denied_as_unprivileged_user(tmp_path):
    """Root reads everything, so run the installed CLI as `nobody` against a 0700 folder."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="streamctl-perm-"))  # pytest's tmp root is 0700
    os.chmod(base, 0o755)
    chk = build(base / "chk", state=healthy_state())
    for dirpath, _dirs, files in os.walk(chk):
        os.chmod(dirpath, 0o755)
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)
    os.chmod(chk / "state", 0o700)
    exe = shutil.which("streamctl", path=str(Path(sys.executable).parent))
    assert exe
    env = {"PATH": os.environ["PATH"], "HOME": str(base), "NO_COLOR": "1"}
    r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", exe,
                        "inspect", "epochs", str(chk)], capture_output=True, text=True, env=env, timeout=60)
    if "Permission denied" in r.stderr and "python" in r.stderr.lower():
        pytest.skip("the venv itself is not readable by nobody here")
    assert r.returncode == 3, r
    assert f"{chk}/state: permission denied" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr
    shutil.rmtree(base)


# --- output ---------------------------------------------------------------------------------


def test_plain_table_and_markdown(cli, tmp_path):
    chk = build(tmp_path / "chk[prod]", planned=4, committed=3, state=healthy_state(4))
    r = cli("inspect", "epochs", str(chk))
    assert r.code == 0
    assert "chk[prod]" in r.stdout and "\x1b[" not in r.stdout
    assert "IN_FLIGHT" in r.stdout and "recoverable" in r.stdout
    md = cli("inspect", "epochs", str(chk), "--format", "markdown")
    assert "| query id" in md.stdout and "|---" in md.stdout.replace(" ", "").replace(":", "")
    st = cli("inspect", "state", str(chk), "-o", "plain")
    assert "operator 0" in st.stdout and "durable" in st.stdout


def test_rich_table_keeps_brackets(tmp_path, monkeypatch):
    """On a terminal the table goes through rich; bracketed names must survive its markup."""
    import io

    from rich.console import Console

    from streamctl.console import render

    buf = io.StringIO()
    monkeypatch.setattr("rich.console.Console", lambda *a, **k: Console(file=buf, width=200, color_system=None))
    render.emit_table(["topic"], [["topic[prod]"]], "table")
    assert "topic[prod]" in buf.getvalue()


def test_format_from_env_and_bad_format(cli, tmp_path):
    chk = build(tmp_path / "chk")
    r = cli("inspect", "epochs", str(chk), env={"STREAMCTL_FORMAT": "json"})
    assert r.json()["kind"] == "EpochReport"
    bad = cli("inspect", "epochs", str(chk), "--format", "yaml")
    assert bad.code == 2 and "--format" in bad.stderr


def test_named_pipeline_from_config(cli, tmp_path):
    chk = build(tmp_path / "chk", state=healthy_state())
    cfg = tmp_path / "streamctl.toml"
    cfg.write_text(f'[defaults]\nformat = "json"\n\n[pipelines.orders]\ncheckpoint = "{chk}"\n')
    r = cli("--config", str(cfg), "inspect", "epochs", "orders")
    assert r.code == 0, r
    assert r.json()["queries"][0]["checkpoint"] == str(chk)
    r = cli("inspect", "state", "orders", env={"STREAMCTL_CONFIG": str(cfg)})
    assert r.json()["kind"] == "StateReport"
    r = cli("--config", str(tmp_path / "missing.toml"), "inspect", "epochs", "orders")
    assert r.code == 2 and "missing.toml" in r.stderr


def test_help_documents_exit_codes_and_every_command(cli):
    for args in (["--help"], ["inspect", "--help"], ["inspect", "epochs", "--help"], ["inspect", "state", "--help"],
                 ["inspect", "sink", "--help"], ["inspect", "writers", "--help"]):
        r = cli(*args)
        assert r.code == 0
    assert "3 unreadable" in cli("--help").stdout
    readme = (REPO / "README.md").read_text()
    for command in ("streamctl inspect epochs", "streamctl inspect state", "streamctl inspect sink",
                    "streamctl inspect kafka", "streamctl kafka commit-offsets", "streamctl kafka starting-offsets",
                    "streamctl stop", "streamctl demo", "streamctl align", "streamctl trim", "streamctl drop-sink",
                    "streamctl kafka retention-floor",
                    "streamctl inspect writers", "streamctl completion"):
        assert command in readme
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |", "| 5 |"):
        assert code in readme


# --- golden JSON (a stable contract) --------------------------------------------------------


def _normalise(text: str) -> str:
    return text.replace(str(CORPUS), "<corpus>")


@pytest.mark.parametrize("command, folder", [
    ("epochs", "checkpoint-version-4.0.0/hdfs/join2"),
    ("epochs", "checkpoint-version-4.0.0-state-source"),
    ("state", "checkpoint-version-4.0.0/rocksdb/agg"),
])
def test_golden_json(cli, command, folder):
    r = cli("inspect", command, str(CORPUS / folder), "--json")
    got = _normalise(r.stdout)
    check_golden_text(GOLDEN / f"inspect_{command}__{folder.replace('/', '_')}.json", got, f"inspect {command}")


def test_file_uri_and_unsupported_scheme(cli, tmp_path):
    chk = build(tmp_path / "chk", state=healthy_state())
    r = cli("inspect", "epochs", f"file://{chk}", "--json")
    assert r.code == 0 and r.json()["queries"][0]["query_id"] == QID
    r = cli("inspect", "epochs", "ftp://host/chk")
    assert r.code == 3 and "unsupported URI scheme 'ftp'" in r.stdout
    r = cli("inspect", "epochs", "file://otherhost/chk")
    assert r.code == 3 and "file:// URIs must name a local path" in r.stdout


def test_live_query_from_recent_files(cli, tmp_path):
    """A newest log file younger than the quiet period: LIVE_QUERY (info, verdict unchanged)."""
    chk = build(tmp_path / "chk", state=healthy_state())
    r = cli("inspect", "epochs", str(chk), "--json", "--quiet-period", "300")
    (f,) = r.json()["queries"][0]["findings"]
    assert r.code == 0 and f["code"] == "LIVE_QUERY" and f["severity"] == "info" and f["quiet_period_s"] == 300
    old = 1_000_000_000  # 2001: long quiet
    for d in ("offsets", "commits"):
        for p in (chk / d).iterdir():
            os.utime(p, (old, old))
    r = cli("inspect", "epochs", str(chk), "--json", "--quiet-period", "300")
    assert r.json()["queries"][0]["findings"] == []
    # the default derives the period from the trigger interval (here unknown: 60 s)
    (chk / "commits/3").touch()
    r = cli("inspect", "epochs", str(chk), "--json", env={"STREAMCTL_QUIET_PERIOD": ""})
    (f,) = r.json()["queries"][0]["findings"]
    assert f["code"] == "LIVE_QUERY" and f["quiet_period_s"] == 60.0
    r = cli("inspect", "state", str(chk), "--json", "--quiet-period", "300")
    assert [f["code"] for f in r.json()["findings"]] == ["LIVE_QUERY"]


def _lease(chk: Path, state: str, heartbeat_ms: int, ttl_ms: int = 30_000) -> None:
    (chk / "_streamctl").mkdir(exist_ok=True)
    (chk / "_streamctl/lease.json").write_text(json.dumps({
        "version": 1, "query_id": QID, "run_id": "r-1", "name": None, "host": "driver-1", "pid": 4242,
        "started_at_ms": heartbeat_ms - 60_000, "heartbeat_ms": heartbeat_ms, "expires_at_ms": heartbeat_ms + ttl_ms,
        "last_batch": 3, "state": state, "released_at_ms": None, "stop_request_ms": None}))


def test_live_and_stale_leases(cli, tmp_path):
    """The agent's lease (streamctl.pipeline.agent): live -> LIVE_QUERY, expired -> STALE_LEASE."""
    import time

    chk = build(tmp_path / "chk", state=healthy_state())
    now = int(time.time() * 1000)
    _lease(chk, "running", now)
    r = cli("inspect", "epochs", str(chk), "--json")
    q = r.json()["queries"][0]
    (f,) = q["findings"]
    assert r.code == 0 and f["code"] == "LIVE_QUERY" and "driver-1 (pid 4242)" in f["message"]
    assert q["lease"]["status"] == "live" and q["lease"]["last_batch"] == 3
    _lease(chk, "running", now - 120_000)
    q = cli("inspect", "epochs", str(chk), "--json").json()["queries"][0]
    assert [f["code"] for f in q["findings"]] == ["STALE_LEASE"] and q["lease"]["status"] == "stale"
    _lease(chk, "released", now - 120_000)
    q = cli("inspect", "epochs", str(chk), "--json").json()["queries"][0]
    assert q["findings"] == [] and q["lease"]["status"] == "released" and q["verdict"] == "aligned"
    (chk / "_streamctl/lease.json").write_text("{not json")
    r = cli("inspect", "epochs", str(chk), "--json")
    assert r.code == 3 and "lease.json" in r.json()["queries"][0]["findings"][0]["path"]


def test_no_headers_prints_the_rows_alone(cli, tmp_path) -> None:
    """--no-headers (as kubectl's): a table's rows without title or header, one per line."""
    ck = copy_spark35(SPARK35 / "agg_hdfs" / "checkpoint", tmp_path / "agg" / "checkpoint")
    r = cli("--no-headers", "inspect", "epochs", str(ck), "-o", "plain", "--quiet-period", "0")
    first = r.stdout.splitlines()[0].split()
    assert r.code == 0 and first[1] == str(ck) and first[-1] == "aligned", r.stdout
    assert "query id" not in r.stdout and "---" not in r.stdout


FIXTURE_STATEFUL = SPARK35 / "agg_rocksdb" / "checkpoint"


@pytest.mark.parametrize("no_color", [False, True])
def test_output_on_a_terminal_fits_its_width(tmp_path, no_color, terminal):
    """A table and its findings on an 80-column terminal (colours or NO_COLOR) keep
    every line within the width: rich folds cells and wraps finding lines; only piped output is
    plain text. -o wide adds its columns and still fits."""
    term = terminal
    chk = build(tmp_path / "a-checkpoint-folder-with-a-long-name" / "chk", planned=4, committed=2)
    (chk / "offsets" / "3").unlink()  # a gap: a long finding line
    for fmt in ("table", "wide"):
        r = term.on_terminal("inspect", "epochs", str(chk), "-o", fmt, columns=80, no_color=no_color)
        lines = r.stdout.splitlines()
        assert r.code == 1 and "ASYNC_PROGRESS" in r.stdout and "verdict: misaligned" in r.stdout, r.stdout
        assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
        if fmt == "wide":
            assert "lease" in r.stdout, r.stdout
    piped = subprocess.run([str(term.STREAMCTL), "inspect", "epochs", str(chk)], capture_output=True,
                           text=True, env=dict(os.environ, COLUMNS="80", STREAMCTL_QUIET_PERIOD="0"))
    assert any(len(line) > 80 for line in piped.stdout.splitlines()), "piped output is plain: lines are not wrapped"


def test_wide_adds_columns(cli, tmp_path):
    chk = build(tmp_path / "chk")
    r = cli("inspect", "epochs", str(chk), "-o", "wide")
    head = r.stdout.splitlines()[0]
    assert r.code == 0 and all(h in head for h in ("offsets kept", "format", "sink", "lease", "findings")), r.stdout
    plain = cli("inspect", "epochs", str(chk))
    assert "offsets kept" not in plain.stdout
    st = cli("inspect", "state", str(FIXTURE_STATEFUL), "-o", "wide")
    assert "first restorable" in st.stdout and "state/0/0" in st.stdout, st.stdout

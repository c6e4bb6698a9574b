"""Sink commit logs: file sink `_spark_metadata/`, Delta `txn` (real tables written with the
deltalake package), streamctl's coordinated sink; SINK_AHEAD / SINK_BEHIND against checkpoints
built with Spark's layout; bad sink input."""
from __future__ import annotations

import os

from helpers.layouts import QID, checkpoint, codes, coordinated, delta_table, epochs, file_sink, quiet_pipeline

# --- file sink ------------------------------------------------------------------------------


def test_file_sink_aligned_ahead_behind_and_in_flight(cli, tmp_path):
    sink = file_sink(tmp_path / "out", latest=7, compact_every=3)
    code, q = epochs(cli, checkpoint(tmp_path / "a", 7, 7), sink)
    assert code == 0 and q["sink"] == {"kind": "file", "uri": str(sink), "epoch": 7} and q["verdict"] == "aligned"
    # a restored older checkpoint: the sink skips batches 5..7 when they run again
    code, q = epochs(cli, checkpoint(tmp_path / "b", 4, 4), sink)
    (f,) = q["findings"]
    assert code == 1 and f["code"] == "SINK_AHEAD" and f["skipped"] == [5, 6, 7]
    # the in-flight case: Spark replays 7, the sink already has it (not an error)
    code, q = epochs(cli, checkpoint(tmp_path / "c", 7, 6), sink)
    assert code == 0 and codes(q) == ["IN_FLIGHT"]
    # ...but one more epoch of difference is
    code, q = epochs(cli, checkpoint(tmp_path / "d", 6, 5), sink)
    assert code == 1 and codes(q) == ["IN_FLIGHT", "SINK_AHEAD"]
    # the sink lost its newest entries
    code, q = epochs(cli, checkpoint(tmp_path / "e", 9, 9), sink)
    (f,) = q["findings"]
    assert code == 1 and f["code"] == "SINK_BEHIND" and f["missing"] == [8, 9]


def test_inspect_sink_lists_epochs_files_and_compactions(cli, tmp_path):
    sink = file_sink(tmp_path / "out", latest=7, compact_every=3)
    r = cli("inspect", "sink", str(sink), "--json")
    assert r.code == 0
    rec = r.json()["sink"]
    assert (rec["kind"], rec["epoch"], rec["compactions"], rec["epoch_ids"]) == ("file", 7, [2, 5], [2, 5, 6, 7])
    by_epoch = {e["epoch"]: e for e in rec["epochs"]}
    assert len(by_epoch[5]["files"]) == 6 and by_epoch[6]["files"] == [f"file:{sink}/part-00006.parquet"]
    text = cli("inspect", "sink", str(sink)).stdout
    assert "compactions at 2, 5" in text


def test_file_sink_gap_after_compaction_and_garbage_compact(cli, tmp_path):
    sink = file_sink(tmp_path / "out", latest=7, compact_every=3, drop=(6,))
    code, q = epochs(cli, checkpoint(tmp_path / "a", 7, 7), sink)
    (f,) = q["findings"]
    assert code == 1 and (f["code"], f["log"], f["missing"]) == ("LOG_GAP", "_spark_metadata", [6])
    (sink / "_spark_metadata/5.compact").write_bytes(b"\x00\x01garbage\xff")
    code, q = epochs(cli, checkpoint(tmp_path / "b", 7, 7), sink)
    unreadable = [f for f in q["findings"] if f["code"] == "UNREADABLE"]
    assert code == 3 and unreadable[0]["path"] == str(sink / "_spark_metadata/5.compact")
    r = cli("inspect", "sink", str(sink))
    assert r.code == 3 and "5.compact" in r.stdout


def test_unknown_sink_layout_and_missing_sink(cli, tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain/data.csv").write_text("a,b\n")
    chk = checkpoint(tmp_path / "chk", 3, 3)
    code, q = epochs(cli, chk, tmp_path / "plain")
    assert code == 3 and "unknown sink layout" in q["findings"][0]["message"]
    code, q = epochs(cli, chk, tmp_path / "nope")
    assert code == 3 and "does not exist" in q["findings"][0]["message"]
    r = cli("inspect", "sink", str(tmp_path / "plain"), "--sink-kind", "parquet")
    assert r.code == 2 and "--sink-kind" in r.stderr


def test_sink_count_must_match_checkpoints(cli, tmp_path):
    chk = checkpoint(tmp_path / "chk", 3, 3)
    r = cli("inspect", "epochs", str(chk), str(chk), "--sink", str(tmp_path))
    assert r.code == 2 and "one per checkpoint" in r.stderr


# --- Delta ----------------------------------------------------------------------------------


def test_delta_txn_version_is_the_sink_epoch(cli, tmp_path):
    sink = tmp_path / "table"
    delta_table(sink, QID, range(0, 6))
    delta_table(sink, "someone-else", range(40, 42))
    code, q = epochs(cli, checkpoint(tmp_path / "a", 5, 5), sink)
    assert code == 0 and q["sink"]["kind"] == "delta" and q["sink"]["epoch"] == 5
    code, q = epochs(cli, checkpoint(tmp_path / "b", 3, 3), sink)
    assert code == 1 and codes(q) == ["SINK_AHEAD"]
    # another query id (a copied checkpoint would share ours): nothing written for it yet
    code, q = epochs(cli, checkpoint(tmp_path / "c", 2, 2, qid="22222222-2222-3333-4444-555555555555"), sink)
    assert code == 1 and codes(q) == ["SINK_BEHIND"] and q["sink"]["epoch"] is None
    code, q = epochs(cli, checkpoint(tmp_path / "d", 41, 41, qid="33333333-2222-3333-4444-555555555555"), sink,
                     "--app-id", "someone-else")
    assert code == 0 and q["sink"]["epoch"] == 41
    r = cli("inspect", "sink", str(sink), "--app-id", QID, "--json")
    rec = r.json()["sink"]
    assert r.code == 0 and (rec["kind"], rec["epoch"], rec["table_version"]) == ("delta", 5, 7)


def test_delta_log_with_a_missing_version_file(cli, tmp_path):
    sink = tmp_path / "table"
    delta_table(sink, QID, range(0, 4))
    (sink / "_delta_log" / f"{2:020d}.json").unlink()
    code, q = epochs(cli, checkpoint(tmp_path / "a", 3, 3), sink)
    (f,) = [f for f in q["findings"] if f["code"] == "UNREADABLE"]  # the missing commit is named
    assert code == 3 and f["path"] == str(sink / "_delta_log" / f"{2:020d}.json"), f
    assert "Expected contiguous commit files" in f["message"] and "None" not in f["message"], f


# --- coordinated sink (layout of streamctl.pipeline.coordinated_sink) ------------------------


def test_coordinated_sink_writers_join_the_parallel_writer_analysis(cli, tmp_path):
    sink = coordinated(tmp_path / "out", 5)
    chk = checkpoint(tmp_path / "chk", 5, 5)
    r = cli("inspect", "writers", str(chk), "--sink", str(sink), "--json")
    q = r.json()["queries"][0]
    assert r.code == 0 and q["common_window"] == [0, 5]
    kinds = {w["writer"]: (w["kind"], w["first"], w["last"], w["status"]) for w in q["writers"]}
    assert kinds["sink"] == ("sink_log", 0, 5, "ok")
    assert kinds["sink/writer-0"] == kinds["sink/writer-1"] == ("sink_writer", 0, 5, "ok")
    # writer 1's files of epoch 5 are gone, and epoch 6 crashed with staging left behind
    os.remove(sink / "data/epoch=5/part-00001-0-0005.jsonl")
    (sink / "_staging/6").mkdir(parents=True)
    (sink / "_staging/6/part-00000-0-abcd.jsonl").write_text("{}\n")
    (sink / "_commits/.6.json.1234.tmp").write_text("{")
    r = cli("inspect", "writers", str(chk), "--sink", str(sink), "--json")
    q = r.json()["queries"][0]
    assert r.code == 1
    assert q["behind"] == ["sink/writer-1"] and q["common_window"] == [0, 4]
    found = {f["code"]: f for f in q["findings"]}
    assert found["SINK_WRITER_MISSING"]["partition"] == 1 and found["SINK_WRITER_MISSING"]["epochs"] == [5]
    assert found["SINK_ORPHANS"]["severity"] == "warning" and "uncommitted epoch(s) 6" in found["SINK_ORPHANS"]["message"]
    assert len(found["SINK_ORPHANS"]["files"]) == 2


def test_coordinated_commit_record_garbage(cli, tmp_path):
    sink = coordinated(tmp_path / "out", 3)
    (sink / "_commits/3.json").write_text('{"epoch": 2, "writers": []}')
    r = cli("inspect", "sink", str(sink), "--json")
    (f,) = [f for f in r.json()["findings"] if f["code"] == "UNREADABLE"]
    assert r.code == 3 and f["path"] == str(sink / "_commits/3.json") and "epoch 3" in f["message"]


def test_cli_sink_kinds_match_the_readers():
    from streamctl.commands.options import SinkKind
    from streamctl.inspectors.sinks import READERS, SINK_KINDS

    assert tuple(k.value for k in SinkKind) == SINK_KINDS == ("auto", *READERS)


def test_delta_txn_survives_a_checkpoint_and_log_cleanup(cli, tmp_path):
    """The txn version comes from the Delta checkpoint once the JSON commits before it are gone
    (the deltalake package reads checkpoints for the txn version)."""
    from deltalake import DeltaTable

    sink = tmp_path / "table"
    delta_table(sink, QID, range(0, 4))
    DeltaTable(str(sink)).create_checkpoint()
    delta_table(sink, "someone-else", range(0, 2))
    for v in range(0, 3):  # commits covered by the checkpoint at version 3
        (sink / "_delta_log" / f"{v:020d}.json").unlink()
    assert any(p.name.endswith(".checkpoint.parquet") for p in (sink / "_delta_log").iterdir())
    code, q = epochs(cli, checkpoint(tmp_path / "a", 3, 3), sink)
    assert code == 0 and q["sink"]["epoch"] == 3


def test_delta_preflight_names_the_streaming_writers_a_new_query_is_not(cli, tmp_path):
    """A checkpoint that does not exist yet over a Delta table streaming queries wrote: a new query
    id that the table skips nothing for (duplicates; a real restart in
    test_restart_oracle.py). The app ids come from the newest Delta checkpoint's `txn` column
    and the commits after it, whose files before the checkpoint are gone; a table no
    streaming writer wrote gives no pre-flight ("not a checkpoint", exit 3)."""
    from deltalake import DeltaTable

    sink = tmp_path / "table"
    delta_table(sink, QID, range(0, 3))
    DeltaTable(str(sink)).create_checkpoint()
    delta_table(sink, "someone-else", range(0, 2))
    for v in range(0, 3):  # commits covered by the checkpoint: the old app id is only in its parquet
        (sink / "_delta_log" / f"{v:020d}.json").unlink()
    code, q = epochs(cli, tmp_path / "new", sink)
    assert code == 1 and codes(q) == ["SINK_NEW_QUERY"], q
    assert q["findings"][0]["query_ids"] == sorted([QID, "someone-else"]) and q["findings"][0]["preflight"] is True
    r = cli("diagnose", str(tmp_path / "new"), "--sink", str(sink))
    assert r.code == 1 and "a pre-flight" in r.stdout and "new sink path" in r.stdout, r
    # a multi-part checkpoint a crash left with one part of two: readers fall back to the older one
    (sink / "_delta_log" / f"{4:020d}.checkpoint.0000000001.0000000002.parquet").write_bytes(b"PAR1 torn")
    code, q = epochs(cli, tmp_path / "new", sink)
    assert code == 1 and q["findings"][0]["query_ids"] == sorted([QID, "someone-else"]), q
    plain = tmp_path / "plain"
    delta_table(plain, None, range(0, 1))
    code, q = epochs(cli, tmp_path / "new", plain)
    assert code == 3 and "not a checkpoint" in q["findings"][0]["message"], q
    assert not (tmp_path / "new").exists()


def test_delta_preflight_with_the_writers_fixed_app_id_names_the_batches_it_skips(cli, tmp_path):
    """A foreachBatch writer given a fixed app id (Delta's `txnAppId`, `--app-id` here): a new
    checkpoint's batch ids restart at 0, and the writer skips every one up to the table's txn
    version of that id (Delta documents it: a new checkpoint needs a new txnAppId). The
    pre-flight is SINK_FOREIGN_BATCHES with the version, not SINK_NEW_QUERY."""
    sink = tmp_path / "table"
    delta_table(sink, "orders-to-delta", range(0, 4))
    code, q = epochs(cli, tmp_path / "new", sink, "--app-id", "orders-to-delta")
    (f,) = q["findings"]
    assert code == 1 and f["code"] == "SINK_FOREIGN_BATCHES" and f["preflight"] is True and f["sink_epoch"] == 3, q
    assert "batch ids 0..3" in f["message"] and "new txnAppId" in f["message"]
    code, q = epochs(cli, tmp_path / "new", sink, "--app-id", "another-writer")
    assert code == 1 and codes(q) == ["SINK_NEW_QUERY"], q


def test_files_streamctl_wrote_are_no_sign_of_a_live_query(cli, tmp_path):
    """Right after align wrote `commits/3` (a roll forward), inspect with the default quiet period
    does not call the query live: the runner noted the files it wrote (`_streamctl/written.json`).
    Once the file changes again (a real writer), it is evidence again."""
    import os

    chk = checkpoint(tmp_path / "chk", 3, 2)
    out = file_sink(tmp_path / "out", 3)
    for b in range(4):  # old files: no sign of life
        for d in ("offsets", "commits"):
            f = chk / d / str(b)
            if f.exists():
                os.utime(f, (1, 1))
    r = cli("align", str(chk), "--sink", str(out), "--execute", "--json", "--quiet-period", "0")
    assert r.code == 0 and r.json()["plan"]["strategy"] == "roll_forward", r
    r = cli("inspect", "epochs", str(chk), "--sink", str(out), "--json", "--quiet-period", "600")
    assert "LIVE_QUERY" not in codes(r.json()["queries"][0]), r.json()
    (chk / "commits" / "3").write_text((chk / "commits" / "3").read_text() + " ")  # someone else writes it
    r = cli("inspect", "epochs", str(chk), "--sink", str(out), "--json", "--quiet-period", "600")
    assert "LIVE_QUERY" in codes(r.json()["queries"][0]), r.json()


def test_a_retired_checkpoint_reads_as_retired_not_unreadable(cli, tmp_path):
    """After drop-sink, the checkpoint holds only its tombstone `metadata`: inspect says RETIRED
    (info, exit 0) with the archive and the undo command, so a fleet watch does not alert on it
    forever; the undo brings the query back as it was."""
    chk, out = quiet_pipeline(tmp_path, 3)
    r = cli("drop-sink", str(out), "--checkpoint", str(chk), "--assume-stopped", "--execute", "--json")
    assert r.code == 0, r
    archive = r.json()["archive"] if "archive" in r.json() else r.json()["backup"]
    code, q = epochs(cli, chk, out)
    found = {f["code"]: f for f in q["findings"]}
    assert code == 0 and q["verdict"] == "aligned" and set(found) == {"RETIRED"}, q["findings"]
    assert found["RETIRED"]["archive"] == archive and found["RETIRED"]["undo"] == f"streamctl drop-sink --undo {archive}"
    assert found["RETIRED"]["query_id_was"] == QID
    assert cli("drop-sink", "--undo", archive).code == 0
    code, q = epochs(cli, chk, out)
    assert code == 0 and q["query_id"] == QID and q["committed"] == 3 and not q["findings"], q


def test_a_long_plan_is_summarized_and_verbose_lists_every_step(cli, tmp_path):
    """197 steps: one line per kind of step and folder, with counts and the first names; --verbose
    (and --json) list every step."""
    import os

    chk = checkpoint(tmp_path / "chk", 99, 99)
    for d in ("offsets", "commits"):
        for f in (chk / d).iterdir():
            os.utime(f, (1, 1))
    r = cli("trim", str(chk), "--keep-epochs", "1")
    assert r.code == 0 and "steps (197, summarized" in r.stdout, r
    assert "move to the backup     98 in checkpoint:offsets/" in r.stdout and "... 95 more" in r.stdout, r.stdout
    assert len(r.stdout.splitlines()) < 15
    v = cli("--verbose", "trim", str(chk), "--keep-epochs", "1")
    assert v.code == 0 and "steps (197):" in v.stdout and " 197. move checkpoint:" in v.stdout, v.stdout[-500:]
    j = cli("trim", str(chk), "--keep-epochs", "1", "--json")
    assert len(j.json()["plan"]["steps"]) == 197
    e = cli("trim", str(chk), "--keep-epochs", "1", "--execute")  # says where the backup went and its size
    assert e.code == 0 and "(197 file(s), " in e.stdout and "elsewhere next time: --backup-dir" in e.stdout, e.stdout[-600:]


def test_undo_of_drop_sink_says_what_blocks_it(cli, tmp_path):
    """After drop-sink, a query started on the sink recreated `_spark_metadata/`: the undo refuses
    (exit 4, nothing changed), names the folder and its files and says what to do; once it is
    moved aside, the undo runs."""
    chk, out = quiet_pipeline(tmp_path, 3)
    r = cli("drop-sink", str(out), "--checkpoint", str(chk), "--assume-stopped", "--execute", "--json")
    archive = r.json()["archive"] if "archive" in r.json() else r.json()["backup"]
    (out / "_spark_metadata").mkdir()
    (out / "_spark_metadata" / "0").write_text("v1\n")
    u = cli("drop-sink", "--undo", archive)
    assert u.code == 4 and "_spark_metadata was made again" in u.stderr and "1 file(s): 0" in u.stderr, u
    assert "move it aside" in u.stderr and (chk / "metadata").read_text().startswith("{\"archive\"")
    (out / "_spark_metadata").rename(tmp_path / "later-query-log")
    assert cli("drop-sink", "--undo", archive).code == 0
    code, q = epochs(cli, chk, out)
    assert code == 0 and q["committed"] == 3 and q["sink"]["epoch"] == 3, q


def test_a_running_query_has_one_stable_verdict(cli, tmp_path):
    """Between its offsets and its commit a running query is in flight half of the time: with
    LIVE_QUERY its verdict stays aligned (exit 0) whether a batch is in flight or not; stopped,
    the in-flight batch is `recoverable`."""
    import os

    chk = checkpoint(tmp_path / "chk", 3, 3)
    verdicts = []
    for committed in (3, 2):  # between two batches; then batch 3 planned, not yet committed
        if committed == 2:
            (chk / "commits" / "3").unlink()
        r = cli("inspect", "epochs", str(chk), "--json", "--quiet-period", "600")
        q = r.json()["queries"][0]
        assert r.code == 0 and "LIVE_QUERY" in codes(q), q
        verdicts.append(q["verdict"])
    assert verdicts == ["aligned", "aligned"]
    for d in ("offsets", "commits"):
        for f in (chk / d).iterdir():
            os.utime(f, (1, 1))
    r = cli("inspect", "epochs", str(chk), "--json", "--quiet-period", "600")
    assert r.json()["queries"][0]["verdict"] == "recoverable"




def test_a_deltalake_error_is_cut_before_its_rust_debug_dump() -> None:
    from streamctl.inspectors.delta_sink import _deltalake_reason

    exc = Exception('Kernel error: Generic delta kernel error: Expected contiguous commit files, but found gap: '
                    'ParsedLogPath { location: FileMeta { location: Url { scheme: "file", password: None } } }\nmore')
    assert _deltalake_reason(exc) == ("Kernel error: Generic delta kernel error: Expected contiguous commit files, "
                                      "but found gap")
    assert _deltalake_reason(Exception("No table metadata or protocol found in delta log.")) == \
        "No table metadata or protocol found in delta log."

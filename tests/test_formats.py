"""formats/: each module's serializer and parser agree, and each reads what Spark (or streamctl's
own writers) write, byte for byte where streamctl writes. The readers' hostile cases
are tests/test_fuzz_readers.py's and tests/test_logs.py's; these are the round trips."""
from __future__ import annotations

import json
import zipfile
import zlib
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
import xxhash

from streamctl.formats import checksum, commits, compactible, coordinated_log, file_sink_log, journal, metadata, state
from streamctl.formats.errors import LogParseError, PathError, StorageError


def test_commit_and_metadata_round_trip_in_spark_bytes() -> None:
    data = commits.serialize_commit(1_700_000)
    assert data == b'v1\n{"nextBatchWatermarkMs":1700000}'  # what CommitLog writes
    entry = commits.parse_commit(data, "commits/4", 4)
    assert (entry.batch_id, entry.version, entry.next_batch_watermark_ms, entry.state_unique_ids) == (4, 1, 1_700_000, None)
    qid = "5f3a9c9e-8d4b-4a53-9b1c-2b8a4c1d7e01"
    assert metadata.serialize_query_metadata(qid) == f'{{"id":"{qid}"}}'.encode()
    assert metadata.parse_query_metadata(metadata.serialize_query_metadata(qid), "metadata") == qid


def test_hadoop_checksums_are_written_and_checked_alike() -> None:
    data = bytes(range(256)) * 5  # three 512-byte chunks, the last one short
    sums = checksum.hadoop_crc(data)
    assert sums[:8] == b"crc\0" + (512).to_bytes(4, "big") and len(sums) == 8 + 3 * 4
    assert sums[8:12] == zlib.crc32(data[:512]).to_bytes(4, "big")
    assert checksum.hadoop_crc_mismatch(sums, data) is None
    torn = data[:600] + b"\xff" + data[601:]
    assert checksum.hadoop_crc_mismatch(sums, torn) == 512  # the chunk holding byte 600
    assert checksum.hadoop_crc_mismatch(sums, data[:700]) == 512  # cut short: the second chunk differs
    assert checksum.hadoop_crc_mismatch(b"not a crc", data) is None  # not Hadoop's: not judged
    assert checksum.crc_name("offsets/3") == "offsets/.3.crc" and checksum.crc_name("metadata") == ".metadata.crc"
    assert checksum.crc_target(".3.crc") == "3" and checksum.crc_target("3.crc") is None
    assert checksum.crc_companions("state/0/1/5.delta") == ("state/0/1/.5.delta.crc", "state/0/1/5.delta.crc",
                                                            "state/0/1/.5.delta.crc.crc")
    assert checksum.checksum_base(".7.crc") == "7" and checksum.main_file_size({"mainFileSize": 12}) == 12


def test_compactible_names_and_the_file_sink_view_of_a_log() -> None:
    for batch, compact in ((0, False), (9, True), (1234, False)):
        assert compactible.compactible_name(compactible.compactible_file(batch, compact)) == (batch, compact)
    assert compactible.compactible_name(".9.compact.crc") is None and compactible.compactible_name("9.tmp") is None
    entry = {"path": "file:/out/part-0.parquet", "size": 10, "isDir": False, "modificationTime": 1, "blockReplication": 1,
             "blockSize": 1, "action": "add"}
    gone = dict(entry, action="delete")
    later = dict(entry, path="file:/out/part-1.parquet")
    b0 = compactible.parse_compactible(b"v1\n" + json.dumps(entry).encode(), "_spark_metadata/0", 0, False)
    b1 = compactible.parse_compactible(b"v1\n" + json.dumps(gone).encode() + b"\n" + json.dumps(later).encode() + b"\n",
                                       "_spark_metadata/1", 1, False)
    assert file_sink_log.added_paths(b1) == ("file:/out/part-1.parquet",)
    assert file_sink_log.deleted_paths(b1) == ("file:/out/part-0.parquet",)
    assert file_sink_log.live_files([b0.entries, b1.entries]) == {"file:/out/part-1.parquet": 10}
    empty = compactible.parse_compactible(file_sink_log.EMPTY_SINK_ENTRY, "_spark_metadata/2", 2, False)
    assert empty.entries == ()
    with pytest.raises(LogParseError, match="_spark_metadata/3"):
        compactible.parse_compactible(b"v2\n{}", "_spark_metadata/3", 3, False)


def test_a_coordinated_commit_record_reads_back_as_written() -> None:
    writers = [coordinated_log.writer_entry(p, 0, 2, [f"data/{coordinated_log.epoch_folder(7)}/part-{p:05d}.jsonl"])
               for p in range(3)]
    record = coordinated_log.commit_record(7, "q", 1_700_000_000_000, writers)
    data = coordinated_log.serialize_commit_record(record)
    assert data.endswith(b"\n") and list(json.loads(data)) == ["version", "epoch", "query_id", "committed_at_ms",
                                                               "num_writers", "writers", "rows"]
    back = coordinated_log.parse_commit_record(data, "_commits/7.json", 7)
    assert back == record and coordinated_log.writer_count(back) == 3 and coordinated_log.record_rows(back) == 6
    assert coordinated_log.record_writers(back)[2] == coordinated_log.Writer(2, ("data/epoch=7/part-00002.jsonl",), 2)
    del back["rows"]
    assert coordinated_log.record_rows(back) == 6  # an older record without `rows`: its writers' sum
    assert coordinated_log.epoch_of_record_name(coordinated_log.commit_record_name(7)) == 7
    assert coordinated_log.epoch_of_record_name(".7.json.0a1b.tmp") is None
    assert coordinated_log.epoch_of_folder("epoch=7") == 7 and coordinated_log.epoch_of_folder("epoch=x") is None
    with pytest.raises(LogParseError, match="not a commit record of epoch 8"):
        coordinated_log.parse_commit_record(data, "_commits/8.json", 8)


def test_lz4_block_checksums_of_a_spark_written_delta() -> None:
    """lz4_corrupt checks what lz4-java's LZ4BlockInputStream checks as a restart reads a state
    file: a delta PySpark 3.5 wrote passes; eight bytes changed anywhere after the magic are seen
    (by the block checks, or as a stream cut short by lz4_torn), as the restart sees them."""
    delta = Path(__file__).parent / "fixtures/spark-3.5/join_renamed_hdfs/checkpoint/state/0/2/left-keyWithIndexToValue/5.delta"
    data = delta.read_bytes()
    assert data[:8] == state.LZ4_MAGIC and state.lz4_corrupt(data) is None
    for at in range(8, len(data) - 8):
        bad = bytearray(data)
        bad[at:at + 8] = bytes(b ^ 0x5A for b in bad[at:at + 8])
        found = state.lz4_corrupt(bytes(bad)) or state.lz4_torn(bytes(bad[:8]), bytes(bad[-state.LZ4_END:]))
        assert found is not None, at
    body = b"\x00\x00\x00\x01x"  # a raw (stored) block, then the end mark
    check = xxhash.xxh32_intdigest(body, seed=state.LZ4_SEED) & 0xFFFFFFF
    raw = (state.LZ4_MAGIC + bytes([0x10]) + len(body).to_bytes(4, "little") * 2 + check.to_bytes(4, "little")
           + body + state.LZ4_MAGIC + bytes([0x10]) + bytes(12))
    assert state.lz4_corrupt(raw) is None
    assert state.lz4_corrupt(raw.replace(b"x", b"y")) == "the LZ4 block at byte 0 fails its checksum"
    assert state.lz4_corrupt(raw[:-4] + b"\x01\0\0\0") == f"the LZ4Block end mark at byte {state.LZ4_HEADER + 5} has a checksum"
    assert state.lz4_corrupt(b"\x28\xb5\x2f\xfd" + bytes(30)) is None  # zstd: not judged
    assert state.lz4_stream(b"\x00\x00\x00\x01x", level=0) == raw  # the writer the benchmark's tree uses
    assert state.lz4_stream(b"") == state.LZ4_MAGIC + bytes([0x15]) + bytes(12)


def test_a_spark_written_zip_is_read_as_spark_unzips_it() -> None:
    """zip_stream_corrupt walks a RocksDB checkpoint zip as java.util.zip.ZipInputStream does when
    a restart unzips it: the zips PySpark 3.5 wrote pass; eight bytes changed inside an entry's
    data, a zip cut short, or a first local header damaged (nothing unzipped, no `metadata`) fail."""
    zips = sorted((Path(__file__).parent / "fixtures/spark-3.5/agg_rocksdb/checkpoint/state/0").glob("*/*.zip"))
    assert zips
    for z in zips:
        data = z.read_bytes()
        assert state.zip_stream_corrupt(data) is None, z
    data = zips[0].read_bytes()
    with zipfile.ZipFile(zips[0]) as zf:  # where each entry's compressed data lies
        spans = [(i.header_offset + 30 + len(i.filename.encode()) + len(i.extra), i.compress_size)
                 for i in zf.infolist() if i.compress_size >= 8]
    assert spans
    for start, size in spans:
        for at in range(start, start + size - 8, max(1, size // 16)):
            bad = bytearray(data)
            bad[at:at + 8] = bytes(b ^ 0x5A for b in bad[at:at + 8])
            assert state.zip_stream_corrupt(bytes(bad)) is not None, at
    assert "cut short" in (state.zip_stream_corrupt(data[: len(data) // 2]) or "")
    assert "no metadata entry" in (state.zip_stream_corrupt(b"PK\x03\x05" + data[4:]) or "")


def test_state_end_marks_and_the_zip_manifest() -> None:
    end = b"LZ4Block" + bytes([0x10]) + bytes(12)  # lz4-java's empty end block
    assert state.lz4_torn(b"LZ4Block", end) is None
    assert state.lz4_torn(b"LZ4Block", b"LZ4Block" + b"\x25" + b"\x01" * 12) == "truncated: no LZ4Block end mark"
    assert state.lz4_torn(b"\x28\xb5\x2f\xfd" + b"\0" * 4, b"") is None  # zstd: not judged
    buf = BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("metadata", 'v1\n{"sstFiles":[{"localFileName":"000008.sst","dfsSstFileName":"000008-a.sst",'
                                '"sizeBytes":1234}],"numKeys":3}')
    raw = buf.getvalue()
    assert state.zip_torn(raw[:4], raw[-state.ZIP_TAIL:]) is None
    assert state.zip_torn(raw[:4], raw[:-30][-state.ZIP_TAIL:]) == "truncated: no zip end of central directory record"
    assert state.zip_torn(b"LZ4B", raw[-state.ZIP_TAIL:]) == "not a zip file (no local file header)"
    with zipfile.ZipFile(BytesIO(raw)) as zf:
        assert state.parse_zip_metadata(zf.read("metadata").decode()) == {"000008-a.sst": 1234}
    assert state.state_file("12_ab-cd.changelog") == state.StateFileName(12, "ab-cd", "changelog", False)
    assert state.state_file(".5.delta.crc") == state.StateFileName(5, None, "delta", True)
    assert state.is_zip_file("3_x.zip") and state.is_full_file("4.snapshot") and not state.is_full_file("4.delta")


def test_journal_records_encode_and_read_back() -> None:
    begin = {"event": journal.Event.BEGIN, "step": 0, "action": "move", "root": "checkpoint", "path": "offsets/9",
             "pre": {"sha256": "ab", "size": 3}}
    done = {"event": "done", "step": 0, "manifest": {"action": "move", "backup": "b/offsets/9", "path": "offsets/9",
                                                     "root": "checkpoint", "sha256": "ab", "size": 3, "uri": "file:/x"}}
    written = ({"event": "start", "op": "o"}, begin, done, {"event": "finished"})
    lines = [journal.record_line(r, 5) for r in written]
    for line, rec in zip(lines, written, strict=True):  # one line each, read back as written
        assert line.endswith(b"\n") and line.count(b"\n") == 1 and json.loads(line) == dict(rec, time_ms=5)
    chunk = b"".join(lines) + b'{"event": "do'  # a torn last line of a crashed run
    state_ = journal.JournalState()
    for _, rec in journal.journal_records(chunk):
        assert rec is not None and journal.apply_record(state_, rec)
    assert state_.started and state_.finished and state_.begun[0]["path"] == "offsets/9" and 0 in state_.done
    assert not journal.apply_record(journal.JournalState(), {"event": "teleported"})
    with pytest.raises(ValueError):
        journal.record_line({"event": "teleported"}, 5)  # the closed schema: no writer names another kind
    assert [rec for _, rec in journal.journal_records(b"[1, 2]\n")] == [None]
    assert journal.segment_number(journal.segment_rel(12).rpartition("/")[2]) == 12
    assert journal.segment_number("12.json") is None


def test_chunk_records_read_back_as_a_record_per_step_and_malformed_ones_are_refused() -> None:
    """A `begin_chunk` record reads back as a `begin` record of each of its steps (a move, its
    size and sha256), a `done_chunk` as a `done` record of each saying `renamed`; a chunk record
    without a list of step numbers, or with a `pre` that is not [size, sha256] for each, is not a
    record (the reader refuses the journal)."""
    chunk = {"event": "begin_chunk", "action": "move", "steps": [3, 4], "pre": [[1, "aa"], [0, "bb"]]}
    state_ = journal.JournalState()
    assert journal.apply_record(state_, chunk) and journal.apply_record(state_, {"event": "done_chunk", "steps": [4]})
    assert state_.begun[3]["pre"] == {"size": 1, "sha256": "aa"} and state_.begun[4]["action"] == "move"
    assert state_.done == {4: {"event": "done", "step": 4, "renamed": True}}
    for bad in ({"steps": [3, -1]}, {"steps": [3, 4.0]}, {"steps": "3"}, {"pre": [[1, "aa"]]}, {"pre": [[1, "aa"], None]},
                {"pre": [[1, "aa"], [True, "bb"]]}, {"action": "write"}):
        assert not journal.apply_record(journal.JournalState(), dict(chunk, **bad)), bad
    assert not journal.apply_record(journal.JournalState(), {"event": "done_chunk", "steps": [None]})


def test_errors_about_a_path_share_one_shape() -> None:
    for kind in (StorageError, LogParseError):
        exc = kind("s3://b/chk/offsets/3", "truncated")
        assert isinstance(exc, PathError) and str(exc) == "s3://b/chk/offsets/3: truncated" and exc.reason == "truncated"
    assert not isinstance(LogParseError("p", "r"), StorageError)


def test_kafka_offset_json_in_spark_shape() -> None:
    from streamctl.formats import kafka_offsets

    raw = '{"orders":{"0":12,"1":7},"audit":{"0":3}}'
    parsed = kafka_offsets.parse_kafka_offsets(raw)
    assert parsed == {"orders": {0: 12, 1: 7}, "audit": {0: 3}}
    assert kafka_offsets.offsets_text(parsed) == '{"audit":{"0":3},"orders":{"0":12,"1":7}}'
    flat = kafka_offsets.flat(json.loads(raw))
    assert flat == {("orders", 0): 12, ("orders", 1): 7, ("audit", 0): 3}
    assert kafka_offsets.spark_shape({("t", 10): 1, ("t", 2): 5}) == {"t": {"2": 5, "10": 1}}
    assert list(kafka_offsets.spark_shape({("t", 10): 1, ("t", 2): 5})["t"]) == ["2", "10"]  # by partition number
    for other in ('{"logOffset":4}', "17", '{"t":{"0":true}}', "not json", None):
        assert kafka_offsets.parse_kafka_offsets(other) is None


def test_iceberg_table_metadata_names_snapshots_and_rollback() -> None:
    """formats/iceberg.py: the metadata folder's file names, the snapshots of a table metadata
    file (ids as JSON integers or digit strings), and a rollback's next version reads back with
    the target snapshot current and the logs extended."""
    from streamctl.formats import iceberg

    names = ["v1.metadata.json", "v2.metadata.json", "v3.gz.metadata.json", iceberg.VERSION_HINT, "snap-1.avro"]
    assert [n for n in names if iceberg.is_metadata_name(n)] == names[:3]
    assert iceberg.metadata_versions(names) == {1: ["v1.metadata.json"], 2: ["v2.metadata.json"]}
    assert iceberg.hinted_name(b"2\n", names) == "v2.metadata.json" and iceberg.hinted_name(b"7", names) is None
    assert iceberg.hadoop_version(iceberg.metadata_rel("v2.metadata.json")) == 2
    assert iceberg.hadoop_version("metadata/00002-ab-cd.metadata.json") is None
    summary = {iceberg.QUERY_ID: "q", iceberg.EPOCH_ID: "4", "operation": "append", "added-records": "10"}
    doc = {"format-version": 2, "current-snapshot-id": 2, "last-updated-ms": 5,
           "snapshots": [{"snapshot-id": 1, "timestamp-ms": 1, "summary": {**summary, iceberg.EPOCH_ID: "3"}},
                         {"snapshot-id": "2", "parent-snapshot-id": 1, "timestamp-ms": 2, "summary": summary}],
           "metadata-log": [{"timestamp-ms": 1, "metadata-file": "s3://b/t/metadata/v1.metadata.json"}]}
    meta = iceberg.parse_table_metadata(json.dumps(doc).encode(), "t/metadata/v2.metadata.json")
    assert meta.current == 2 and meta.snapshots[2].parent_id == 1 and meta.snapshots[2].epoch == 4
    assert (meta.snapshots[2].query, meta.snapshots[2].rows, meta.snapshots[2].files) == ("q", 10, None)
    with pytest.raises(StorageError, match="snapshot-id"):
        iceberg.parse_table_metadata(b'{"snapshots": [{"summary": {}}]}', "m")
    with pytest.raises(StorageError, match="not valid JSON"):
        iceberg.parse_table_metadata(b"{", "m")
    back = json.loads(iceberg.rolled_back_metadata(json.dumps(doc).encode(), "s3://b/t/metadata/v2.metadata.json", 1,
                                                   9, "s3://b/t/metadata"))
    assert back["current-snapshot-id"] == 1 and back["refs"]["main"] == {"snapshot-id": 1, "type": "branch"}
    assert back["snapshot-log"] == [{"timestamp-ms": 9, "snapshot-id": 1}]
    assert back["metadata-log"][-1] == {"timestamp-ms": 5, "metadata-file": "s3://b/t/metadata/v2.metadata.json"}
    assert iceberg.version_hint(3) == b"3"


def test_a_source_offset_spark_never_writes_after_the_batch_before() -> None:
    """offsets_go_back: a file source's logOffset below -1 or below the batch before's, a Kafka
    partition's offset below 0; not a Kafka offset below the batch before's (a recreated topic,
    run with failOnDataLoss=false), nor offsets of a kind streamctl does not read."""
    from streamctl.formats.offsets import offsets_go_back, parse_offsets

    def entry(batch: int, *lines: str) -> Any:
        return parse_offsets(("v1\n{}\n" + "\n".join(lines)).encode(), f"offsets/{batch}", batch)

    assert offsets_go_back(entry(3, '{"logOffset":3}'), entry(4, '{"logOffset":4}')) is None
    assert offsets_go_back(entry(3, '{"logOffset":3}'), entry(4, '{"logOffset":3}')) is None  # a no-data batch
    assert offsets_go_back(None, entry(0, '{"logOffset":-1}')) is None
    assert offsets_go_back(None, entry(4, '{"logOffset":-7}')) == "source 0's logOffset -7 is below -1"
    assert offsets_go_back(entry(3, '{"logOffset":3}'), entry(4, '{"logOffset":2}')) == \
        "source 0's logOffset 2 is below batch 3's 3"
    assert offsets_go_back(entry(3, '{"t":{"0":5}}'), entry(4, '{"t":{"0":-7}}')) == \
        "source 0's offset -7 of t-0 is below 0"
    assert offsets_go_back(entry(3, '{"t":{"0":5}}'), entry(4, '{"t":{"0":2}}')) is None
    assert offsets_go_back(entry(3, '{"logOffset":3}', '5'), entry(4, '{"logOffset":4}', '2')) is None  # a LongOffset
    assert offsets_go_back(entry(3, '{"logOffset":3}'), entry(4, '{"logOffset":4}', '{"logOffset":0}')) is None


def test_kafka_offsets_taken_back_from_the_batch_before() -> None:
    """kafka_rewound (SOURCE_REWOUND): a Kafka partition below the batch before's, or gone from
    the newer offsets; not an equal one (a batch that read nothing there), a new partition, a
    topic added, another source kind, nor the first batch."""
    from streamctl.formats.offsets import Rewound, kafka_rewound, parse_offsets

    def entry(batch: int, *lines: str) -> Any:
        return parse_offsets(("v1\n{}\n" + "\n".join(lines)).encode(), f"offsets/{batch}", batch)

    prev = entry(3, '{"t":{"0":5,"1":7}}', '{"logOffset":3}')
    assert kafka_rewound(prev, entry(4, '{"t":{"0":5,"1":9,"2":0},"u":{"0":1}}', '{"logOffset":4}')) == []
    assert kafka_rewound(prev, entry(4, '{"t":{"0":3,"1":7}}', '{"logOffset":4}')) == [Rewound(0, "t", 0, 3, 5)]
    assert kafka_rewound(prev, entry(4, '{"t":{"0":5}}', '{"logOffset":4}')) == [Rewound(0, "t", 1, None, 7)]
    assert kafka_rewound(prev, entry(4, '{"u":{"0":1}}', '{"logOffset":4}')) == \
        [Rewound(0, "t", 0, None, 5), Rewound(0, "t", 1, None, 7)]
    assert kafka_rewound(None, entry(0, '{"t":{"0":0}}')) == []
    assert kafka_rewound(prev, entry(4, '-', '{"logOffset":4}')) == []
    assert kafka_rewound(prev, entry(4, '{"t":{"0":-7,"1":7}}')) == []  # offsets_go_back's

"""Every folder of tests/fixtures/spark-corpus (written by Apache Spark's own test suite,
2.1 -> 4.0) is read without a parse error. The corpus is a partial copy: binary files are empty
placeholders and some files are missing, so only placeholders may be UNREADABLE and gaps are
artefacts of the copy — verdicts are not asserted here except where the copy is complete."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from helpers.paths import CORPUS
from streamctl.formats.offsets import parse_offsets
from streamctl.formats.source_log import parse_kafka_initial_offsets
from streamctl.inspectors.checkpoint import inspect_checkpoint
from streamctl.inspectors.sources import read_compactible_log
from streamctl.inspectors.storage import Storage


def _placeholders() -> set[Path]:
    with open(CORPUS / "MANIFEST.tsv", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return {CORPUS / r["corpus_dir"] / r["relative_path"] for r in rows if r["status"] == "placeholder"}


def _checkpoints() -> list[Path]:
    out = []
    for metadata in CORPUS.rglob("metadata"):
        folder = metadata.parent
        if (folder / "offsets").is_dir() or (folder / "commits").is_dir():
            out.append(folder)
    return sorted(out)


CHECKPOINTS = _checkpoints() if CORPUS.is_dir() else []


def test_corpus_has_the_expected_checkpoints():
    names = {str(p.relative_to(CORPUS)) for p in CHECKPOINTS}
    assert {
        "checkpoint-version-2.1.0",
        "checkpoint-version-2.4.0-streaming-join",
        "checkpoint-version-3.5.1-streaming-deduplication",
        "checkpoint-version-4.0.0/hdfs/join2",
        "checkpoint-version-4.0.0/rocksdb/agg",
        "checkpoint-version-4.0.0-state-source",
    } <= names
    assert len(CHECKPOINTS) == 11


@pytest.mark.parametrize("folder", CHECKPOINTS, ids=lambda p: str(p.relative_to(CORPUS)))
def test_every_corpus_checkpoint_parses(folder: Path):
    q = inspect_checkpoint(str(folder))
    placeholders = _placeholders()
    for f in q.findings:
        if f.code == "UNREADABLE":
            assert Path(f.details["path"]) in placeholders, f.message
    assert q.query_id and len(q.query_id) == 36
    assert q.planned is not None
    json.dumps(q.to_record())  # serialisable


def test_join_2_4_0_has_four_named_stores_per_partition():
    q = inspect_checkpoint(str(CORPUS / "checkpoint-version-2.4.0-streaming-join"))
    (op,) = q.operators
    assert op.store_names == ("left-keyToNumValues", "left-keyWithIndexToValue",
                              "right-keyToNumValues", "right-keyWithIndexToValue")
    assert op.num_partitions == 5 and op.num_partitions_source == "offsets_conf"
    # the copy lacks partition 0 entirely: reported, not a parse error
    assert [f.details["missing_partitions"] for f in q.findings if f.code == "STATE_PARTITION_MISSING"] == [[0]]


def test_state_source_4_0_0_snapshots_and_deltas():
    """Partition 1 of this copy: deltas 2..17 (18 missing), snapshots 12 and 24, deltas 26..30."""
    q = inspect_checkpoint(str(CORPUS / "checkpoint-version-4.0.0-state-source"))
    assert (q.planned, q.committed) == (30, 30)
    (op,) = q.operators
    assert op.metadata_version == 1 and op.name == "stateStoreSave" and op.num_partitions == 4
    p1 = next(s for s in op.stores if s.partition == 1)
    assert p1.newest_snapshot == 24
    assert (p1.first_restorable, p1.broken_at, p1.durable_version) == (12, 18, 24)
    assert p1.chain == "unrestorable" and p1.missing == ("25.delta", "31.delta")
    p0 = next(s for s in op.stores if s.partition == 0)
    assert not p0.restorable_required and p0.missing[0] == "1..9.delta"


def test_rocksdb_4_0_0_zip_and_changelog_chain():
    q = inspect_checkpoint(str(CORPUS / "checkpoint-version-4.0.0/rocksdb/agg"))
    (op,) = q.operators
    assert op.provider == "rocksdb"
    p1 = next(s for s in op.stores if s.partition == 1)
    assert (p1.newest_snapshot, p1.durable_version, p1.first_restorable) == (4, 4, 1)


def test_bare_offset_log_2_1_0_keeps_offsets_exact():
    folder = CORPUS / "offset-log-version-2.1.0"
    e0 = parse_offsets((folder / "0").read_bytes(), str(folder / "0"), 0)
    assert [s.raw for s in e0.sources] == ['{"logOffset":345}', '{"topic-0":{"0":1}}']
    e16 = parse_offsets((folder / "16").read_bytes(), str(folder / "16"), 16)
    (src,) = e16.sources
    assert (folder / "16").read_text().split("\n")[2] == src.raw
    assert sum(len(p) for p in json.loads(src.raw).values()) == 193


def test_file_sink_and_file_source_logs_2_1_0():
    sink = read_compactible_log(Storage.open(str(CORPUS / "file-sink-log-version-2.1.0")))
    assert [(b.batch_id, b.compact) for b in sink] == [(7, True), (8, False), (9, False)]
    assert len(sink[0].entries) == 8 and {e["action"] for e in sink[1].entries} == {"add", "delete"}
    source = read_compactible_log(Storage.open(str(CORPUS / "file-source-log-version-2.1.0")))
    assert [(b.batch_id, b.compact) for b in source] == [(2, True), (3, False), (4, False)]


def test_kafka_offset_fixtures():
    folder = CORPUS / "kafka-0-10-sql-offset-fixtures"
    old = parse_kafka_initial_offsets((folder / "kafka-source-initial-offset-version-2.1.0.bin").read_bytes(), "x")
    assert old.version is None and old.offsets
    from streamctl.formats.errors import LogParseError

    with pytest.raises(LogParseError, match="v99999"):
        parse_kafka_initial_offsets((folder / "kafka-source-initial-offset-future-version.bin").read_bytes(), "x")
    offset = json.loads((folder / "kafka-source-offset-version-2.1.0.txt").read_text())
    assert offset == {"topic1": {"0": 456, "1": 789}, "topic2": {"0": 0}}

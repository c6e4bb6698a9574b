"""Parsers of Spark's metadata logs: byte-exact offsets, versions, and every kind of bad input."""
from __future__ import annotations

import pytest

from streamctl.formats.commits import parse_commit
from streamctl.formats.compactible import compactible_name, parse_compactible
from streamctl.formats.errors import LogParseError
from streamctl.formats.metadata import parse_query_metadata
from streamctl.formats.offsets import parse_offsets
from streamctl.formats.source_log import parse_kafka_initial_offsets
from streamctl.formats.state import parse_operator_metadata
from streamctl.inspectors.logs import classify_log_names

META = '{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{"spark.sql.shuffle.partitions":"4"}}'


def test_offsets_v1_keeps_each_source_string_byte_exact():
    kafka = '{"t":{"1":57,"0":23}}'
    python_ds = '{"t": {"0": 5, "1": 7}}'  # a Python data source's json.dumps spacing
    entry = parse_offsets(f"v1\n{META}\n{kafka}\n{python_ds}\n-".encode(), "offsets/3", 3)
    assert entry.version == 1
    assert [s.raw for s in entry.sources] == [kafka, python_ds, None]
    assert entry.conf["spark.sql.shuffle.partitions"] == "4"
    assert entry.watermark_ms == 0


def test_offsets_v1_empty_metadata_line_and_trailing_newline():
    entry = parse_offsets(b'v1\n\n{"logOffset":345}\n', "offsets/0", 0)
    assert entry.metadata == {}
    assert [s.raw for s in entry.sources] == ['{"logOffset":345}']


def test_offsets_v2_grammar_splits_at_first_colon_and_orders_by_source_id():
    text = f'v2\n{META}\n1:{{"a":{{"0":1}}}}\n0:-\n'
    entry = parse_offsets(text.encode(), "offsets/9", 9)
    assert entry.version == 2
    assert [(s.source_id, s.raw) for s in entry.sources] == [(0, None), (1, '{"a":{"0":1}}')]


def test_offsets_v2_named_sources():
    """Source evolution (PySpark 4.2+ `DataStreamReader.name`): the id is the name (observed 4.3.0:
    `orders:{"logOffset":0}`, `sources/orders/`); ordinals sort before names."""
    text = f'v2\n{META}\norders:{{"logOffset":0}}\nclicks_2:-\n0:{{"x":1}}\n'
    entry = parse_offsets(text.encode(), "offsets/4", 4)
    assert [s.source_id for s in entry.sources] == [0, "clicks_2", "orders"]


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "empty file"),
        (b"v99\n{}\n{}", "unsupported log version v99"),
        (b"x1\n{}", "bad version line"),
        (b"v0\n{}", "bad version line"),
        (b"v1", "truncated"),
        (b"v1\n{\"batchWatermarkMs\":0,", "metadata line is not valid JSON"),
        (b"v1\n{}\n{\"t\":{\"0\":1", "source 0 offset is not valid JSON"),
        (b"v1\n{}\n\xff\xfe\x00garbage", "not UTF-8"),
        (b"\x00\x01\x02\x03binary", "bad version line"),
        (b"v2\n{}\nnocolon", "expected '<sourceId>:<offset>'"),
        (b"v2\n{}\nbad name:{}", "expected '<sourceId>:<offset>'"),
    ],
)
def test_offsets_bad_input_is_one_line_error_naming_the_file(data, reason):
    with pytest.raises(LogParseError) as info:
        parse_offsets(data, "/chk/offsets/7", 7)
    message = str(info.value)
    assert message.startswith("/chk/offsets/7: ")
    assert reason in message
    assert "\n" not in message


def test_commit_v1_and_v2_with_state_unique_ids():
    c1 = parse_commit(b'v1\n{"nextBatchWatermarkMs":5}', "commits/1", 1)
    assert (c1.version, c1.next_batch_watermark_ms, c1.state_unique_ids) == (1, 5, None)
    assert parse_commit(b"v1", "commits/0", 0).next_batch_watermark_ms == 0  # `{}` assumed
    c2 = parse_commit(
        b'v2\n{"nextBatchWatermarkMs":0,"stateUniqueIds":{"0":[["a"],["b"]],"1":[["l1","l2","r1","r2"]]}}',
        "commits/4", 4)
    assert c2.state_unique_ids == {"0": (("a",), ("b",)), "1": (("l1", "l2", "r1", "r2"),)}


@pytest.mark.parametrize("data", [b"", b"v3\n{}", b"v1\n[1]", b'v1\n{"stateUniqueIds":{"0":[1]}}'])
def test_commit_bad_input(data):
    with pytest.raises(LogParseError):
        parse_commit(data, "commits/2", 2)


def test_query_metadata_compact_and_pretty():
    qid = "5f8a62a4-6c6e-4a1f-9d2b-0e6f3c1e7d11"
    assert parse_query_metadata(b'{"id":"%s"}' % qid.encode(), "metadata") == qid
    assert parse_query_metadata(b'{\n  "id": "%s"\n}\n' % qid.encode(), "metadata") == qid
    with pytest.raises(LogParseError):
        parse_query_metadata(b'{"ident":"abc"}', "metadata")


@pytest.mark.parametrize("qid", ["abc", "ed766059-91ab-4cc<wbnim-b34b904e351c", "5f8a62a4-6c6e-4a1f-9d2b", ""])
def test_query_metadata_id_that_is_no_uuid_is_refused(qid):
    """Spark's restart parses the id with UUID.fromString and fails on anything else."""
    with pytest.raises(LogParseError, match="UUID|no string"):
        parse_query_metadata(b'{"id":"%s"}' % qid.encode(), "metadata")


def test_log_listing_ignores_crc_and_temp_files():
    names = ["0", "1", "3", ".1.crc", ".3.crc", ".4.5c1e6f1a-1111-2222-3333-444455556666.tmp", "notes.txt"]
    listing = classify_log_names([(n, False) for n in names] + [("7", True)])
    assert listing.batch_ids == (0, 1, 3)
    assert listing.gaps() == [2]
    assert listing.temp_files == (".4.5c1e6f1a-1111-2222-3333-444455556666.tmp",)
    assert listing.stray_files == ("7", "notes.txt")


def test_kafka_initial_offsets_with_leading_byte_and_version():
    data = b'\x00v1\n{"topic":{"0":5,"1":0}}'
    parsed = parse_kafka_initial_offsets(data, "sources/0/0")
    assert (parsed.leading_byte, parsed.version, parsed.offsets) == (0, 1, {"topic": {"0": 5, "1": 0}})
    assert parsed.raw == '{"topic":{"0":5,"1":0}}'
    with pytest.raises(LogParseError, match="unsupported log version v99999"):
        parse_kafka_initial_offsets(b'\x00v99999\n{"t":{"0":1}}', "sources/0/0")


def test_compactible_names_and_entries():
    assert compactible_name("9.compact") == (9, True)
    assert compactible_name("10") == (10, False)
    assert compactible_name(".10.crc") is None
    batch = parse_compactible(b'v1\n{"path":"/a/b/0","action":"add"}\n{"path":"/a/b/1","action":"delete"}\n',
                              "_spark_metadata/7.compact", 7, True)
    assert [e["action"] for e in batch.entries] == ["add", "delete"]


def test_operator_metadata_v1_and_v2():
    v1 = parse_operator_metadata(
        b'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"symmetricHashJoin"},"stateStoreInfo":'
        b'[{"storeName":"left-keyToNumValues","numColsPrefixKey":0,"numPartitions":5}]}', "m")
    assert (v1.version, v1.operator_name, v1.stores) == (1, "symmetricHashJoin", (("left-keyToNumValues", 5),))
    v2 = parse_operator_metadata(
        b'v2\n{"operatorInfo":{"operatorId":0,"operatorName":"transformWithStateExec"},"stateStoreInfo":'
        b'[{"storeName":"default","numColsPrefixKey":0,"numPartitions":4,"stateSchemaFilePath":"x"}],'
        b'"operatorPropertiesJson":"{}"}', "m")
    assert v2.version == 2 and v2.stores == (("default", 4),)
    with pytest.raises(LogParseError):
        parse_operator_metadata(b"v3\n{}", "m")


def test_state_files_parses_a_folder_as_state_file_parses_each_name():
    """The bulk parse a trim plan uses (one regex over a store folder's names) says exactly what
    `state_file` says of each name: versions, unique ids, companions hidden and visible, and the
    names that are no state file (temp files, hidden files without a checksum suffix, others)."""
    from streamctl.formats.state import state_file, state_files

    names = ["1.delta", "2.snapshot", ".1.delta.crc", "1.delta.crc", ".2.snapshot.crc.crc", "3_ab-12.zip",
             ".3_ab-12.zip.crc", "4.changelog", ".5.delta", "..5.delta.crc", "5.delta.tmp", ".5.delta.abc.tmp",
             "temp-123", "6.delta.crcx", "7.delta.crc.tmp", "x.delta", "8_.delta", "9_a.b.delta", "10_a_b.zip",
             "_metadata", "SSTs", "11.DELTA", "012.delta", "13.zip.crc.crc.crc", ".crc", "14.delta\n15.delta"]
    want = [(n, state_file(n)) for n in names if state_file(n) is not None]
    assert state_files(names) == want
    assert state_files([n for n in names if "\n" not in n]) == [(n, f) for n, f in want if "\n" not in n]
    assert {n for n, _f in want} >= {"1.delta", ".1.delta.crc", "3_ab-12.zip", "10_a_b.zip", "13.zip.crc.crc.crc"}
    assert state_files([]) == []
    # the versions alone, above a bound (align's roll back): the same names, the same order
    from streamctl.formats.state import state_versions

    for names_now in (names, [n for n in names if "\n" not in n]):
        for above in (-1, 0, 2, 5, 9, 10, 12, 13):
            assert state_versions(names_now, above) == [(n, f.version) for n, f in state_files(names_now)
                                                        if f.version > above]
    assert state_versions(names, 5) == [("10_a_b.zip", 10), ("012.delta", 12), ("13.zip.crc.crc.crc", 13)]


def test_the_bounded_version_pattern_matches_exactly_the_greater_numbers():
    """`state_versions` above a bound lets the regex pick the versions (`_greater_than`): every
    digit run, leading zeros and all, is taken exactly when int() of it is above the bound."""
    import random
    import re

    from streamctl.formats.state import _greater_than, state_files, state_versions

    rng = random.Random(23)
    bounds = [0, 1, 9, 10, 11, 99, 100, 101, 449, 450, 499, 909, 990, 999, 1000, 12345] + [rng.randrange(10**7) for _ in range(40)]
    for n in bounds:
        pattern = re.compile(_greater_than(n) + r"\Z")
        runs = {str(v) for v in range(max(n - 120, 0), n + 120)} | {"0", "00", "0" + str(n), "00" + str(n + 1), str(n) + "0",
                                                                    str(n * 10 + 9), "9" * len(str(n)), "1" + "0" * len(str(n))}
        runs |= {str(rng.randrange(10**9)).zfill(rng.randrange(1, 11)) for _ in range(300)}
        for run in runs:
            assert bool(pattern.match(run)) == (int(run) > n), (n, run)
        names = [f"{r}.delta" for r in sorted(runs)] + [f".{r}.snapshot.crc" for r in sorted(runs)][:50] + [f"{n}_x.zip", "a.delta"]
        assert state_versions(names, n) == [(m, f.version) for m, f in state_files(names) if f.version > n], n


def test_operator_metadata_v2_schema_paths_rewritten_and_nothing_else():
    """`rewrite_schema_paths` changes each `stateSchemaFilePaths` entry its function moves and no
    other byte of Spark's compact JSON; an unmoved file comes back as it was, a path left alone is
    named, a v1 file has no schema paths to rewrite."""
    from streamctl.formats.state import is_operator_metadata_v2, rewrite_schema_paths

    old = "file:/old/ck/state/0/_stateSchema/default/0_4f1c"
    data = ('v2\n{"operatorInfo":{"operatorId":0,"operatorName":"transformWithStateInPySparkExec"},"stateStoreInfo":'
            f'[{{"storeName":"default","numColsPrefixKey":0,"numPartitions":4,"stateSchemaFilePaths":["{old}"]}}],'
            '"operatorPropertiesJson":"{\\"timeMode\\":\\"ProcessingTime\\",\\"stateVariables\\":[]}"}').encode()
    got, count, kept = rewrite_schema_paths(data, "m", lambda p: p.replace("/old/", "/new place/"))
    assert got == data.replace(b"/old/", b"/new place/") and (count, kept) == (1, [])
    assert rewrite_schema_paths(data, "m", lambda p: p) == (data, 0, [])
    assert rewrite_schema_paths(data, "m", lambda p: None) == (data, 0, [old])
    with pytest.raises(LogParseError):
        rewrite_schema_paths(b'v1\n{"operatorInfo":{},"stateStoreInfo":[]}', "m", lambda p: p)
    # Spark 4.0's shape: one `stateSchemaFilePath` per store, rewritten the same way and named when left
    one = data.replace(b'"stateSchemaFilePaths":["' + old.encode() + b'"]', b'"stateSchemaFilePath":"' + old.encode() + b'"')
    got, count, kept = rewrite_schema_paths(one, "m", lambda p: p.replace("/old/", "/new place/"))
    assert got == one.replace(b"/old/", b"/new place/") and (count, kept) == (1, [])
    assert rewrite_schema_paths(one, "m", lambda p: None) == (one, 0, [old])
    from streamctl.formats.state import parse_operator_metadata

    assert parse_operator_metadata(one, "m").schema_paths == ("_stateSchema/default/0_4f1c",)
    assert is_operator_metadata_v2("state/0/_metadata/v2/12")
    assert not any(map(is_operator_metadata_v2, ("state/0/_metadata/metadata", "state/0/_metadata/v2/.12.crc",
                                                 "state/0/0/_metadata/v2", "sources/0/_metadata/v2/1")))


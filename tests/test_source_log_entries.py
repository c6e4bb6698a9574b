"""A file source's log as a restart reads it (inspectors/sources.py `read_source`): every entry of
the files from the newest compaction on is judged, against its Hadoop sidecar where there is one,
and an entry whose path was changed is told by the input file it stood for. The restart oracle
proves each rule with real restarts (tests/test_restart_oracle.py); these pin the edges."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from streamctl.formats.checksum import hadoop_crc
from streamctl.formats.errors import LogParseError, StreamctlError
from streamctl.inspectors.sources import SourceInfo, read_source
from streamctl.inspectors.storage import Storage

T0 = 1_795_000_000_000  # ms


def _input(tmp_path: Path, name: str, ms: int) -> Path:
    f = tmp_path / "input" / name
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text('{"id": 1}\n')
    os.utime(f, ns=(ms * 1_000_000, ms * 1_000_000))
    return f


def _log(tmp_path: Path, batch: int, entries: list[dict], crc: bool = False) -> Path:
    folder = tmp_path / "checkpoint" / "sources" / "0"
    folder.mkdir(parents=True, exist_ok=True)
    data = ("v1\n" + "\n".join(json.dumps(e, separators=(",", ":")) for e in entries)).encode()
    (folder / str(batch)).write_bytes(data)
    if crc:
        (folder / f".{batch}.crc").write_bytes(hadoop_crc(data))
    return folder / str(batch)


def _entry(path: Path | str, ms: int, batch: int) -> dict:
    return {"path": f"file://{path}", "timestamp": ms, "batchId": batch}


def _read(tmp_path: Path) -> SourceInfo:
    return read_source(Storage.open(str(tmp_path / "checkpoint")), 0)


def test_a_whole_log_reads(tmp_path: Path) -> None:
    a, b = _input(tmp_path, "a.json", T0), _input(tmp_path, "b.json", T0 + 5)
    _log(tmp_path, 0, [_entry(a, T0, 0)], crc=True)
    _log(tmp_path, 1, [_entry(b, T0 + 5, 1)], crc=True)
    info = _read(tmp_path)
    assert info.kind == "file" and info.file_log_latest == 1


@pytest.mark.parametrize("field, value, says", [
    ("batchId", -7, "batchId -7 is below 0, and a restart's restore of the log asserts"),
    ("timestamp", 9223372036854775808, "out of the Long range"),
    ("timestamp", -7, "reads " + "{b}" + " again as a new file"),
    ("timestamp", "12", "timestamp 12 is not a Java long"),
    ("path", "", "no input file path"),
])
def test_an_entry_spark_cannot_take_is_named(tmp_path: Path, field: str, value: object, says: str) -> None:
    a, b = _input(tmp_path, "a.json", T0), _input(tmp_path, "b.json", T0 + 5)
    _log(tmp_path, 0, [_entry(a, T0, 0)])
    _log(tmp_path, 1, [{**_entry(b, T0 + 5, 1), field: value}])
    with pytest.raises(LogParseError) as exc:
        _read(tmp_path)
    assert says.format(b=b) in str(exc.value) and "sources/0/1" in str(exc.value), exc.value


def test_an_entry_of_another_batch_is_kept_for_the_replay_to_judge(tmp_path: Path) -> None:
    """A batch file's entry of another batch is no error of the log: a restart that replays
    nothing takes it as seen (observed 4.3.0, the restart exact); the replay of that batch
    skips its input file, which the inspection judges from the replayed range."""
    a, b = _input(tmp_path, "a.json", T0), _input(tmp_path, "b.json", T0 + 5)
    _log(tmp_path, 0, [_entry(a, T0, 0)])
    _log(tmp_path, 1, [_entry(b, T0 + 5, 0)])
    info = _read(tmp_path)
    assert [(f[0], f[2]) for f in info.file_log_foreign] == [(1, "entry 1: batchId 0 is not the file's batch 1")]


def test_an_old_entry_is_judged_by_its_file_modification_time(tmp_path: Path) -> None:
    """An entry more than maxFileAge (7 days) older than the newest is forgotten on restart:
    harmless while its file is as old (Spark's own logs of old input), read again once the file
    is newer (a changed entry, or a file changed after Spark read it). A file gone is not read."""
    week = 7 * 24 * 3600 * 1000
    a, b = _input(tmp_path, "a.json", T0 - 2 * week), _input(tmp_path, "b.json", T0)
    _log(tmp_path, 0, [_entry(a, T0 - 2 * week, 0)])
    _log(tmp_path, 1, [_entry(b, T0, 1)])
    assert _read(tmp_path).file_log_latest == 1
    os.utime(a, ns=(T0 * 1_000_000, T0 * 1_000_000))
    with pytest.raises(LogParseError, match=f"reads {a} again as a new file"):
        _read(tmp_path)
    a.unlink()
    assert _read(tmp_path).file_log_latest == 1


def test_an_entry_far_ahead_of_the_clock_skips_every_new_file(tmp_path: Path) -> None:
    """The restore takes the newest entry's timestamp as the latest file's and no file modified
    more than maxFileAge below it as new: an entry more than that ahead of the clock (in any
    file a restart reads, the compaction too) skips every file written until then. Less far
    ahead (a clock a little fast) skips nothing at the default maxFileAge."""
    import time

    day = 24 * 3600 * 1000
    now = int(time.time() * 1000)
    a, b = _input(tmp_path, "a.json", T0), _input(tmp_path, "b.json", T0 + 5)
    _log(tmp_path, 0, [_entry(a, now + 6 * day, 0)])
    _log(tmp_path, 1, [_entry(b, T0 + 5, 1)])
    assert _read(tmp_path).file_log_latest == 1
    _log(tmp_path, 0, [_entry(a, now + 8 * day, 0)])
    with pytest.raises(LogParseError, match="entry 1: timestamp .* ahead of this machine's clock") as exc:
        _read(tmp_path)
    assert "sources/0/0" in str(exc.value) and "new files are skipped" in str(exc.value), exc.value


def test_a_file_changed_behind_its_sidecar_is_judged_by_what_the_change_does(tmp_path: Path) -> None:
    """A log file that no longer matches its sidecar changed after Spark wrote it: an entry whose
    path now names nothing while its input file is still there is read again (named, even where
    other input files were cleaned up); once that file is gone too (archived), nothing is."""
    a, b = _input(tmp_path, "a.json", T0), _input(tmp_path, "b.json", T0 + 5)
    _log(tmp_path, 0, [_entry(a, T0, 0)], crc=True)
    f = _log(tmp_path, 1, [_entry(b, T0 + 5, 1)], crc=True)
    f.write_bytes(f.read_bytes().replace(b"b.json", b"c.json"))
    a.unlink()  # cleaned up: without the sidecar's word no entry would be judged
    with pytest.raises(LogParseError) as exc:
        _read(tmp_path)
    assert str(b) in str(exc.value) and "again" in str(exc.value), exc.value
    b.unlink()
    assert _read(tmp_path).kind == "file"


def test_an_entry_renamed_away_from_its_input_file_is_named(tmp_path: Path) -> None:
    a, b = _input(tmp_path, "a.json", T0), _input(tmp_path, "b.json", T0 + 5)
    _log(tmp_path, 0, [_entry(a, T0, 0)])
    _log(tmp_path, 1, [_entry(tmp_path / "input" / "b?6.json", T0 + 5, 1)])
    with pytest.raises(LogParseError) as exc:
        _read(tmp_path)
    assert str(b) in str(exc.value) and "again" in str(exc.value), exc.value


def test_input_files_cleaned_up_leave_the_log_unjudged(tmp_path: Path) -> None:
    """cleanSource or a retention job removes the files of committed batches: a new file that
    shares a millisecond with a removed one is no evidence of a changed entry."""
    a, b = _input(tmp_path, "a.json", T0), _input(tmp_path, "b.json", T0 + 5)
    _input(tmp_path, "new.json", T0 + 5)  # arrived since, same ms as b
    _log(tmp_path, 0, [_entry(a, T0, 0)])
    _log(tmp_path, 1, [_entry(b, T0 + 5, 1)])
    a.unlink()
    b.unlink()
    assert _read(tmp_path).kind == "file"


def test_a_compacted_entry_renamed_away_from_its_input_file_is_named_with_or_without_its_sidecar(
        tmp_path: Path) -> None:
    """A compaction's entries are judged as a batch file's: a restart reads them all (observed
    4.3.0: a compaction's entry changed, its sidecar dropped, the input file's rows written twice).
    The sidecar's word decides only where more entries name nothing than a change makes."""
    a, b = _input(tmp_path, "a.json", T0), _input(tmp_path, "b.json", T0 + 5)
    c = _input(tmp_path, "c.json", T0 + 9)
    folder = tmp_path / "checkpoint" / "sources" / "0"
    folder.mkdir(parents=True)
    body = "v1\n" + "\n".join(json.dumps(e, separators=(",", ":")) for e in [_entry(a, T0, 0), _entry(b, T0 + 5, 1)])
    (folder / "1.compact").write_text(body)
    (folder / ".1.compact.crc").write_bytes(hadoop_crc(body.encode()))
    _log(tmp_path, 2, [_entry(c, T0 + 9, 2)])
    assert _read(tmp_path).file_log_latest == 2
    (folder / "1.compact").write_text(body.replace("b.json", "b;x.json"))
    for sidecar in (True, False):
        if not sidecar:
            (folder / ".1.compact.crc").unlink()
        with pytest.raises(LogParseError) as exc:
            _read(tmp_path)
        assert "sources/0/1.compact" in str(exc.value) and str(b) in str(exc.value), exc.value


def test_many_compacted_entries_naming_nothing_are_a_clean_up_unless_the_sidecar_speaks(tmp_path: Path) -> None:
    """More than RENAMED_JUDGED entries naming nothing, each with a twin: without a sidecar that
    says the compaction changed, a clean-up (no listing of the input folders is spent on it);
    with one, the change is named."""
    from streamctl.inspectors.sources import RENAMED_JUDGED

    n = RENAMED_JUDGED + 1
    files = [_input(tmp_path, f"f{k}.json", T0 + k) for k in range(n + 1)]
    folder = tmp_path / "checkpoint" / "sources" / "0"
    folder.mkdir(parents=True)
    good = "v1\n" + "\n".join(json.dumps(_entry(f, T0 + k, k), separators=(",", ":")) for k, f in enumerate(files[:n]))
    (folder / f"{n - 1}.compact").write_text(good.replace("/input/f", "/input/gone-f"))
    _log(tmp_path, n, [_entry(files[n], T0 + n, n)])
    assert _read(tmp_path).file_log_latest == n
    (folder / f".{n - 1}.compact.crc").write_bytes(hadoop_crc(good.encode()))
    with pytest.raises(LogParseError):
        _read(tmp_path)


def test_a_compaction_takes_its_entries_whatever_their_batch_id(tmp_path: Path) -> None:
    a, b = _input(tmp_path, "a.json", T0), _input(tmp_path, "b.json", T0 + 5)
    folder = tmp_path / "checkpoint" / "sources" / "0"
    folder.mkdir(parents=True)
    (folder / "1.compact").write_text("v1\n" + json.dumps({**_entry(a, T0, 0), "batchId": -7}))
    _log(tmp_path, 2, [_entry(b, T0 + 5, 2)])
    assert _read(tmp_path).file_log_latest == 2


def test_the_newest_batch_outside_the_folder_of_every_other_entry(tmp_path: Path) -> None:
    a, b = _input(tmp_path, "a.json", T0), _input(tmp_path, "b.json", T0 + 5)
    _log(tmp_path, 0, [_entry(a, T0, 0)])
    _log(tmp_path, 1, [_entry(b, T0 + 5, 1)])
    assert _read(tmp_path).file_log_outside == ()
    _log(tmp_path, 2, [_entry(tmp_path / "inpu?x" / "c.json", T0 + 9, 2)])
    info = _read(tmp_path)
    assert info.file_log_base == f"file://{tmp_path}/input" and len(info.file_log_outside) == 1, info


def test_a_folder_below_the_newest_compaction_is_never_read(tmp_path: Path) -> None:
    a, b = _input(tmp_path, "a.json", T0), _input(tmp_path, "b.json", T0 + 5)
    folder = tmp_path / "checkpoint" / "sources" / "0"
    (folder / "0").mkdir(parents=True)  # where batch 0's file was, below the compaction
    (folder / "1.compact").write_text("v1\n" + json.dumps(_entry(a, T0, 0)))
    _log(tmp_path, 2, [_entry(b, T0 + 5, 2)])
    assert _read(tmp_path).file_log_latest == 2
    (folder / "3").mkdir()
    with pytest.raises(StreamctlError, match="is a folder"):
        _read(tmp_path)


def test_a_logged_path_is_split_as_urlparse_splits_it() -> None:
    """The hand split of plain `file:` paths (a compaction's entries are many) gives what
    urlparse and unquote give, for every spelling: one slash or three, an authority, escapes,
    queries, fragments, whitespace."""
    import random
    from urllib.parse import unquote, urlparse

    from streamctl.inspectors.sources import _split

    rnd = random.Random(5)
    alphabet = "ab/:%?#; \t\n.-_~é2F"
    cases = ["file:///tmp/a b.json", "file:/tmp/x.json", "file://host/tmp/x", "file:////x", "/tmp/x", "s3a://b/k"]
    cases += ["file:" + "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 14))) for _ in range(20000)]
    for uri in cases:
        parsed = urlparse(uri)
        assert _split(uri) == (parsed.scheme, parsed.netloc, unquote(parsed.path)), uri


def test_a_log_line_is_read_by_the_scanner_as_the_decoder_reads_it() -> None:
    """The scanner's direct read of a log line (a compaction's entries are many) gives the
    decoder's object, and where the decoder refuses, the same error: whitespace JSON does not
    pass over, trailing bytes, numbers out of range, nesting too deep, not an object."""
    import random

    from streamctl.formats.reader import json_object, json_object_line

    rnd = random.Random(11)
    pieces = ['{"path":"file:///in/a.json","timestamp":1,"batchId":0}', "{", "}", '"', ":", ",", "1", "-", "e9",
              "9223372036854775808", "NaN", "[", "]", " ", "\t", "\x0b", "\u00a0", "\r", "x", "true", '{"a":' * 3]
    cases = ["", " ", "{}", " {} ", "{}\x0b", "{} {}", "[]", "1", '{"a":' * 5000 + "1" + "}" * 5000,
             '{"a":9223372036854775807}', '{"a":9223372036854775808}', '{"a":1e400}', '{"a":NaN}']
    cases += ["".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 6))) for _ in range(20000)]
    for line in cases:
        try:
            want: object = json_object(line, "log", "line 3")
        except LogParseError as exc:
            want = str(exc)
        try:
            got: object = json_object_line(line, "log", 3)
        except LogParseError as exc:
            got = str(exc)
        assert got == want, repr(line)

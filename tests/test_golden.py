"""Golden JSON of every document kind streamctl prints (README: JSON contract).

The inputs are built here in Spark's on-disk layout (deterministic: fixed query id, times and
file names), so every byte of the output is stable; the few values that are not (the temporary
folder, operation ids, wall-clock times, durations, sizes of files that hold temporary paths)
are replaced by placeholders before the
comparison. The real-Spark behaviour behind these documents is tested elsewhere (test_align_*,
test_trim, test_drop_sink, test_kafka_*); these files pin the contract: a changed key or value
fails here, and is reviewed, then accepted with `STREAMCTL_UPDATE_GOLDEN=1 ./dev test -k golden`
(tests/helpers/golden.py: never where CI is set).

The Kafka documents come from the real broker of tests/helpers/kafka_fixtures.py (topics named here, one
record per produce request), since `inspect kafka`, `retention-floor` and `commit-offsets` ask it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from helpers.golden import UPDATE_ENV, check_golden_text
from helpers.paths import GOLDEN

_OP_ID = re.compile(r"\b((?:align|trim|copy|drop-sink|kafka-commit-offsets|commit-offsets)(?:-fleet)?)-\d{8}T\d{6}Z-[0-9a-f]{4}\b")
_VOLATILE_KEYS = {"elapsed_s", "duration_s", "took_s", "started_ms", "finished_ms", "created_ms", "at_ms",
                  "now_ms", "created", "requested_at_ms", "stopped_at_ms", "pid", "host", "age_s", "newest_write_age_s", "waited_s"}
# sizes of sink-log files, which hold the absolute (temporary) paths of the data files
_PATH_DEPENDENT_KEYS = {"bytes"}
_AGO = re.compile(r"\b\d+(\.\d+)? s ago\b")


def _scrub(value: Any, tmp: str) -> Any:
    if isinstance(value, dict):
        return {k: ("<volatile>" if k in _VOLATILE_KEYS and v is not None else
                    "<bytes>" if k in _PATH_DEPENDENT_KEYS and isinstance(v, int) else _scrub(v, tmp))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, tmp) for v in value]
    if isinstance(value, str):
        return _AGO.sub("<n> s ago", _OP_ID.sub(r"\1-<op_id>", value.replace(tmp, "<tmp>")))
    return value


def check_golden(name: str, stdout: str, tmp: Path) -> dict[str, Any]:
    """Compare one printed JSON document with tests/golden/NAME.json (after scrubbing)."""
    doc = json.loads(stdout)
    got = json.dumps(_scrub(doc, str(tmp)), indent=2, sort_keys=True) + "\n"
    check_golden_text(GOLDEN / f"{name}.json", got, name)
    return doc


def test_updating_golden_files_is_opt_in_and_refused_in_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The expected file is written from the actual output only with STREAMCTL_UPDATE_GOLDEN=1,
    and that fails where CI is set (a CI run always compares)."""
    path = tmp_path / "golden" / "Doc.json"
    monkeypatch.delenv("CI", raising=False)
    for value in (None, "", "0", "yes"):  # not asked: a missing file fails, nothing is written
        if value is None:
            monkeypatch.delenv(UPDATE_ENV, raising=False)
        else:
            monkeypatch.setenv(UPDATE_ENV, value)
        with pytest.raises(AssertionError, match="missing"):
            check_golden_text(path, "{}\n", "Doc")
        assert not path.exists()
    path.parent.mkdir()
    path.write_text('{"a": 1}\n')
    with pytest.raises(AssertionError, match="JSON contract of Doc changed"):
        check_golden_text(path, '{"a": 2}\n', "Doc")
    monkeypatch.setenv(UPDATE_ENV, "1")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="refused where CI is set"):
        check_golden_text(path, '{"a": 2}\n', "Doc")
    assert path.read_text() == '{"a": 1}\n'
    monkeypatch.delenv("CI")
    check_golden_text(path, '{"a": 2}\n', "Doc")  # asked, outside CI: rewritten
    assert path.read_text() == '{"a": 2}\n'


def _scene(layouts: Any, tmp: Path) -> dict[str, Path]:
    """A checkpoint two batches behind its file sink (align rolls the checkpoint forward), a long
    aligned one with a compacted sink log (trim has work), and a coordinated sink."""
    checkpoint, coordinated, file_sink = layouts.checkpoint, layouts.coordinated, layouts.file_sink
    return {
        "chk": checkpoint(tmp / "chk", 5, 3), "out": file_sink(tmp / "out", 5),
        "chk2": checkpoint(tmp / "chk2", 24, 24), "out2": file_sink(tmp / "out2", 24, compact_every=10),
        "chk3": checkpoint(tmp / "chk3", 4, 4), "out3": coordinated(tmp / "out3", 4),
    }


def test_golden_inspections(cli, layouts: Any, tmp_path: Path) -> None:
    s = _scene(layouts, tmp_path)
    for name, args in [
        ("EpochReport__file_sink_ahead", ("inspect", "epochs", str(s["chk"]), "--sink", str(s["out"]))),
        ("SinkReport__compacted_file_sink", ("inspect", "sink", str(s["out2"]))),
        ("SinkReport__coordinated", ("inspect", "sink", str(s["out3"]))),
        ("WriterReport__coordinated", ("inspect", "writers", str(s["chk3"]), "--sink", str(s["out3"]))),
        ("EpochReport__reclaimable", ("inspect", "epochs", str(s["chk2"]), "--sink", str(s["out2"]),
                                      "--reclaimable", "--keep-epochs", "3")),
    ]:
        r = cli(*args, "--json")
        assert r.code in (0, 1), (name, r)
        check_golden(name, r.stdout, tmp_path)


@pytest.mark.parametrize("command, args", [
    ("align", ("chk", "out")),
    ("trim", ("chk2", "out2", "--keep-epochs", "3")),
])
def test_golden_plan_result_undo(cli, layouts: Any, tmp_path: Path, command: str, args: tuple[str, ...]) -> None:
    s = _scene(layouts, tmp_path)
    base = (command, str(s[args[0]]), "--sink", str(s[args[1]]), *args[2:], "--json")
    kind = command.title()
    r = cli(*base)
    assert r.code == 0, r
    check_golden(f"{kind}Plan", r.stdout, tmp_path)
    r = cli(*base, "--execute", "--backup-dir", str(tmp_path / "bk"))
    assert r.code == 0, r
    check_golden(f"{kind}Result", r.stdout, tmp_path)
    r = cli(command, "--undo", str(tmp_path / "bk"), "--json")
    assert r.code == 0, r
    check_golden(f"{kind}Undo", r.stdout, tmp_path)


def test_golden_savepoint_documents(cli, layouts: Any, tmp_path: Path) -> None:
    s = _scene(layouts, tmp_path)
    r = cli("savepoint", "create", str(s["chk2"]), "before-deploy", "--sink", str(s["out2"]), "--epoch", "20", "--json")
    assert r.code == 0, r
    check_golden("Savepoint", r.stdout, tmp_path)
    r = cli("savepoint", "list", str(s["chk2"]), "--json")
    assert r.code == 0, r
    check_golden("SavepointList", r.stdout, tmp_path)


def test_golden_drop_sink_plan_result_and_handoff(cli, layouts: Any, tmp_path: Path) -> None:
    s = _scene(layouts, tmp_path)
    base = ("drop-sink", str(s["out3"]), "--checkpoint", str(s["chk3"]), "--assume-stopped", "--json")
    r = cli(*base)
    assert r.code == 0, r
    check_golden("DropSinkPlan", r.stdout, tmp_path)
    r = cli(*base, "--execute", "--archive", str(tmp_path / "archive"))
    assert r.code == 0, r
    doc = check_golden("DropSinkResult", r.stdout, tmp_path)
    check_golden("Handoff", Path(doc["handoff"]).read_text(), tmp_path)


def test_golden_refusals(cli, layouts: Any, tmp_path: Path) -> None:
    """A refused plan prints its own document (exit 4), not a plan."""
    s = _scene(layouts, tmp_path)
    r = cli("align", str(s["chk"]), "--sink", str(s["out"]), "--json", "--execute", "--quiet-period", "3600",
            "--backup-dir", str(tmp_path / "bk"))
    assert r.code == 4 and not (tmp_path / "bk").exists(), r  # written seconds ago: maybe live
    check_golden("AlignRefused__live", r.stdout, tmp_path)
    r = cli("trim", str(s["chk"]), "--sink", str(s["out"]), "--json")
    assert r.code == 4, r
    check_golden("TrimRefused__misaligned", r.stdout, tmp_path)


def test_golden_stop_without_an_agent(cli, layouts: Any, tmp_path: Path) -> None:
    s = _scene(layouts, tmp_path)
    r = cli("stop", str(s["chk3"]), "--no-wait", "--json")
    check_golden("StopResult__no_lease", r.stdout, tmp_path)


def test_golden_starting_offsets(cli, layouts: Any, tmp_path: Path) -> None:
    chk = layouts.checkpoint(tmp_path / "chk", 2, 2)
    kafka = json.dumps({"orders": {"0": 7, "1": 9}})
    for b in range(3):
        (chk / "offsets" / str(b)).write_text(
            f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{{}}}}\n{kafka}')
    r = cli("kafka", "starting-offsets", str(chk), "--json")
    assert r.code == 0, r
    check_golden("StartingOffsets", r.stdout, tmp_path)


def test_golden_kafka_documents(cli, layouts: Any, tmp_path: Path, kafka_broker: Any, kafka_topic: Any) -> None:
    """KafkaReport, KafkaRetentionFloor and KafkaCommitOffsets (plan, then --execute) against the
    real broker: a 2-partition topic with 3 + 2 records, a checkpoint whose committed batch 1 read
    all of them (batch 0 read one record of each partition)."""
    topic = kafka_topic(2)
    kafka_broker.produce(topic, ["a", "b", "c"], partition=0)
    kafka_broker.produce(topic, ["d", "e"], partition=1)
    chk = layouts.checkpoint(tmp_path / "chk", 1, 1, file_source=False)
    for b, ends in enumerate(({"0": 1, "1": 1}, {"0": 3, "1": 2})):
        (chk / "offsets" / str(b)).write_text(
            f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{{}}}}\n{json.dumps({topic: ends})}')
    (chk / "sources" / "0").mkdir(parents=True)  # the Kafka source's initial offsets: a 0 byte, then v1
    (chk / "sources" / "0" / "0").write_bytes(b"\0v1\n" + json.dumps({topic: {"0": 0, "1": 0}}).encode())
    boot = ("--bootstrap", kafka_broker.bootstrap)

    def golden(name: str, *args: str, broker: bool = True) -> dict[str, Any]:
        r = cli(*args, *(boot if broker else ()), "--json")
        assert r.code == 0, (name, r)
        return check_golden(name, r.stdout.replace(topic, "<topic>").replace(kafka_broker.bootstrap, "<bootstrap>"),
                            tmp_path)

    golden("KafkaReport", "inspect", "kafka", str(chk))
    golden("KafkaRetentionFloor", "kafka", "retention-floor", str(chk), broker=False)
    group = f"golden-{topic}"
    plan = golden("KafkaCommitOffsets__plan", "kafka", "commit-offsets", str(chk), "--group", group)
    assert plan["changes"] == 2 and not plan["executed"]
    done = golden("KafkaCommitOffsets__execute", "kafka", "commit-offsets", str(chk), "--group", group, "--execute")
    assert done["executed"] and done["verified"]


def test_golden_copy_plan_result_undo(cli, layouts: Any, tmp_path: Path) -> None:
    """copy of a checkpoint and its file sink to a new place: the plan, the result (both places
    inspected) and its undo."""
    s = _scene(layouts, tmp_path)
    new = tmp_path / "new"
    base = ("copy", str(s["chk2"]), str(new / "chk"), "--sink", str(s["out2"]), "--sink-dest", str(new / "out"), "--json")
    r = cli(*base)
    assert r.code == 0, r
    check_golden("CopyPlan", r.stdout, tmp_path)
    r = cli(*base, "--execute")
    assert r.code == 0, r
    doc = check_golden("CopyResult", r.stdout, tmp_path)
    r = cli("copy", "--undo", doc["backup"], "--json")
    assert r.code == 0, r
    check_golden("CopyUndo", r.stdout, tmp_path)


def test_golden_fleet_plan_result_undo(cli, layouts: Any, tmp_path: Path) -> None:
    """trim over a fleet: one checkpoint with work, one refused (misaligned); align's plan of the
    same fleet (nothing to do, a roll forward)."""
    chk, out = tmp_path / "chk", tmp_path / "out"
    layouts.checkpoint(chk / "a", 24, 24)
    layouts.file_sink(out / "a", 24, compact_every=10)
    layouts.checkpoint(chk / "b", 5, 3)
    layouts.file_sink(out / "b", 5)
    base = ("trim", str(chk / "a"), str(chk / "b"), "--sink-pattern", "../../out/{name}", "--keep-epochs", "3", "--json")
    r = cli(*base)
    assert r.code == 4, r
    check_golden("TrimFleetPlan", r.stdout, tmp_path)
    r = cli(*base, "--execute", "--run-dir", str(tmp_path / "runs"))
    assert r.code == 4, r
    doc = check_golden("TrimFleetResult", r.stdout, tmp_path)
    r = cli("trim", "--undo-run", doc["run_record"], "--json")
    assert r.code == 0, r
    check_golden("TrimFleetUndo", r.stdout, tmp_path)
    r = cli("align", str(chk / "a"), str(chk / "b"), "--sink-pattern", "../../out/{name}", "--json")
    assert r.code == 0, r
    check_golden("AlignFleetPlan", r.stdout, tmp_path)

"""The guarantees of every mutation under hostile input, one test per class on a real
PySpark checkpoint (tests/helpers/align_pipeline.py, kind "file", the "sink ahead" fault of
test_align_ops: align rolls the sink back to batch 3), restored IN PLACE before each test (the
file sink's log holds absolute paths). Each test asserts the exact outcome: exit code, JSON, and
every byte under the pipeline folder and outside it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import align_pipeline
from helpers.paths import SPARK35, copy_spark35
from helpers.trees import tree  # relative path -> sha256 (symlinks as their target)

INPUT_FILES = 5


ap = align_pipeline


class Lab(ap.Lab):
    """The pipeline, its snapshot `snap` (saved as "start") and a folder outside every root that
    no command may touch, all put back before each test."""

    def __init__(self, p: Any, snaps: Path, outside: Path) -> None:
        super().__init__(p, snaps)
        self.outside = outside

    def restore(self) -> None:
        self.put_back("start")
        if self.outside.exists():
            shutil.rmtree(self.outside)
        self.outside.mkdir()
        (self.outside / "precious.json").write_bytes(b'{"keep": "me"}\n')

    def add_log_entry(self, batch: int, path: str, is_dir: bool) -> None:
        """Append an entry to the sink log file of `batch` (v1 header, one JSON entry a line)."""
        f = self.out / "_spark_metadata" / str(batch)
        entry = {"path": path, "size": 0, "isDir": is_dir, "modificationTime": 0, "blockReplication": 1,
                 "blockSize": 0, "action": "add"}
        f.write_bytes(f.read_bytes().rstrip(b"\n") + b"\n" + json.dumps(entry).encode())
        crc = f.parent / f".{batch}.crc"
        if crc.exists():
            crc.unlink()

    def everything(self) -> dict[str, str]:
        return {**{f"pipe/{k}": v for k, v in tree(self.p.base).items()},
                **{f"outside/{k}": v for k, v in tree(self.outside).items()}}


@pytest.fixture(scope="module")
def lab(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    root = tmp_path_factory.mktemp("hostile")
    p = ap.build(root / "pipe", "file", spark, INPUT_FILES)
    for rel in ("offsets/4", "offsets/.4.crc", "commits/4", "commits/.4.crc", "commits/3", "commits/.3.crc"):
        (p.checkpoint / rel).unlink()
    lab = Lab(p, root / "snaps", root / "outside")
    lab.save("start")
    return lab


@pytest.fixture
def fresh(lab: Lab) -> Lab:
    lab.restore()
    return lab


def no_lock(lab: Lab) -> None:
    assert not (lab.ckpt / "_streamctl" / "lock.json").exists()


def refused_json(r: Any) -> dict[str, Any]:
    assert r.code == 4, r
    doc = json.loads(r.stdout)
    assert doc["kind"].endswith("Refusal"), doc
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r
    return doc


# ------------------------------------------------------------------ 1. backup-path collisions


@pytest.mark.spark
def test_a_log_entry_naming_the_sink_log_folder_is_refused_and_nothing_moves(fresh: Lab, cli: Callable) -> None:
    fresh.add_log_entry(4, str(fresh.out / "_spark_metadata"), is_dir=True)
    before = fresh.everything()
    doc = refused_json(cli(*fresh.align_args("--execute", "--json")))
    assert "nest" in doc["reason"] and "sink:_spark_metadata" in doc["reason"], doc
    assert fresh.everything() == before
    no_lock(fresh)


# ------------------------------------------------------------------ 2. symlink escapes


@pytest.mark.spark
def test_a_log_entry_through_a_symlink_out_of_the_sink_is_refused(fresh: Lab, cli: Callable) -> None:
    os.symlink(fresh.outside, fresh.out / "escape")
    fresh.add_log_entry(4, str(fresh.out / "escape" / "precious.json"), is_dir=False)
    before = fresh.everything()
    doc = refused_json(cli(*fresh.align_args("--execute", "--json")))
    assert "outside the named roots" in doc["reason"] and "precious.json" in doc["reason"], doc
    assert fresh.everything() == before
    assert (fresh.outside / "precious.json").read_bytes() == b'{"keep": "me"}\n'
    no_lock(fresh)


# ------------------------------------------------------------------ 3. named backup folder not empty


@pytest.mark.spark
def test_a_backup_dir_holding_files_is_refused_and_kept(fresh: Lab, cli: Callable, tmp_path: Path) -> None:
    bdir = tmp_path / "bk"
    bdir.mkdir()
    (bdir / "files").mkdir()
    (bdir / "files" / "mine.txt").write_bytes(b"mine")
    before = fresh.everything()
    doc = refused_json(cli(*fresh.align_args("--execute", "--json", "--backup-dir", str(bdir))))
    assert "is not empty (it holds files" in doc["reason"], doc
    assert fresh.everything() == before
    assert tree(bdir) == {"files/mine.txt": hashlib.sha256(b"mine").hexdigest()}
    no_lock(fresh)
    # an empty folder is fine
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cli(*fresh.align_args("--execute", "--json", "--backup-dir", str(empty)))
    assert r.code == 0 and json.loads(r.stdout)["verified"] is True, r


@pytest.mark.spark
def test_drop_sink_purge_never_deletes_a_named_archive_s_files(fresh: Lab, cli: Callable, tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    arch.mkdir()
    (arch / "handoff.json").write_bytes(b"theirs")
    before = fresh.everything()
    r = cli("drop-sink", str(fresh.out), "--checkpoint", str(fresh.ckpt), "--assume-stopped", "--execute",
            "--purge", "--discard-in-flight", "--archive", str(arch), "--json")
    doc = refused_json(r)
    assert "--archive" in doc["reason"] and "is not empty (it holds handoff.json)" in doc["reason"], doc
    assert fresh.everything() == before
    assert (arch / "handoff.json").read_bytes() == b"theirs"
    no_lock(fresh)


# ------------------------------------------------------------------ 4. undo checks the backup first


@pytest.mark.spark
@pytest.mark.parametrize("damage", ["edit", "remove"])
def test_undo_refuses_a_backup_that_differs_from_its_manifest(fresh: Lab, cli: Callable, damage: str) -> None:
    r = cli(*fresh.align_args("--execute", "--json"))
    assert r.code == 0, r
    backup = Path(json.loads(r.stdout)["backup"])
    manifest = json.loads((backup / "manifest.json").read_text())
    moved = [m for m in manifest["files"] if m["action"] == "moved"]
    victim = backup / moved[0]["backup"]
    if damage == "edit":
        victim.write_bytes(victim.read_bytes() + b"x")
    else:
        victim.unlink()
    before = fresh.everything()
    doc = refused_json(cli("align", "--undo", str(backup), "--json"))
    assert "does not match its manifest" in doc["reason"] and moved[0]["backup"] in doc["reason"], doc
    assert fresh.everything() == before
    no_lock(fresh)


# ------------------------------------------------------------------ 6. no lock leaks


@pytest.mark.spark
@pytest.mark.parametrize("bad", ["file", "scheme", "under-a-file"])
def test_an_early_failure_leaves_no_lock(fresh: Lab, cli: Callable, tmp_path: Path, bad: str) -> None:
    if bad == "file":
        target = tmp_path / "a-file"
        target.write_bytes(b"x")
    elif bad == "scheme":
        target = Path("bogus://bucket/backups")  # type: ignore[assignment]
    else:
        (tmp_path / "a-file").write_bytes(b"x")
        target = tmp_path / "a-file" / "backup"
    before = fresh.everything()
    r = cli(*fresh.align_args("--execute", "--json", "--backup-dir", str(target).replace("bogus:/", "bogus://")))
    refused_json(r)
    assert fresh.everything() == before
    no_lock(fresh)
    r = cli(*fresh.align_args("--execute", "--json"))  # the next run needs no --break-lock
    assert r.code == 0, r


# ------------------------------------------------------------------ 5. cost follows the files that exist

FIXTURE = SPARK35 / "agg_hdfs" / "checkpoint"  # written by PySpark 3.5


def _finding(doc: dict[str, Any], code: str) -> dict[str, Any]:
    every = doc["findings"] + [f for q in doc["queries"] for f in q["findings"]]
    found = [f for f in every if f["code"] == code and any(k.endswith("_count") for k in f)]
    assert found, [f["code"] for f in every]
    return found[0]


@pytest.mark.parametrize("log", ["offsets", "commits"])
def test_a_huge_batch_id_costs_the_files_that_exist(cli: Callable, tmp_path: Path, log: str) -> None:
    import time

    ck = tmp_path / "checkpoint"
    copy_spark35(FIXTURE, ck)
    shutil.copy(ck / log / "1", ck / log / "9223372036854775807")
    t0 = time.monotonic()
    r = cli("inspect", "epochs", str(ck), "--json")
    assert time.monotonic() - t0 < 20, r
    assert r.code in (1, 3), r
    gap = _finding(json.loads(r.stdout), "LOG_GAP")
    assert len(gap["missing"]) == 1000 and gap["missing"][0] == 4, gap
    assert gap["missing_count"] == 9223372036854775807 - 4, gap
    assert "4..9223372036854775806" in gap["message"], gap


def test_absurd_num_partitions_is_bounded(cli: Callable, tmp_path: Path) -> None:
    import time

    ck = tmp_path / "checkpoint"
    copy_spark35(FIXTURE, ck)
    for f in (ck / "offsets").iterdir():
        if f.name.isdigit():
            f.write_bytes(f.read_bytes().replace(b'"spark.sql.shuffle.partitions":"2"',
                                                 b'"spark.sql.shuffle.partitions":"100000000000"'))
    t0 = time.monotonic()
    r = cli("inspect", "epochs", str(ck), "--json")
    assert time.monotonic() - t0 < 20, r
    doc = json.loads(r.stdout)
    miss = _finding(doc, "STATE_PARTITION_MISSING")
    assert miss["missing_count"] == 100000000000 - 2, miss
    assert len(miss["missing_partitions"]) == 1000, miss
    assert "2..99999999999" in miss["message"], miss


@pytest.mark.spark
def test_a_sink_ten_million_epochs_ahead_is_a_range(fresh: Lab, cli: Callable) -> None:
    import time

    meta = fresh.out / "_spark_metadata"
    shutil.copy(meta / "4", meta / "10000004")
    t0 = time.monotonic()
    r = cli("inspect", "epochs", str(fresh.ckpt), "--sink", str(fresh.out), "--json")
    assert time.monotonic() - t0 < 20, r
    ahead = _finding(json.loads(r.stdout), "SINK_AHEAD")
    d = ahead
    assert d["skipped_range"] == [3, 10000004] and d["skipped_count"] == 10000002, d
    assert len(d["skipped"]) == 1000 and d["skipped"][:2] == [3, 4], d
    assert len(r.stdout) < 200_000


# ------------------------------------------------------------------ 7. exit codes and errors


def error_json(r: Any, code: int) -> dict[str, Any]:
    """A failed --json run: exactly one JSON document (an Error), one line on stderr."""
    assert r.code == code, r
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r
    doc = json.loads(r.stdout)
    assert doc["kind"] == "Error" and doc["code"] == code and r.stderr == f"streamctl: {doc['message']}\n", doc
    return doc


@pytest.mark.spark
def test_a_folder_where_a_sink_log_file_is_read_is_unreadable_for_every_command(fresh: Lab, cli: Callable) -> None:
    meta = fresh.out / "_spark_metadata"
    newest = max(int(n) for n in os.listdir(meta) if n.isdigit())
    (meta / str(newest)).unlink()  # the newest batch file: every reader of the sink opens it
    (meta / str(newest)).mkdir()
    path = str(meta / str(newest))
    before = fresh.everything()
    r = cli("inspect", "epochs", str(fresh.ckpt), "--sink", str(fresh.out), "--json")
    assert r.code == 3, r
    errors = [f for q in r.json()["queries"] for f in q["findings"] if f["severity"] == "error"]
    assert [(f["code"], f["path"]) for f in errors] == [("UNREADABLE", path)], errors
    assert errors[0]["message"] == f"{path}: is a folder, not a regular file"
    r = cli("inspect", "sink", str(fresh.out), "--json")
    assert r.code == 3 and [f["path"] for f in r.json()["findings"]] == [path], r
    doc = error_json(cli("trim", str(fresh.ckpt), "--sink", str(fresh.out), "--json"), 3)
    assert doc["message"] == f"{path}: is a folder, not a regular file", doc
    # align takes it as a torn batch file: moved aside, its batch rolled back with it
    plan = cli(*fresh.align_args("--json")).json()["plan"]
    moved = [s["path"] for s in plan["steps"] if s["action"] == "move" and s["root"] == "sink"]
    assert f"_spark_metadata/{newest}" in moved and plan["after"]["sink_epoch"] < newest, plan
    assert fresh.everything() == before
    no_lock(fresh)


@pytest.mark.spark
def test_a_folder_where_an_older_sink_log_file_was_is_read_by_nothing_but_a_roll_back_below_it(
        fresh: Lab, cli: Callable) -> None:
    # below the newest compaction: no reader of the sink and no restart opens it (Spark lists it as
    # that batch; the oracle's window_nodata sink-middle-folder restarted exact)
    meta = fresh.out / "_spark_metadata"
    compacts = sorted(int(n.split(".")[0]) for n in os.listdir(meta) if n.endswith(".compact"))
    assert compacts and compacts[-1] >= 1, sorted(os.listdir(meta))
    def codes(r: Any) -> list[str]:
        return sorted(f["code"] for q in r.json()["queries"] for f in q["findings"])

    inspect = ("inspect", "epochs", str(fresh.ckpt), "--sink", str(fresh.out), "--json")
    clean, clean_plan = cli(*inspect), cli(*fresh.align_args("--json"))
    (meta / "0").unlink()
    (meta / "0").mkdir()
    before = fresh.everything()
    r = cli(*inspect)  # the same findings as without it
    assert (r.code, codes(r)) == (clean.code, codes(clean)) and "UNREADABLE" not in codes(r), r
    # `inspect sink` reads every batch file it lists: that one cannot be read
    r = cli("inspect", "sink", str(fresh.out), "--json")
    assert r.code == 3 and [f["path"] for f in r.json()["findings"]] == [str(meta / "0")], r
    r = cli(*fresh.align_args("--json"))
    assert r.code == 0 and r.json()["plan"]["steps"] == clean_plan.json()["plan"]["steps"], r
    # a roll back to batch 0 reads it: refused, naming it
    r = cli(*fresh.align_args("--to", "0", "--allow-duplicates", "--json"))
    assert r.code == 4 and "_spark_metadata/0, which cannot be read" in r.stdout, r
    assert fresh.everything() == before
    no_lock(fresh)


@pytest.mark.spark
def test_a_batch_id_beyond_a_long_is_no_batch_and_a_huge_one_is_a_bounded_refusal(fresh: Lab, cli: Callable) -> None:
    import time

    meta = fresh.out / "_spark_metadata"
    plan = cli(*fresh.align_args("--json"))
    assert plan.code == 0, plan
    # 20 digits: not a Long, so Spark ignores the file; so does streamctl (the same plan)
    shutil.copy(meta / "2.compact", meta / "12345678901234567890.compact")
    shutil.copy(fresh.ckpt / "offsets" / "3", fresh.ckpt / "offsets" / "12345678901234567890")
    again = cli(*fresh.align_args("--json"))
    assert again.code == 0 and again.json()["plan"]["steps"] == plan.json()["plan"]["steps"], again
    # a Long, 19 digits: the sink log's chain follows the files that exist (it was range(0, id): MemoryError)
    (meta / "12345678901234567890.compact").unlink()
    shutil.copy(meta / "2.compact", meta / "9223372036854775806.compact")
    before = fresh.everything()
    t0 = time.monotonic()
    r = cli(*fresh.align_args("--json"))
    assert time.monotonic() - t0 < 60, r
    assert r.code == 0, r
    moves = [s["path"] for s in r.json()["plan"]["steps"] if s["action"] == "move"]
    assert "_spark_metadata/9223372036854775806.compact" in moves, moves  # rolled back like any sink commit ahead
    assert fresh.everything() == before
    no_lock(fresh)


@pytest.mark.spark
def test_drop_sink_refuses_with_the_same_code_and_json_in_plan_and_execute(fresh: Lab, cli: Callable) -> None:
    before = fresh.everything()
    base = ["drop-sink", str(fresh.out), "--checkpoint", str(fresh.ckpt), "--json"]
    for extra in ([], ["--execute"]):  # neither --safe nor --assume-stopped
        doc = refused_json(cli(*base, *extra))
        assert "--safe" in doc["reason"], doc
    for extra in ([], ["--execute"]):  # the lab's sink is ahead of its commits: not drained
        doc = refused_json(cli(*base, "--assume-stopped", *extra))
        assert doc["kind"] == "DropSinkRefusal", doc
    assert fresh.everything() == before
    no_lock(fresh)


def _denied(path: Path) -> tuple[Callable[[], None], Callable[[], None]]:
    """(deny, allow) moving `path`: root ignores permissions, so an immutable flag (chattr) for
    root, a read-only parent folder for anyone else."""
    import subprocess

    if os.geteuid() == 0:
        return (lambda: subprocess.run(["chattr", "+i", str(path)], check=True),
                lambda: subprocess.run(["chattr", "-i", str(path)], check=True))
    mode = path.parent.stat().st_mode
    return lambda: path.parent.chmod(0o555), lambda: path.parent.chmod(mode)


@pytest.mark.spark
def test_a_permission_error_mid_execute_is_exit_3_naming_the_file_and_resume_finishes(fresh: Lab, cli: Callable) -> None:
    victim = fresh.out / "_spark_metadata" / "4"
    deny, allow = _denied(victim)
    import subprocess

    deny()
    try:  # a real process: its lock outlives it, as after any failed --execute
        proc = subprocess.run([str(Path(sys.executable).with_name("streamctl")), *fresh.align_args("--execute", "--json")],
                              capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, STREAMCTL_QUIET_PERIOD="0", NO_COLOR="1"))
    finally:
        allow()
    from types import SimpleNamespace

    doc = error_json(SimpleNamespace(code=proc.returncode, stdout=proc.stdout, stderr=proc.stderr), 3)  # was exit 70, an internal error
    assert doc["message"].startswith(str(victim) + ": cannot move to "), doc
    assert "; the lock is kept: resume with: streamctl align --resume " in doc["message"], doc
    assert (fresh.ckpt / "_streamctl" / "lock.json").exists()
    backup = doc["message"].split("--resume ", 1)[1].split(" (or undo", 1)[0]
    r = cli("align", "--resume", backup, "--json")
    assert r.code == 0 and r.json()["verified"] is True, r
    no_lock(fresh)
    fresh.p.add_input(INPUT_FILES, 1)  # the delivery check: a restart of the real query with more input
    fresh.p.run()
    d = fresh.p.delivery()
    assert d["ok"], d


def test_align_and_trim_refuse_an_absurd_gap_in_bounded_time(cli: Callable, tmp_path: Path) -> None:
    """Class 5 for the planners: a copy of the newest batch at id 10**15 in offsets/ and
    commits/ (a real PySpark 3.5 checkpoint otherwise). Planning must not walk the ids between
    (it once raised MemoryError, exit 70): align refuses every restart point across the gap,
    trim refuses the misaligned checkpoint, both in seconds, nothing changed."""
    import time

    ck = tmp_path / "checkpoint"
    copy_spark35(FIXTURE, ck)
    for log in ("offsets", "commits"):
        shutil.copy(ck / log / "3", ck / log / str(10**15))
    before = tree(ck)
    for command in ("align", "trim"):
        t0 = time.monotonic()
        r = cli(command, str(ck), "--json", "--execute")
        assert time.monotonic() - t0 < 20, r
        assert r.code == 4, r
        doc = json.loads(r.stdout)
        assert doc["kind"] == f"{command.title()}Refusal", doc
    r = cli("align", str(ck), "--json")
    assert r.code == 4 and any("more than 1,000,000 epochs between the writers" in o["why"]
                               for o in json.loads(r.stdout)["options"]), r
    assert tree(ck) == before

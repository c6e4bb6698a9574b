"""The write side without Spark: Root, the executor's idempotency, undo, the lock, Hadoop crc."""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.paths import SPARK35
from streamctl.formats.checksum import hadoop_crc
from streamctl.formats.errors import StorageError
from streamctl.formats.journal import JOURNAL_FILE
from streamctl.operations.executor import MANIFEST_FILE, Executor, write_plan
from streamctl.operations.files import Root
from streamctl.operations.journal import CRASH_EXIT, Conflict
from streamctl.operations.lock import LOCK_FILE, Lock, LockHeld
from streamctl.operations.plan import Plan, Step

FIXTURE = SPARK35 / "agg_rocksdb" / "checkpoint"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _plan(steps: list[Step], roots: dict[str, str]) -> Plan:
    return Plan("test", roots, "rollback", 1, "exactly-once", steps, "aligned", op_id="op-1")


def _twelve_moves(tmp_path: Path, suffix: str) -> tuple[Path, Path, dict[str, bytes], list[Step], Plan]:
    """A checkpoint of twelve state files (`<v><suffix>.delta`, v bytes each), the plan moving
    them: checkpoint, backup folder, the files, the steps, the plan."""
    ck, backup = tmp_path / "ck", tmp_path / "backup"
    (ck / "state" / "0").mkdir(parents=True)
    for v in range(12):
        (ck / "state" / "0" / f"{v}{suffix}.delta").write_bytes(str(v).encode() * v)
    before = _tree(ck)
    steps = [Step("move", "checkpoint", rel, "old") for rel in sorted(before)]
    return ck, backup, before, steps, _plan(steps, {"checkpoint": str(ck)})


def _crashed_run(plan: Plan, ck: Path, backup: Path, after: int) -> None:
    """plan.json written, then a run of the plan in another process that ends abruptly right
    after its `after`-th journal record (STREAMCTL_TEST_CRASH_AFTER), as a killed one would."""
    write_plan(Root("backup", str(backup)), plan)  # durable before the other process reads it (the Executor's writes on a thread)
    code = ("import sys, json; from streamctl.operations.executor import Executor; from streamctl.operations.files import Root;"
            "from streamctl.operations.plan import Plan; p = Plan.from_record(json.load(open(sys.argv[1])));"
            "Executor(p, {'checkpoint': Root('checkpoint', sys.argv[2])}, Root('backup', sys.argv[3])).run()")
    proc = subprocess.run([sys.executable, "-c", code, str(backup / "plan.json"), str(ck), str(backup)],
                          env=dict(os.environ, STREAMCTL_TEST_CRASH_AFTER=str(after)))
    assert proc.returncode == CRASH_EXIT


def _setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    ck, sink, backup = tmp_path / "ck", tmp_path / "sink", tmp_path / "backup"
    (ck / "commits").mkdir(parents=True)
    (ck / "commits" / "1").write_bytes(b"v1\n{}")
    (ck / "commits" / "2").write_bytes(b"v1\n{\"nextBatchWatermarkMs\":0}")
    (sink / "data").mkdir(parents=True)
    (sink / "data" / "a.json").write_bytes(b"{}\n")
    return ck, sink, backup


def test_hadoop_crc_matches_a_sidecar_spark_wrote() -> None:
    for rel in ("commits/0", "offsets/1", "metadata"):
        data = (FIXTURE / rel).read_bytes()
        head, _, name = rel.rpartition("/")
        side = FIXTURE / head / f".{name}.crc" if head else FIXTURE / f".{name}.crc"
        assert hadoop_crc(data) == side.read_bytes()


def test_paths_cannot_leave_their_root(tmp_path: Path) -> None:
    root = Root("checkpoint", str(tmp_path))
    for bad in ("../x", "a/../../x", "/etc/passwd"):
        with pytest.raises(StorageError, match="outside the root"):
            root.local(bad)


def test_run_twice_is_idempotent_and_undo_restores_exact_bytes(tmp_path: Path) -> None:
    ck, sink, backup = _setup(tmp_path)
    before = {**{f"ck/{k}": v for k, v in _tree(ck).items()}, **{f"sink/{k}": v for k, v in _tree(sink).items()}}
    steps = [Step("move", "checkpoint", "commits/2", "above the target"),
             Step("write", "checkpoint", "commits/1", "rewrite", b"v1\n{\"nextBatchWatermarkMs\":5}"),
             Step("write", "checkpoint", "commits/.1.crc", "its checksum", hadoop_crc(b"v1\n{\"nextBatchWatermarkMs\":5}")),
             Step("move", "sink", "data", "a folder"),
             Step("move", "sink", "missing-file", "already gone")]
    roots = {"checkpoint": Root("checkpoint", str(ck)), "sink": Root("sink", str(sink))}
    ex = Executor(_plan(steps, {"checkpoint": str(ck), "sink": str(sink)}), roots, Root("backup", str(backup)))
    ex.write_plan()
    state = ex.run()
    assert state.finished and sorted(state.done) == [0, 1, 2, 3, 4]
    assert not (ck / "commits" / "2").exists() and (backup / "files/checkpoint/commits/2").read_bytes() == before["ck/commits/2"]
    assert (ck / "commits" / "1").read_bytes().endswith(b":5}")
    assert (backup / "files/sink/data/a.json").exists()
    manifest = json.loads((backup / MANIFEST_FILE).read_text())
    actions = {(m["root"], m["path"]): m["action"] for m in manifest["files"]}
    assert actions == {("checkpoint", "commits/2"): "moved", ("checkpoint", "commits/1"): "replaced",
                       ("checkpoint", "commits/.1.crc"): "created", ("sink", "data"): "moved",
                       ("sink", "missing-file"): "absent"}
    assert all(len(m["sha256"] or m["written_sha256"]) == 64 for m in manifest["files"] if m["action"] != "absent")
    lines = (backup / JOURNAL_FILE).read_text().splitlines()
    again = Executor(ex.plan, roots, Root("backup", str(backup))).run()  # nothing left to do
    assert again.finished and (backup / JOURNAL_FILE).read_text().splitlines() == lines
    with pytest.raises(Conflict, match="already exists"):
        Executor(ex.plan, roots, Root("backup", str(backup))).write_plan()

    ex.undo()
    after = {**{f"ck/{k}": v for k, v in _tree(ck).items()}, **{f"sink/{k}": v for k, v in _tree(sink).items()}}
    assert after == before


def test_a_step_interrupted_between_its_journal_records_is_redone(tmp_path: Path) -> None:
    ck, sink, backup = _setup(tmp_path)
    content = b"v1\n{\"nextBatchWatermarkMs\":9}"
    steps = [Step("write", "checkpoint", "commits/3", "complete the commit", content)]
    roots = {"checkpoint": Root("checkpoint", str(ck))}
    plan = _plan(steps, {"checkpoint": str(ck)})
    _crashed_run(plan, ck, backup, 2)  # start, begin -> die before the write
    assert not (ck / "commits" / "3").exists()
    events = [json.loads(line)["event"] for line in (backup / JOURNAL_FILE).read_text().splitlines()]
    assert events == ["start", "begin"]
    state = Executor(plan, roots, Root("backup", str(backup))).run()
    assert state.finished and (ck / "commits" / "3").read_bytes() == content
    Executor(plan, roots, Root("backup", str(backup))).undo()  # created by the operation: taken out again
    assert not (ck / "commits" / "3").exists() and (backup / "undone/checkpoint/commits/3").read_bytes() == content


def test_undo_refuses_when_a_file_changed_after_the_operation(tmp_path: Path) -> None:
    ck, sink, backup = _setup(tmp_path)
    steps = [Step("move", "checkpoint", "commits/2", "above the target")]
    roots = {"checkpoint": Root("checkpoint", str(ck))}
    ex = Executor(_plan(steps, {"checkpoint": str(ck)}), roots, Root("backup", str(backup)))
    ex.run()
    (ck / "commits" / "2").write_bytes(b"v1\n{\"written by a restart\":1}")
    with pytest.raises(Conflict, match="exists again"):
        ex.undo()
    assert (ck / "commits" / "2").read_bytes().startswith(b"v1\n{\"written by a restart")
    assert (backup / "files/checkpoint/commits/2").exists()


def test_put_back_moves_archived_input_back_never_over_a_file_and_undo_returns_it(tmp_path: Path) -> None:
    """align's `put_back` (archived input of replayed batches, docs/model.md#replayable-batches):
    archive -> input at the same relative path, mtime kept (a rename); another file at the
    destination is a conflict that moves nothing; undo puts it into the archive again; a
    destination that resolves outside the input root is refused before anything runs."""
    from streamctl.operations.runner import escaping_steps

    archive, inp, backup = tmp_path / "archive" / "in", tmp_path / "in", tmp_path / "backup"
    (archive / "day=1").mkdir(parents=True)
    inp.mkdir()
    (archive / "day=1" / "a.json").write_bytes(b'{"id": 1}\n')
    (archive / "b.json").write_bytes(b'{"id": 2}\n')
    os.utime(archive / "b.json", ns=(10**18, 10**18))
    before = _tree(archive)
    roots = {"archive": Root("archive", str(archive)), "input": Root("input", str(inp))}
    steps = [Step("put_back", "archive", "day=1/a.json", "replayed input"), Step("put_back", "archive", "b.json", "replayed input")]
    plan = _plan(steps, {"archive": str(archive), "input": str(inp)})
    assert Plan.from_record(json.loads(json.dumps(plan.to_record()))).steps == steps
    ex = Executor(plan, roots, Root("backup", str(backup)))
    ex.write_plan()
    assert ex.run().finished
    assert _tree(inp) == before and _tree(archive) == {}
    assert (inp / "b.json").stat().st_mtime_ns == 10**18  # Spark's file age rules see the file it archived
    manifest = json.loads((backup / MANIFEST_FILE).read_text())
    assert [m["action"] for m in manifest["files"]] == ["put_back", "put_back"]
    ex.undo()
    assert _tree(archive) == before and _tree(inp) == {}

    (inp / "b.json").write_bytes(b'{"id": 99}\n')  # something else is there now: never overwritten
    other = Executor(_plan(steps[1:], {"archive": str(archive), "input": str(inp)}), roots, Root("backup", str(tmp_path / "b2")))
    with pytest.raises(Conflict, match="refusing to overwrite an input file"):
        other.run()
    assert (inp / "b.json").read_bytes() == b'{"id": 99}\n' and _tree(archive) == before

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (inp / "day=1").rmdir()  # left empty by the undo
    os.symlink(outside, inp / "day=1")
    out = escaping_steps(plan, roots)
    assert len(out) == 1 and "day=1/a.json" in out[0] and str(outside) in out[0], out
    with pytest.raises(ValueError, match="put_back"):
        Plan.from_record(dict(plan.to_record(), roots={"archive": str(archive)}))


def test_lock_is_exclusive_and_a_dead_owner_needs_break_lock(tmp_path: Path) -> None:
    root = Root("checkpoint", str(tmp_path))
    lock = Lock.acquire(root, "align", "op-a")
    with pytest.raises(LockHeld, match=f"pid {os.getpid()}"):
        Lock.acquire(root, "align", "op-b")
    lock.release()
    assert not (tmp_path / LOCK_FILE).exists()
    assert not (tmp_path / "_streamctl").exists()  # the folder it made for the lock goes too
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    (tmp_path / "_streamctl").mkdir(exist_ok=True)
    (tmp_path / LOCK_FILE).write_text(json.dumps({"op_id": "op-dead", "command": "align", "host": socket.gethostname(),
                                                  "pid": pid, "started_ms": 0}))
    with pytest.raises(LockHeld, match="no longer running.*--break-lock"):
        Lock.acquire(root, "align", "op-c")
    taken = Lock.acquire(root, "align --resume", "op-dead", takeover_op="op-dead")  # resuming its own operation
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    taken.release()
    (tmp_path / "_streamctl").mkdir(exist_ok=True)
    (tmp_path / LOCK_FILE).write_text(json.dumps({"op_id": "op-x", "host": socket.gethostname(), "pid": pid}))
    Lock.acquire(root, "align", "op-d", break_lock=True).release()


def test_journal_lines_plan_and_manifest_read_back_what_was_written(tmp_path: Path) -> None:
    """Journal lines, plan.json and manifest.json (orjson: compact, keys sorted, one record per
    line) read back to exactly what was written: paths with quotes, backslashes, non-ASCII, U+2028
    and a name that is not UTF-8 (a lone surrogate: orjson refuses it, json.dumps escapes it),
    null digests, write steps' extra keys, every other record."""
    from streamctl.formats.journal import dumps, journal_records, json_file, record_line, record_lines
    from streamctl.operations.executor import PLAN_FILE, _moved_entry, load, write_plan

    odd = 'state/0/"q"\\x/é\u2028/ü.delta'
    not_utf8 = os.fsdecode(b"state/0/\xff.delta")
    records = [
        {"event": "begin", "step": 7, "action": "move", "root": "checkpoint", "path": odd, "pre": {"size": 4, "sha256": "ab"}},
        {"event": "begin", "step": 8, "action": "move", "root": "checkpoint", "path": not_utf8, "pre": None},
        {"event": "begin", "step": 0, "action": "write", "root": "sink", "path": "p", "pre": None},
        {"event": "begin", "step": 3, "action": "delete", "root": "checkpoint", "path": "p", "pre": {"size": 9, "sha256": None}},
        {"event": "done", "step": 7, "manifest": {"root": "checkpoint", "path": odd, "uri": f"s3://b/{odd}?x=\"",
                                                  "backup": f"files/checkpoint/{odd}", "action": "moved", "size": 4, "sha256": "ab"}},
        {"event": "done", "step": 0, "manifest": {"root": "sink", "path": "p", "uri": "u", "backup": "b", "action": "created",
                                                  "size": None, "sha256": None, "written_size": 3, "written_sha256": "f"}},
        {"event": "start", "op_id": "x", "pid": 3, "steps": 4},
        {"event": "verified", "ok": True, "got": {"planned": 3, "findings": ["A"], "ratio": 1.5}},
    ]
    root = Root("checkpoint", str(tmp_path / 'ck "é\\'))
    for step, size, sha in ((Step("move", "checkpoint", odd, 'below "5" é'), 4, "ab"), (Step("move", "sink", "a/b", "r"), None, None)):
        entry = _moved_entry(step, root.uri(step.path), size, sha)
        assert root.storage.uri_prefix() + step.path == root.uri(step.path)  # the prefix the executor takes once per root
        assert entry == {"root": step.root, "path": step.path, "uri": root.uri(step.path), "action": "moved",
                         "backup": f"files/{step.root}/{step.path}", "size": size, "sha256": sha}
        records.append({"event": "done", "step": 2, "manifest": entry})
    data = record_lines(records, 17)
    assert data == b"".join(record_line(r, 17) for r in records) and data.count(b"\n") == len(records)
    assert [rec for _, rec in journal_records(data)] == [dict(r, time_ms=17) for r in records]
    assert dumps({"b": 1, "a": [1, None]}) == b'{"a":[1,null],"b":1}' == json.dumps({"b": 1, "a": [1, None]}, sort_keys=True,
                                                                                    separators=(",", ":")).encode()
    with pytest.raises(TypeError):
        dumps({"a": {1, 2}})  # neither encoder writes a set
    doc = {"steps": [{"path": odd}, {"path": not_utf8}], "roots": {"c": "/x"}, "notes": [], "target": None}
    text = json_file(doc)
    assert json.loads(text) == doc and text.splitlines()[:3] == [b"{", b'  "notes": [],', b'  "roots": {"c":"/x"},']
    steps = [Step("move", "checkpoint", odd, "x"), Step("move", "checkpoint", not_utf8, "y"),
             Step("write", "checkpoint", "w", "w", content=b"\xff\x00"), Step("write", "checkpoint", "t", "t", content="é".encode())]
    plan = _plan(steps, {"checkpoint": str(tmp_path / "ck")})
    backup = Root("backup", str(tmp_path / "backup"))
    write_plan(backup, plan)
    assert (tmp_path / "backup" / PLAN_FILE).read_bytes().count(b"\n") == len(plan.to_record()) + len(steps) + 2 + 1
    assert load(str(tmp_path / "backup"))[0].to_record() == plan.to_record()


def test_rename_into_never_replaces_a_file_at_the_backup_path(tmp_path: Path) -> None:
    ck, _sink, backup = _setup(tmp_path)
    src, dst = Root("checkpoint", str(ck)), Root("backup", str(backup))
    (backup / "files" / "commits").mkdir(parents=True)
    (backup / "files" / "commits" / "1").write_bytes(b"earlier backup")
    assert not src.rename_into("commits/1", dst, "files/commits/1")  # taken: the general path decides
    assert (ck / "commits" / "1").read_bytes() == b"v1\n{}"
    assert (backup / "files" / "commits" / "1").read_bytes() == b"earlier backup"
    assert not src.rename_into("commits/9", dst, "files/commits/9")  # nothing to move
    assert src.rename_into("commits/2", dst, "files/new/commits/2")  # its folders are made
    assert not (ck / "commits" / "2").exists()
    assert (backup / "files" / "new" / "commits" / "2").read_bytes() == b"v1\n{\"nextBatchWatermarkMs\":0}"


def test_a_record_appended_after_a_torn_last_line_stays_readable(tmp_path: Path) -> None:
    """A crash in the middle of a write leaves a torn last line: the next run's records start on
    a line of their own (glued to it, the first would be lost with it)."""
    from streamctl.operations.journal import Journal

    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / JOURNAL_FILE).write_bytes(b'{"event": "start", "steps": 1}\n{"action": "move", "event": "beg')
    journal = Journal(Root("backup", str(backup)))
    journal.append_many([{"event": "begin", "step": 0, "action": "move", "root": "checkpoint", "path": "a", "pre": None}])
    assert 0 in journal.read().begun


@pytest.mark.parametrize("where", ["second batch's begin records", "done records"])
def test_many_local_moves_over_two_group_commits_resume_after_a_crash_and_undo_exactly(tmp_path: Path, where: str) -> None:
    """More moves than one group commit (BATCH_STEPS): the first batch renames in the co-process
    while the second batch is read, hashed and its begin records committed. A crash (the parent
    ends; the co-process dies with it) halfway through the second batch's begin records, or
    halfway through the done records, leaves each file in exactly one place, nothing moved that
    has no durable begin record; the resume records what was moved from the backup, moves the
    rest, and undo puts back every byte."""
    from streamctl.operations.executor import BATCH_STEPS

    ck, backup = tmp_path / "ck", tmp_path / "backup"
    for part in range(6):
        (ck / "state" / "0" / str(part)).mkdir(parents=True)
        for v in range(BATCH_STEPS // 5):
            (ck / "state" / "0" / str(part) / f"{v}.delta").write_bytes(f"{part}/{v}".encode() * (v % 7))
    before = _tree(ck)
    steps = [Step("move", "checkpoint", rel, "old") for rel in sorted(before)]
    assert BATCH_STEPS < len(steps) < 2 * BATCH_STEPS
    plan = _plan(steps, {"checkpoint": str(ck)})
    second = len(steps) - BATCH_STEPS
    # start, the first batch's begin records, then half the second's; or every begin record and half a batch of done records
    crash = 1 + BATCH_STEPS + (second // 2 if where.startswith("second") else second + BATCH_STEPS // 2)
    _crashed_run(plan, ck, backup, crash)
    records = [json.loads(line) for line in (backup / JOURNAL_FILE).read_text().splitlines()]
    events = [r["event"] for r in records]
    assert "finished" not in events and events.count("begin") + events.count("done") == crash - 1
    begun = {steps[r["step"]].path for r in records if r["event"] == "begin"}
    time.sleep(0.2)  # a co-process that outlived its parent would move more files meanwhile
    moved = set(_tree(backup / "files" / "checkpoint")) if (backup / "files").exists() else set()
    assert moved <= begun  # nothing moved without a durable begin record
    assert set(_tree(ck)) == set(before) - moved  # each file in exactly one place
    if where.startswith("second"):
        assert events.count("done") == 0 and len(begun) == BATCH_STEPS + second // 2
    else:
        assert len(begun) == len(steps) and moved >= {s.path for s in steps[:BATCH_STEPS]}

    roots = {"checkpoint": Root("checkpoint", str(ck))}
    state = Executor(plan, roots, Root("backup", str(backup))).run()
    assert state.finished and sorted(state.done) == list(range(len(steps)))
    manifest = {m["path"]: m for m in json.loads((backup / MANIFEST_FILE).read_text())["files"]}
    assert {p: m["action"] for p, m in manifest.items()} == {p: "moved" for p in before}
    assert {p: m["size"] for p, m in manifest.items()} == {p: len(b) for p, b in before.items()}
    assert {p: m["sha256"] for p, m in manifest.items()} == {p: hashlib.sha256(b).hexdigest() for p, b in before.items()}
    assert _tree(backup / "files" / "checkpoint") == before

    Executor(plan, roots, Root("backup", str(backup))).undo()
    assert _tree(ck) == before


def test_a_crashed_run_whose_journal_an_earlier_version_wrote_resumes_and_undoes(tmp_path: Path) -> None:
    """Backups written before the journal went to orjson (json.dumps' text: spaced, ASCII escapes)
    still resume and undo: a run crashed halfway, its journal and plan rewritten as the earlier
    encoders wrote them, is finished by this version, which appends its own lines after the old
    ones, and undone to the last byte."""
    ck, backup, before, steps, plan = _twelve_moves(tmp_path, "é")
    _crashed_run(plan, ck, backup, 6)  # start, then 5 of 12 begin records

    def earlier(doc: dict) -> str:  # the earlier json_file: json.dumps text, one list item per line
        parts = []
        for key in sorted(doc):
            v = doc[key]
            body = ("[\n    " + ",\n    ".join(json.dumps(x, sort_keys=True) for x in v) + "\n  ]" if isinstance(v, list) and v
                    else json.dumps(v, sort_keys=True))
            parts.append(f"  {json.dumps(key)}: {body}")
        return "{\n" + ",\n".join(parts) + "\n}\n"

    journal = backup / JOURNAL_FILE
    old_lines = [json.dumps(json.loads(line), sort_keys=True) + "\n" for line in journal.read_text().splitlines()]
    assert len(old_lines) == 6 and all('": ' in line and "\\u00e9" in line for line in old_lines[1:])
    journal.write_text("".join(old_lines))
    (backup / "plan.json").write_text(earlier(json.loads((backup / "plan.json").read_text())))

    roots = {"checkpoint": Root("checkpoint", str(ck))}
    state = Executor(plan, roots, Root("backup", str(backup))).run()
    assert state.finished and sorted(state.done) == list(range(len(steps)))
    assert journal.read_text().startswith("".join(old_lines))  # appended after the earlier lines, nothing rewritten
    assert _tree(backup / "files" / "checkpoint") == before and not _tree(ck)
    manifest = {m["path"]: m for m in json.loads((backup / MANIFEST_FILE).read_text())["files"]}
    assert {p: m["sha256"] for p, m in manifest.items()} == {p: hashlib.sha256(b).hexdigest() for p, b in before.items()}
    Executor(plan, roots, Root("backup", str(backup))).undo()
    assert _tree(ck) == before


def test_done_records_of_renames_and_of_earlier_versions_resume_and_undo(tmp_path: Path) -> None:
    """A move done by one rename has a `renamed` done record: its manifest entry is made from its
    begin record. A run crashed among its done records, whose earlier done records are rewritten
    as earlier versions wrote them (the entry carried), resumes and undoes to the last byte, its
    manifest the same as a run's that never crashed. A `renamed` record whose begin record holds
    no size and sha256 is refused, before anything changes."""
    ck, backup, before, steps, plan = _twelve_moves(tmp_path, "")
    roots = {"checkpoint": Root("checkpoint", str(ck))}
    _crashed_run(plan, ck, backup, 20)  # start, 12 begin records, 7 done
    journal = backup / JOURNAL_FILE
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    done = [r for r in records if r["event"] == "done"]
    assert len(done) == 7 and all(r == {"event": "done", "step": r["step"], "renamed": True, "time_ms": r["time_ms"]}
                                  for r in done)
    pre = {r["step"]: r["pre"] for r in records if r["event"] == "begin"}
    for r in done[:4]:  # as earlier versions wrote them
        del r["renamed"]
        rel = steps[r["step"]].path
        r["manifest"] = {"root": "checkpoint", "path": rel, "uri": roots["checkpoint"].uri(rel),
                         "backup": f"files/checkpoint/{rel}", "action": "moved", **pre[r["step"]]}
    journal.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    bad = [dict(r, pre=None) if r["event"] == "begin" and r["step"] == done[5]["step"] else r for r in records]
    journal.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in bad))
    files = _tree(tmp_path)
    for act in ("run", "undo"):
        with pytest.raises(Conflict, match=f"done record of step {done[5]['step']} says it was renamed"):
            getattr(Executor(plan, roots, Root("backup", str(backup))), act)()
        assert _tree(tmp_path) == files
    journal.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))

    state = Executor(plan, roots, Root("backup", str(backup))).run()
    assert state.finished and sorted(state.done) == list(range(len(steps)))
    assert _tree(backup / "files" / "checkpoint") == before and not _tree(ck)
    manifest = json.loads((backup / MANIFEST_FILE).read_text())["files"]
    assert manifest == [{"root": "checkpoint", "path": s.path, "uri": roots["checkpoint"].uri(s.path),
                         "backup": f"files/checkpoint/{s.path}", "action": "moved", "size": len(before[s.path]),
                         "sha256": hashlib.sha256(before[s.path]).hexdigest()} for s in steps]
    Executor(plan, roots, Root("backup", str(backup))).undo()
    assert _tree(ck) == before


def test_the_renaming_co_process_reads_requests_by_their_length(tmp_path: Path) -> None:
    """A request says how many bytes its lines take (`_request`): read at once, split at once;
    one without a length is read line by line (as before); a length that does not hold the lines
    it announced ends the co-process before it renames anything. Renames never replace a file
    (RENAME_NOREPLACE: EEXIST), and a batch of successes is answered all at once."""
    import errno
    import io

    from streamctl.operations import coprocess

    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    for n in range(6):
        (src / f"{n}.delta").write_bytes(b"%d" % n)
    (dst / "5.delta").write_bytes(b"already there")

    def serve(data: bytes) -> bytes:
        out = io.BytesIO()
        coprocess.serve(io.BytesIO(data), out)
        return out.getvalue()

    pairs = [(str(src / f"{n}.delta"), str(dst / f"{n}.delta")) for n in range(6)]
    request = coprocess._request(b"m", [p for pair in pairs[:2] for p in pair], 2)
    assert request is not None and request.split(b"\n", 1)[0].split(b" ")[2] == b"%d" % (len(request.split(b"\n", 1)[1]))
    assert serve(request) == b"0\n0\n"
    old_style = b"m 2\n" + "".join(f"{a}\n{b}\n" for a, b in pairs[2:4]).encode()
    assert serve(old_style) == b"0\n0\n"
    answer = serve(coprocess._request(b"m", [p for pair in pairs[4:] for p in pair], 2) or b"")
    assert answer == b"0\n%d\n" % errno.EEXIST  # the one whose target exists is not renamed
    assert sorted(p.name for p in src.iterdir()) == ["5.delta"] and (dst / "5.delta").read_bytes() == b"already there"
    (src / "6.delta").write_bytes(b"6")
    body = f"{src / '6.delta'}\n{dst / '6.delta'}\n".encode()
    assert serve(b"m 1 %d\n%s" % (len(body) - 5, body)) == b""  # short: not this protocol, nothing done
    assert serve(b"m 2 %d\n%s" % (len(body), body)) == b""  # fewer lines than it said
    assert (src / "6.delta").exists() and not (dst / "6.delta").exists()


def test_the_hashing_co_process_answers_what_hash_file_reads(tmp_path: Path) -> None:
    """The pre-images read by the hashing co-process (`h` requests) are those `hash_file` reads in
    process: size and sha256 of files (empty, longer than one read, behind a symlink), the errno
    of a missing file and of a folder (which the executor then reads by its general path)."""
    import errno

    from streamctl.operations.coprocess import CHUNK, CoProcess, hash_file

    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "big").write_bytes(os.urandom(CHUNK + 17))
    (tmp_path / "folder").mkdir()
    (tmp_path / "with space\u00e9").write_bytes(b"x" * 3)
    os.symlink(tmp_path / "big", tmp_path / "link")
    names = ["empty", "big", "folder", "gone", "with space\u00e9", "link"]
    co = CoProcess()
    try:
        assert co.submit_hashes([str(tmp_path / n) for n in names])
        got = dict(zip(names, co.hashes() or [], strict=True))
    finally:
        co.close()
    for n in ("empty", "big", "with space\u00e9", "link"):
        assert got[n] == hash_file(str(tmp_path / n)) == (len((tmp_path / n).read_bytes()),
                                                         hashlib.sha256((tmp_path / n).read_bytes()).hexdigest())
    assert got["gone"] == errno.ENOENT and got["folder"] == errno.EISDIR
    assert not CoProcess().submit_hashes([str(tmp_path / "a\nb")])  # a line break: not sent, read in process


def test_reads_beneath_a_root_never_open_a_path_outside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`hash_beneath` (the executor's reads before the plan is checked) hashes what `hash_file`
    reads for paths that resolve inside the root, through a symlinked folder inside it too; a
    path whose folder resolves outside is answered EXDEV and a symlink ELOOP without being opened
    (every open recorded here resolves inside the root); missing ones ENOENT, folders EISDIR."""
    import errno

    from streamctl.operations import coprocess

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a" / "folder").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_bytes(b"not ours")
    (root / "a" / "f1").write_bytes(b"one")
    (root / "a" / "empty").write_bytes(b"")
    os.symlink(outside / "secret", root / "a" / "link")  # a file symlink out of the root
    os.symlink("f1", root / "a" / "inlink")  # one inside it: still not followed here
    os.symlink(outside, root / "out")  # a folder symlink out of the root
    os.symlink("a", root / "in")  # one inside it
    rels = ["a/f1", "a/empty", "a/folder", "a/link", "a/inlink", "out/secret", "in/f1", "gone/x", "a/missing"]
    opened: list[str] = []
    real_open = os.open

    def recorded(path: object, flags: int, mode: int = 0o777, *, dir_fd: object = None) -> int:
        where = os.fsdecode(path)  # type: ignore[arg-type]
        if dir_fd is not None:
            where = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), where)
        opened.append(os.path.realpath(where) if not os.path.islink(where) else where)
        return real_open(path, flags, mode, dir_fd=dir_fd)  # type: ignore[arg-type]

    monkeypatch.setattr(coprocess.os, "open", recorded)
    lines = coprocess.hash_beneath(os.fsencode(str(root)), [os.fsencode(r) for r in rels])
    monkeypatch.undo()
    got = dict(zip(rels, lines, strict=True))
    for rel, body in (("a/f1", b"one"), ("a/empty", b""), ("in/f1", b"one")):
        assert got[rel] == b"%d %s\n" % (len(body), hashlib.sha256(body).hexdigest().encode())
    assert got["a/folder"] == b"-%d\n" % errno.EISDIR
    assert got["a/link"] == got["a/inlink"] == b"-%d\n" % errno.ELOOP
    assert got["out/secret"] == b"-%d\n" % errno.EXDEV
    assert got["gone/x"] == got["a/missing"] == b"-%d\n" % errno.ENOENT
    top = os.path.realpath(root)
    assert opened and all(p == top or p.startswith(top + os.sep) for p in opened), opened
    assert not [p for p in opened if "secret" in p or p.startswith(os.path.realpath(outside))]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIONREAD on a pipe, /proc")
def test_queued_hash_requests_are_answered_in_turn(tmp_path: Path) -> None:
    """`queue_hashes` sends several requests at once (a whole plan's: more than the pipe holds,
    written by a thread) and `hashes()` gives each request's answers in turn, also when the
    answers of the next one came in the same read."""
    import fcntl
    import termios

    from streamctl.operations.coprocess import PIPE_BYTES, CoProcess

    roots = [tmp_path / n for n in ("r1", "r2", "r3")]
    bodies = {}
    for k, r in enumerate(roots):
        (r / "d").mkdir(parents=True)
        for v in range(3 + k):
            bodies[(r, f"d/{v}")] = str((k, v)).encode() * v
            (r / "d" / str(v)).write_bytes(bodies[(r, f"d/{v}")])
    want = [[(len(bodies[(r, rel)]), hashlib.sha256(bodies[(r, rel)]).hexdigest()) for rel in sorted(
        rel for (root, rel) in bodies if root == r)] for r in roots]
    requests = [(str(r), sorted(rel for (root, rel) in bodies if root == r)) for r in roots]
    co = CoProcess()
    try:
        assert co.queue_hashes(requests)
        assert co._proc is not None and co._proc.stdout is not None
        expected = sum(len(b"%d %s\n" % (size, h.encode())) for answers in want for size, h in answers)
        deadline = time.monotonic() + 20
        buf = bytearray(4)
        while time.monotonic() < deadline:  # every answer waiting in the pipe: the first read takes them all
            fcntl.ioctl(co._proc.stdout.fileno(), termios.FIONREAD, buf)
            if int.from_bytes(buf, sys.byteorder) >= expected:
                break
            time.sleep(0.01)
        assert co.hashes() == want[0]
        assert co._rest  # the next requests' answers, read with the first, kept for them
        assert co.hashes() == want[1] and co.hashes() == want[2]
        assert co.hashes() is None  # nothing more was asked
    finally:
        co.close()
    many = tmp_path / "many"
    many.mkdir()
    (many / ("f" * 200)).write_bytes(b"abc")
    big = [(str(many), ["f" * 200] * 4000) for _ in range(3)]  # 2.4 MB of requests: more than the pipe holds
    assert sum(len(rel) + 1 for _, rels in big for rel in rels) > 2 * PIPE_BYTES
    co = CoProcess()
    try:
        assert co.queue_hashes(big)
        for _ in big:
            assert co.hashes() == [(3, hashlib.sha256(b"abc").hexdigest())] * 4000
    finally:
        co.close()
    assert co._writer is None
    assert not CoProcess().queue_hashes([(str(many), ["a\nb"])])  # a line break: not sent, read in process
    assert not CoProcess().queue_hashes([(str(many), [])])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_SETPIPE_SZ is Linux's")
def test_a_whole_batch_of_paths_is_sent_while_the_co_process_is_not_reading(tmp_path: Path) -> None:
    """The co-process's pipes hold a whole request (1 MiB): the executor hands the first batch's
    8,192 paths to a hasher still starting up and goes on (here: a co-process stopped by
    SIGSTOP, which reads nothing until SIGCONT), instead of waiting for it to read."""
    import fcntl
    import signal
    import threading

    from streamctl.operations.coprocess import PIPE_BYTES, CoProcess

    (tmp_path / "f").write_bytes(b"abc")
    path = str(tmp_path / "f")
    long_paths = [path] * (700_000 // (len(path) + 1))  # about 700 KB in all, like 8,192 paths of a batch
    assert 600_000 < sum(len(p) + 1 for p in long_paths) < PIPE_BYTES - 4096
    co = CoProcess()
    co.spawn()
    try:
        assert co._proc is not None and co._proc.stdin is not None
        assert fcntl.fcntl(co._proc.stdin.fileno(), fcntl.F_GETPIPE_SZ) == PIPE_BYTES
        os.kill(co._proc.pid, signal.SIGSTOP)
        sent: list[bool] = []
        writer = threading.Thread(target=lambda: sent.append(co.submit_hashes(long_paths)), daemon=True)
        writer.start()
        writer.join(timeout=5)
        alive = writer.is_alive()
        os.kill(co._proc.pid, signal.SIGCONT)
        writer.join(timeout=10)
        assert not alive and sent == [True]  # sent whole while the co-process read nothing
        answers = co.hashes()
        assert answers is not None and set(answers) == {(3, hashlib.sha256(b"abc").hexdigest())}
        assert len(answers) == len(long_paths)
    finally:
        co.close()


def test_a_run_whose_hashing_co_process_fails_reads_the_files_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the hashing co-process dies before it answers, the executor reads that batch's files
    in process: every begin record still carries the size and sha256 of its file."""
    from streamctl.operations import coprocess
    from streamctl.operations.executor import BATCH_STEPS

    ck, backup = tmp_path / "ck", tmp_path / "backup"
    (ck / "state").mkdir(parents=True)
    for v in range(BATCH_STEPS + 40):
        (ck / "state" / f"{v}.delta").write_bytes(str(v).encode() * (v % 5))
    before = _tree(ck)
    killed = []
    answers = coprocess.CoProcess.hashes

    def dies(self: coprocess.CoProcess) -> object:
        assert self._proc is not None
        self.close()  # killed with its answers unread, as when it dies
        killed.append(True)
        return answers(self)

    monkeypatch.setattr(coprocess.CoProcess, "hashes", dies)
    steps = [Step("move", "checkpoint", rel, "old") for rel in sorted(before)]
    plan = _plan(steps, {"checkpoint": str(ck)})
    ex = Executor(plan, {"checkpoint": Root("checkpoint", str(ck))}, Root("backup", str(backup)))
    ex.write_plan()
    state = ex.run()
    assert killed and state.finished
    begun = {r["path"]: r["pre"] for r in state.begun.values()}
    assert begun == {p: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for p, b in before.items()}
    assert _tree(backup / "files" / "checkpoint") == before and not _tree(ck)


def test_a_group_commit_written_on_a_thread_is_durable_or_raises_at_wait(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`Journal.append_started` writes and fsyncs on a thread: once `wait()` returned, the lines are
    in the journal after what was there (a torn last line of a crashed run kept apart); a failed
    fsync raises at `wait()`, on the caller's thread (as `append_many` raises)."""
    import errno

    from streamctl.operations.journal import Journal

    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / JOURNAL_FILE).write_bytes(b'{"event":"start"}\n{"event":"be')  # torn by a crash
    journal = Journal(Root("backup", str(backup)))
    commit = journal.append_started([{"event": "finished"}])
    commit.wait()
    lines = (backup / JOURNAL_FILE).read_bytes().split(b"\n")
    assert lines[:2] == [b'{"event":"start"}', b'{"event":"be'] and json.loads(lines[2])["event"] == "finished"
    assert journal.read().finished

    def fails(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fails)
    commit = journal.append_started([{"event": "finished"}])
    with pytest.raises(OSError, match="Input/output"):
        commit.wait()
    with pytest.raises(OSError, match="Input/output"):
        journal.append_many([{"event": "finished"}])


def test_a_journal_record_waits_for_the_writes_named_before_it(tmp_path: Path) -> None:
    """`Journal.after`: plan.json (written on a thread while the first batch is prepared) is
    durable before the first record, manifest.json before `verified`; a write that failed raises
    at the next append, which then writes nothing."""
    from streamctl.operations.files import Pending
    from streamctl.operations.journal import Journal

    backup = Root("backup", str(tmp_path / "b"))
    journal = Journal(backup)
    late = tmp_path / "late"

    def slow() -> None:
        time.sleep(0.3)
        late.write_bytes(b"written")

    journal.after(Pending(slow))
    journal.append({"event": "start", "op_id": "x", "pid": 1, "steps": 0})
    assert late.read_bytes() == b"written"  # the record came after the write, not before

    def fails() -> None:
        raise OSError(28, "No space left on device")

    journal.after(Pending(fails))
    with pytest.raises(OSError, match="No space left"):
        journal.append({"event": "finished"})
    assert journal.read().started and not journal.read().finished
    journal.append({"event": "finished"})  # raised once: the next append goes on
    assert journal.read().finished
    # the plan through Root.write_atomic_started: durable once wait() returned
    pending = backup.write_atomic_started("x.json", b"{}")
    pending.wait()
    assert (tmp_path / "b" / "x.json").read_bytes() == b"{}"


@pytest.mark.parametrize("started", ["as a script", "as a module"])
def test_the_syncing_co_process_fsyncs_folders_and_names_those_gone(tmp_path: Path, started: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`f` requests: `0` for each folder fsynced, `1` for one that cannot be opened; a line break
    in a path is not sent. Whether the co-process runs this file as an isolated script without
    `site` (the usual start: `fsync_dirs` is loaded from its file then) or the module by `-m`
    (where the file is not on disk)."""
    from streamctl.operations import coprocess
    from streamctl.operations.coprocess import CoProcess

    command = coprocess._command()
    assert command[1:3] == ["-I", "-S"] and command[3].endswith("coprocess.py")
    if started == "as a module":
        monkeypatch.setattr(coprocess, "__file__", str(tmp_path / "not-on-disk.py"))
        assert coprocess._command()[1:3] == ["-m", "streamctl.operations.coprocess"]
    (tmp_path / "a" / "b").mkdir(parents=True)
    co = CoProcess()
    try:
        assert co.submit_syncs([str(tmp_path / "a" / "b"), str(tmp_path / "gone"), str(tmp_path / "a")])
        assert co.synced() == [0, 1, 0]
        assert co.submit_syncs([str(tmp_path / "a")]) and co.synced() == [0]  # one folder: no thread pool
    finally:
        co.close()
    assert not CoProcess().submit_syncs([str(tmp_path / "a\nb")])


def _batches_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, dict[str, bytes], Plan]:
    """A checkpoint of three group commits of state files in 30 folders (of 50 steps each here:
    the pipeline is the same at any size), and the plan moving them all."""
    from streamctl.operations import executor

    monkeypatch.setattr(executor, "BATCH_STEPS", 50)
    ck, backup = tmp_path / "ck", tmp_path / "backup"
    for v in range(50 * 2 + 7):
        folder = ck / "state" / str(v % 30)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{v}.delta").write_bytes(str(v).encode() * (v % 5))
    before = _tree(ck)
    return ck, backup, before, _plan([Step("move", "checkpoint", rel, "old") for rel in sorted(before)], {"checkpoint": str(ck)})


def _started_co_processes(monkeypatch: pytest.MonkeyPatch) -> list[subprocess.Popen[bytes]]:
    """Every co-process started from now on, as it starts."""
    from streamctl.operations import coprocess

    started: list[subprocess.Popen[bytes]] = []
    start = coprocess.CoProcess._start

    def recorded(self: coprocess.CoProcess) -> None:
        start(self)
        assert self._proc is not None
        started.append(self._proc)

    monkeypatch.setattr(coprocess.CoProcess, "_start", recorded)
    return started


@pytest.mark.parametrize("size", ["batches", "one step", "empty"])
def test_co_processes_started_before_the_plan_are_taken_or_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 size: str) -> None:
    """The runner starts the executor's three co-processes before the plan is made (their start-up
    overlaps it); a run of several batches takes those three (no others started), and whatever
    the plan, every one of them has ended when `execute` returns."""
    from streamctl.operations import coprocess
    from streamctl.operations.runner import Operation, Request, execute

    ck, _backup, before, plan = _batches_plan(tmp_path, monkeypatch)
    if size != "batches":
        plan.steps = plan.steps[:1 if size == "one step" else 0]
    started = _started_co_processes(monkeypatch)
    at_plan: list[int] = []

    def planner(op_id: str, _backup: Root) -> Plan:
        at_plan.append(len(started))
        return plan

    out = execute(Operation("test", verify=lambda _plan, _roots: (True, {})), Request(str(ck), planner))
    assert at_plan == [3]  # started before the plan was made
    assert len(started) == 3  # none started on top of them
    assert all(proc.poll() is not None for proc in started) and coprocess._WARM == []
    assert out.executed == (size != "empty")
    if size == "batches":
        assert not [p for p in _tree(ck) if p.startswith("state/")]
        assert _tree(Path(out.backup.location) / "files" / "checkpoint") == before


def test_a_plan_refused_by_its_check_after_reads_began_changes_nothing(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The hasher is sent a plan's reads before the plan is checked; a plan the check refuses (a
    step's folder is a symlink out of the checkpoint) is refused as before: nothing moved, no
    backup written, no co-process left, and the files outside never read (answered EXDEV)."""
    import errno

    from streamctl.operations import coprocess
    from streamctl.operations.plan import Refused
    from streamctl.operations.runner import Operation, Request, execute

    ck, _backup, before, plan = _batches_plan(tmp_path, monkeypatch)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "1.delta").write_bytes(b"not the checkpoint's")
    os.symlink(outside, ck / "state" / "elsewhere")
    plan.steps.insert(3, Step("move", "checkpoint", "state/elsewhere/1.delta", "old"))
    started = _started_co_processes(monkeypatch)
    queued: list[int] = []
    queue = coprocess.CoProcess.queue_hashes

    def counted(self: coprocess.CoProcess, requests: list[tuple[str, list[str]]]) -> bool:
        queued.append(sum(len(rels) for _, rels in requests))
        return queue(self, requests)

    monkeypatch.setattr(coprocess.CoProcess, "queue_hashes", counted)
    backup = tmp_path / "named-backup"
    with pytest.raises(Refused, match="elsewhere"):
        execute(Operation("test", verify=lambda _plan, _roots: (True, {})),
                Request(str(ck), lambda _op_id, _backup: plan, backup_dir=str(backup)))
    assert queued == [len(plan.steps)]  # the reads were sent before the check
    assert _tree(ck) == before and (outside / "1.delta").read_bytes() == b"not the checkpoint's"
    assert not backup.exists() or not any(backup.iterdir())
    assert all(proc.poll() is not None for proc in started) and coprocess._WARM == []
    assert not (ck / LOCK_FILE).exists()
    assert coprocess.hash_beneath(os.fsencode(str(ck)), [b"state/elsewhere/1.delta"]) == [b"-%d\n" % errno.EXDEV]


def test_the_cycle_collector_is_paused_while_a_mutation_runs_and_back_after(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`execute` runs with Python's cycle collector paused (its plans and records are freed by
    reference counting) and turns it on again when it returns or raises."""
    import gc

    from streamctl.operations.plan import Refused
    from streamctl.operations.runner import Operation, Request, execute

    ck, _backup, _before, plan = _batches_plan(tmp_path, monkeypatch)
    seen: list[bool] = []

    def planner(_op_id: str, _backup: Root) -> Plan:
        seen.append(gc.isenabled())
        return plan

    assert gc.isenabled()
    out = execute(Operation("test", verify=lambda _plan, _roots: (True, {})), Request(str(ck), planner))
    assert out.executed and seen == [False] and gc.isenabled()

    def refused(_op_id: str, _backup: Root) -> Plan:
        seen.append(gc.isenabled())
        raise Refused("no")

    with pytest.raises(Refused):
        execute(Operation("test", verify=lambda _plan, _roots: (True, {})), Request(str(ck), refused))
    assert seen == [False, False] and gc.isenabled()


def test_what_a_paused_mutation_allocated_is_not_walked_when_the_collector_is_back(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The objects a mutation allocated while the collector was paused go to the oldest
    generation when `execute` returns: no collection walks them on the first allocation after
    (a long pause on a plan of many steps); a cycle made during the run is still freed by
    the next full collection; objects something else froze stay frozen."""
    import gc
    import weakref

    from streamctl.operations.runner import Operation, Request, execute

    class Held:
        me: Any = None

    ck, _backup, _before, plan = _batches_plan(tmp_path, monkeypatch)
    kept: list[Any] = []
    cycles: list[weakref.ref[Held]] = []

    def planner(_op_id: str, _backup: Root) -> Plan:
        kept.extend({"n": i} for i in range(300_000))  # beyond the young threshold: a collection is due
        loop = Held()
        loop.me = loop  # a cycle made during the run, garbage once it returns
        cycles.append(weakref.ref(loop))
        return plan

    collections: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    old = gc.get_threshold()
    gc.collect()
    gc.set_threshold(100_000, 50, 100)  # the CLI's (cli/entry.py GC_THRESHOLDS)
    gc.callbacks.append(seen)
    try:
        out = execute(Operation("test", verify=lambda _plan, _roots: (True, {})), Request(str(ck), planner))
        young = gc.get_count()[0]
        after: list[dict[str, int]] = [{} for _ in range(10)]  # the first allocations with the collector on
    finally:
        gc.callbacks.remove(seen)
        gc.set_threshold(*old)
    assert out.executed and after and gc.isenabled()
    assert young < 1000 and collections == [], (young, collections)
    assert cycles[0]() is not None  # not collected yet: no collection ran
    gc.collect()
    assert cycles[0]() is None  # and freed by the next full collection

    ck2, _backup2, _before2, plan2 = _batches_plan(tmp_path / "again", monkeypatch)
    held = Held()
    gc.freeze()  # someone else's frozen objects
    try:
        frozen = gc.get_freeze_count()
        out = execute(Operation("test", verify=lambda _plan, _roots: (True, {})), Request(str(ck2), lambda _o, _b: plan2))
        assert out.executed and frozen > 0 and gc.get_freeze_count() > 0  # not released (unfreeze: 0)
    finally:
        gc.unfreeze()
    assert held.me is None


def test_once_the_renames_run_the_other_processes_step_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a pipelined run's first renames are sent, the hasher and the syncer lower their
    priority by STEP_BACK and the renamer keeps its own; the calling process keeps its priority
    unless it asked to step back too (`step_back`, the CLI's), which another process checks."""
    from streamctl.operations import coprocess
    from streamctl.operations.executor import STEP_BACK

    ck, backup, _before, plan = _batches_plan(tmp_path, monkeypatch)
    seen: dict[str, int] = {}
    step_back = coprocess.CoProcess.step_back

    def recorded(self: coprocess.CoProcess, by: int) -> None:
        was = os.getpriority(os.PRIO_PROCESS, 0)  # a co-process starts with its parent's
        step_back(self, by)
        if self._proc is not None:  # running (else it steps back as it starts: asked below)
            seen[f"co{len(seen)}"] = os.getpriority(os.PRIO_PROCESS, self._proc.pid) - was
        else:
            self.submit_syncs([str(tmp_path)])  # starts it
            assert self._proc is not None and self.synced() == [0]
            seen[f"co{len(seen)}"] = os.getpriority(os.PRIO_PROCESS, self._proc.pid) - was

    monkeypatch.setattr(coprocess.CoProcess, "step_back", recorded)
    ex = Executor(plan, {"checkpoint": Root("checkpoint", str(ck))}, Root("backup", str(backup)))
    renamer: list[int] = []
    start = ex._start_renames

    def started(renaming: Any) -> Any:
        out = start(renaming)
        if ex._co is not None and ex._co._proc is not None:
            renamer.append(os.getpriority(os.PRIO_PROCESS, ex._co._proc.pid))
        return out

    monkeypatch.setattr(ex, "_start_renames", started)
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    ex.write_plan()
    assert ex.run().finished and not _tree(ck)
    assert seen == {"co0": STEP_BACK, "co1": STEP_BACK}  # the hasher and the syncer, once
    assert renamer and set(renamer) == {mine}  # the renamer as it was
    assert os.getpriority(os.PRIO_PROCESS, 0) == mine  # a library caller's priority is its own

    ck2, backup2, _before2, plan2 = _batches_plan(tmp_path / "again", monkeypatch)
    code = ("import os, sys, json; from streamctl.operations import executor; executor.BATCH_STEPS = 50;"
            "from streamctl.operations.files import Root; from streamctl.operations.plan import Plan;"
            "p = Plan.from_record(json.loads(sys.argv[1])); was = os.getpriority(os.PRIO_PROCESS, 0);"
            "ex = executor.Executor(p, {'checkpoint': Root('checkpoint', sys.argv[2])}, Root('backup', sys.argv[3]));"
            "ex.step_back = True; ex.write_plan(); ex.run(); print(os.getpriority(os.PRIO_PROCESS, 0) - was)")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(plan2.to_record()), str(ck2), str(backup2)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == min(STEP_BACK, 19 - mine) and not _tree(ck2)


def test_done_records_wait_for_the_syncing_co_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's done records are written only once the syncing co-process answered for its
    folders (each moved file's folder and its backup folder among those fsynced)."""
    from streamctl.formats.journal import journal_records
    from streamctl.operations import coprocess, executor

    ck, backup, before, plan = _batches_plan(tmp_path, monkeypatch)
    sent: list[list[str]] = []
    submit = coprocess.CoProcess.submit_syncs

    def recorded(self: coprocess.CoProcess, paths: list[str]) -> bool:
        sent.append(list(paths))
        return submit(self, paths)

    waited = executor.Executor._synced
    checked = []

    def done_after(self: executor.Executor, syncing: object) -> None:
        if syncing is not None:
            steps = {id(s) for s in syncing.steps}  # type: ignore[attr-defined]
            done = {r["step"] for _, r in journal_records((backup / JOURNAL_FILE).read_bytes()) if r and r["event"] == "done"}
            assert not {i for i, s in enumerate(self.plan.steps) if id(s) in steps} & done
            checked.append(len(steps))
        waited(self, syncing)  # type: ignore[arg-type]

    monkeypatch.setattr(coprocess.CoProcess, "submit_syncs", recorded)
    monkeypatch.setattr(executor.Executor, "_synced", done_after)
    ex = Executor(plan, {"checkpoint": Root("checkpoint", str(ck))}, Root("backup", str(backup)))
    ex.write_plan()
    state = ex.run()
    assert state.finished and checked and sent
    folders = {p for paths in sent for p in paths}
    first = [s for s in plan.steps[:executor.BATCH_STEPS]]  # the first batch goes to the syncer
    assert {str(ck / s.path.rpartition("/")[0]) for s in first} <= folders
    assert {str(backup / "files" / "checkpoint" / s.path.rpartition("/")[0]) for s in first} <= folders
    assert _tree(backup / "files" / "checkpoint") == before and not _tree(ck)


def test_a_run_whose_syncing_co_process_fails_fsyncs_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the syncing co-process dies before it answers, the executor fsyncs that batch's
    folders itself (Root.sync_parents) before writing its done records."""
    from streamctl.operations import coprocess, files

    ck, backup, before, plan = _batches_plan(tmp_path, monkeypatch)
    answers = coprocess.CoProcess.synced
    killed = []

    def dies(self: coprocess.CoProcess) -> object:
        self.close()
        killed.append(True)
        return answers(self)

    synced_here: list[set[str]] = []
    sync_parents = files.Root.sync_parents

    def recorded(self: files.Root, rels: list[str] | set[str]) -> None:
        synced_here.append(set(rels))
        sync_parents(self, rels)

    monkeypatch.setattr(coprocess.CoProcess, "synced", dies)
    monkeypatch.setattr(files.Root, "sync_parents", recorded)
    ex = Executor(plan, {"checkpoint": Root("checkpoint", str(ck))}, Root("backup", str(backup)))
    ex.write_plan()
    state = ex.run()
    assert killed and state.finished
    here = set().union(*synced_here)
    # every batch's folders fsynced in process (sync_parents fsyncs the folder of each path it is given)
    assert {s.path.rpartition("/")[0] for s in plan.steps} <= {rel.rpartition("/")[0] for rel in here}
    assert _tree(backup / "files" / "checkpoint") == before and not _tree(ck)


def test_escaping_steps_finds_links_out_among_many_names_and_folders_that_lead_out(tmp_path: Path) -> None:
    """One listing answers for a folder of many steps (LISTING_FROM): a symlink out among 40 plain
    names is found; a folder that is itself a link out takes every name in it along."""
    from streamctl.operations.runner import LISTING_FROM, escaping_steps

    ck, outside = tmp_path / "ck", tmp_path / "outside"
    (ck / "state" / "0" / "0").mkdir(parents=True)
    (outside / "store").mkdir(parents=True)
    (outside / "precious").write_bytes(b"x")
    for v in range(40):
        (ck / "state" / "0" / "0" / f"{v}.delta").write_bytes(b"d")
    os.symlink(outside / "precious", ck / "state" / "0" / "0" / "40.delta")
    os.symlink(outside / "store", ck / "state" / "0" / "1")
    (outside / "store" / "1.delta").write_bytes(b"d")
    steps = [Step("move", "checkpoint", f"state/0/0/{v}.delta", "old") for v in range(41)]
    steps += [Step("move", "checkpoint", "state/0/1/1.delta", "old"), Step("move", "checkpoint", "state/0/1/2.delta", "gone")]
    assert 41 >= LISTING_FROM
    out = escaping_steps(_plan(steps, {"checkpoint": str(ck)}), {"checkpoint": Root("checkpoint", str(ck))})
    assert sorted(o.split(" (resolves")[0].split("/state/")[1] for o in out) == ["0/0/40.delta", "0/1/1.delta",
                                                                                 "0/1/2.delta"]
    assert all(str(outside) in o for o in out)


def test_is_normal_rel_says_what_the_regex_says() -> None:
    """The substring test of a plan path (operations/files.py is_normal_rel) against the regex it
    stands for, on every string of up to 5 characters over "a", ".", "/" and a backslash."""
    import itertools

    from streamctl.operations.files import _NOT_NORMAL, is_normal_rel

    for n in range(6):
        for chars in itertools.product("a./\\", repeat=n):
            rel = "".join(chars)
            assert is_normal_rel(rel) == bool(rel and _NOT_NORMAL.search(rel) is None), rel


def test_a_file_that_vanishes_while_its_folder_is_hashed_is_named_as_a_folder_being_written(tmp_path: Path,
                                                                                             monkeypatch) -> None:
    """A folder move hashes the folder's files after listing them. Spark's state maintenance can
    rename its `.N.snapshot.<uuid>.tmp` in between (a snapshot written after the query stopped):
    the error names the file and says the checkpoint is still being written, not a bare ENOENT.
    The race is made real by deleting the listed file right after the real listing."""
    folder = tmp_path / "state" / "0" / "1"
    folder.mkdir(parents=True)
    (folder / "1.delta").write_bytes(b"d")
    tmp = folder / ".2.snapshot.0f3a.tmp"
    tmp.write_bytes(b"s")
    root = Root("checkpoint", str(tmp_path))
    listed = Root.walk_files

    def list_then_rename(self: Root, rel: str) -> list[str]:
        names = listed(self, rel)
        if tmp.exists():
            tmp.rename(folder / "2.snapshot")
        return names

    monkeypatch.setattr(Root, "walk_files", list_then_rename)
    with pytest.raises(StorageError) as exc:
        root.tree_digest("state")
    assert exc.value.path.endswith("state/0/1/.2.snapshot.0f3a.tmp"), exc.value.path
    assert "vanished while streamctl read its folder" in exc.value.reason
    monkeypatch.setattr(Root, "walk_files", listed)
    assert root.tree_digest("state")[0] == 2  # quiet again: the folder hashes


def test_the_first_batch_read_while_the_plan_is_written_gives_the_same_begin_records(tmp_path: Path,
                                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`start()` (the runner calls it once the plan is checked) has the hashing co-process read
    the first batch's files while plan.json is written; `run()` takes those answers: every begin
    record carries each file's size and sha256, the first batch's read by the co-process, not
    here. `close()` without a run leaves no co-process behind."""
    from streamctl.operations.executor import BATCH_STEPS

    ck, backup = tmp_path / "ck", tmp_path / "backup"
    (ck / "state").mkdir(parents=True)
    for v in range(BATCH_STEPS + 40):
        (ck / "state" / f"{v}.delta").write_bytes(str(v).encode() * (v % 5))
    before = _tree(ck)
    read_here: list[str] = []
    digests = Root.digests_if_exist

    def counted(self: Root, rels: list[str]) -> list[object]:
        read_here.extend(rels)  # read in this process
        return digests(self, rels)

    monkeypatch.setattr(Root, "digests_if_exist", counted)
    steps = [Step("move", "checkpoint", rel, "old") for rel in sorted(before)]
    plan = _plan(steps, {"checkpoint": str(ck)})

    idle = Executor(plan, {"checkpoint": Root("checkpoint", str(ck))}, Root("backup", str(tmp_path / "unused")))
    idle.start()
    procs = [co._proc for co in (idle._co, idle._hasher) if co is not None]
    assert len(procs) == 2 and all(p is not None and p.poll() is None for p in procs)
    idle.close()
    assert all(p is not None and p.poll() is not None for p in procs)  # stopped, not left running

    ex = Executor(plan, {"checkpoint": Root("checkpoint", str(ck))}, Root("backup", str(backup)))
    ex.start()
    ex.write_plan()
    state = ex.run()
    assert state.finished
    begun = {r["path"]: r["pre"] for r in state.begun.values()}
    assert begun == {p: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for p, b in before.items()}
    assert not read_here  # every pre-image came from the co-process, the first batch's included
    assert _tree(backup / "files" / "checkpoint") == before and not _tree(ck)


def test_a_run_s_last_records_are_durable_before_the_verified_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's executor (manifest_ahead) leaves its last done records and `finished` to be
    written while the runner verifies (`Journal.after`): the next record (`verified`) waits for
    them, however slow their write, so the journal reads start, begins, dones, finished, verified
    in that order, with manifest.json in place."""
    from streamctl.formats.journal import Event, journal_records
    from streamctl.operations import journal as journal_mod

    ck, backup, before, steps, plan = _twelve_moves(tmp_path, "")
    write_all = journal_mod._write_all

    def slow_end(fd: int, data: bytes) -> None:
        if b'"finished"' in data:
            time.sleep(0.5)  # the run's last commit: a slow disk
        write_all(fd, data)

    monkeypatch.setattr(journal_mod, "_write_all", slow_end)
    ex = Executor(plan, {"checkpoint": Root("checkpoint", str(ck))}, Root("backup", str(backup)), manifest_ahead=True)
    ex.write_plan()
    state = ex.run()
    assert state.finished
    ex.journal.append({"event": Event.VERIFIED, "ok": True, "got": {}})
    events = [r["event"] for _, r in journal_records((backup / JOURNAL_FILE).read_bytes()) if r]
    assert events == ["start"] + ["begin"] * len(steps) + ["done"] * len(steps) + ["finished", "verified"]
    assert (backup / MANIFEST_FILE).exists() and _tree(backup / "files" / "checkpoint") == before

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

import pytest

from helpers.paths import SPARK35
from streamctl.formats.checksum import hadoop_crc
from streamctl.formats.errors import StorageError
from streamctl.formats.journal import JOURNAL_FILE
from streamctl.operations.backup_folder import MANIFEST_FILE, write_plan
from streamctl.operations.executor import Executor
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


def _per_step(records: list[dict], steps: list[Step]) -> list[dict]:
    """The journal records as the build before chunk records wrote them: a `begin_chunk` as a
    `begin` record per step (action, root, path, pre {size, sha256}), a `done_chunk` as a `done`
    record per step saying `renamed`."""
    out: list[dict] = []
    for r in records:
        if r["event"] == "begin_chunk":
            out += [{"event": "begin", "step": i, "action": "move", "root": steps[i].root, "path": steps[i].path,
                     "pre": {"size": size, "sha256": sha}, "time_ms": r["time_ms"]}
                    for i, (size, sha) in zip(r["steps"], r["pre"], strict=True)]
        elif r["event"] == "done_chunk":
            out += [{"event": "done", "step": i, "renamed": True, "time_ms": r["time_ms"]} for i in r["steps"]]
        else:
            out.append(r)
    return out


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
    from streamctl.operations.plan_checks import escaping_steps

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
    """Journal lines (orjson: compact, keys sorted, one record per line), plan.json and
    manifest.json (one indented document) read back to exactly what was written: paths with quotes, backslashes, non-ASCII, U+2028
    and a name that is not UTF-8 (a lone surrogate: orjson refuses it, json.dumps escapes it),
    null digests, write steps' extra keys, every other record."""
    from streamctl.formats.journal import journal_records, json_file, record_line, record_lines
    from streamctl.formats.jsontext import dumps
    from streamctl.operations.apply_steps import moved_entry
    from streamctl.operations.backup_folder import PLAN_FILE, load

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
        entry = moved_entry(step, root, size, sha)
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
    assert json.loads(text) == doc and text.splitlines()[:4] == [b"{", b'  "notes": [],', b'  "roots": {', b'    "c": "/x"']
    steps = [Step("move", "checkpoint", odd, "x"), Step("move", "checkpoint", not_utf8, "y"),
             Step("write", "checkpoint", "w", "w", content=b"\xff\x00"), Step("write", "checkpoint", "t", "t", content="é".encode())]
    plan = _plan(steps, {"checkpoint": str(tmp_path / "ck")})
    backup = Root("backup", str(tmp_path / "backup"))
    write_plan(backup, plan)
    assert json.loads((tmp_path / "backup" / PLAN_FILE).read_bytes()) == json.loads(json.dumps(plan.to_record()))
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


@pytest.mark.parametrize("check", [True, False], ids=["os.access", "lexists"])
def test_rename_into_sees_a_file_or_a_dangling_symlink_at_the_backup_path(tmp_path: Path, check: bool) -> None:
    """The destination check (os.access without following the last symlink, or os.path.lexists
    where that is not to be had) sees a file, and a symlink whose target is gone, as taken: the
    rename never replaces either; a free name is renamed into."""
    ck, _sink, backup = _setup(tmp_path)
    src, dst = Root("checkpoint", str(ck)), Root("backup", str(backup))
    (backup / "files" / "commits").mkdir(parents=True)
    dst._taken_check = check
    (backup / "files" / "commits" / "1").symlink_to(tmp_path / "gone")
    assert not src.rename_into("commits/1", dst, "files/commits/1")
    assert (backup / "files" / "commits" / "1").is_symlink() and (ck / "commits" / "1").exists()
    (backup / "files" / "commits" / "2").write_bytes(b"earlier backup")
    assert not src.rename_into("commits/2", dst, "files/commits/2")
    assert (backup / "files" / "commits" / "2").read_bytes() == b"earlier backup"
    assert src.rename_into("commits/2", dst, "files/commits/3")
    assert not (ck / "commits" / "2").exists()
    fresh = Root("backup", str(backup))
    assert fresh._taken(str(backup / "files" / "commits" / "1")) and not fresh._taken(str(backup / "nothing"))
    assert fresh._taken_check is (os.access in os.supports_follow_symlinks and os.access in os.supports_effective_ids)


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


@pytest.mark.parametrize("where", ["first begin chunk", "first renames", "first done chunk", "second begin chunk"])
def test_many_local_moves_over_two_group_commits_resume_after_a_crash_and_undo_exactly(tmp_path: Path, where: str) -> None:
    """More moves than one group commit (BATCH_STEPS): the journal holds the start and the first
    batch's `begin_chunk` record, then the first batch's `done_chunk` with the second batch's
    `begin_chunk`, then the second batch's `done_chunk`. A crash right after the first begin
    chunk, halfway through the first batch's renames (its files moved by hand, as the crashed run
    left them), after the first done chunk, or after the second begin chunk leaves each file in
    exactly one place, nothing moved that has no durable begin record; the resume records what
    was moved from the backup, moves the rest, and undo puts back every byte."""
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
    crash = {"first begin chunk": 2, "first renames": 2, "first done chunk": 3, "second begin chunk": 4}[where]
    _crashed_run(plan, ck, backup, crash)
    first = {s.path for s in steps[:BATCH_STEPS]}
    if where == "first renames":  # the crashed run renamed half the first batch
        for rel in sorted(first)[::2]:
            (backup / "files" / "checkpoint" / rel).parent.mkdir(parents=True, exist_ok=True)
            (ck / rel).rename(backup / "files" / "checkpoint" / rel)
    records = _per_step([json.loads(line) for line in (backup / JOURNAL_FILE).read_text().splitlines()], steps)
    events = [r["event"] for r in records]
    assert "finished" not in events
    begun = {steps[r["step"]].path for r in records if r["event"] == "begin"}
    done = {steps[r["step"]].path for r in records if r["event"] == "done"}
    moved = set(_tree(backup / "files" / "checkpoint")) if (backup / "files").exists() else set()
    assert moved <= begun  # nothing moved without a durable begin record
    assert set(_tree(ck)) == set(before) - moved  # each file in exactly one place
    assert begun == (set(before) if where == "second begin chunk" else first)
    assert done == (first if where in ("first done chunk", "second begin chunk") else set())
    assert moved == (set(sorted(first)[::2]) if where == "first renames" else done)

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
    _crashed_run(plan, ck, backup, 2)  # start, the begin chunk of the 12 moves: nothing moved

    def earlier(doc: dict) -> str:  # the earlier json_file: json.dumps text, one list item per line
        parts = []
        for key in sorted(doc):
            v = doc[key]
            body = ("[\n    " + ",\n    ".join(json.dumps(x, sort_keys=True) for x in v) + "\n  ]" if isinstance(v, list) and v
                    else json.dumps(v, sort_keys=True))
            parts.append(f"  {json.dumps(key)}: {body}")
        return "{\n" + ",\n".join(parts) + "\n}\n"

    journal = backup / JOURNAL_FILE
    records = _per_step([json.loads(line) for line in journal.read_text().splitlines()], steps)[:6]  # start, 5 begin
    old_lines = [json.dumps(r, sort_keys=True) + "\n" for r in records]
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
    _crashed_run(plan, ck, backup, 3)  # start, the begin chunk and the done chunk of the 12 moves
    journal = backup / JOURNAL_FILE
    records = _per_step([json.loads(line) for line in journal.read_text().splitlines()], steps)[:20]  # 7 done
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


def test_a_plan_refused_by_its_check_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan the check refuses (a step's folder is a symlink out of the checkpoint) changes
    nothing: nothing moved, no backup written, the lock released, the file outside untouched."""
    from streamctl.operations.plan import Refused
    from streamctl.operations.runner import Operation, Request, execute

    ck, _backup, before, plan = _batches_plan(tmp_path, monkeypatch)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "1.delta").write_bytes(b"not the checkpoint's")
    os.symlink(outside, ck / "state" / "elsewhere")
    plan.steps.insert(3, Step("move", "checkpoint", "state/elsewhere/1.delta", "old"))
    backup = tmp_path / "named-backup"
    with pytest.raises(Refused, match="elsewhere"):
        execute(Operation("test", verify=lambda _plan, _roots: (True, {})),
                Request(str(ck), lambda _op_id, _backup: plan, backup_dir=str(backup)))
    assert _tree(ck) == before and (outside / "1.delta").read_bytes() == b"not the checkpoint's"
    assert not backup.exists() or not any(backup.iterdir())
    assert not (ck / LOCK_FILE).exists()


def test_escaping_steps_finds_links_out_among_many_names_and_folders_that_lead_out(tmp_path: Path) -> None:
    """One listing answers for a folder of many steps (LISTING_FROM): a symlink out among 40 plain
    names is found; a folder that is itself a link out takes every name in it along."""
    from streamctl.operations.plan_checks import LISTING_FROM, escaping_steps

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


def test_a_run_s_last_records_are_durable_before_the_verified_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's executor (manifest_ahead) leaves its last done records and `finished` to be
    written while the runner verifies (`Journal.after`): the next record (`verified`) waits for
    them, however slow their write, so the journal reads start, the begin chunk, the done chunk,
    finished, verified in that order, with manifest.json in place."""
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
    assert events == ["start", "begin_chunk", "done_chunk", "finished", "verified"]
    assert (backup / MANIFEST_FILE).exists() and _tree(backup / "files" / "checkpoint") == before

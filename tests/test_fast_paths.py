"""The fast paths of the inspection give the plain answers.

The state inspector classifies a folder's names with a few regex calls over the joined listing,
and judges a store whose versions run without a hole without a loop per version. Storage reads
are sized by the file, and backups are walked with scandir. Each test below checks the fast
code against a plain statement of what it computes, on seeded random inputs or a small real tree.
No mocks: real files on the local file system.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import random
import sys
from pathlib import Path

import pytest

from streamctl.formats.checksum import is_checksum_name
from streamctl.formats.errors import StorageError
from streamctl.formats.names import is_temp_name
from streamctl.formats.state import state_file
from streamctl.inspectors.state_listing import StoreFiles
from streamctl.inspectors.state_restore import store_status
from streamctl.inspectors.storage import Storage, _read_fd
from streamctl.operations.files import Root


def _restorable(full: set[int], incr: set[int], top: int) -> set[int]:
    """The definition (docs/formats/state.md): version 0 is the empty store; version v restores
    from its own snapshot, or from its delta on top of version v - 1."""
    out = {0}
    for v in range(1, top + 1):
        if v in full or (v in incr and v - 1 in out):
            out.add(v)
    return out


def _random_store(rng: random.Random) -> tuple[set[int], set[int], list[str]]:
    low = rng.randint(0, 6)
    high = low + rng.randint(0, 30)
    full: set[int] = set()
    incr: set[int] = set()
    every_version = rng.random() < 0.5  # the usual store: no hole (the fast path)
    for v in range(low, high + 1):
        if every_version or rng.random() < 0.75:
            incr.add(v)
        if rng.random() < 0.15:
            full.add(v)
    if every_version and rng.random() < 0.5:
        incr -= {v for v in full if rng.random() < 0.5}  # a snapshot without its delta
    names = [f"{v}.delta" for v in incr] + [f"{v}.snapshot" for v in full]
    names += [f".{n}.crc" for n in names if rng.random() < 0.9]
    if rng.random() < 0.2:
        names += [f".{high + 1}.delta.{rng.randint(1, 9)}.tmp", "notes.txt", f"{low}.delta.crc", f"{high + 9}.snapshot.crc"]
    rng.shuffle(names)
    return full, incr, names


@pytest.mark.parametrize("seed", range(4))
def test_store_status_is_the_definition_with_or_without_holes(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(1500):
        full, incr, names = _random_store(rng)
        store = StoreFiles(0, 0, "default")
        store.add_names(names)
        versions = full | incr
        planned = rng.choice([None, max(versions, default=0), max(versions, default=0) - 2, rng.randint(0, 40)])
        required = rng.choice([None, 0, 1, min(versions, default=1), max(versions, default=1), rng.randint(0, 40)])
        s = store_status(store, required, planned, {})
        top = max(versions, default=0) if planned is None else min(max(versions, default=0), planned + 1)
        ok = _restorable(full, incr, top) if versions else {0}
        kept = sorted(ok - {0})
        assert s.restorable_versions == frozenset(ok), (sorted(full), sorted(incr), planned)
        assert s.first_restorable == (kept[0] if kept else None)
        assert s.durable_version == (kept[-1] if kept else None)
        holes = [a + 1 for a, b in zip(kept, kept[1:], strict=False) if b > a + 1]
        assert s.broken_at == (holes[0] if holes else None)
        assert s.restorable_required == (required in ok if required else True)
        assert s.newest_snapshot == max(full, default=None)
        limit = None if planned is None else planned + 1
        above = sorted(v for v in versions if limit is not None and v > limit)
        assert sorted({state_file(n).version for n in s.orphans}) == above  # type: ignore[union-attr]


@pytest.mark.parametrize("seed", range(3))
def test_add_names_classifies_each_name_as_state_file_does(seed: int) -> None:
    rng = random.Random(100 + seed)
    for _ in range(800):
        _full, _incr, names = _random_store(rng)
        names += rng.sample(["7_a1b2.delta", "8_c3d4.snapshot", "9.zip", "3.changelog", ".7_a1b2.delta.crc",
                             "12.delta.crc", "x.delta", "_metadata.bak"], rng.randint(0, 4))
        store = StoreFiles(0, 0, "default")
        store.add_names(names)
        parsed = {n: state_file(n) for n in names}
        plain = {n: p for n, p in parsed.items() if p is not None and not p.companion and not n.startswith(".")}
        want_full = {p.version for p in plain.values() if p.unique_id is None and p.ext in ("snapshot", "zip")}
        want_incr = {p.version for p in plain.values() if p.unique_id is None and p.ext in ("delta", "changelog")}
        assert (store.full, store.incr) == (want_full, want_incr), names
        ids = {(p.version, p.unique_id) for p in plain.values() if p.unique_id is not None}
        got_ids = {(v, u) for table in (store.full_ids, store.incr_ids) for v, us in table.items() for u in us}
        assert got_ids == ids
        assert sorted(store.temp_files) == sorted(n for n in names if is_temp_name(n))
        assert store.has_crc == any(n.endswith(".crc") for n in names)
        assert all(store.lists(n) for n in names)
        assert not store.lists("absent.delta")
        visible_crc = [n for n in names if n.endswith(".crc") and not n.startswith(".")]
        assert store.orphan_crc == sorted(n for n in visible_crc if n[: -len(".crc")] not in names)
        assert store.other_files == sorted(
            n for n in names if not n.startswith(".") and state_file(n) is None and not is_temp_name(n)
            and not is_checksum_name(n))


def _fields(store: StoreFiles) -> dict[str, object]:
    return {f: getattr(store, f) for f in StoreFiles.__dataclass_fields__ if f not in ("listed", "sent", "shape")}


@pytest.mark.parametrize("seed", range(3))
def test_the_listing_memos_answer_as_a_fresh_classification_and_status(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """add_names and store_status remember their answers by the listing (the
    partitions of an operator list the same names). A store classified from the memo has the
    fields of a store classified with empty memos, in the same order, as its own copies; its
    status is the computed one with its own operator, partition, store and path; a store that
    is not new, or a copy of one (`without_file`), has no shape and is computed."""
    from streamctl.inspectors import state_listing, state_restore

    rng = random.Random(300 + seed)
    listings = [_random_store(rng)[2] for _ in range(60)]
    for _ in range(400):
        names = list(rng.choice(listings))
        op, part, name = rng.randint(0, 3), rng.randint(0, 300), rng.choice(["default", "left", "right"])
        required, planned = rng.choice([None, 0, 3, 12, 30]), rng.choice([None, 2, 12, 40])
        remembered = StoreFiles(op, part, name)
        remembered.add_names(names)
        with monkeypatch.context() as m:
            m.setattr(state_listing, "_CLASSIFIED", {})
            m.setattr(state_restore, "_STATUSES", {})
            fresh = StoreFiles(op, part, name)
            fresh.add_names(names)
            want = state_restore.store_status(fresh, required, planned, {})
        assert remembered.shape == fresh.shape and fresh.shape is not None and fresh.shape[0] == "\n".join(names)
        assert _fields(remembered) == _fields(fresh)
        assert [list(getattr(remembered, f)) for f in ("temp_files", "orphan_crc", "other_files")] == \
            [list(getattr(fresh, f)) for f in ("temp_files", "orphan_crc", "other_files")]
        got = store_status(remembered, required, planned, {})
        assert got == want and got.files is remembered and got.path == fresh.path
        remembered.full.add(10_000)  # its own sets: the memo and the next store are untouched
        remembered.temp_files.append("x.tmp")
        again = StoreFiles(op, part, name)
        again.add_names(names)
        assert _fields(again) == _fields(fresh)

    two = StoreFiles(0, 0, "default")
    two.add_names(["9.delta.tmp", "1.delta"])
    one = StoreFiles(0, 0, "default")
    one.add_names(["9.delta.tmp\n1.delta"])  # joined as `two`'s listing is: its own answer, no shape
    with monkeypatch.context() as m:
        m.setattr(state_listing, "_CLASSIFIED", {})
        alone = StoreFiles(0, 0, "default")
        alone.add_names(["9.delta.tmp\n1.delta"])
    assert two.shape is not None and one.shape is None and _fields(one) == _fields(alone) != _fields(two)
    store = StoreFiles(0, 0, "default")
    store.add_names(["1.delta", "2.delta"])
    store.add_names(["3.delta"])  # not new: computed from everything it holds
    assert store.shape is None and store_status(store, 3, 3, {}).restorable_versions == {0, 1, 2, 3}
    single = StoreFiles(0, 1, "default")
    single.add_names(["1.delta", "2.delta"])
    assert single.shape is not None
    torn = state_listing.without_file(single, 2, None, False)
    assert torn.shape is None and store_status(torn, 2, 2, {}).restorable_required is False
    assert store_status(single, 2, 2, {}).restorable_required is True
    # as read_state's child sends it (its shape), and a copy of that (a torn file): the same names
    import pickle

    sent = pickle.loads(pickle.dumps(single))
    assert sent.shape == single.shape and sent.names == single.names == ("1.delta", "2.delta")
    copy = state_listing.without_file(pickle.loads(pickle.dumps(single)), 2, None, False)
    assert copy.shape is None and copy.names == single.names and copy.lists("1.delta") and copy.incr == {1}


def _alike_checkpoint(root: Path) -> Path:
    """Three operators of six partitions (the third a join: stores left and right), listed mostly
    alike: a partition in three with one more snapshot, one with a temp file, one with another."""
    from tests.helpers import layouts

    def listing(snaps: tuple[int, ...], extra: tuple[str, ...] = ()) -> list[str]:
        names = [f"{v}.delta" for v in range(1, 22)] + [f"{v}.snapshot" for v in snaps]
        return names + [f".{n}.crc" for n in names] + list(extra)

    state: dict[str, list[str]] = {}
    for p in range(6):
        for op in (0, 1):
            state[f"{op}/{p}"] = listing((10, 20) if p % 3 else (10, 15, 20),
                                         (".21.delta.5e1f.tmp",) if (op, p) == (1, 4) else ())
        for side in ("left", "right"):
            state[f"2/{p}/{side}"] = listing((10, 20) if p != 3 else (10, 17, 20))
    meta = layouts.META.replace('"2"', '"6"')
    return layouts.build(root / "chk", planned=20, committed=20, state=state, meta=meta)


def test_plans_worked_out_once_per_shape_are_those_worked_out_store_by_store(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """align's roll back and trim work out the files of the stores listed alike (one `shape`)
    once: their plans (steps in order, reasons, reclaimable sizes) are those made with no store
    shaped, each store on its own; and the shapes were used (fewer listings parsed)."""
    from streamctl.operations import align, align_checkpoint_steps, trim

    ck = _alike_checkpoint(tmp_path)
    parsed: list[int] = []
    for module in (align_checkpoint_steps, trim):  # the modules that parse a store's listing
        real = module.state_versions
        monkeypatch.setattr(module, "state_versions", lambda *a, real=real: parsed.append(1) or real(*a))

    def plans() -> tuple[object, ...]:
        parsed.clear()
        rolled = align.plan_align(align.AlignRequest(str(ck), to="15", allow_duplicates=True))[0]
        trimmed, sizes = trim.plan_trim(trim.TrimRequest(str(ck), keep_epochs=5))
        assert len(rolled.steps) > 250 and len(trimmed.steps) > 250
        return [s.to_record() for s in rolled.steps], [s.to_record() for s in trimmed.steps], sizes, len(parsed)

    *shaped, parsed_shaped = plans()
    real_add = StoreFiles.add_names

    def unshaped(self: StoreFiles, names: list[str]) -> None:
        real_add(self, names)
        self.shape = None

    monkeypatch.setattr(StoreFiles, "add_names", unshaped)
    *alone, parsed_alone = plans()
    assert shaped == alone
    assert parsed_alone == 2 * 24 and parsed_shaped <= 2 * 6, (parsed_shaped, parsed_alone)  # 24 stores, 6 shapes


def test_local_reads_are_sized_by_the_file_and_keep_the_limit(tmp_path: Path) -> None:
    (tmp_path / "ten").write_bytes(b"0123456789")
    (tmp_path / "eleven").write_bytes(b"0123456789a")
    (tmp_path / "empty").write_bytes(b"")
    st = Storage.open(str(tmp_path))
    assert st.read("ten", 10) == b"0123456789"
    assert st.read("empty", 10) == b""
    with pytest.raises(StorageError, match="larger than 10 bytes"):
        st.read("eleven", 10)
    # a file that grew after its fstat: read to its end, never past the limit
    grown = tmp_path / "grown"
    grown.write_bytes(b"x" * 5000)
    fd = os.open(grown, os.O_RDONLY)
    try:
        assert _read_fd(fd, 3, 1 << 20) == b"x" * 5000
        os.lseek(fd, 0, os.SEEK_SET)
        assert len(_read_fd(fd, 3, 100)) == 100  # the caller sees more than its limit: refused
    finally:
        os.close(fd)


def _os_walk_sizes(base: str) -> list[tuple[str, int]]:
    """What os.walk gives (links to folders not followed): what Root.walk_sizes must answer."""
    out = []
    for dirpath, _dirs, files in os.walk(base):
        for f in files:
            path = os.path.join(dirpath, f)
            out.append((os.path.relpath(path, base).replace(os.sep, "/"), os.lstat(path).st_size))
    return sorted(out)


def test_backup_walk_is_os_walk_s_answer(tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    files = backup / "files"
    for rel, size in (("checkpoint/offsets/1", 5), ("checkpoint/state/0/0/1.delta", 12),
                      ("checkpoint/state/0/0/.1.delta.crc", 12), ("sink/_spark_metadata/0", 40), ("top", 1)):
        (files / rel).parent.mkdir(parents=True, exist_ok=True)
        (files / rel).write_bytes(b"z" * size)
    (files / "empty-folder").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"p" * 99)
    os.symlink(outside, files / "checkpoint" / "link-to-folder")  # not followed, not a file
    os.symlink(tmp_path / "nowhere", files / "dangling")  # a file entry: its own size
    os.symlink(outside / "precious", files / "sink" / "link-to-file")
    root = Root("backup", str(backup))
    want = _os_walk_sizes(str(files))
    assert root.walk_sizes("files") == want
    assert root.walk_files("files") == [name for name, _ in want]
    assert root.tree_size("files") == (len(want), sum(size for _, size in want))
    assert root.walk_sizes("missing") == []


def test_large_json_documents_print_compact_and_read_back(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """--json documents (console/render.py emit_json): up to PRETTY_LIMIT characters json.dumps'
    indented text, as before; larger ones (a 100,000-step plan) orjson's compact text on one line,
    which reads back to the same document, also with a file name that is not UTF-8 (orjson refuses
    its lone surrogate: json.dumps encodes that document)."""
    from streamctl.console.render import PRETTY_LIMIT, emit_json

    small = {"b": [1, 2], "a": "é"}
    emit_json(small)
    assert capsys.readouterr().out == json.dumps(small, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    steps = [{"path": f"state/0/{i}/{i}.delta", "action": "move", "reason": "x é"} for i in range(PRETTY_LIMIT // 40)]
    sys.stdout.reconfigure(errors="backslashreplace")  # as the CLI does (cli/app.py _utf8_output)
    for odd in ("state/\u2028.delta", os.fsdecode(b"state/\xff.delta")):
        doc = {"plan": {"steps": steps + [{"path": odd}]}, "kind": "Plan"}
        emit_json(doc)
        out = capsys.readouterr().out
        assert out.count("\n") == 1 and len(out) > PRETTY_LIMIT
        assert json.loads(out) == doc
    # a large document's bytes go past the text layer (a pipe's, which holds text until it is
    # flushed; capsys's writes through): what that layer held is written first
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="utf-8"))
    sys.stdout.write("before ")
    emit_json({"steps": steps})
    out = raw.getvalue().decode()
    assert out.startswith("before {") and json.loads(out[len("before "):]) == {"steps": steps}


@pytest.mark.parametrize("odd", [None, 'a"b.delta', "tab\tname.delta", "line\nbreak.delta", os.fsdecode(b"\xff.delta"),
                                 "\x7f\u2028\u00e9.delta"])
@pytest.mark.parametrize("batch", [8, None])
def test_a_manifest_of_renames_is_its_entries_encoded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      odd: str | None, batch: int | None) -> None:
    """A run whose steps were all renames writes `done_chunk` records, and manifest.json holds
    the bytes `json_file` writes for their entries (what resume and undo read back from the
    journal), names that need a JSON escape included; the entries say what was moved."""
    from streamctl.formats.journal import json_file
    from streamctl.operations import executor
    from streamctl.operations.backup_folder import MANIFEST_FILE
    from streamctl.operations.executor import RENAMED, Executor
    from streamctl.operations.plan import Plan, Step

    if batch is not None:
        monkeypatch.setattr(executor, "BATCH_STEPS", batch)

    sink = tmp_path / "sink"
    names = [f"_spark_metadata/{n}" for n in range(40)] + [f"part-{n}.parquet" for n in range(5)]
    if odd is not None:
        names.append(f"_spark_metadata/{odd}")
    data = {}
    for n, rel in enumerate(names):
        (sink / rel).parent.mkdir(parents=True, exist_ok=True)
        data[rel] = b"x" * n
        (sink / rel).write_bytes(data[rel])
    steps = [Step("move", "sink", rel, "test") for rel in names]
    plan = Plan("align", {"sink": str(sink)}, "rollback", 0, "exactly-once", steps, "aligned", op_id="t")
    roots = {"sink": Root("sink", str(sink))}
    ex = Executor(plan, roots, Root("backup", str(tmp_path / "backup")))
    ex.write_plan()
    state = ex.run()
    ex.journal.settle()
    assert all(RENAMED in state.done[i] for i in range(len(steps)))
    records = [json.loads(line) for line in (tmp_path / "backup" / "journal.jsonl").read_text().splitlines()]
    chunked = [i for r in records if r["event"] == "done_chunk" for i in r["steps"]]
    assert sorted(chunked) == list(range(len(steps))) and not [r for r in records if r["event"] == "done"]
    read = ex.read_journal()  # the entries as resume and undo read them
    entries = [read.done[i]["manifest"] for i in range(len(steps))]
    written = (tmp_path / "backup" / MANIFEST_FILE).read_bytes()
    assert written == json_file({"op_id": "t", "command": "align", "roots": plan.roots, "files": entries})
    head = Root("sink", str(sink)).uri("")
    assert json.loads(written)["files"] == [
        {"root": "sink", "path": rel, "uri": head.rstrip("/") + "/" + rel, "backup": f"files/sink/{rel}",
         "action": "moved", "size": len(data[rel]), "sha256": hashlib.sha256(data[rel]).hexdigest()} for rel in names]



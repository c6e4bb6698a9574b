"""Property-style checks of the mutation invariants on generated hostile trees: nested
steps, symlinks out of the root, paths through them, huge ids, files where folders are expected.
Seeded generators (deterministic, no Spark: the planners are covered by tests/test_hostile.py);
every case goes through the runner's checks (operations.plan_checks.check_plan) and the executor:

* no byte lost: every file present before is in place or in the backup with its sha256;
* nothing outside the roots touched;
* undo restores the tree exactly; a refused plan changes nothing;
* bounded time.
"""
from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

from helpers.trees import tree
from streamctl.operations.executor import Executor
from streamctl.operations.files import Root
from streamctl.operations.journal import Conflict
from streamctl.operations.plan import Plan, Refused, Step
from streamctl.operations.plan_checks import (
    LISTING_FROM,
    _may_nest,
    _real_folder,
    check_backup_target,
    check_plan,
    escaping_steps,
    nested_steps,
)

CASES = 60


def build(rng: random.Random, base: Path) -> tuple[Path, Path, list[str]]:
    """A sink root with files in nested folders, links out of it, and an outside folder."""
    sink, outside = base / "sink", base / "outside"
    outside.mkdir(parents=True)
    (outside / "precious").write_bytes(b"outside")
    names: list[str] = []
    for i in range(rng.randint(3, 12)):
        depth = rng.randint(0, 3)
        folder = "/".join(rng.choice(["_spark_metadata", "a", "b", "part=1", str(2 ** 63 - 1)]) for _ in range(depth))
        rel = f"{folder}/{rng.choice(['0', '9223372036854775807', 'x.json', '.1.crc'])}{i}".lstrip("/")
        p = sink / rel
        if any(Path(sink, *Path(rel).parts[:k]).is_file() for k in range(1, len(Path(rel).parts))):
            continue  # a file where this path needs a folder
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(rng.randint(0, 64)))
        names.append(rel)
    if rng.random() < 0.7:
        os.symlink(outside, sink / "escape")
        names += ["escape/precious", "escape"]
    if rng.random() < 0.3:
        os.symlink(outside / "precious", sink / "link-file")
        names.append("link-file")
    return sink, outside, names


def plan_of(rng: random.Random, sink: Path, names: list[str]) -> Plan:
    folders = sorted({str(Path(n).parent) for n in names if str(Path(n).parent) != "."})
    pool = names + folders + ["missing/0", "9223372036854775807"]
    steps = []
    for path in rng.sample(pool, k=min(len(pool), rng.randint(1, 8))):
        if rng.random() < 0.15:
            steps.append(Step("write", "sink", path, "hostile write", content=b"new"))
        else:
            steps.append(Step("move", "sink", path, "hostile move"))
    return Plan("align", {"sink": str(sink)}, "rollback", 0, "exactly-once", steps, "aligned", op_id="prop")


@pytest.mark.parametrize("seed", range(CASES))
def test_no_byte_lost_nothing_outside_touched_undo_exact(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    sink, outside, names = build(rng, tmp_path)
    plan = plan_of(rng, sink, names)
    before, before_out = tree(sink), tree(outside)
    roots = {"sink": Root("sink", str(sink))}
    t0 = time.monotonic()
    backup = check_backup_target(str(tmp_path / "backup"))
    try:
        check_plan(plan, roots)
    except Refused:
        assert tree(sink) == before and tree(outside) == before_out
        paths = [s.path for s in plan.steps]
        nested = any(a != b and b.startswith(a + "/") or (a == b and i != j)
                     for i, a in enumerate(paths) for j, b in enumerate(paths))
        escapes = any(p == "escape" or p.startswith("escape/") or p == "link-file" for p in paths)
        assert nested or escapes, plan.to_record()["steps"]
        return
    ex = Executor(plan, roots, backup)
    ex.write_plan()
    try:
        ex.run()
    except Conflict:
        pass
    # no byte lost: each file is in place or in the backup under files/sink/<path>
    after = tree(sink)
    backed = tree(tmp_path / "backup" / "files" / "sink") if (tmp_path / "backup" / "files").exists() else {}
    written = {s.path for s in plan.steps if s.action == "write"}
    for rel, sha in before.items():
        assert after.get(rel) == sha or backed.get(rel) == sha or rel in written and backed.get(rel) == sha, \
            (rel, plan.to_record()["steps"])
    assert tree(outside) == before_out
    Executor(plan, roots, backup).undo()
    assert tree(sink) == before
    assert time.monotonic() - t0 < 10


def test_the_executor_never_deletes_at_a_backup_path(tmp_path: Path) -> None:
    """A move whose backup path already holds other bytes is a Conflict; both copies stay."""
    sink = tmp_path / "sink"
    (sink / "_spark_metadata").mkdir(parents=True)
    (sink / "_spark_metadata" / "4").write_bytes(b"log 4")
    bdir = tmp_path / "backup"
    (bdir / "files" / "sink" / "_spark_metadata").mkdir(parents=True)
    (bdir / "files" / "sink" / "_spark_metadata" / "4").write_bytes(b"backed up earlier")
    plan = Plan("align", {"sink": str(sink)}, "rollback", 3, "exactly-once",
                [Step("move", "sink", "_spark_metadata/4", "x")], "aligned", op_id="t")
    with pytest.raises(Conflict, match="refusing to overwrite a backed-up file"):
        Executor(plan, {"sink": Root("sink", str(sink))}, Root("backup", str(bdir))).run()
    assert (sink / "_spark_metadata" / "4").read_bytes() == b"log 4"
    assert (bdir / "files" / "sink" / "_spark_metadata" / "4").read_bytes() == b"backed up earlier"


def test_nesting_steps_are_refused_whatever_their_order(tmp_path: Path) -> None:
    for order in (["_spark_metadata/0", "_spark_metadata"], ["_spark_metadata", "_spark_metadata/0"],
                  ["a", "a"]):
        plan = Plan("align", {"sink": str(tmp_path)}, "rollback", 0, "exactly-once",
                    [Step("move", "sink", p, "x") for p in order], "aligned")
        with pytest.raises(Refused, match="nest"):
            check_plan(plan, {"sink": Root("sink", str(tmp_path))})
    ok = Plan("align", {"sink": str(tmp_path)}, "rollback", 0, "exactly-once",
              [Step("move", "sink", p, "x") for p in ("a/0", "a0", "a-b", "ab/0")], "aligned")
    check_plan(ok, {"sink": Root("sink", str(tmp_path))})


@pytest.mark.parametrize("seed", range(20))
def test_the_quick_nesting_check_misses_no_pair_the_sort_finds(seed: int) -> None:
    """`_may_nest` (sets, one pass) is False only where the sort of every path finds no pair:
    paths drawn from a small alphabet with "/", so nesting, equal paths and near misses
    ("a0" beside "a/0", "a//b", a trailing "/") all come up."""
    rng = random.Random(seed)
    for _ in range(200):
        paths = ["".join(rng.choice("ab/") for _ in range(rng.randint(1, 5))) for _ in range(rng.randint(1, 6))]
        ordered = sorted(p + "/" for p in paths)
        sorted_finds = any(b.startswith(a) for a, b in zip(ordered, ordered[1:], strict=False))
        if sorted_finds:
            assert _may_nest(paths), paths
        plan = Plan("align", {"sink": "/x"}, "rollback", 0, "exactly-once", [Step("move", "sink", p, "x") for p in paths],
                    "aligned")
        assert bool(nested_steps(plan)) == sorted_finds, paths


def test_folders_resolve_as_realpath_resolves_them(tmp_path: Path) -> None:
    """`_real_folder` (a folder's real path from its parent's, one lstat) gives what
    os.path.realpath gives: symlinked folders inside the root, out of it, to a relative target,
    chained, dangling, a file where a folder should be, and names that do not exist."""
    root_dir = tmp_path / "root"
    (root_dir / "a" / "b" / "c").mkdir(parents=True)
    (root_dir / "f").write_bytes(b"x")
    (tmp_path / "out" / "deep").mkdir(parents=True)
    os.symlink(tmp_path / "out", root_dir / "a" / "out")
    os.symlink("b", root_dir / "a" / "rel")  # a relative target, inside
    os.symlink(root_dir / "a" / "rel", root_dir / "chain")  # a link to a link
    os.symlink(tmp_path / "nowhere", root_dir / "dangling")
    os.symlink("..", root_dir / "a" / "up")
    heads = ["a", "a/b", "a/b/c", "a/out", "a/out/deep", "a/out/deep/x", "a/rel", "a/rel/c", "chain", "chain/c",
             "dangling", "dangling/x", "f", "f/x", "missing", "missing/x/y", "a/up", "a/up/a/out/deep"]
    root = Root("sink", str(root_dir))
    top = os.path.realpath(root_dir)
    resolved: dict[tuple[str, str], str] = {}
    for head in heads + heads[::-1]:  # each from scratch, then again from the cache
        assert _real_folder(root, "sink", head, top, resolved) == os.path.realpath(root_dir / head), head
    plan = Plan("align", {"sink": str(root_dir)}, "rollback", 0, "exactly-once",
                [Step("move", "sink", f"{h}/n", "x") for h in heads], "aligned")
    escaping = escaping_steps(plan, {"sink": root})
    outside = [h for h in heads if not os.path.realpath(root_dir / h / "n").startswith(top + os.sep)]
    assert outside == ["a/out", "a/out/deep", "a/out/deep/x", "dangling", "dangling/x", "a/up/a/out/deep"]
    assert [e.split(" (resolves")[0] for e in escaping] == [root.uri(f"{h}/n") for h in outside]


@pytest.mark.parametrize("seed", range(6))
def test_the_escape_check_finds_what_realpath_of_every_step_finds(tmp_path: Path, seed: int) -> None:
    """`escaping_steps` (folders counted at once, names looked at only where a folder holds a
    symlink or few steps) reports exactly the steps whose path os.path.realpath takes out of the
    root: random folders of many and of few steps, file symlinks out and in among them, folder
    symlinks out and in, steps on missing names; and `check_plan` refuses exactly then."""
    rng = random.Random(seed)
    root_dir, out = tmp_path / "root", tmp_path / "out"
    out.mkdir()
    (out / "x").write_bytes(b"x")
    steps: list[str] = []
    for f in range(rng.randint(2, 6)):
        folder = root_dir / f"d{f}"
        folder.mkdir(parents=True)
        for n in range(rng.choice([1, 3, LISTING_FROM - 1, LISTING_FROM, 40])):
            (folder / f"{n}.delta").write_bytes(b"v")
            if rng.random() < 0.8:
                steps.append(f"d{f}/{n}.delta")
        if rng.random() < 0.4:  # a file symlink out, as a step or only beside the steps
            os.symlink(out / "x", folder / "link-out")
            if rng.random() < 0.6:
                steps.append(f"d{f}/link-out")
        if rng.random() < 0.3:
            os.symlink("0.delta", folder / "link-in")
            steps.append(f"d{f}/link-in")
        if rng.random() < 0.2:
            steps.append(f"d{f}/missing")
    os.symlink(out, root_dir / "away")  # a folder symlink out
    os.symlink("d0", root_dir / "here")  # and one in
    for name in ("away", "here"):
        if rng.random() < 0.7:
            steps += [f"{name}/x", f"{name}/0.delta"][: rng.randint(1, 2)]
    rng.shuffle(steps)
    root = Root("sink", str(root_dir))
    plan = Plan("align", {"sink": str(root_dir)}, "rollback", 0, "exactly-once",
                [Step("move", "sink", p, "x") for p in steps], "aligned")
    top = os.path.realpath(root_dir)
    want = sorted(root.uri(p) for p in steps if not os.path.realpath(root_dir / p).startswith(top + os.sep))
    got = sorted(e.split(" (resolves")[0] for e in escaping_steps(plan, {"sink": root}))
    assert got == want, steps
    if want:
        with pytest.raises(Refused, match="outside the named roots"):
            check_plan(plan, {"sink": root})
    else:
        check_plan(plan, {"sink": root})


def _run_then_forget_done(tmp_path: Path, refill: dict[str, bytes]) -> tuple[Path, Path, Plan]:
    """Move `_spark_metadata` away, then drop the journal's done record (as a crash before the
    group commit wrote it would) and make the folder again with `refill` in it."""
    sink, bdir = tmp_path / "sink", tmp_path / "backup"
    (sink / "_spark_metadata").mkdir(parents=True)
    (sink / "_spark_metadata" / "0").write_bytes(b"v1\n{}")
    plan = Plan("drop-sink", {"sink": str(sink)}, "rollback", 0, "exactly-once",
                [Step("move", "sink", "_spark_metadata", "x")], "retired", op_id="t")
    ex = Executor(plan, {"sink": Root("sink", str(sink))}, Root("backup", str(bdir)))
    ex.write_plan()
    ex.run()
    journal = bdir / "journal.jsonl"
    lines = journal.read_text().splitlines()
    keep = [ln for ln in lines if json.loads(ln)["event"] in ("start", "begin", "begin_chunk")]
    assert len(keep) < len(lines)
    journal.write_text("\n".join(keep) + "\n")
    (sink / "_spark_metadata").mkdir()
    for name, data in refill.items():
        (sink / "_spark_metadata" / name).write_bytes(data)
    return sink, bdir, plan


def test_resume_removes_an_empty_folder_made_again_after_its_move(tmp_path: Path) -> None:
    """A restart attempt of a retired file sink's query makes `_spark_metadata` again, empty,
    before it fails on the tombstone (as a real restart does): resume removes the
    empty folder (left there, it would hide the sink's files from readers of its log)."""
    sink, bdir, plan = _run_then_forget_done(tmp_path, {})
    Executor(plan, {"sink": Root("sink", str(sink))}, Root("backup", str(bdir))).run()
    assert not (sink / "_spark_metadata").exists()
    assert (bdir / "files" / "sink" / "_spark_metadata" / "0").read_bytes() == b"v1\n{}"


def test_resume_refuses_a_folder_made_again_with_files_in_it(tmp_path: Path) -> None:
    sink, bdir, plan = _run_then_forget_done(tmp_path, {"1": b"v1\nnew"})
    with pytest.raises(Conflict, match="refusing to overwrite a backed-up file"):
        Executor(plan, {"sink": Root("sink", str(sink))}, Root("backup", str(bdir))).run()
    assert (sink / "_spark_metadata" / "1").read_bytes() == b"v1\nnew"
    assert (bdir / "files" / "sink" / "_spark_metadata" / "0").read_bytes() == b"v1\n{}"

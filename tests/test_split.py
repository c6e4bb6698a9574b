"""The split inspection (inspectors/split.py) reports what the serial one does.

`read_state` shares the partition folders of a large local checkpoint with a forked child (one
forked by `fork_map`, or the early one the console script starts before the CLI's imports).
Every case runs in a fresh interpreter (a driver below): a fork is only made by a process with no
other thread, and the test process may hold Spark's. The driver records each `fork_map` call and
whether it joined the early child, so a test that meant to split proves it did.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

from streamctl.formats.checksum import crc_name

# argv: split-min, the entry ("app": cli/app.py's main; "entry": the console script's, which may
# start the early child and end the process at once), then the CLI's arguments. Prints the CLI's
# stdout; on stderr, after each fork_map call, a line `SPLIT-CALLS <json>`: every call so far as
# [units, forked, joined the early child].
DRIVER = r"""
import json, os, sys
from streamctl.inspectors import split, state
calls = []
real, real_take = split.fork_map, split._take_early
def take(key, count):
    child = real_take(key, count)
    calls[-1][2] = child is not None
    if child is not None:
        pids["joined"].append(child.pid)
        sys.stderr.write("\nSPLIT-PIDS " + json.dumps(pids) + "\n")
    return child
def spy(fn, items, min_items, key=None):
    calls.append([len(items), len(items) >= max(min_items, 2) and split.can_fork(), False])
    try:
        return real(fn, items, min_items, key)
    finally:
        sys.stderr.write("\nSPLIT-CALLS " + json.dumps(calls) + "\n")
        sys.stderr.flush()
split.fork_map, split._take_early = spy, take
pids = {"started": [], "joined": []}  # the early children started, and those a fork_map call joined
real_start = split.start_early
def start_early(work):
    before = split._early
    real_start(work)
    if split._early is not None and split._early is not before:  # a child forked by this call
        pids["started"].append(split._early.pid)
        sys.stderr.write("\nSPLIT-PIDS " + json.dumps(pids) + "\n")
split.start_early = start_early
state.SPLIT_MIN_PARTITIONS = int(sys.argv[1])
entry = sys.argv[2]
sys.argv = ["streamctl"] + sys.argv[3:]
if os.environ.get("SPLIT_EARLY"):  # a child forked before anything, for this checkpoint (as the console script's)
    from streamctl.inspectors.chains import early_split
    split.start_early(lambda: early_split(os.environ["SPLIT_EARLY"]))
if entry == "entry":
    from streamctl.cli.entry import main
else:
    from streamctl.cli.app import main
main()
"""

# fork_map alone: argv is a case name; prints a JSON answer. `slow` gives each unit time, so both
# sides take some (a unit of no work is all done by the parent before the child has started).
UNIT = r"""
import json, os, signal, sys, threading, time
from streamctl.inspectors import split
from streamctl.inspectors.split import fork_map
case = sys.argv[1]
me = os.getpid()
def slow(fn):
    def run(x):
        time.sleep(0.002)
        return fn(x)
    return run
if case == "plain":
    out = fork_map(slow(lambda x: [x * x, os.getpid() == me]), list(range(100)), 2)
    print(json.dumps(out))
elif case == "child_raises":  # a unit of the child's fails: the parent computes it, raising as serial code would
    seen = []
    def fn(x):
        seen.append((x, os.getpid() == me))
        if x >= 90:
            raise ValueError(f"unit {x}")
        return x
    try:
        fork_map(slow(fn), list(range(100)), 2)
    except ValueError as exc:
        print(json.dumps({"error": str(exc), "parent_did": [x for x, here in seen if here]}))
elif case == "parent_raises":  # the parent's unit fails: the child is killed and reaped, nothing left behind
    def fn(x):
        if x == 3:
            raise KeyError("parent's unit")
        if os.getpid() != me:
            time.sleep(30)
        return x
    try:
        fork_map(slow(fn), list(range(100)), 2)
    except KeyError:
        pass
    try:
        os.waitpid(-1, os.WNOHANG)
        left = True
    except ChildProcessError:
        left = False
    print(json.dumps({"child_left": left}))
elif case == "child_killed":  # the child dies by a signal: the parent computes its units
    def fn(x):
        if os.getpid() != me:
            os.kill(os.getpid(), signal.SIGKILL)
        return [x, os.getpid() == me]
    print(json.dumps(fork_map(slow(fn), list(range(100)), 2)))
elif case == "common":  # one object in many of the child's answers: sent once, one object here too
    common = ("common", tuple(range(50)))
    out = fork_map(slow(lambda x: [x, common, os.getpid() == me]), list(range(100)), 2)
    theirs = [r for r in out if not r[2]]
    print(json.dumps({"values": [r[0] for r in out], "equal": all(r[1] == common for r in out),
                      "child_units": len(theirs), "objects": len({id(r[1]) for r in theirs})}))
elif case == "damaged":  # unit 95's answer does not unpickle here: it and every later message computed here
    def explode(x):
        if os.getpid() == me:
            raise ValueError("does not unpickle")
        return x
    class Bomb:
        def __init__(self, x):
            self.x = x
        def __reduce__(self):
            return explode, (self.x,)
    sys.modules["__main__"].explode = explode
    # `late` is first pickled in 95's message, after the bomb: the parent's memo misses it (and
    # what came after), so later messages' references to it would resolve to other objects
    late = ("late", tuple(range(5)))
    out = fork_map(slow(lambda x: [x, Bomb(x) if x == 95 else None, os.getpid() == me, late if x <= 95 else None]),
                   list(range(100)), 2)
    print(json.dumps({"values": [r[0] for r in out], "theirs": [r[0] for r in out if not r[2]],
                      "bomb_here": isinstance(out[95][1], Bomb),
                      "late": all(r[3] == late for r in out[:96]) and all(r[3] is None for r in out[96:])}))
elif case == "thread":  # another thread: no fork
    t = threading.Thread(target=time.sleep, args=(2,), daemon=True)
    t.start()
    print(json.dumps(fork_map(lambda x: os.getpid() == me, list(range(100)), 2)))
elif case == "spinner":  # rich's redraw thread of inspect's progress line does not stop the split
    import io
    from rich.console import Console
    console = Console(file=io.StringIO(), force_terminal=True)
    with console.status("inspecting..."):
        others = [t for t in threading.enumerate() if t is not threading.current_thread()]
        out = fork_map(slow(lambda x: os.getpid() == me), list(range(100)), 2)
    print(json.dumps({"threads": len(others), "here": sum(out)}))
elif case == "few":
    print(json.dumps(fork_map(lambda x: os.getpid() == me, list(range(10)), 64)))
elif case.startswith("tree_digest"):  # a folder's digest (operations/files.py): its files read on two cores
    import pathlib
    from streamctl.formats.errors import StorageError
    from streamctl.operations import files
    base = pathlib.Path(sys.argv[2])
    for k in range(1300):
        (base / "state" / str(k % 7)).mkdir(parents=True, exist_ok=True)
        (base / "state" / str(k % 7) / f"{k}.delta").write_bytes(os.urandom(k % 97))
    if case == "tree_digest_dangling":  # a file that does not read, late in the list: the child's
        (base / "state" / "6" / "9999.delta").symlink_to(base / "nowhere")
    calls = []
    real = split.fork_map
    def spy(fn, items, min_items, key=None):
        calls.append(len(items))
        return real(fn, items, min_items, key)
    split.fork_map = spy
    root = files.Root("checkpoint", str(base))
    answers = []
    for chunk in (files.DIGEST_CHUNK, 10**9):  # split, then serial
        files.DIGEST_CHUNK = chunk
        try:
            answers.append(list(root.tree_digest("state")))
        except StorageError as exc:
            answers.append(str(exc))
    print(json.dumps({"split": answers[0], "serial": answers[1], "calls": calls}))
elif case.startswith("early_"):  # a child started before the work is known, joined by its key
    items = list(range(100))
    def job():
        if case == "early_none":
            return None
        if case == "early_unjoined":  # long units: only the exit handler ends it in time
            return ("key", 7), lambda x: time.sleep(1), items
        return ("key", 7), slow(lambda x: [x * 3, os.getpid() == me]), items
    split.start_early(job)
    early = split._early.pid
    if case == "early_unjoined":  # the process ends without taking it: it ends too (atexit)
        print(json.dumps({"pid": early}))
        sys.exit(0)
    key = ("key", 7) if case == "early_joined" else ("other", 7)
    out = fork_map(slow(lambda x: [x * 3, os.getpid() == me]), items, 2, key)
    try:
        os.kill(early, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    print(json.dumps({"out": out, "early_alive": alive, "pending": split._early is not None}))
"""


def _unit(case: str, *args: str) -> Any:
    r = subprocess.run([sys.executable, "-c", UNIT, case, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_fork_map_shares_the_units_with_a_child() -> None:
    out = _unit("plain")
    assert [x for x, _ in out] == [x * x for x in range(100)]
    here = [i for i, (_, mine) in enumerate(out) if mine]
    assert here == list(range(len(here))) and 10 <= len(here) <= 90, here  # the first ones here, the rest there


def test_a_failure_in_the_childs_units_is_raised_by_the_parent_in_serial_order() -> None:
    out = _unit("child_raises")
    assert out["error"] == "unit 90"
    assert 90 in out["parent_did"]  # computed again here after the child failed


def test_a_failure_in_the_parents_units_leaves_no_child() -> None:
    assert _unit("parent_raises") == {"child_left": False}


def test_an_object_in_many_answers_is_sent_once_and_a_message_that_does_not_unpickle_ends_the_stream() -> None:
    """The child's messages share one pickler's memo (a store's shape is sent once): the
    parent's answers hold one object where the child's did. Once a message does not unpickle,
    the references of later ones cannot be trusted: the parent computes those units itself."""
    common = _unit("common")
    assert common["values"] == list(range(100)) and common["equal"] and common["child_units"] >= 2
    assert common["objects"] == 1, common
    damaged = _unit("damaged")
    assert damaged["values"] == list(range(100)) and damaged["bomb_here"] and damaged["late"]
    assert damaged["theirs"] and all(x > 95 for x in damaged["theirs"]), damaged  # 95 and below: here


def test_a_child_killed_by_a_signal_costs_time_not_answers() -> None:
    out = _unit("child_killed")
    assert out == [[x, True] for x in range(100)]


def test_the_progress_lines_redraw_thread_does_not_stop_the_split() -> None:
    out = _unit("spinner")
    assert out["threads"] == 1 and out["here"] < 100, out


def test_no_fork_with_another_thread_or_few_units() -> None:
    assert _unit("thread") == [True] * 100
    assert _unit("few") == [True] * 10


def test_an_early_child_is_joined_by_its_key_and_discarded_by_another() -> None:
    joined = _unit("early_joined")
    assert [x for x, _ in joined["out"]] == [x * 3 for x in range(100)]
    assert 0 < sum(mine for _, mine in joined["out"]) < 100, joined  # both took units
    assert joined["early_alive"] is False and joined["pending"] is False
    for case in ("early_other", "early_none"):  # a child for other work: ended, and the work done as without it
        other = _unit(case)
        assert [x for x, _ in other["out"]] == [x * 3 for x in range(100)], case
        assert other["early_alive"] is False and other["pending"] is False, case


def test_an_early_child_never_joined_ends_with_the_process() -> None:
    pid = _unit("early_unjoined")["pid"]
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_a_folders_digest_read_on_two_cores_is_the_serial_one(tmp_path: Path) -> None:
    """Root.tree_digest of a local folder of 1,300 files shares its reads with a forked child
    (drop-sink's pre-images and undo checks): the same digest as the serial reads; with a file
    that does not read among the child's, the same error."""
    whole = _unit("tree_digest", str(tmp_path / "a"))
    assert whole["calls"] == [3] and whole["split"] == whole["serial"], whole  # 1,300 files: 3 units of 512
    assert isinstance(whole["split"], list) and whole["split"][0] == sum(k % 97 for k in range(1300))
    broken = _unit("tree_digest_dangling", str(tmp_path / "b"))
    assert broken["calls"] == [3] and isinstance(broken["split"], str), broken
    assert broken["split"] == broken["serial"] and "9999.delta" in broken["split"], broken


def _inspect(checkpoint: Path, split_min: int, entry: str = "app") -> tuple[int, str, str, list[list[Any]]]:
    """(exit code, stdout, stderr, the fork_map calls [units, forked, joined the early child])."""
    return _cli(["inspect", "epochs", str(checkpoint), "--json"], split_min, entry)


def _cli(args: list[str], split_min: int, entry: str = "app", early: Optional[Path] = None,
         pids: Optional[dict[str, Any]] = None) -> tuple[int, str, str, list[list[Any]]]:
    """`streamctl ARGS` through the driver: (exit code, stdout, stderr, the fork_map calls);
    `early`: a checkpoint whose early child the driver starts before the CLI runs; `pids` gets
    the pids of the early children started and of those joined, in order."""
    env = dict(os.environ, STREAMCTL_QUIET_PERIOD="0", SPLIT_EARLY=str(early or ""))
    r = subprocess.run([sys.executable, "-c", DRIVER, str(split_min), entry, *args],
                       capture_output=True, text=True, timeout=120, env=env)
    lines = r.stderr.splitlines()
    calls = [json.loads(ln.split(" ", 1)[1]) for ln in lines if ln.startswith("SPLIT-CALLS ")]
    errors = "\n".join(ln for ln in lines if ln and not ln.startswith(("SPLIT-CALLS ", "SPLIT-PIDS ")))
    if pids is not None:
        pids.update(next((json.loads(ln.split(" ", 1)[1]) for ln in reversed(lines) if ln.startswith("SPLIT-PIDS ")), {}))
    return r.returncode, r.stdout, errors, calls[-1] if calls else []


def _damage(checkpoint: Path) -> list[str]:
    """One damage per partition folder, as incidents leave them, spread over both halves: a
    delta removed, one cut short, one with a flipped byte under its checksum, a temp file, an
    orphan version, a checksum left without its file."""
    done = []
    for op in sorted((checkpoint / "state").iterdir()):
        parts = sorted((p for p in op.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        folders = [sub for part in parts for sub in [part, *sorted(
            d for d in part.iterdir() if d.is_dir() and d.name not in ("SSTs", "logs", "_metadata"))]]
        for i, part in enumerate(folders):
            files = sorted((f for f in part.iterdir() if f.is_file() and f.suffix in (".delta", ".changelog")),
                           key=lambda f: int(f.name.split(".")[0].split("_")[0]))
            if not files:
                continue
            newest = files[-1]
            kind = i % 6
            if kind == 0:
                newest.unlink()
                (part / crc_name(newest.name)).unlink(missing_ok=True)
            elif kind == 1:
                data = newest.read_bytes()
                newest.write_bytes(data[: max(len(data) // 2, 1)])
                (part / crc_name(newest.name)).unlink(missing_ok=True)
            elif kind == 2 and (part / crc_name(newest.name)).exists():
                data = bytearray(newest.read_bytes())
                data[len(data) // 2] ^= 0xFF
                newest.write_bytes(bytes(data))
            elif kind == 3:
                (part / f".{newest.name}.5d1e.tmp").write_bytes(b"half")
            elif kind == 4:
                top = int(newest.name.split(".")[0].split("_")[0])
                shutil.copy(newest, part / newest.name.replace(str(top), str(top + 40), 1))
            elif kind == 5:
                (part / crc_name(f"{int(newest.name.split('.')[0].split('_')[0]) + 41}.delta")).write_bytes(b"crc")
            done.append(f"{part.relative_to(checkpoint)}: {kind}")
    return done


@pytest.mark.spark
def test_the_split_inspection_reports_what_the_serial_one_does(spark_checkpoints: dict[str, Path],
                                                                 fresh_copy: Any) -> None:
    """Every example scenario, as built and damaged in every partition: the JSON report and the
    exit code are the serial ones, byte for byte, and each stateful case was split."""
    compared = 0
    for name in sorted(spark_checkpoints):
        for damaged in (False, True):
            chk = fresh_copy(name)
            if damaged and not (chk / "state").is_dir():
                continue
            if damaged:
                assert _damage(chk), name
            serial = _inspect(chk, 10**9)
            split = _inspect(chk, 2)
            early = _inspect(chk, 2, "entry")  # the console script's way: the child started before the CLI's imports
            assert not any(forked for _, forked, _ in serial[3]), serial[3]
            assert split[:3] == serial[:3], (name, damaged)
            assert early[:3] == serial[:3], (name, damaged)
            if split[3] and split[3][0][0] >= 2:
                assert split[3][0][1] is True and split[3][0][2] is False, (name, split[3])  # it did split
                assert early[3][0][2] is True, (name, early[3])  # it joined the early child
                compared += 1
            if damaged:  # the damage shows (what each one means is other tests' business)
                assert "STATE_" in split[1], (name, split[1][:400])
    assert compared >= 6, compared


@pytest.mark.spark
def test_an_unreadable_folder_in_the_childs_units_is_named_as_the_serial_run_names_it(spark_checkpoints: dict[str, Path],
                                                                                      fresh_copy: Any) -> None:
    """A folder named like a state file in the last partition (the child's first unit): the
    child fails, the parent lists its units itself and exits 3 naming the folder, as the serial
    run does; the early child too."""
    chk = fresh_copy("agg_hdfs")
    parts = sorted((p for p in (chk / "state" / "0").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    (parts[-1] / "99.delta").mkdir()
    serial = _inspect(chk, 10**9)
    split = _inspect(chk, 2)
    early = _inspect(chk, 2, "entry")
    assert serial[0] == 3 and "99.delta" in serial[1] and "is a folder" in serial[1], serial
    assert split[:3] == serial[:3] and early[:3] == serial[:3]
    assert split[3][0][1] is True and early[3][0][2] is True


@pytest.mark.spark
def test_plan_previews_join_the_early_child_and_executed_plans_list_under_the_lock(spark_checkpoints: dict[str, Path],
                                                                                   fresh_copy: Any, tmp_path: Path) -> None:
    """The console script starts the early child for the plan previews of `align` and `trim` of
    one local checkpoint too (cli/entry.py): the plan's inspection joins it, and the plan's JSON is
    the serial run's, byte for byte. With --execute it starts none, and a child forked before the
    lock (its listings may predate another operation's) is discarded once the lock is taken: the
    plan lists under the lock, and the verification joins only the child the runner forks once
    every step is durable (runner._verify_ahead)."""
    chk = fresh_copy("agg_hdfs")
    newest = max(int(p.name) for p in (chk / "commits").iterdir() if p.name.isdigit())
    for args in (["trim", str(chk), "--keep-epochs", "1", "--json"],
                 ["align", str(chk), "--to", str(newest - 1), "--allow-duplicates", "--json"]):
        serial = _cli(args, 10**9)
        early = _cli(args, 2, "entry")
        assert serial[0] == 0 and json.loads(serial[1])["plan"]["steps"], (args, serial)
        assert early[:3] == serial[:3], args
        assert not serial[3][0][1] and early[3][0][2] is True, (args, serial[3], early[3])  # joined the early child
    done = {}
    for entry, split_min, before in (("app", 10**9, False), ("entry", 2, False), ("entry", 2, True)):
        copy = fresh_copy("agg_hdfs")
        pids: dict[str, Any] = {}
        code, out, err, calls = _cli(["trim", str(copy), "--keep-epochs", "1", "--json", "--execute", "--backup-dir",
                                      str(tmp_path / f"{entry}-{before}")], split_min, entry, copy if before else None, pids)
        doc = json.loads(out)
        assert code == 0 and doc["verified"] is True, (entry, err)
        done[(entry, before)] = ([(st["action"], st["root"], st["path"]) for st in doc["plan"]["steps"]], doc["after"])
        assert not [p for a, _r, p in done[(entry, before)][0] if a == "move" and (copy / p).exists()], entry  # moved away
        if entry == "entry":  # the plan listed under the lock (no child joined); the verification joined the
            # child forked after the steps, never one from before the lock
            assert [joined for _, _, joined in calls] == [False, True], calls
            assert len(pids["started"]) == 1 + before and pids["joined"] == pids["started"][-1:], pids
    assert done[("entry", False)] == done[("app", False)] == done[("entry", True)]

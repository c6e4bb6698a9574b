"""The split inspection (inspectors/split.py, issue 23 goal 1) reports what the serial one does.

`read_state` lists and judges half the partition folders of a large local checkpoint in a forked
child. Every case runs in a fresh interpreter (a driver below): a fork is only made by a process
with no other thread, and the test process may hold Spark's. The driver records each `fork_map`
call, so a test that meant to split proves it did.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamctl.formats.checksum import crc_name

# argv: split-min, then the CLI's arguments. Prints the CLI's stdout; on stderr the last line is
# the JSON list of [units, forked] of every fork_map call.
DRIVER = r"""
import json, sys
from streamctl.inspectors import split, state
calls = []
real = split.fork_map
def spy(fn, items, min_items):
    calls.append([len(items), len(items) >= max(min_items, 2) and split.can_fork()])
    return real(fn, items, min_items)
split.fork_map = spy
state.SPLIT_MIN_PARTITIONS = int(sys.argv[1])
sys.argv = ["streamctl"] + sys.argv[2:]
from streamctl.cli.app import main
try:
    main()
finally:
    sys.stderr.write("\n" + json.dumps(calls) + "\n")
"""

# fork_map alone: argv is a case name; prints a JSON answer
UNIT = r"""
import json, os, signal, sys, threading, time
from streamctl.inspectors.split import fork_map
case = sys.argv[1]
me = os.getpid()
if case == "plain":
    out = fork_map(lambda x: [x * x, os.getpid() == me], list(range(100)), 2)
    print(json.dumps(out))
elif case == "child_raises":  # a unit of the child's half fails: the parent computes it, raising as serial code would
    seen = []
    def fn(x):
        seen.append((x, os.getpid() == me))
        if x >= 90:
            raise ValueError(f"unit {x}")
        return x
    try:
        fork_map(fn, list(range(100)), 2)
    except ValueError as exc:
        print(json.dumps({"error": str(exc), "parent_did": [x for x, here in seen if here]}))
elif case == "parent_raises":  # the parent's half fails: the child is killed and reaped, nothing left behind
    def fn(x):
        if x == 3:
            raise KeyError("parent's unit")
        if os.getpid() != me:
            time.sleep(30)
        return x
    try:
        fork_map(fn, list(range(100)), 2)
    except KeyError:
        pass
    try:
        os.waitpid(-1, os.WNOHANG)
        left = True
    except ChildProcessError:
        left = False
    print(json.dumps({"child_left": left}))
elif case == "child_killed":  # the child dies by a signal: the parent computes its half
    def fn(x):
        if os.getpid() != me:
            os.kill(os.getpid(), signal.SIGKILL)
        return [x, os.getpid() == me]
    print(json.dumps(fork_map(fn, list(range(100)), 2)))
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
        out = fork_map(lambda x: os.getpid() == me, list(range(100)), 2)
    print(json.dumps({"threads": len(others), "here": sum(out)}))
elif case == "few":
    print(json.dumps(fork_map(lambda x: os.getpid() == me, list(range(10)), 64)))
"""


def _unit(case: str) -> Any:
    r = subprocess.run([sys.executable, "-c", UNIT, case], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_fork_map_computes_the_second_half_in_a_child() -> None:
    out = _unit("plain")
    assert [x for x, _ in out] == [x * x for x in range(100)]
    here = [i for i, (_, mine) in enumerate(out) if mine]
    assert here == list(range(len(here))) and 40 <= len(here) <= 60, here  # the first half here, the rest there


def test_a_failure_in_the_childs_half_is_raised_by_the_parent_in_serial_order() -> None:
    out = _unit("child_raises")
    assert out["error"] == "unit 90"
    assert 90 in out["parent_did"]  # computed again here after the child failed


def test_a_failure_in_the_parents_half_leaves_no_child() -> None:
    assert _unit("parent_raises") == {"child_left": False}


def test_a_child_killed_by_a_signal_costs_time_not_answers() -> None:
    out = _unit("child_killed")
    assert out == [[x, True] for x in range(100)]


def test_the_progress_lines_redraw_thread_does_not_stop_the_split() -> None:
    out = _unit("spinner")
    assert out["threads"] == 1 and out["here"] < 100, out


def test_no_fork_with_another_thread_or_few_units() -> None:
    assert _unit("thread") == [True] * 100
    assert _unit("few") == [True] * 10


def _inspect(checkpoint: Path, split_min: int) -> tuple[int, str, str, list[list[Any]]]:
    """(exit code, stdout, stderr, the fork_map calls [units, forked])."""
    env = dict(os.environ, STREAMCTL_QUIET_PERIOD="0")
    r = subprocess.run([sys.executable, "-c", DRIVER, str(split_min), "inspect", "epochs", str(checkpoint), "--json"],
                       capture_output=True, text=True, timeout=120, env=env)
    *errors, calls = r.stderr.strip().splitlines()
    return r.returncode, r.stdout, "\n".join(errors), json.loads(calls)


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
            assert not any(forked for _, forked in serial[3]), serial[3]
            assert split[:3] == serial[:3], (name, damaged)
            if split[3] and split[3][0][0] >= 2:
                assert split[3][0][1] is True, (name, split[3])  # it did split
                compared += 1
            if damaged:  # the damage shows (what each one means is other tests' business)
                assert "STATE_" in split[1], (name, split[1][:400])
    assert compared >= 6, compared


@pytest.mark.spark
def test_an_unreadable_folder_in_the_childs_half_is_named_as_the_serial_run_names_it(spark_checkpoints: dict[str, Path],
                                                                                      fresh_copy: Any) -> None:
    """A folder named like a state file in the last partition (the child's half): the child
    fails, the parent lists that half itself and exits 3 naming the folder, as the serial run does."""
    chk = fresh_copy("agg_hdfs")
    parts = sorted((p for p in (chk / "state" / "0").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    (parts[-1] / "99.delta").mkdir()
    serial = _inspect(chk, 10**9)
    split = _inspect(chk, 2)
    assert serial[0] == 3 and "99.delta" in serial[1] and "is a folder" in serial[1], serial
    assert split[:3] == serial[:3]
    assert split[3][0][1] is True

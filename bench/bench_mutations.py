#!/usr/bin/env python3
"""Benchmark the mutating commands on the large synthetic checkpoint of bench_inspect.py.

Run with `./dev bench-mutations` (see BENCHMARKS.md). Prints figures; not a test.

The checkpoint (cached under .bench/, built by bench/bench_inspect.py: 100 retained batches, 3
operators x 200 partitions x 100 HDFS state versions, about 132,000 files) is copied once per
timed command (and synced to disk before anything is timed). Timed in --runs alternating rounds
(default 3), each round running a..l once, in that order, each on a fresh copy:

a. `cp -a <chk> <backup>`: what an operator does by hand before editing a checkpoint (the baseline);
b. `streamctl align <chk>` plan only, on a copy where one state file of the newest version is
   deleted in one partition (the fault of STATE_UNRESTORABLE: a rollback of one epoch);
c. `streamctl align <chk> --allow-duplicates --execute` of that plan (lock, backup of every touched
   file with sha256, journal, re-inspection);
d. `streamctl align --undo <backup>` of that run;
e. `streamctl trim <chk> --keep-epochs 10` plan only and f. `--execute` (on an aligned copy);
g. the floor of that trim: plain renames (`os.rename`, each folder made once, nothing else) of the
   same files into a backup tree, in one Python process, on another fresh copy;
h. `streamctl align <chk> --to <newest - 50> --allow-duplicates --execute`: a rollback of 50 epochs,
   the same class of work as the trim (about 65,000 files moved);
i. its floor: plain renames of the files its plan moves;
j. `streamctl drop-sink <sink> --checkpoint <chk> --assume-stopped --execute` with a file sink up
   to the same newest batch next to the copy (tests/helpers/layouts.py `file_sink`) (its folders moved whole into the archive, every file of
   them hashed first: the pre-images its undo checks);
k. its floor: plain renames of every file under the folders its plan moves;
l. the folders' own renames (what `mv` does: a handful of renames), an INFO line.

Prints the medians, then each ratio with its floor beside it (trim, align --to and drop-sink
--execute / their renames, guard rail 5x; the same / cp -a, guard rail 1x; align --execute
of the fault / cp -a), as the ratio of the medians and the median and range of the per-round
ratios. `--partitions N` uses a smaller tree (cached apart) for a quick check of the script; the
figures of BENCHMARKS.md use the default 200.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # `python -P` does not put the script's folder first
    sys.path.insert(0, str(HERE))

import bench_inspect as bi  # bench/ is on sys.path (above)

if str(HERE.parent / "tests") not in sys.path:  # the tests' layout builders (a file sink's log)
    sys.path.insert(0, str(HERE.parent / "tests"))
from helpers.layouts import file_sink  # noqa: E402

# Guard rails, not targets: a mutation within 5x of the bare renames of what it moves and no
# slower than `cp -a` of the same checkpoint (plain code first; BENCHMARKS.md).
GOAL_VS_RENAMES = 5.0
GOAL_VS_CP = 1.0


def _copy(source: Path, ck: Path) -> None:
    """A fresh copy, written back to disk before anything is timed (os.sync): else the next
    command pays for the copy's dirty pages and 132,000 new inodes in its first fsync (the
    mutations fsync their journal; cp -a and the renames floor do not), which measures the
    copy, not the command."""
    shutil.copytree(source, ck, symlinks=True)
    os.sync()


def _set_aside(tree: Path) -> None:
    """Move a used tree into `trash/` beside it; the temporary folder holding both is deleted once
    every round is done. Deleting 132,000 files between rounds made every file the next rounds
    create slower: ext4 skips inodes freed in the last minutes when it allocates one
    (`recently_deleted` in `find_inode_bit`), and scans past each of them. Measured here: `cp -a`
    of the checkpoint 2.3 s when nothing was deleted for minutes, 24-48 s right after; the
    mutations' backup folders and the floors' parallel trees pay it too (BENCHMARKS.md). The price: a few GB of disk until the end."""
    trash = tree.parent / "trash"
    trash.mkdir(exist_ok=True)
    os.rename(tree, trash / f"{tree.name}-{time.monotonic_ns()}")


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, r


RENAME_FLOOR = """
import json, os, sys
made = set()
for src, dst in json.load(open(sys.argv[1])):
    parent = os.path.dirname(dst)
    if parent not in made:  # each folder made once (a makedirs per file would raise the floor)
        os.makedirs(parent, exist_ok=True)
        made.add(parent)
    os.rename(src, dst)
"""

ROLLBACK_EPOCHS = 50  # align --to: the newest batch minus this (h)


def _floor(pairs: list[tuple[str, str]], tmp: Path, env: dict[str, str]) -> float:
    """Seconds of plain renames of `pairs` ((source, destination) absolute paths), in one Python process."""
    paths_file = tmp / "floor-paths.json"
    paths_file.write_text(json.dumps(pairs))
    t, r = _run([sys.executable, "-c", RENAME_FLOOR, str(paths_file)], env)
    assert r.returncode == 0, r.stderr
    return t


def _files_under(root: Path) -> list[str]:
    """Every file under `root` (a file: itself), as absolute paths."""
    if not root.is_dir():
        return [str(root)]
    out = []
    for folder, _dirs, files in os.walk(root):
        out += [os.path.join(folder, f) for f in files]
    return out


def _align(exe: str, ck: Path, env: dict[str, str], times: dict[str, list[float]], steps: dict[str, int]) -> None:
    """b, c, d: align's plan, --execute and --undo on a copy with the fault."""
    t, r = _run([exe, "align", str(ck), "--allow-duplicates", "--json"], env)
    assert r.returncode == 0, r.stderr
    steps["align"] = len(json.loads(r.stdout)["plan"]["steps"])
    times["align plan"].append(t)
    t, r = _run([exe, "align", str(ck), "--allow-duplicates", "--execute", "--json"], env)
    assert r.returncode == 0 and json.loads(r.stdout)["verified"], r.stderr
    times["align --execute"].append(t)
    backup = json.loads(r.stdout)["backup"]
    t, r = _run([exe, "align", "--undo", backup], env)
    assert r.returncode == 0, r.stderr
    times["align --undo"].append(t)


def _align_to(exe: str, source: Path, ck: Path, tmp: Path, env: dict[str, str], times: dict[str, list[float]],
              steps: dict[str, int]) -> None:
    """h, i: a rollback of ROLLBACK_EPOCHS epochs and its floor, each on a fresh copy."""
    _copy(source, ck)
    newest = max(int(n) for n in os.listdir(ck / "offsets") if n.isdigit())
    argv = [exe, "align", str(ck), "--to", str(newest - ROLLBACK_EPOCHS), "--allow-duplicates", "--json"]
    _, r = _run(argv, env)
    assert r.returncode == 0, r.stderr
    moved = [s["path"] for s in json.loads(r.stdout)["plan"]["steps"] if s["action"] == "move" and s["root"] == "checkpoint"]
    steps["align --to"] = len(json.loads(r.stdout)["plan"]["steps"])
    t, r = _run([*argv, "--execute"], env)
    assert r.returncode == 0 and json.loads(r.stdout)["verified"], r.stderr
    times["align --to --execute"].append(t)
    _set_aside(ck)
    _copy(source, ck)
    renamed = tmp / "renamed-align"
    times["renames (align --to floor)"].append(_floor([(str(ck / p), str(renamed / p)) for p in moved], tmp, env))
    _set_aside(ck)
    _set_aside(renamed)


def _drop_sink(exe: str, source: Path, ck: Path, tmp: Path, env: dict[str, str], times: dict[str, list[float]],
               steps: dict[str, int]) -> None:
    """j, k, l: drop-sink of the copy and a file sink of its batches; the floors, each on a fresh copy."""
    sink = tmp / "sink"
    roots = {"checkpoint": ck, "sink": sink}

    def fresh() -> None:
        _copy(source, ck)
        # its log up to the newest committed batch, compacted every 10 as Spark's default
        file_sink(sink, max(int(n) for n in os.listdir(ck / "commits") if n.isdigit()), compact_every=10)
        os.sync()

    fresh()
    argv = [exe, "drop-sink", str(sink), "--checkpoint", str(ck), "--assume-stopped", "--json"]
    _, r = _run(argv, env)
    assert r.returncode == 0, r.stderr
    moves = [(roots[s["root"]] / s["path"]) for s in json.loads(r.stdout)["plan"]["steps"]
             if s["action"] == "move" and s["root"] in roots]
    steps["drop-sink"] = len(json.loads(r.stdout)["plan"]["steps"])
    t, r = _run([*argv, "--execute"], env)
    assert r.returncode == 0 and json.loads(r.stdout)["verified"], r.stderr
    times["drop-sink --execute"].append(t)
    for floor, whole in (("renames (drop-sink floor)", False), ("folder renames (drop-sink)", True)):
        _set_aside(ck)
        _set_aside(sink)
        fresh()
        dest = tmp / "renamed-drop"
        pairs = []
        for m in moves:
            base = dest / ("sink" if m.is_relative_to(sink) else "checkpoint")
            root = sink if m.is_relative_to(sink) else ck
            files = [str(m)] if whole else _files_under(m)
            pairs += [(f, str(base / os.path.relpath(f, root))) for f in files]
        steps["drop-sink files"] = len(pairs) if not whole else steps.get("drop-sink files", 0)
        times[floor].append(_floor(pairs, tmp, env))
        _set_aside(dest)
    _set_aside(ck)
    _set_aside(sink)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--dir", type=Path, default=None, help="the cached synthetic checkpoint (default: bench_inspect's)")
    p.add_argument("--skip-align", action="store_true", help="no align runs (b-d, h-i)")
    p.add_argument("--skip-drop-sink", action="store_true", help="no drop-sink runs (j-l)")
    p.add_argument("--partitions", type=int, default=bi.N_PARTITIONS,
                   help=f"shuffle partitions of the tree (default {bi.N_PARTITIONS}; fewer: a quick check, cached apart)")
    args = p.parse_args(argv)
    if args.runs < 1 or args.partitions < 8:
        p.error("--runs must be >= 1 and --partitions >= 8 (the fault goes into partition 7)")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    default_dir = bi.DEFAULT_DIR if args.partitions == bi.N_PARTITIONS else \
        bi.DEFAULT_DIR.with_name(f"checkpoint-{args.partitions}p")
    source = (args.dir or default_dir).resolve()
    info = bi.ensure_checkpoint(source, False, lambda m: print(m, file=sys.stderr), args.partitions)
    load_at_start = os.getloadavg()[0]
    exe = str(Path(sys.executable).with_name("streamctl"))
    env = dict(os.environ, STREAMCTL_QUIET_PERIOD="0")
    times: dict[str, list[float]] = {k: [] for k in (
        "cp -a (baseline)", "align plan", "align --execute", "align --undo", "trim plan", "trim --execute",
        "renames (trim floor)", "align --to --execute", "renames (align --to floor)", "drop-sink --execute",
        "renames (drop-sink floor)", "folder renames (drop-sink)")}
    steps: dict[str, int] = {}
    with tempfile.TemporaryDirectory(dir=source.parent) as tmp:
        for i in range(args.runs):
            ck = Path(tmp) / f"ck-{i}"
            _copy(source, ck)
            newest = max(int(n.split(".")[0]) for n in os.listdir(ck / "state/0/0") if n.endswith(".delta"))
            for name in os.listdir(ck / "state/0/7"):  # the newest version's delta and snapshot
                if name.lstrip(".").startswith(f"{newest}."):
                    os.remove(ck / "state/0/7" / name)
            os.sync()  # the fault's deletions too
            t, r = _run(["cp", "-a", str(ck), str(Path(tmp) / f"manual-{i}")], env)
            times["cp -a (baseline)"].append(t)
            if not args.skip_align:
                _align(exe, ck, env, times, steps)
            _set_aside(ck)
            _copy(source, ck)
            t, r = _run([exe, "trim", str(ck), "--keep-epochs", "10", "--json"], env)
            assert r.returncode == 0, r.stderr
            trim_paths = [s["path"] for s in json.loads(r.stdout)["plan"]["steps"]]
            steps["trim"] = len(trim_paths)
            times["trim plan"].append(t)
            t, r = _run([exe, "trim", str(ck), "--keep-epochs", "10", "--execute", "--json"], env)
            assert r.returncode == 0 and json.loads(r.stdout)["verified"], r.stderr
            times["trim --execute"].append(t)
            _set_aside(ck)
            _copy(source, ck)
            renamed = Path(tmp) / f"renamed-{i}"
            times["renames (trim floor)"].append(_floor([(str(ck / p), str(renamed / p)) for p in trim_paths], Path(tmp), env))
            _set_aside(ck)
            _set_aside(renamed)
            _set_aside(Path(tmp) / f"manual-{i}")
            if not args.skip_align:
                _align_to(exe, source, ck, Path(tmp), env, times, steps)
            if not args.skip_drop_sink:
                _drop_sink(exe, source, ck, Path(tmp), env, times, steps)
    report(info, steps, times, args.runs, load_at_start)
    return 0


def ratio_line(times: dict[str, list[float]], name: str, floor: str, goal: float | None) -> tuple[str, ...] | None:
    """One ratio of the same rounds: medians, the ratio of the medians (judged against the goal)
    and the median [min-max] of the per-round ratios (round i of `name` against round i of `floor`)."""
    a, b = times.get(name), times.get(floor)
    if not a or not b:
        return None
    ratio = statistics.median(a) / statistics.median(b)
    per_round = [x / y for x, y in zip(a, b, strict=False)]
    status = "INFO" if goal is None else ("PASS" if ratio <= goal else "MISS")
    return (name, f"{statistics.median(a):.2f}", floor, f"{statistics.median(b):.2f}", f"{ratio:.2f}x",
            f"{statistics.median(per_round):.2f}x [{min(per_round):.2f}-{max(per_round):.2f}]",
            "-" if goal is None else f"<= {goal:g}x", status)


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def report(info: dict, steps: dict[str, int], times: dict[str, list[float]], runs: int, load_at_start: float) -> None:
    g = bi.git_info()
    print(f"streamctl from git commit {g['short'] or '?'} ({g['branch']}: {g['subject']})")
    if g["uncommitted_outside_bench"]:
        print(f"  note: editable install with {len(g['uncommitted_outside_bench'])} uncommitted path(s) outside bench/")
    print(f"checkpoint: {info['files']} files; align plan: {steps.get('align', '-')} steps; trim plan: {steps['trim']} steps; "
          f"align --to plan: {steps.get('align --to', '-')} steps; drop-sink plan: {steps.get('drop-sink', '-')} steps "
          f"({steps.get('drop-sink files', '-')} files under what it moves); "
          f"{os.cpu_count()} CPUs; {runs} alternating rounds, each command on a fresh synced copy")
    print(f"load average (1 min) at start / end: {load_at_start:.2f} / {os.getloadavg()[0]:.2f}")
    print()
    base = statistics.median(times["cp -a (baseline)"])
    floor = statistics.median(times["renames (trim floor)"])  # the trim's: the "vs renames" column
    rows = []
    for name, ts in times.items():
        if ts:  # empty: --skip-align
            med = statistics.median(ts)
            rows.append((name, f"{med:.2f}", f"{min(ts):.2f}", f"{med / base:.2f}x", f"{med / floor:.2f}x"))
    print(table(("operation", "median s", "best s", "vs cp -a", "vs renames"), rows))
    print()
    ratios = [r for r in (ratio_line(times, "trim --execute", "renames (trim floor)", GOAL_VS_RENAMES),
                          ratio_line(times, "trim --execute", "cp -a (baseline)", GOAL_VS_CP),
                          ratio_line(times, "align --to --execute", "renames (align --to floor)", GOAL_VS_RENAMES),
                          ratio_line(times, "align --to --execute", "cp -a (baseline)", GOAL_VS_CP),
                          ratio_line(times, "drop-sink --execute", "renames (drop-sink floor)", GOAL_VS_RENAMES),
                          ratio_line(times, "drop-sink --execute", "cp -a (baseline)", GOAL_VS_CP),
                          ratio_line(times, "drop-sink --execute", "folder renames (drop-sink)", None),
                          ratio_line(times, "align --execute", "cp -a (baseline)", GOAL_VS_CP),
                          ratio_line(times, "renames (trim floor)", "cp -a (baseline)", None)) if r]
    print(table(("measured", "median s", "floor", "floor median s", "ratio of medians",
                 "per-round ratios: median [min-max]", "goal", "status"), ratios))


if __name__ == "__main__":
    sys.exit(main())

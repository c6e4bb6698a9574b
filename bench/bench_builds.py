#!/usr/bin/env python3
"""Compare builds of streamctl on the large synthetic checkpoint, alternating in one run.

Run with `./dev bench-builds --build before=/path/to/venv/bin/streamctl --build after=...` (see
BENCHMARKS.md). Prints figures; not a test.

Each build is a `streamctl` executable (a venv of a checkout at some commit). In each of --runs
rounds (default 5), on the checkpoint of bench_inspect.py (about 132,000 files, cached under
.bench/): `find | wc -l` once, then for each build in turn `inspect epochs --json`; then `cp -a`
of a fresh copy and the plain renames of the trim's files (the floors), then for each build in
turn `trim --keep-epochs 10 --execute` on a fresh synced copy. Builds take turns inside every
round, so a load spike from another process falls on all of them alike, and every round gives
each build a ratio of its own against the floors of that round.

Prints, per build: the medians, inspect against `find` (guard rail 5x), trim --execute against
the renames (5x) and against `cp -a` (1x), as ratios of the medians with the median and range of
the per-round ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # `python -P` does not put the script's folder first
    sys.path.insert(0, str(HERE))

import bench_inspect as bi  # noqa: E402  (bench/ is on sys.path, above)
import bench_mutations as bm  # noqa: E402


def _build(text: str) -> tuple[str, str]:
    name, sep, exe = text.partition("=")
    if not sep or not name or not os.access(exe, os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=EXECUTABLE (an executable streamctl)")
    return name, exe


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", type=_build, action="append", required=True, help="NAME=path of a streamctl executable")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--partitions", type=int, default=bi.N_PARTITIONS,
                   help=f"shuffle partitions of the tree (default {bi.N_PARTITIONS}; fewer: a quick check, cached apart)")
    args = p.parse_args(argv)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    source = (bi.DEFAULT_DIR if args.partitions == bi.N_PARTITIONS
              else bi.DEFAULT_DIR.with_name(f"checkpoint-{args.partitions}p")).resolve()
    info = bi.ensure_checkpoint(source, False, lambda m: print(m, file=sys.stderr), args.partitions)
    env = dict(os.environ, STREAMCTL_QUIET_PERIOD="0")
    load_at_start = os.getloadavg()[0]
    times: dict[str, list[float]] = {"find": [], "cp -a": [], "renames": []}
    for name, _exe in args.build:
        times[f"{name}: inspect"] = []
        times[f"{name}: trim --execute"] = []
    for name, exe in args.build:  # warm-up: each build's first run compiles nothing later rounds pay
        t, r = bm._run([exe, "inspect", "epochs", str(source), "--json"], env)
        if r.returncode not in (0, 1):
            sys.exit(f"bench_builds: {name}: inspect epochs exit {r.returncode}: {r.stderr.strip()[-300:]}")
    with tempfile.TemporaryDirectory(dir=source.parent) as tmp:
        for i in range(args.runs):
            t, r = bm._run(["sh", "-c", 'find "$1" -type f | wc -l', "sh", str(source)], env)
            times["find"].append(t)
            for name, exe in args.build:
                t, r = bm._run([exe, "inspect", "epochs", str(source), "--json"], env)
                times[f"{name}: inspect"].append(t)
            ck = Path(tmp) / f"ck-{i}"
            bm._copy(source, ck)
            t, r = bm._run(["cp", "-a", str(ck), str(Path(tmp) / f"manual-{i}")], env)
            times["cp -a"].append(t)
            t, r = bm._run([args.build[0][1], "trim", str(ck), "--keep-epochs", "10", "--json"], env)
            assert r.returncode == 0, r.stderr
            paths = [s["path"] for s in json.loads(r.stdout)["plan"]["steps"]]
            renamed = Path(tmp) / f"renamed-{i}"
            times["renames"].append(bm._floor([(str(ck / p), str(renamed / p)) for p in paths], Path(tmp), env))
            for tree in (ck, renamed, Path(tmp) / f"manual-{i}"):
                bm._set_aside(tree)
            for name, exe in args.build:
                bm._copy(source, ck)
                t, r = bm._run([exe, "trim", str(ck), "--keep-epochs", "10", "--execute", "--json"], env)
                assert r.returncode == 0 and json.loads(r.stdout)["verified"], f"{name}: {r.stderr[-300:]}"
                times[f"{name}: trim --execute"].append(t)
                bm._set_aside(ck)
            print(f"round {i + 1}/{args.runs} done", file=sys.stderr, flush=True)
    g = bi.git_info()
    print(f"bench_builds from git commit {g['short'] or '?'}; checkpoint: {info['files']} files; {os.cpu_count()} CPUs; "
          f"{args.runs} alternating rounds; builds: " + ", ".join(f"{n} = {e}" for n, e in args.build))
    print(f"load average (1 min) at start / end: {load_at_start:.2f} / {os.getloadavg()[0]:.2f}")
    print()
    rows = [(k, f"{statistics.median(v):.2f}", f"{min(v):.2f}") for k, v in times.items()]
    print(bm.table(("operation", "median s", "best s"), rows))
    print()
    ratios = []
    for name, _exe in args.build:
        for measured, floor, goal in ((f"{name}: inspect", "find", bi.STREAMCTL_MAX_RATIO_VS_FIND),
                                      (f"{name}: trim --execute", "renames", bm.GOAL_VS_RENAMES),
                                      (f"{name}: trim --execute", "cp -a", bm.GOAL_VS_CP)):
            row = bm.ratio_line(times, measured, floor, goal)
            if row:
                ratios.append(row)
    print(bm.table(("measured", "median s", "floor", "floor median s", "ratio of medians",
                    "per-round ratios: median [min-max]", "goal", "status"), ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())

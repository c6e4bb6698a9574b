#!/usr/bin/env python3
"""Benchmark the mutating commands on the large synthetic checkpoint of bench_inspect.py.

Run with `./dev bench-mutations` (see BENCHMARKS.md). Prints figures; not a test.

The checkpoint (cached under .bench/, built by bench/bench_inspect.py: 100 retained batches, 3
operators x 200 partitions x 100 HDFS state versions, about 132,000 files) is copied once per
timed run (and synced to disk before anything is timed), and one state file of the newest
version is deleted in one partition (the fault of STATE_UNRESTORABLE). Timed, median of --runs (default 3), each on a fresh copy:

a. `cp -a <chk> <backup>`: what an operator does by hand before editing a checkpoint (the baseline);
b. `streamctl align <chk>` plan only (inspection + planning, nothing changed);
c. `streamctl align <chk> --allow-duplicates --execute` (lock, backup of every touched file with
   sha256, journal, re-inspection);
d. `streamctl align --undo <backup>` of that run;
e. `streamctl trim <chk> --keep-epochs 10` plan only and f. `--execute` (on an aligned copy);
g. the floor of that trim: plain renames (`os.rename`, each folder made once, nothing else) of the
   same files into a backup tree, in one Python process, on another fresh copy.
"""
from __future__ import annotations

import argparse
import importlib.util
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


def _bench_inspect():
    spec = importlib.util.spec_from_file_location("bench_inspect", HERE / "bench_inspect.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _copy(source: Path, ck: Path) -> None:
    """A fresh copy, written back to disk before anything is timed (os.sync): else the next
    command pays for the copy's dirty pages and 132,000 new inodes in its first fsync (the
    mutations fsync their journal; cp -a and the renames floor do not), which measures the
    copy, not the command."""
    shutil.copytree(source, ck, symlinks=True)
    os.sync()


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, r


RENAME_FLOOR = """
import json, os, sys
ck, dest = sys.argv[1], sys.argv[2]
made = set()
for rel in json.load(open(sys.argv[3])):
    dst = os.path.join(dest, rel)
    parent = os.path.dirname(dst)
    if parent not in made:  # each folder made once (a makedirs per file would raise the floor)
        os.makedirs(parent, exist_ok=True)
        made.add(parent)
    os.rename(os.path.join(ck, rel), dst)
"""


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--dir", type=Path, default=None, help="the cached synthetic checkpoint (default: bench_inspect's)")
    p.add_argument("--skip-align", action="store_true", help="time only cp -a, trim and the renames floor")
    args = p.parse_args(argv)
    bi = _bench_inspect()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    source = (args.dir or bi.DEFAULT_DIR).resolve()
    info = bi.ensure_checkpoint(source, False, lambda m: print(m, file=sys.stderr))
    exe = str(Path(sys.executable).with_name("streamctl"))
    env = dict(os.environ, STREAMCTL_QUIET_PERIOD="0")
    times: dict[str, list[float]] = {k: [] for k in ("cp -a (baseline)", "align plan", "align --execute",
                                                      "align --undo", "trim plan", "trim --execute",
                                                      "renames (trim floor)")}
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
            shutil.rmtree(ck)
            _copy(source, ck)
            t, r = _run([exe, "trim", str(ck), "--keep-epochs", "10", "--json"], env)
            assert r.returncode == 0, r.stderr
            trim_paths = [s["path"] for s in json.loads(r.stdout)["plan"]["steps"]]
            steps["trim"] = len(trim_paths)
            times["trim plan"].append(t)
            t, r = _run([exe, "trim", str(ck), "--keep-epochs", "10", "--execute", "--json"], env)
            assert r.returncode == 0 and json.loads(r.stdout)["verified"], r.stderr
            times["trim --execute"].append(t)
            shutil.rmtree(ck)
            _copy(source, ck)
            paths_file = Path(tmp) / "trim-paths.json"
            paths_file.write_text(json.dumps(trim_paths))
            t, r = _run([sys.executable, "-c", RENAME_FLOOR, str(ck), str(Path(tmp) / f"renamed-{i}"), str(paths_file)], env)
            assert r.returncode == 0, r.stderr
            times["renames (trim floor)"].append(t)
            shutil.rmtree(ck)
            shutil.rmtree(Path(tmp) / f"renamed-{i}")
            shutil.rmtree(Path(tmp) / f"manual-{i}")
    base = statistics.median(times["cp -a (baseline)"])
    print(f"checkpoint: {info['files']} files; align plan: {steps.get('align', '-')} steps; trim plan: {steps['trim']} steps; "
          f"{os.cpu_count()} CPUs; median of {args.runs}")
    floor = statistics.median(times["renames (trim floor)"])
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'operation':<22} {'median s':>9} {'best s':>8} {'vs cp -a':>9} {'vs renames':>11}")
    for name, ts in times.items():
        if not ts:
            continue  # --skip-align
        med = statistics.median(ts)
        print(f"{name:<22} {med:>9.2f} {min(ts):>8.2f} {med / base:>8.2f}x {med / floor:>10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark fleet scans: `streamctl inspect epochs '<dir>/*'` over 1,000 checkpoints.

Run with `./dev bench-fleet` (see BENCHMARKS.md, "Fleet scans"). This script prints figures; it
is not a test and never fails because a figure is low (it exits 0 unless it cannot build the
fleet).

What it does:

1. Builds, once, 1,000 checkpoints under .bench/fleet/ (git-ignored; `--rebuild` forces a new
   set): clones of the two real PySpark 3.5 checkpoints in tests/fixtures/spark-3.5 (`agg_hdfs`:
   HDFS-backed state, `agg_rocksdb`: RocksDB state; offsets, commits, operator metadata, state
   files and Hadoop `.crc` sidecars exactly as Spark wrote them), alternating, each with its own
   query id in `metadata` (a fleet of copies sharing one id would only report QUERY_ID_CLASH).
2. Times, in this process, after one untimed warm-up run each (page cache warm), the same
   inspector (`streamctl.inspectors.fleet`) over all 1,000:
   a. sequential: `--workers 1`;
   b. threads: `--workers N` (default N = min(32, 4 x CPUs), the default on object stores);
   c. Spark: `--engine spark --master local[2]` with its default grouping of the checkpoints
      into tasks (two per core: `fleet.default_tasks`), and for comparison one task per checkpoint
      (`--spark-tasks 1000`; --spark-runs timed runs, default 1: 1,000 tasks take minutes).
      Session start-up and the first job (Python workers starting) are reported separately,
      not in the figures. `--no-spark` skips this part.
   and, for the user's view, the whole command as a subprocess (interpreter start included):
   `streamctl inspect epochs '<dir>/*' --json > /dev/null` with the default engine.
3. Prints checkpoints per second (best and median of --runs) and per core (the CPUs the engine
   may use: 1, all CPUs, 2), and checks that every engine returned the same records.

Only the standard library is imported at module level; PySpark is imported inside part c.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench_inspect import find_streamctl, git_info, machine_info  # bench/ is on sys.path: it holds this script

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / ".bench" / "fleet"
SOURCES = ROOT / "tests" / "fixtures" / "spark-3.5"
TEMPLATES = ("agg_hdfs", "agg_rocksdb")
GENERATOR_VERSION = 1
DEFAULT_COUNT = 1000


def ensure_fleet(root: Path, count: int, rebuild: bool, log) -> dict:
    stamp = root / ".generator"
    want = f"{GENERATOR_VERSION} {count}"
    if not rebuild and stamp.is_file() and stamp.read_text() == want:
        files = sum(len(f) for _d, _s, f in os.walk(root)) - 1
        return {"cached": True, "files": files}
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    log(f"building {count} checkpoints in {root} ...")
    t0 = time.perf_counter()
    for i in range(count):
        template = SOURCES / TEMPLATES[i % len(TEMPLATES)] / "checkpoint"
        dest = root / f"q{i:04d}-{TEMPLATES[i % len(TEMPLATES)]}"
        shutil.copytree(template, dest)
        (dest / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}, separators=(",", ":")))
    stamp.write_text(want)
    files = sum(len(f) for _d, _s, f in os.walk(root)) - 1
    return {"cached": False, "files": files, "build_seconds": round(time.perf_counter() - t0, 1)}


def timed(fn, runs: int, warmup: bool = True) -> dict:
    """One untimed warm-up call, then `runs` timed calls: best and median wall time, last result."""
    if warmup:
        fn()
    times = []
    result = None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return {"best_s": min(times), "median_s": statistics.median(times), "times_s": times, "result": result}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"where the fleet is built and cached (default: {DEFAULT_DIR})")
    p.add_argument("--count", type=int, default=DEFAULT_COUNT, help=f"checkpoints (default {DEFAULT_COUNT})")
    p.add_argument("--rebuild", action="store_true", help="rebuild the fleet even if cached")
    p.add_argument("--runs", type=int, default=3, help="timed runs per engine, after one warm-up run (default: 3)")
    p.add_argument("--workers", type=int, default=None, help="threads of the threads run (default: min(32, 4 x CPUs))")
    p.add_argument("--spark-runs", type=int, default=1, help="timed runs of the one-task-per-checkpoint Spark engine (default: 1)")
    p.add_argument("--master", default="local[2]", help="Spark master of the Spark run (default: local[2])")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark engine")
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    args = p.parse_args(argv)
    if args.runs < 1 or args.count < 1:
        p.error("--runs and --count must be >= 1")

    log = (lambda msg: print(f"bench: {msg}", file=sys.stderr, flush=True))
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from streamctl.inspectors import fleet

    root = args.dir.resolve()
    info = ensure_fleet(root, args.count, args.rebuild, log)
    try:
        load_at_start = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load_at_start = None
    cpus = os.cpu_count() or 1
    workers = args.workers or fleet.default_workers(remote=True)
    targets = [fleet.Target(c) for c in fleet.expand([f"{root}/*"])]
    n = len(targets)
    results: dict = {}

    def records(queries) -> list:
        return [q.to_record() for q in queries]

    log(f"sequential (--workers 1), {args.runs} runs after 1 warm-up ...")
    results["sequential"] = timed(lambda: records(fleet.run_local(targets, 1, 0.0)), args.runs)
    results["sequential"]["cores"] = 1
    log(f"threads (--workers {workers}) ...")
    results["threads"] = timed(lambda: records(fleet.run_local(targets, workers, 0.0)), args.runs)
    results["threads"]["cores"] = cpus
    results["threads"]["workers"] = workers

    if not args.no_spark:
        log(f"Spark engine ({args.master}): starting a session ...")
        t0 = time.perf_counter()
        import pyspark

        runner = fleet.SparkRunner(args.master, app_name="streamctl-bench-fleet")
        session_s = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            runner.run(targets[:4], 0.0)  # Python workers start
            first_job_s = time.perf_counter() - t0
            cores = runner.spark.sparkContext.defaultParallelism
            log(f"Spark engine: {args.spark_runs} run(s) of {n} tasks ...")
            spark = timed(lambda: runner.run(targets, 0.0, tasks=n), args.spark_runs, warmup=False)
            spark.update(cores=cores, session_s=session_s, first_job_s=first_job_s,
                         pyspark=pyspark.__version__, master=args.master)
            results["spark"] = spark
            grouped = fleet.default_tasks(n, cores)
            log(f"Spark engine: default grouping, {grouped} tasks, {args.runs} runs after 1 warm-up ...")
            results["spark_batched"] = timed(lambda: runner.run(targets, 0.0), args.runs)
            results["spark_batched"].update(cores=cores, tasks=grouped)
        finally:
            runner.close()

    reference = results["sequential"]["result"]
    same = {k: v["result"] == reference for k, v in results.items()}
    for v in results.values():
        del v["result"]
        v["per_s"] = n / v["median_s"]
        v["best_per_s"] = n / v["best_s"]
        v["per_core_per_s"] = v["per_s"] / v["cores"]

    streamctl = find_streamctl()
    if streamctl:
        log("the whole command as a subprocess ...")

        def cli() -> int:
            return subprocess.run([streamctl, "inspect", "epochs", f"{root}/*", "--json"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, env=dict(os.environ, STREAMCTL_QUIET_PERIOD="0")).returncode

        results["cli"] = timed(cli, args.runs)
        results["cli"]["returncode"] = results["cli"].pop("result")
        results["cli"]["per_s"] = n / results["cli"]["median_s"]

    report = {"fleet": {"path": str(root), "checkpoints": n, "files": info["files"], "cached": info["cached"],
                        "build_seconds": info.get("build_seconds"), "templates": list(TEMPLATES)},
              "method": {"runs": args.runs, "warmup_runs": 1, "statistic": "median"},
              "streamctl": {"git": git_info()},
              "machine": dict(machine_info(root), loadavg_at_start=load_at_start),
              "same_records": same, "results": results}
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0

    g, m = report["streamctl"]["git"], report["machine"]
    print(f"streamctl fleet benchmark: git commit {g['short'] or '?'} ({g['branch']}: {g['subject']})")
    print(f"machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['mem_gb']} GiB RAM, {m['os']}, Python {m['python']}, "
          f"{m['java']}, fleet on {m['filesystem']}")
    print(f"load average (1 min) at start / end: {(load_at_start or ['?'])[0]} / {(m['loadavg_at_end'] or ['?'])[0]}")
    print(f"fleet: {n} checkpoints ({', '.join(TEMPLATES)} clones), {info['files']} files"
          + (" [cached]" if info["cached"] else f" [built in {info['build_seconds']} s]"))
    print(f"method: {args.runs} timed runs per engine after 1 untimed warm-up (Spark with one task per checkpoint: "
          f"{args.spark_runs} run(s), no warm-up); checkpoints/s from the median\n")
    rows = [("engine", "median s", "best s", "checkpoints/s", "cores", "per core/s", "same records")]
    labels = {"sequential": "sequential (--workers 1)", "threads": f"threads (--workers {workers})",
              "spark": f"spark ({args.master}, 1 task per checkpoint)",
              "spark_batched": f"spark ({args.master}, default: {results.get('spark_batched', {}).get('tasks')} tasks in all)"}
    for key, label in labels.items():
        if key in results:
            r = results[key]
            rows.append((label, f"{r['median_s']:.2f}", f"{r['best_s']:.2f}", f"{r['per_s']:.0f}", str(r["cores"]),
                         f"{r['per_core_per_s']:.0f}", "yes" if same[key] else "NO"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    if "spark" in results:
        s = results["spark"]
        print(f"\nSpark {s['pyspark']} {s['master']}: session start-up {s['session_s']:.2f} s, first job {s['first_job_s']:.2f} s "
              "(Python workers starting); neither is in the figure above")
    if "cli" in results:
        c = results["cli"]
        print(f"whole command (subprocess, interpreter start, default engine and workers, --json): median {c['median_s']:.2f} s "
              f"= {c['per_s']:.0f} checkpoints/s (exit {c['returncode']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark fleet trims: `streamctl trim '<dir>/*' --sink-pattern ...` against a shell loop of
single-checkpoint trims, on the local disk and on an S3 API server, local engine and Spark engine.

Run with `./dev bench-fleet-ops` (see BENCHMARKS.md, "Fleet trims"). Prints figures; it is not a
test and never fails because a figure is low (it exits 0 unless the set-up or a command fails).

What it does, for each store in turn (the local disk: --count checkpoints, default 1,000; moto's S3
server on loopback: --s3-count, default 200):

1. Builds the fleet: clones of the two real PySpark 3.5 checkpoints (bench_fleet.py's builder:
   `agg_hdfs`, `agg_rocksdb` alternating, each with its own query id), their file source's log
   naming one input folder that exists, and for each a file sink whose log ends at the
   checkpoint's last commit (aligned: every plan has steps). On S3 the tree is uploaded to the
   server (not timed).
2. Times, each as the operator runs it (a subprocess, interpreter start included, `--json`,
   `--keep-epochs 1`):
   a. a shell-style loop of `streamctl trim CK --sink SINK` plans, one process per checkpoint:
      --sample of them (default 50) are timed and the figure extrapolated to the whole fleet;
   b. the fleet plan on the local engine, `--workers 1, 2, 4` (threads);
   c. the fleet plan with `--engine spark --master local[2]`, `--workers 1, 2, 4` (Spark tasks;
      the session's start-up is in the figure, and printed alone beside it);
   d. `--execute` then `--undo-run` of the whole fleet on each engine (--workers 4): every clean
      checkpoint trimmed, then put back (checked: every row done, then undone).
3. Prints checkpoints per second of each, and deletes the fleet before the next store.

On S3, `--delay SECONDS` puts the tests' counting proxy between streamctl and moto, adding that
round trip to every request: moto on loopback answers in a few milliseconds from one Python
process, where a real object store takes tens of milliseconds per request and serves many at
once; the delay is what parallel workers and tasks can overlap. `--count 0` skips the local disk.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (HERE, ROOT / "tests"):  # bench_fleet, bench_s3; tests/helpers (the sink layout)
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import bench_fleet as bf  # noqa: E402
import bench_inspect as bi  # noqa: E402
import bench_s3 as bs  # noqa: E402

TASKS = (1, 2, 4)
SAMPLE = 50
COMMITTED = 3  # the fixtures' last commit


def log(msg: str) -> None:
    print(f"bench-fleet-ops: {msg}", file=sys.stderr, flush=True)


def build(root: Path, count: int) -> Path:
    """root/chk/<name> (checkpoints), root/sinks/<name> (their file sinks), root/in (the input)."""
    from helpers import layouts
    from helpers.paths import repoint_source_logs

    chk = root / "chk"
    bf.ensure_fleet(chk, count, True, log)
    (chk / ".generator").unlink()
    inp = root / "in"
    inp.mkdir()
    for ck in sorted(p for p in chk.iterdir() if p.is_dir()):
        repoint_source_logs(ck, inp)
        layouts.file_sink(root / "sinks" / ck.name, COMMITTED)
    return chk


def run(argv: list[str], env: dict[str, str], codes: tuple[int, ...] = (0,)) -> tuple[float, dict]:
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if r.returncode not in codes:
        raise SystemExit(f"bench-fleet-ops: {' '.join(argv[:4])} ... exited {r.returncode}: {bi.first_line(r.stderr)}")
    return seconds, (json.loads(r.stdout) if r.stdout.strip() else {})


def add(rows: list[dict], row: dict) -> None:
    """A figure, also said on stderr as it is measured (a run stopped half-way keeps what it measured)."""
    rows.append(row)
    log(f"  {row['what']}, {row['tasks']} task(s): {row['seconds']:.1f} s, {row['per_s']:.1f} checkpoints/s")


def statuses(doc: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in doc.get("checkpoints", []):
        out[row["status"]] = out.get(row["status"], 0) + 1
    return out


def spark_start(env: dict[str, str], master: str) -> float:
    """A SparkSession started and stopped alone: the part of a Spark run no fleet size changes."""
    code = ("import time; t = time.perf_counter(); from pyspark.sql import SparkSession; "
            f"s = SparkSession.builder.master({master!r}).config('spark.ui.enabled', 'false').getOrCreate(); "
            "s.sparkContext.parallelize([1], 1).count(); print(time.perf_counter() - t); s.stop()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return float(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else float("nan")


def measure(store: str, exe: str, pattern: str, sinks: str, names: list[str], ck_of, sink_of, env: dict[str, str],
            args: argparse.Namespace, runs_dir: Path) -> list[dict]:
    """The rows of one store: the loop, the fleet plans, the executes and undos."""
    n = len(names)
    rows: list[dict] = []
    base = [exe, "trim", "--keep-epochs", "1", "--json"]
    sample = names[:min(args.sample, n)]
    log(f"{store}: loop of {len(sample)} single-checkpoint plans ...")
    t0 = time.perf_counter()
    for name in sample:
        _s, doc = run([*base, ck_of(name), "--sink", sink_of(name)], env)
        assert doc["plan"]["steps"], doc
    per = (time.perf_counter() - t0) / len(sample)
    add(rows, {"store": store, "what": f"shell loop, 1 process per checkpoint ({len(sample)} timed, extrapolated)",
                 "tasks": 1, "seconds": per * n, "per_s": 1 / per})
    fleet = [*base, pattern, "--sink-pattern", sinks]
    for engine in ("local", "spark"):
        extra = ["--engine", "spark", "--master", args.master] if engine == "spark" else []
        for tasks in TASKS:
            log(f"{store}: fleet plan, {engine} engine, --workers {tasks} ...")
            s, doc = run([*fleet, *extra, "--workers", str(tasks)], env)
            assert statuses(doc) == {"planned": n}, statuses(doc)
            what = "fleet plan, threads" if engine == "local" else f"fleet plan, spark {args.master} tasks"
            add(rows, {"store": store, "what": what, "tasks": tasks, "seconds": s, "per_s": n / s})
    for engine in ("local", "spark"):
        extra = ["--engine", "spark", "--master", args.master] if engine == "spark" else []
        log(f"{store}: fleet --execute and --undo-run, {engine} engine, --workers 4 ...")
        s, doc = run([*fleet, *extra, "--workers", "4", "--execute", "--run-dir", str(runs_dir)], env)
        assert statuses(doc) == {"done": n}, statuses(doc)
        add(rows, {"store": store, "what": f"fleet --execute, {engine}", "tasks": 4, "seconds": s, "per_s": n / s})
        s, doc = run([exe, "trim", "--undo-run", doc["run_record"], "--json", *extra, "--workers", "4"], env)
        assert statuses(doc) == {"undone": n}, statuses(doc)
        add(rows, {"store": store, "what": f"fleet --undo-run, {engine}", "tasks": 4, "seconds": s, "per_s": n / s})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=1000, help="checkpoints on the local disk (default 1,000; 0: none)")
    p.add_argument("--s3-count", type=int, default=200, help="checkpoints on the S3 server (default 200; 0: none)")
    p.add_argument("--sample", type=int, default=SAMPLE, help=f"timed runs of the shell loop (default {SAMPLE})")
    p.add_argument("--delay", type=float, default=0.0,
                   help="on S3, a simulated round trip per request in seconds (a proxy in front of moto; default none)")
    p.add_argument("--master", default="local[2]", help="Spark master of the Spark engine (default local[2])")
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    args = p.parse_args(argv)
    if args.count < 0 or args.s3_count < 0 or args.sample < 1 or args.delay < 0:
        p.error("--sample must be >= 1; --count, --s3-count and --delay >= 0")
    exe = bi.find_streamctl()
    if exe is None:
        raise SystemExit("bench-fleet-ops: streamctl executable not found")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    uptime_start = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    rows: list[dict] = []
    work = ROOT / ".bench"
    work.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fleet-ops-", dir=work) as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "STREAMCTL_"))}
        env.update(bs.CREDENTIALS, HOME=str(home), XDG_CONFIG_HOME=str(home), NO_COLOR="1",
                   AWS_CONFIG_FILE=str(home / "aws-config"), AWS_SHARED_CREDENTIALS_FILE=str(home / "aws-credentials"),
                   STREAMCTL_QUIET_PERIOD="0", PYSPARK_PYTHON=sys.executable)  # the trees are seconds old
        os.environ.update({k: env[k] for k in (*bs.CREDENTIALS, "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")})
        session_s = spark_start(env, args.master)

        if args.count:
            local = Path(tmp) / "local"
            log(f"local disk: building {args.count} checkpoints and their sinks ...")
            chk = build(local, args.count)
            names = sorted(p.name for p in chk.iterdir() if p.is_dir())
            rows += measure("local disk", exe, f"{chk}/*", "../../sinks/{name}", names, lambda n: str(chk / n),
                            lambda n: str(local / "sinks" / n), env, args, Path(tmp) / "runs-local")
            shutil.rmtree(local)

        if args.s3_count:
            from helpers.s3_fixtures import CountingProxy, free_port

            remote = Path(tmp) / "s3"
            log(f"S3: building {args.s3_count} checkpoints and their sinks, starting moto, uploading ...")
            chk = build(remote, args.s3_count)
            names = sorted(p.name for p in chk.iterdir() if p.is_dir())
            port = free_port()
            moto = bs.start_moto(port, Path(tmp) / "moto.log")
            proxy = None
            try:
                endpoint = f"http://127.0.0.1:{port}"
                bs.upload(endpoint, remote)
                shutil.rmtree(remote)
                if args.delay:
                    proxy = CountingProxy(port, delay=args.delay)
                    port = proxy.port
                opts = f"?endpoint_override=127.0.0.1:{port}&scheme=http"
                base = f"s3://{bs.BUCKET}/{bs.PREFIX}"
                store = f"S3 (moto, {args.delay * 1000:g} ms per request)" if args.delay else "S3 (moto)"
                rows += measure(store, exe, f"{base}/chk/*{opts}", f"{base}/sinks/{{name}}", names,
                                lambda n: f"{base}/chk/{n}{opts}", lambda n: f"{base}/sinks/{n}{opts}", env, args,
                                Path(tmp) / "runs-s3")
            finally:
                if proxy is not None:
                    proxy.close()
                moto.terminate()
                moto.wait(timeout=30)
    report = {"nproc": os.cpu_count(), "uptime_start": uptime_start,
              "uptime_end": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
              "git": bi.git_info(), "spark_session_start_s": session_s, "count": args.count,
              "s3_count": args.s3_count, "delay_s": args.delay, "sample": args.sample, "rows": rows}
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    g = report["git"]
    print(f"streamctl fleet-trim benchmark: git commit {g['short'] or '?'} ({g['branch']}: {g['subject']})")
    print(f"nproc {report['nproc']}; uptime at start: {uptime_start}\n                 at end:   {report['uptime_end']}")
    print(f"fleets: {args.count} checkpoints on the local disk, {args.s3_count} on moto's S3 server (loopback); "
          f"trim --keep-epochs 1, plans unless said; a Spark session alone starts in {session_s:.1f} s "
          "(in every Spark figure)\n")
    table = [("store", "what", "tasks", "seconds", "checkpoints/s")]
    table += [(r["store"], r["what"], str(r["tasks"]), f"{r['seconds']:.1f}", f"{r['per_s']:.1f}") for r in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
    for t in table:
        print("  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

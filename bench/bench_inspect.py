#!/usr/bin/env python3
"""Benchmark `streamctl inspect epochs` on a large synthetic checkpoint.

Run with `./dev bench` (see BENCHMARKS.md). This script prints figures; it is not a test and
never fails because a target is missed (it exits 0 unless it cannot build the checkpoint).

What it does:

1. Builds, once, a synthetic checkpoint with Spark's exact file layout (docs/formats/checkpoint.md, docs/formats/state.md):
   `metadata`, the last 100 retained `offsets/<n>` and `commits/<n>` (batches 400..499), and an
   HDFS-backed state store for 3 operators x 200 partitions x 100 retained versions (401..500,
   `<v>.delta` plus a `<v>.snapshot` every 10 versions), operator metadata v1 and a schema file
   per operator. Every file has the hidden Hadoop `.<name>.crc` sidecar that Hadoop's local
   checksummed filesystem writes, with a *valid* CRC32 so that Spark's reader accepts the tree.
   The tree is cached under .bench/ (git-ignored); `--rebuild` forces a new one.
2. Times, after one warm-up run each (page cache and dentry cache warm), in --runs alternating
   rounds (each round runs a, b, the two Python floors and c once, in that order, so find and
   inspect are always side by side):
   a. `find <chk> -type f | wc -l`              (baseline: a bare listing of the tree)
   b. `streamctl inspect epochs <chk> --format json > /dev/null`  (subprocess, interpreter start
      included)
   c. `streamctl --help`                          (start-up of the CLI, every command's help loaded)
      and `python -c "import streamctl.cli.app"`   (the root app's imports: the command tree loads
                                                    lazily, so inspect loads its own modules only)
   and then, in-process:
   d. Spark's own reader, `spark.read.format("state-metadata").load(<chk>).collect()`, in a
      PySpark local[2] session; session start-up is reported separately and is NOT included in
      the reader's figure. `--no-spark` skips this part.
3. Prints a table with best and median wall time; a table of the ratios with their floor beside
   them (inspect / find, guard rail 5x; inspect / the Python walk), each as the ratio of the
   medians and the median and range of the per-round ratios; a rough split of inspect's median;
   and two targets: streamctl within 5x of `find`, and Spark's reader >= 20x slower than
   streamctl (medians).

Only the standard library is imported at module level; PySpark is imported inside part d.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import time
import uuid
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / ".bench" / "checkpoint"

# Bump when the generated tree changes, so that a cached tree from an older generator is rebuilt.
GENERATOR_VERSION = 5  # 5: state files are LZ4Block streams, as the offsets' codec (lz4) says

# Shape of the synthetic checkpoint.
FIRST_BATCH = 400                 # retained batches: FIRST_BATCH .. LAST_BATCH
LAST_BATCH = 499
N_OPERATORS = 3
N_PARTITIONS = 200
SNAPSHOT_EVERY = 10               # a <v>.snapshot when v % SNAPSHOT_EVERY == 0
BASE_TIMESTAMP_MS = 1_700_000_000_000
BATCH_INTERVAL_MS = 60_000

# Targets.
STREAMCTL_MAX_RATIO_VS_FIND = 5.0    # a guard rail, not a target (BENCHMARKS.md)
SPARK_MIN_RATIO_VS_STREAMCTL = 20.0


# --------------------------------------------------------------------------------------------
# Generator
# --------------------------------------------------------------------------------------------

def hadoop_crc(data: bytes, bytes_per_checksum: int = 512) -> bytes:
    """Content of the `.<name>.crc` file Hadoop's ChecksumFileSystem writes for `data`.

    Layout: magic b"crc\\0", int32 bytesPerChecksum, then one big-endian CRC32 per chunk.
    """
    out = [b"crc\x00", struct.pack(">i", bytes_per_checksum)]
    for i in range(0, len(data), bytes_per_checksum):
        out.append(struct.pack(">I", zlib.crc32(data[i:i + bytes_per_checksum]) & 0xFFFFFFFF))
    return b"".join(out)


def write_with_crc(directory: str, name: str, data: bytes) -> int:
    """Write `directory/name` and its hidden Hadoop sidecar `directory/.name.crc`; return 2."""
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)
    with open(os.path.join(directory, "." + name + ".crc"), "wb") as f:
        f.write(hadoop_crc(data))
    return 2


def java_write_utf(s: str) -> bytes:
    """Java DataOutputStream.writeUTF for ASCII text: 2-byte length, then the bytes."""
    b = s.encode("ascii")
    return struct.pack(">H", len(b)) + b


OFFSET_CONF = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "spark.sql.streaming.join.stateFormatVersion": "2",
    "spark.sql.streaming.stateStore.compression.codec": "lz4",
    "spark.sql.streaming.stateStore.rocksdb.formatVersion": "5",
    "spark.sql.streaming.statefulOperator.useStrictDistribution": "true",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
    "spark.sql.streaming.aggregation.stateFormatVersion": "2",
    "spark.sql.shuffle.partitions": str(N_PARTITIONS),
    "spark.sql.streaming.stateStore.encodingFormat": "unsaferow",
}


def offsets_file(batch: int, partitions: int = N_PARTITIONS) -> bytes:
    meta = {
        "batchWatermarkMs": 0,
        "batchTimestampMs": BASE_TIMESTAMP_MS + batch * BATCH_INTERVAL_MS,
        # the same key order as OFFSET_CONF: the default tree's bytes do not change
        "conf": dict(OFFSET_CONF, **{"spark.sql.shuffle.partitions": str(partitions)}),
    }
    # v1, metadata line, one line per source (a file source); no trailing newline.
    lines = ["v1", json.dumps(meta, separators=(",", ":")), json.dumps({"logOffset": batch}, separators=(",", ":"))]
    return "\n".join(lines).encode()


COMMIT_FILE = b'v1\n{"nextBatchWatermarkMs":0}'


def operator_metadata_v1(op: int, partitions: int = N_PARTITIONS) -> bytes:
    body = {
        "operatorInfo": {"operatorId": op, "operatorName": "stateStoreSave"},
        "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 0, "numPartitions": partitions}],
    }
    return b"v1\n" + json.dumps(body, separators=(",", ":")).encode()


def schema_file_v2() -> bytes:
    """A small, well-formed state schema file, format v2 (docs/formats/state.md#state-schema-files)."""
    key = {"type": "struct", "fields": [{"name": "key", "type": "string", "nullable": True, "metadata": {}}]}
    value = {"type": "struct", "fields": [{"name": "count", "type": "long", "nullable": True, "metadata": {}}]}
    out = java_write_utf("v2")
    for schema in (key, value):
        out += struct.pack(">i", 1) + java_write_utf(json.dumps(schema, separators=(",", ":")))
    return out


def build_checkpoint(target: Path, partitions: int = N_PARTITIONS) -> int:
    """Build the synthetic checkpoint at `target` (atomically: build aside, then rename).
    `partitions`: shuffle partitions per operator (the benchmark's 200 unless a smaller tree is
    asked for, as bench_s3.py does)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.building-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    root = str(tmp)
    count = 0

    count += write_with_crc(root, "metadata", json.dumps({"id": str(uuid.uuid4())}, separators=(",", ":")).encode())

    offsets = os.path.join(root, "offsets")
    commits = os.path.join(root, "commits")
    os.mkdir(offsets)
    os.mkdir(commits)
    for batch in range(FIRST_BATCH, LAST_BATCH + 1):
        count += write_with_crc(offsets, str(batch), offsets_file(batch, partitions))
        count += write_with_crc(commits, str(batch), COMMIT_FILE)
    # The file source's log the offsets' logOffset names: compacted every 10 batches, so its newest
    # compaction holds every input file (one a batch), in an (empty) input folder beside the tree.
    source_log = os.path.join(root, "sources", "0")
    os.makedirs(source_log)
    inp = target.with_name(f"{target.name}-input")
    inp.mkdir(exist_ok=True)
    entries = [json.dumps({"path": f"file://{inp}/part-{b:05d}.json", "timestamp": BASE_TIMESTAMP_MS + b * BATCH_INTERVAL_MS,
                           "batchId": b}, separators=(",", ":")) for b in range(LAST_BATCH + 1)]
    count += write_with_crc(source_log, f"{LAST_BATCH}.compact", ("v1\n" + "\n".join(entries)).encode())

    # State version v is written by batch v-1, so batches 400..499 produce versions 401..500.
    first_version, last_version = FIRST_BATCH + 1, LAST_BATCH + 1
    # The smallest state files a restart reads: an LZ4Block stream (the conf's codec) holding
    # only the end-of-file mark (-1), as an empty delta or snapshot is written. The .crc sidecars
    # are valid, and the same for every file (identical content).
    from streamctl.formats.state import lz4_stream

    delta_bytes = snapshot_bytes = lz4_stream(b"\xff\xff\xff\xff")
    delta_crc = hadoop_crc(delta_bytes)
    snapshot_crc = hadoop_crc(snapshot_bytes)
    schema = schema_file_v2()
    state = os.path.join(root, "state")
    os.mkdir(state)
    for op in range(N_OPERATORS):
        op_dir = os.path.join(state, str(op))
        os.mkdir(op_dir)
        meta_dir = os.path.join(op_dir, "_metadata")
        os.mkdir(meta_dir)
        count += write_with_crc(meta_dir, "metadata", operator_metadata_v1(op, partitions))
        for part in range(partitions):
            part_dir = os.path.join(op_dir, str(part))
            os.mkdir(part_dir)
            if part == 0:
                schema_dir = os.path.join(part_dir, "_metadata")
                os.mkdir(schema_dir)
                count += write_with_crc(schema_dir, "schema", schema)
            for v in range(first_version, last_version + 1):
                kinds = [("delta", delta_bytes, delta_crc)]
                if v % SNAPSHOT_EVERY == 0:
                    kinds.append(("snapshot", snapshot_bytes, snapshot_crc))
                for ext, data, crc in kinds:
                    name = f"{v}.{ext}"
                    with open(os.path.join(part_dir, name), "wb") as f:
                        f.write(data)
                    with open(os.path.join(part_dir, f".{name}.crc"), "wb") as f:
                        f.write(crc)
                    count += 2

    if target.exists():
        shutil.rmtree(target)
    os.rename(tmp, target)
    return count


def stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".stamp.json")


def count_files(path: Path) -> int:
    n = 0
    stack = [str(path)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.is_file(follow_symlinks=False):
                    n += 1
    return n


def ensure_checkpoint(target: Path, rebuild: bool, log, partitions: int = N_PARTITIONS) -> dict:
    stamp = stamp_path(target)
    info = None
    if not rebuild and target.is_dir() and stamp.is_file():
        try:
            info = json.loads(stamp.read_text())
        except ValueError:
            info = None
        # a stamp without "partitions" is from before the shape could change: the default shape
        if info and (info.get("generator_version") != GENERATOR_VERSION
                     or info.get("partitions", N_PARTITIONS) != partitions):
            info = None
    if info is None:
        log(f"building synthetic checkpoint at {target} (once; cached) ...")
        t0 = time.perf_counter()
        written = build_checkpoint(target, partitions)
        info = {"generator_version": GENERATOR_VERSION, "partitions": partitions, "files_written": written,
                "build_seconds": round(time.perf_counter() - t0, 2)}
        stamp.write_text(json.dumps(info))
        log(f"built {written} files in {info['build_seconds']} s")
        info["cached"] = False
    else:
        log(f"using cached synthetic checkpoint at {target} (--rebuild to regenerate)")
        info["cached"] = True
    info["files"] = count_files(target)
    return info


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------

def first_line(text: str) -> str:
    """The first non-blank line of `text`; for a usage error, the line that says what is wrong."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return "(no stderr)"
    if lines[0].startswith("Usage:"):
        for ln in lines:
            if "Error" in ln:
                return ln.strip("│╭╰─ ").strip()[:200]
    return lines[0][:200]


def time_alternating(tools: list[tuple[str, list[str], object]], runs: int) -> dict[str, dict]:
    """Time several commands in alternating rounds: one untimed warm-up of each (validated by its
    `check(result) -> problem or None`; no check: exit code 0), then `runs` rounds, each running every command once in the order
    given (find, inspect, find, inspect, ...). A load spike from another process then falls on
    the same round of every tool instead of on one tool's whole series, and each round gives a
    ratio of its own (`times_s[i]` of two tools are from round i). A tool whose warm-up fails,
    or whose exit code changes, is reported as failed and leaves the rounds."""
    results: dict[str, dict] = {}
    live: list[tuple[str, list[str], int]] = []
    for key, argv, check in tools:
        t0 = time.perf_counter()
        warm = subprocess.run(argv, capture_output=True, text=True)
        warm_s = time.perf_counter() - t0
        problem = check(warm) if check else (None if warm.returncode == 0 else "")
        if problem is not None:
            results[key] = {"ok": False, "error": "failed: " + (problem or first_line(warm.stderr)),
                            "returncode": warm.returncode}
            continue
        results[key] = {"ok": True, "warmup_s": warm_s, "times_s": [], "returncode": warm.returncode}
        live.append((key, argv, warm.returncode))
    for _ in range(runs):
        for key, argv, code in live:
            if not results[key]["ok"]:
                continue
            t0 = time.perf_counter()
            r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            elapsed = time.perf_counter() - t0
            if r.returncode != code:
                results[key] = {"ok": False, "returncode": r.returncode,
                                "error": f"failed: exit code changed to {r.returncode}: {first_line(r.stderr)}"}
                continue
            results[key]["times_s"].append(elapsed)
    for r in results.values():
        if r["ok"]:
            r["best_s"], r["median_s"] = min(r["times_s"]), statistics.median(r["times_s"])
    return results


def ratio_row(results: dict, key: str, floor_key: str, goal: float | None) -> dict | None:
    """`key` against the floor `floor_key`, both from the same alternating rounds: the ratio of
    the medians (what the goal is judged on), the median and range of the per-round ratios."""
    r, f = results.get(key) or {}, results.get(floor_key) or {}
    if not (r.get("ok") and f.get("ok")):
        return None
    per_round = [a / b for a, b in zip(r["times_s"], f["times_s"], strict=False) if b > 0]
    ratio = r["median_s"] / f["median_s"]
    return {"key": key, "floor": floor_key, "median_s": r["median_s"], "floor_median_s": f["median_s"],
            "ratio": ratio, "per_round": per_round,
            "per_round_median": statistics.median(per_round) if per_round else None,
            "goal": goal, "status": "INFO" if goal is None else ("PASS" if ratio <= goal else "MISS")}


def streamctl_check(result) -> str | None:
    # Exit codes (console/exit_codes.py): 0 aligned, 1 misaligned finding; anything else is a failure.
    if result.returncode not in (0, 1):
        return f"exit code {result.returncode}: {first_line(result.stderr)}"
    try:
        json.loads(result.stdout)
    except ValueError:
        return f"exit code {result.returncode}, stdout is not JSON: {first_line(result.stdout or '(empty)')}"
    return None


# A bare Python listing of the whole tree (no per-file work beyond counting): the floor for any
# Python tool that looks at every file, interpreter start included.
PY_WALK = """
import os, sys
n, stack = 0, [sys.argv[1]]
while stack:
    with os.scandir(stack.pop()) as it:
        for e in it:
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
            else:
                n += 1
print(n)
"""


def time_spark(checkpoint: Path, runs: int, log) -> dict:
    """Time Spark's state-metadata reader; session start-up is measured separately."""
    t_import = time.perf_counter()
    try:
        import pyspark
        from pyspark.sql import SparkSession
    except Exception as e:  # noqa: BLE001 - report, never crash the benchmark
        return {"ok": False, "error": f"failed: cannot import pyspark: {e}"}
    import_s = time.perf_counter() - t_import
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = None
    try:
        t0 = time.perf_counter()
        spark = (SparkSession.builder.master("local[2]").appName("streamctl-bench")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .getOrCreate())
        session_s = time.perf_counter() - t0
        spark.sparkContext.setLogLevel("ERROR")
        path = str(checkpoint)

        def read():
            return spark.read.format("state-metadata").load(path).collect()

        t0 = time.perf_counter()
        rows = read()
        first_s = time.perf_counter() - t0
        # The 4.1 reader logs a warning and returns no rows if it cannot read operator metadata,
        # so an empty result means the tree is not accepted: report it rather than time it.
        if len(rows) != N_OPERATORS:
            return {"ok": False, "error": f"failed: state-metadata returned {len(rows)} rows, expected {N_OPERATORS}",
                    "session_s": session_s}
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            read()
            times.append(time.perf_counter() - t0)
        sample = rows[0].asDict()
        return {"ok": True, "pyspark": pyspark.__version__, "import_s": import_s, "session_s": session_s,
                "warmup_s": first_s, "times_s": times, "best_s": min(times),
                "median_s": statistics.median(times), "rows": len(rows), "sample_row": sample}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": "failed: " + first_line(str(e))}
    finally:
        if spark is not None:
            spark.stop()


# --------------------------------------------------------------------------------------------
# Environment and report
# --------------------------------------------------------------------------------------------

def git(*args: str) -> str:
    try:
        # only the newline goes: `status --porcelain` lines start with a status column that may be a blank
        return subprocess.run(["git", "-C", str(ROOT), *args], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, check=True).stdout.rstrip("\n")
    except (OSError, subprocess.CalledProcessError):
        return ""


def git_info() -> dict:
    commit = git("rev-parse", "HEAD")
    # streamctl is installed editable, so uncommitted files of the work tree are what runs.
    # Changes to the benchmark itself do not matter for the figures.
    dirty = [line[3:] for line in git("status", "--porcelain").splitlines()
             if line[3:] and not (line[3:].startswith("bench/") or line[3:] == "BENCHMARKS.md")]
    return {"commit": commit, "short": commit[:12], "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
            "subject": git("log", "-1", "--format=%s"), "uncommitted_outside_bench": dirty}


def machine_info(checkpoint: Path) -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    fs = ""
    try:
        fs = subprocess.run(["stat", "-f", "-c", "%T", str(checkpoint)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True).stdout.strip()
    except OSError:
        pass
    java = ""
    try:
        r = subprocess.run(["java", "-version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        java = first_line(r.stdout)
    except OSError:
        java = "(not found)"
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "loadavg_at_end": load, "mem_gb": mem_gb,
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "java": java, "filesystem": fs}


def find_streamctl() -> str | None:
    candidate = Path(sys.executable).parent / "streamctl"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which("streamctl")


def fmt_s(x) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) else "-"


def fmt_ratio(x) -> str:
    return f"{x:.1f}x" if isinstance(x, (int, float)) else "-"


def render(report: dict) -> str:
    res = report["results"]
    find_med = res["find"].get("median_s") if res["find"].get("ok") else None
    rows, notes = [], []
    for key, tool, what in [
        ("find", "find | wc -l", "bare listing of every file (baseline)"),
        ("python_start", "python -c pass", "interpreter start-up (floor)"),
        ("python_walk", "python os.scandir walk", "bare listing in Python, interpreter start incl. (floor)"),
        ("streamctl_epochs", "streamctl inspect epochs", "--format json > /dev/null, interpreter start incl."),
        ("streamctl_help", "streamctl --help", "CLI start-up, every command's help loaded"),
        ("cli_import", "import streamctl.cli.app", "the root app's imports, no command (python -c)"),
        ("spark_state_metadata", "Spark state-metadata", "read.format('state-metadata').load().collect(), session excl."),
    ]:
        r = res.get(key)
        if r is None:
            continue
        if r.get("ok"):
            ratio = r["median_s"] / find_med if find_med else None
            rows.append((tool, what, fmt_s(r["best_s"]), fmt_s(r["median_s"]), fmt_ratio(ratio)))
        else:
            notes.append(f"[{len(notes) + 1}] {tool}: {r.get('error', 'skipped')}")
            rows.append((tool, what, f"failed [{len(notes)}]", "-", "-"))
    header = ("tool", "what it does", "best s", "median s", "median vs find")
    widths = [max(len(str(row[i])) for row in rows + [header]) for i in range(len(header))]
    lines = []

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    lines.append(line(header))
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        lines.append(line(row))
    return "\n".join(lines + notes)


NAMES = {"find": "find | wc -l", "python_walk": "Python os.scandir walk", "python_start": "python -c pass",
         "streamctl_epochs": "streamctl inspect epochs", "streamctl_help": "streamctl --help",
         "cli_import": "import streamctl.cli.app"}


def render_ratios(rows: list[dict]) -> str:
    """Each ratio of one run with its floor beside it: the ratio of the medians (judged against
    the goal), and the median and range of the per-round ratios of the alternating rounds."""
    header = ("measured", "median s", "floor", "floor median s", "ratio of medians",
              "per-round ratios: median [min-max]", "goal", "status")
    table = []
    for r in rows:
        pr = r["per_round"]
        spread = (f"{r['per_round_median']:.2f}x [{min(pr):.2f}-{max(pr):.2f}]" if pr else "-")
        table.append((NAMES[r["key"]], fmt_s(r["median_s"]), NAMES[r["floor"]], fmt_s(r["floor_median_s"]),
                      f"{r['ratio']:.2f}x", spread,
                      "-" if r["goal"] is None else f"<= {r['goal']:g}x", r["status"]))
    widths = [max(len(str(row[i])) for row in table + [header]) for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(t) for t in table])


def time_split(results: dict) -> list[tuple[str, float]]:
    """Where inspect's median goes, roughly: interpreter start (python -c pass), the root app's
    imports (`import streamctl.cli.app` minus that), and the inspect command: its own modules (the
    command tree loads lazily), the inspection and the JSON (the rest)."""
    keys = ("python_start", "cli_import", "streamctl_epochs")
    if not all(results.get(k, {}).get("ok") for k in keys):
        return []
    start, cli, epochs = (results[k]["median_s"] for k in keys)
    return [("interpreter start", start), ("the root app's imports (import streamctl.cli.app minus start)", cli - start),
            ("the inspect command: its modules, the inspection, the JSON (the rest)", epochs - cli)]


def evaluate_targets(results: dict) -> list[dict]:
    find, epochs, spark = results["find"], results["streamctl_epochs"], results.get("spark_state_metadata")
    targets = []
    if find.get("ok") and epochs.get("ok"):
        ratio = epochs["median_s"] / find["median_s"]
        status = "PASS" if ratio <= STREAMCTL_MAX_RATIO_VS_FIND else "MISS"
        detail = f"{ratio:.1f}x find (best vs best: {epochs['best_s'] / find['best_s']:.1f}x)"
    else:
        status, ratio, detail = "MISS", None, "not measured (" + (epochs.get("error") or find.get("error", "")) + ")"
    targets.append({"target": f"streamctl inspect epochs within {STREAMCTL_MAX_RATIO_VS_FIND:g}x of find",
                    "status": status, "ratio": ratio, "detail": detail})
    if spark is None:
        targets.append({"target": f"streamctl >= {SPARK_MIN_RATIO_VS_STREAMCTL:g}x faster than Spark's reader",
                        "status": "SKIPPED", "ratio": None, "detail": "--no-spark"})
    elif spark.get("ok") and epochs.get("ok"):
        # The target compares what an operator pays for the answer during an incident: one
        # streamctl run against one Spark read from a cold start (import pyspark + session
        # start-up + the query), since neither tool is running before the question is asked.
        one_off = spark["import_s"] + spark["session_s"] + spark["warmup_s"]
        ratio = one_off / epochs["median_s"]
        status = "PASS" if ratio >= SPARK_MIN_RATIO_VS_STREAMCTL else "MISS"
        targets.append({"target": f"streamctl >= {SPARK_MIN_RATIO_VS_STREAMCTL:g}x faster than Spark's reader (one-off read)",
                        "status": status, "ratio": ratio,
                        "detail": f"one-off Spark read (import + session + first query) {one_off:.1f} s = "
                                  f"{ratio:.0f}x streamctl's median"})
        # For context, not the target: a Spark session that is already warm. Its reader only
        # reads the operator metadata files; it never lists the 600 partition folders.
        warm = spark["median_s"] / epochs["median_s"]
        targets.append({"target": "info: warm Spark session's state-metadata read vs streamctl",
                        "status": "INFO", "ratio": warm,
                        "detail": f"{spark['median_s']:.2f} s = {warm:.2f}x streamctl (session start-up excluded; "
                                  "it reads 3 metadata files, streamctl lists every store)"})
    else:
        targets.append({"target": f"streamctl >= {SPARK_MIN_RATIO_VS_STREAMCTL:g}x faster than Spark's reader",
                        "status": "MISS", "ratio": None,
                        "detail": "not measured (" + (epochs.get("error") or spark.get("error", "")) + ")"})
    return targets


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                   help=f"where the synthetic checkpoint is built and cached (default: {DEFAULT_DIR})")
    p.add_argument("--rebuild", action="store_true", help="rebuild the synthetic checkpoint even if cached")
    p.add_argument("--runs", type=int, default=5, help="timed runs per tool, after one warm-up run (default: 5)")
    p.add_argument("--no-spark", action="store_true", help="skip Spark's state-metadata reader")
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    p.add_argument("--streamctl", default=None, help="streamctl executable (default: the one next to this Python)")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be >= 1")

    log = (lambda msg: print(f"bench: {msg}", file=sys.stderr, flush=True))
    # An installed streamctl runs from compiled bytecode (pip compiles it); a shell that sets
    # PYTHONDONTWRITEBYTECODE would make every run recompile the editable sources instead.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    checkpoint = args.dir.resolve()
    info = ensure_checkpoint(checkpoint, args.rebuild, log)
    try:
        load_at_start = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load_at_start = None

    streamctl = args.streamctl or find_streamctl()
    results: dict = {}
    chk = str(checkpoint)

    def find_check(r):
        if r.returncode != 0:
            return first_line(r.stderr)
        if r.stdout.strip() != str(info["files"]):
            return f"counted {r.stdout.strip()} files, expected {info['files']}"
        return None

    # find and inspect side by side in every round, then the floors: see time_alternating.
    tools: list[tuple[str, list[str], object]] = [
        ("find", ["sh", "-c", 'find "$1" -type f | wc -l', "sh", chk], find_check)]
    if streamctl is not None:
        tools.append(("streamctl_epochs", [streamctl, "inspect", "epochs", chk, "--format", "json"], streamctl_check))
    tools += [("python_walk", [sys.executable, "-c", PY_WALK, chk], find_check),
              ("python_start", [sys.executable, "-c", "pass"], None)]
    if streamctl is not None:
        tools.append(("streamctl_help", [streamctl, "--help"], None))
        tools.append(("cli_import", [sys.executable, "-c", "import streamctl.cli.app"], None))
    log(f"timing find, streamctl inspect epochs, the Python floors, streamctl --help and its import in {args.runs} "
        "alternating rounds after 1 warm-up each ...")
    results.update(time_alternating(tools, args.runs))
    if streamctl is None:
        results["streamctl_epochs"] = {"ok": False, "error": "failed: streamctl executable not found"}
        results["streamctl_help"] = {"ok": False, "error": "failed: streamctl executable not found"}
        results["cli_import"] = {"ok": False, "error": "failed: streamctl executable not found"}

    if not args.no_spark:
        log("timing Spark's state-metadata reader (starting a local[2] session) ...")
        results["spark_state_metadata"] = time_spark(checkpoint, args.runs, log)

    report = {
        "checkpoint": {"path": chk, "files": info["files"], "cached": info["cached"],
                       "build_seconds": info.get("build_seconds"),
                       "shape": {"batches": [FIRST_BATCH, LAST_BATCH], "operators": N_OPERATORS,
                                 "partitions": N_PARTITIONS,
                                 "state_versions": [FIRST_BATCH + 1, LAST_BATCH + 1],
                                 "snapshot_every": SNAPSHOT_EVERY, "provider": "HDFSBackedStateStoreProvider"}},
        "method": {"runs": args.runs, "warmup_runs": 1, "page_cache": "warm (one untimed warm-up run per tool)",
                   "order": "alternating rounds: find, inspect epochs, python walk, python -c pass, --help, "
                            "import streamctl.cli.app",
                   "statistic_for_targets": "median"},
        "streamctl": {"executable": streamctl, "git": git_info()},
        "machine": dict(machine_info(checkpoint), loadavg_at_start=load_at_start),
        "results": results,
    }
    report["targets"] = evaluate_targets(results)
    report["ratios"] = [row for row in (
        ratio_row(results, "streamctl_epochs", "find", STREAMCTL_MAX_RATIO_VS_FIND),
        ratio_row(results, "streamctl_epochs", "python_walk", None),
        ratio_row(results, "python_walk", "find", None),
    ) if row is not None]
    report["time_split"] = time_split(results)

    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0

    g = report["streamctl"]["git"]
    m = report["machine"]
    print(f"streamctl benchmark: streamctl from git commit {g['short'] or '?'} ({g['branch']}: {g['subject']})")
    if g["uncommitted_outside_bench"]:
        print(f"  note: editable install with {len(g['uncommitted_outside_bench'])} uncommitted path(s) outside "
              f"bench/: {', '.join(g['uncommitted_outside_bench'][:8])}"
              + (" ..." if len(g["uncommitted_outside_bench"]) > 8 else ""))
    print(f"machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['mem_gb']} GiB RAM, {m['os']}, "
          f"Python {m['python']}, {m['java']}, checkpoint on {m['filesystem']}")
    busy = [x for x in (load_at_start or [])[:1] + (m["loadavg_at_end"] or [])[:1]]
    print(f"load average (1 min) at start / end: {' / '.join(str(x) for x in busy) or '?'}"
          + ("  <- busy machine: figures are inflated" if busy and max(busy) > 0.5 * (m["cpus"] or 1) else ""))
    print(f"checkpoint: {chk}: {info['files']} files "
          f"(batches {FIRST_BATCH}..{LAST_BATCH}; {N_OPERATORS} operators x {N_PARTITIONS} partitions x "
          f"{LAST_BATCH - FIRST_BATCH + 1} versions + snapshot every {SNAPSHOT_EVERY}; .crc sidecars)"
          + (" [cached]" if info["cached"] else f" [built in {info['build_seconds']} s]"))
    print(f"method: wall time of {args.runs} alternating rounds (find, inspect, Python walk, python -c pass, "
          "--help, import streamctl.cli.app; each tool once per round) after 1 untimed warm-up run each (page cache warm); best and median; "
          "targets use medians")
    print()
    print(render(report))
    if report["ratios"]:
        print()
        print(render_ratios(report["ratios"]))
    if report["time_split"]:
        print()
        print("where inspect's median goes (medians of the same rounds; differences of medians, approximate): "
              + ", ".join(f"{name} {secs:.3f} s" for name, secs in report["time_split"]))
    spark = results.get("spark_state_metadata")
    if spark and spark.get("ok"):
        print()
        print(f"Spark {spark['pyspark']} local[2]: session start-up {spark['session_s']:.2f} s "
              f"(import pyspark {spark['import_s']:.2f} s), first state-metadata query {spark['warmup_s']:.2f} s "
              f"(cold JVM; excluded), rows={spark['rows']}")
        print(f"  end to end for a one-off Spark read: about {spark['import_s'] + spark['session_s'] + spark['warmup_s']:.1f} s")
    elif spark and spark.get("session_s") is not None:
        print(f"\nSpark session start-up {spark['session_s']:.2f} s")
    epochs = results.get("streamctl_epochs", {})
    if epochs.get("ok") and epochs.get("returncode"):
        print(f"\nnote: streamctl inspect epochs exited {epochs['returncode']} (a finding, not a failure)")
    print()
    for t in report["targets"]:
        print(f"{t['status']:7} {t['target']}: {t['detail']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fleet scans: many checkpoints at once (`streamctl inspect epochs '/data/chk/*'`).

- `expand` turns glob patterns into checkpoint locations: local patterns with `glob`, remote
  URIs (`s3://bucket/chk/*/?endpoint_override=...`) by listing each wildcard segment through
  `Storage` (the URI's options stay last on every match).
- `run_local` inspects with a thread pool (`workers=1`: one after another); `SparkRunner` runs
  the same inspector inside Spark tasks, checkpoints grouped into tasks. Both keep the input order.
- `write_jsonl` and `write_parquet` write one record per query.

PySpark and pyarrow are imported only by the functions that need them.
"""
from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional
from urllib.parse import urlparse

from streamctl.formats.errors import StreamctlError, UsageError
from streamctl.inspectors.outputs import atomic_write, write_text_atomic
from streamctl.inspectors.storage import REMOTE_SCHEMES, Storage

if TYPE_CHECKING:  # pragma: no cover
    from streamctl.inspectors.query_inspection import QueryInspection

ENGINES = ("local", "spark")
DEFAULT_MASTER = "local[2]"
PARQUET_COLUMNS = ("checkpoint", "query_id", "planned", "committed", "state_epoch", "verdict", "sink_epoch",
                   "findings_count", "error_codes", "record_json")


def is_remote(location: str) -> bool:
    return urlparse(location).scheme.lower() in REMOTE_SCHEMES


def default_workers(remote: bool = True) -> int:
    """Threads of the local engine. On object stores min(32, 4 x CPUs): an inspection mostly waits
    for round trips. On local disks 1: inspecting is CPU-bound Python there, and threads only
    contend for the GIL (1,000 checkpoints on 2 CPUs: 1 thread ~900/s, 8 threads ~420/s; see
    BENCHMARKS.md)."""
    return min(32, 4 * (os.cpu_count() or 1)) if remote else 1


# ------------------------------------------------------------------------------------ globs

def _has_magic(text: str) -> bool:
    return glob.has_magic(text)


def is_pattern(arg: str) -> bool:
    """A glob pattern, as opposed to one path, URI or pipeline name. Remote URIs are patterns
    when their path (not their `?options`) has a wildcard; a local path that exists as written
    is never a pattern."""
    parsed = urlparse(arg)
    if parsed.scheme.lower() in REMOTE_SCHEMES:
        return _has_magic(parsed.netloc + parsed.path)
    if parsed.scheme.lower() == "file":
        return _has_magic(parsed.path)
    return _has_magic(arg) and not os.path.exists(arg)


def expand(args: list[str]) -> list[str]:
    """Each argument, or the folders its pattern matches (sorted), in argument order.
    UsageError when a pattern matches no folder."""
    out: list[str] = []
    for arg in args:
        if not is_pattern(arg):
            out.append(arg)
            continue
        matches = _expand_remote(arg) if urlparse(arg).scheme.lower() in REMOTE_SCHEMES else _expand_local(arg)
        if not matches:
            raise UsageError(f"no checkpoint folder matches {arg}")
        out.extend(matches)
    return out


def _expand_local(pattern: str) -> list[str]:
    parsed = urlparse(pattern)
    if parsed.scheme.lower() == "file":
        return [f"file://{m}" for m in sorted(glob.glob(parsed.path)) if os.path.isdir(m)]
    return [m.rstrip(os.sep) for m in sorted(glob.glob(os.path.expanduser(pattern))) if os.path.isdir(m)]


def _expand_remote(pattern: str) -> list[str]:
    """List each wildcard segment of the URI's path through Storage: `*` costs one listing per
    folder it is matched against; literal segments cost nothing."""
    base, q, options = pattern.partition("?")
    suffix = f"{q}{options}"
    parsed = urlparse(base)
    if _has_magic(parsed.netloc):
        raise UsageError(f"{pattern}: wildcards are allowed in the path, not in the bucket or host name")
    segments = [s for s in parsed.path.split("/") if s]
    first = next(i for i, s in enumerate(segments) if _has_magic(s))
    root = f"{parsed.scheme}://{parsed.netloc}/{'/'.join(segments[:first])}".rstrip("/")
    storage = Storage.open(root + suffix)
    found: list[str] = [""]
    for seg in segments[first:]:
        nxt: list[str] = []
        for rel in found:
            if not _has_magic(seg):
                nxt.append(f"{rel}/{seg}".strip("/"))
                continue
            entries = storage.list_dir(rel) or []
            names = sorted(e.name for e in entries if e.is_dir and fnmatch.fnmatchcase(e.name, seg))
            nxt.extend(f"{rel}/{n}".strip("/") for n in names)
        found = nxt
    if segments[-1:] and not _has_magic(segments[-1]):
        found = [rel for rel in found if storage.kind(rel) == "dir"]
    return [f"{root}/{rel}{suffix}" for rel in found]


# ----------------------------------------------------------------------------------- targets

@dataclass(frozen=True)
class Target:
    """One checkpoint to inspect, with its sink (picklable: it travels to Spark tasks)."""

    checkpoint: str
    sink: Optional[str] = None
    sink_kind: str = "auto"
    app_id: Optional[str] = None
    deep: bool = False  # read state file ends on object stores too (inspect_checkpoint's `deep`)
    target_spark: Optional[tuple[int, int]] = None  # the Spark line that will restart it (inspectors/lines.py)


def inspect_target(target: Target, quiet_period_s: Optional[float] = None,
                   progress: Optional[Callable[[str], None]] = None) -> QueryInspection:
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.rewind_time import with_oldest_time

    return with_oldest_time(inspect_checkpoint(target.checkpoint, progress=progress, sink=target.sink,
                                               sink_kind=target.sink_kind, app_id=target.app_id,
                                               quiet_period_s=quiet_period_s, deep=target.deep,
                                               target_spark=target.target_spark))


def run_local(targets: list[Target], workers: int = 1, quiet_period_s: Optional[float] = None,
              progress: Optional[Callable[[str], None]] = None) -> list[QueryInspection]:
    """Inspect every target; results in input order. `workers` > 1 uses a thread pool."""
    tick = progress or (lambda _msg: None)
    if workers <= 1 or len(targets) <= 1:
        out = []
        for t in targets:
            tick(f"inspecting {t.checkpoint}")
            out.append(inspect_target(t, quiet_period_s, _prefixed(tick, t.checkpoint)))
        return out
    done = [0]

    def one(t: Target) -> QueryInspection:
        q = inspect_target(t, quiet_period_s)
        done[0] += 1  # only a progress figure: an occasional lost increment is harmless
        tick(f"inspected {done[0]}/{len(targets)} checkpoints")
        return q

    from concurrent.futures import ThreadPoolExecutor  # here: one checkpoint needs no pool (and no logging import)

    with ThreadPoolExecutor(max_workers=min(workers, len(targets)), thread_name_prefix="streamctl-fleet") as pool:
        return list(pool.map(one, targets))


def _prefixed(tick: Callable[[str], None], location: str) -> Callable[[str], None]:
    return lambda msg: tick(f"{location}: {msg}")


def _spark_task(quiet_period_s: Optional[float], target: Target) -> dict[str, Any]:
    """Runs inside a Spark task (a Python worker): one checkpoint, its JSON record."""
    return inspect_target(target, quiet_period_s).to_record()


TASK_SLOTS_FACTOR = 2  # tasks per core: a slow checkpoint delays one of several tasks, not the job
CHECKPOINTS_PER_TASK = 500  # beyond that, more tasks (a retried task redoes at most this many)


def default_tasks(checkpoints: int, parallelism: int) -> int:
    """How many Spark tasks inspect a fleet: two per core of the cluster, more for very large
    fleets (at most CHECKPOINTS_PER_TASK checkpoints each), never more than checkpoints."""
    want = max(TASK_SLOTS_FACTOR * max(parallelism, 1), -(-checkpoints // CHECKPOINTS_PER_TASK))
    return max(1, min(checkpoints, want))


class SparkJobFailed(StreamctlError):
    """The Spark job of a fleet failed as a whole (a lost executor, a crashed Python worker): no
    row came back. The message is Spark's reason in one line (exit 3; a fleet run turns it into
    NotVerified, naming its --resume-run)."""


def _collected(job: Callable[[], list[Any]]) -> list[Any]:
    """job() (a Spark action), with a failure of the job turned into SparkJobFailed."""
    try:
        return job()
    except StreamctlError:
        raise
    except Exception as exc:  # Py4JJavaError and PySpark's captured exceptions
        if type(exc).__module__.split(".")[0] not in ("py4j", "pyspark"):
            raise
        raise SparkJobFailed(f"the Spark job failed: {spark_reason(str(exc))}") from None


def spark_reason(text: str) -> str:
    """Spark's reason for a failed job in one line: the innermost exception message of its first
    line that names one ("Task 1 in stage 0.0 failed 1 times: Python worker exited unexpectedly
    (crashed)"), at most 300 characters."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = next((x for x in lines if "Exception: " in x or "Error: " in x), lines[0] if lines else "")
    task = re.search(r"Task \S+ in stage \S+ failed \d+ times?", line)
    inner = re.split(r"(?:Exception|Error): ", line)[-1].split(". ")[0].strip().rstrip(".")
    reason = f"{task.group(0)}: {inner}" if task and task.group(0) not in inner else inner
    return reason[:300] or "no reason given"


class SparkRunner:
    """Inspect checkpoints inside Spark tasks, several checkpoints per task. Reuses the active
    SparkSession when there is one (and then leaves it running); otherwise starts one on
    `master` and stops it on close. The Python workers use this interpreter."""

    def __init__(self, master: str = DEFAULT_MASTER, app_name: str = "streamctl-fleet") -> None:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        try:
            from pyspark.sql import SparkSession
        except ImportError:
            raise UsageError("--engine spark needs PySpark: pip install 'streamctl[spark]'") from None

        active = SparkSession.getActiveSession()
        self.owned = active is None
        if active is None:
            active = (SparkSession.builder.master(master).appName(app_name)
                      .config("spark.ui.enabled", "false")
                      .config("spark.ui.showConsoleProgress", "false")
                      .getOrCreate())
            active.sparkContext.setLogLevel("ERROR")
        self.spark = active

    def run(self, targets: list[Target], quiet_period_s: Optional[float] = None,
            tasks: Optional[int] = None) -> list[dict[str, Any]]:
        """One record (`QueryInspection.to_record()`) per target, in input order. The checkpoints
        are grouped into `tasks` tasks, by default `default_tasks` of the fleet size and the
        cluster's parallelism (each task costs PySpark 0.1-0.3 s of overhead: see BENCHMARKS.md)."""
        import functools

        if not targets:
            return []
        sc = self.spark.sparkContext
        n = default_tasks(len(targets), sc.defaultParallelism) if tasks is None else max(1, min(tasks, len(targets)))
        task = functools.partial(_spark_task, quiet_period_s)
        return _collected(lambda: sc.parallelize(targets, n).map(task).collect())

    def map(self, fn: Callable[[Any], Any], items: list[Any], tasks: int) -> list[Any]:
        """fn(item) of every item inside `tasks` Spark tasks (each takes a contiguous share and runs
        it one item after another, so at most `tasks` items are under way at once); results in
        input order. fn and the items are pickled to the Python workers."""
        if not items:
            return []
        sc = self.spark.sparkContext
        return _collected(lambda: sc.parallelize(items, max(1, min(tasks, len(items)))).map(fn).collect())

    def close(self) -> None:
        if self.owned:
            self.spark.stop()

    def __enter__(self) -> SparkRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ----------------------------------------------------------------------------------- outputs

def jsonl_lines(records: list[dict[str, Any]]) -> Iterator[str]:
    for r in records:
        yield json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n"


def write_jsonl(path: str, records: list[dict[str, Any]]) -> None:
    """One JSON line per query: the `queries[]` record of the EpochReport."""
    write_text_atomic(path, "".join(jsonl_lines(records)))


def flat_row(record: dict[str, Any]) -> dict[str, Any]:
    """The flat Parquet columns of one query record."""
    sink = record.get("sink") or {}
    findings = record.get("findings") or []
    return {
        "checkpoint": record["checkpoint"],
        "query_id": record["query_id"],
        "planned": record["planned"],
        "committed": record["committed"],
        "state_epoch": record["state_epoch"],
        "verdict": record["verdict"],
        "sink_epoch": sink.get("epoch"),
        "findings_count": len(findings),
        "error_codes": sorted({f["code"] for f in findings if f.get("severity") == "error"}),
        "record_json": json.dumps(record, sort_keys=True, ensure_ascii=False),
    }


def write_parquet(path: str, records: list[dict[str, Any]]) -> None:
    """One row per query with flat columns (PARQUET_COLUMNS); the whole record in record_json."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([
        ("checkpoint", pa.string()), ("query_id", pa.string()), ("planned", pa.int64()),
        ("committed", pa.int64()), ("state_epoch", pa.int64()), ("verdict", pa.string()),
        ("sink_epoch", pa.int64()), ("findings_count", pa.int64()), ("error_codes", pa.list_(pa.string())),
        ("record_json", pa.string()),
    ])
    rows = [flat_row(r) for r in records]
    table = pa.Table.from_pylist(rows, schema=schema)
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))

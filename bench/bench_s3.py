#!/usr/bin/env python3
"""Count the S3 requests of `streamctl inspect epochs` and `trim` per file, on a real S3 API server.

Run with `./dev bench-s3` (see BENCHMARKS.md, "Requests per file on S3"). Prints figures; it is not
a timed test and never fails because a bound is missed (it exits 0 unless the set-up or a command
fails).

What it does:

1. Builds, once, a small version of bench_inspect.py's synthetic checkpoint (the same layout: 100
   retained batches, 3 operators, HDFS state with 100 versions and a snapshot every 10, `.crc`
   sidecars) with `--partitions` shuffle partitions (default 4: about 3,000 files), cached under
   .bench/ (git-ignored).
2. Starts moto's S3 server on loopback (as tests/helpers/s3_fixtures.py does), creates a bucket
   and uploads the tree, straight to the server.
3. Puts tests/helpers' CountingProxy in front of the server (it counts each request it forwards;
   `--delay` adds a simulated round trip per request, default none) and runs, as subprocesses
   against the `s3://` URI through the proxy:
   a. a bare listing of the objects (boto3 `ListObjectsV2`, 1,000 keys a page): the floor;
   b. `streamctl inspect epochs <uri> --json`;
   c. `streamctl trim <uri> --keep-epochs N --json` (the plan);
   d. `streamctl copy <uri> <uri>-copy --keep-epochs N --execute --json` (every file a restart
      reads, copied within the store: S3 CopyObject) and `streamctl copy <local tree> <uri>-upload
      ...` (the same files uploaded from the local disk), each verified;
   e. `streamctl trim <uri> --keep-epochs N --execute --json` (copy -> verify -> delete of every
      file the plan moves, backup in the checkpoint's `_streamctl/backups/`).
4. Prints the requests of each by HTTP method, the most requests in flight at once beside the
   thread pools' bounds, requests per listed file for inspect (the bare listing's beside it) and
   requests per moved file for trim --execute, all of them and those on the moved files' own keys,
   each beside its bound (at most 3 per moved file), and for each copy its requests and files per
   second (the copies' wall time is the figure there: with `--delay` it is what the copy threads
   overlap). Other wall times are printed for context only: moto and the proxy are in the way.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (HERE, ROOT / "tests"):  # bench_inspect; tests/helpers (what the S3 tests use); `python -P` adds neither
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import bench_inspect as bi  # bench/ is on sys.path (above)

BOUND_PER_MOVED_FILE = 3.0  # read, copy, read of the copy (the test: tests/test_object_store_mutations.py)
DEFAULT_PARTITIONS = 4
BUCKET = "chk"
PREFIX = "bench"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def log(msg: str) -> None:
    print(f"bench-s3: {msg}", file=sys.stderr, flush=True)


def start_moto(port: int, logfile: Path) -> subprocess.Popen:
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    if exe is None:
        raise SystemExit("bench-s3: moto_server not found next to this Python (pip install 'moto[server]')")
    with open(logfile, "w") as fh:
        proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=fh, stderr=fh)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit(f"bench-s3: moto's server did not start; see {logfile}")


def upload(endpoint: str, src: Path) -> int:
    """Every file of `src` to s3://BUCKET/PREFIX/, 8 at once, straight to the server (not counted)."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint)
    s3.create_bucket(Bucket=BUCKET)
    files = [p for p in src.rglob("*") if p.is_file()]

    def put(p: Path) -> None:
        s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{p.relative_to(src).as_posix()}", Body=p.read_bytes())

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(put, files))
    return len(files)


def list_keys(endpoint: str) -> list[str]:
    """A bare listing of the checkpoint's objects: the floor of any tool that looks at every file."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint)
    return [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{PREFIX}/")
            for o in page.get("Contents", [])]


def kind(method: str, path: str) -> str:
    """The request's HTTP method, with what a GET or POST does (the proxy sees no headers: a PUT
    may be an upload or a server-side CopyObject)."""
    query = path.partition("?")[2]
    if method == "GET":
        return "GET list" if ("list-type=" in query or "prefix=" in query or "delimiter=" in query) else "GET object"
    if method == "POST" and "delete" in query:
        return "POST DeleteObjects"
    return method


def key_of(path: str) -> str:
    """`/chk/bench/state/0/1/401.delta?x-id=GetObject` -> `bench/state/0/1/401.delta`."""
    key = unquote(path.partition("?")[0]).lstrip("/")
    return key[len(BUCKET) + 1:] if key.startswith(BUCKET + "/") else key


class Phase:
    """The requests the proxy forwarded while one command ran."""

    def __init__(self, name: str, requests: list[tuple[str, str]], seconds: float, in_flight: int) -> None:
        self.name, self.requests, self.seconds, self.in_flight = name, requests, seconds, in_flight
        self.kinds = Counter(kind(m, p) for m, p in requests)


def run_phase(proxy, name: str, argv: list[str], env: dict[str, str]) -> tuple[Phase, subprocess.CompletedProcess]:
    start = len(proxy.requests)
    proxy.max_in_flight = 0
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    return Phase(name, list(proxy.requests[start:]), seconds, proxy.max_in_flight), r


def parse(r: subprocess.CompletedProcess, what: str, codes: tuple[int, ...] = (0,)) -> dict:
    if r.returncode not in codes:
        raise SystemExit(f"bench-s3: {what} exited {r.returncode}: {bi.first_line(r.stderr)}")
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise SystemExit(f"bench-s3: {what}: stdout is not JSON: {bi.first_line(r.stdout or '(empty)')}") from None


def pool_bounds() -> str:
    """The thread pools' sizes as the code has them (read, not assumed; '?' if renamed)."""
    try:
        from streamctl.inspectors import checkpoint_reads
        from streamctl.operations import object_moves
    except ImportError:
        return "?"
    return (f"inspect reads {getattr(checkpoint_reads, 'READ_WORKERS', '?')}, "
            f"object-store copies {getattr(object_moves, 'COPY_THREADS', '?')}")


def per(n: int, d: int) -> str:
    return f"{n / d:.3f}" if d else "-"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS,
                   help=f"shuffle partitions of the uploaded checkpoint (default {DEFAULT_PARTITIONS}: about 3,000 files)")
    p.add_argument("--keep-epochs", type=int, default=10, help="trim --keep-epochs (default 10 of the 100 batches)")
    p.add_argument("--delay", type=float, default=0.0,
                   help="seconds the proxy waits before forwarding each request, a simulated round trip (default 0)")
    p.add_argument("--dir", type=Path, default=None, help="where the local tree is built and cached")
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of tables")
    args = p.parse_args(argv)
    if args.partitions < 1 or args.keep_epochs < 1:
        p.error("--partitions and --keep-epochs must be >= 1")

    from helpers.s3_fixtures import CountingProxy, free_port  # tests/ is on sys.path (above)

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    source = (args.dir or bi.DEFAULT_DIR.with_name(f"checkpoint-{args.partitions}p")).resolve()
    info = bi.ensure_checkpoint(source, False, log, args.partitions)
    exe = bi.find_streamctl()
    if exe is None:
        raise SystemExit("bench-s3: streamctl executable not found")
    load_at_start = os.getloadavg()[0]

    with tempfile.TemporaryDirectory(prefix="bench-s3-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        # AWS credentials for moto; no user config of streamctl or of AWS is read
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "STREAMCTL_"))}
        env.update(CREDENTIALS, HOME=str(home), XDG_CONFIG_HOME=str(home), NO_COLOR="1",
                   AWS_CONFIG_FILE=str(home / "aws-config"), AWS_SHARED_CREDENTIALS_FILE=str(home / "aws-credentials"),
                   STREAMCTL_QUIET_PERIOD="0")  # the tree is seconds old on the server: not a live query
        os.environ.update({k: env[k] for k in (*CREDENTIALS, "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")})
        moto_port = free_port()
        log(f"starting moto's S3 server on 127.0.0.1:{moto_port} ...")
        moto = start_moto(moto_port, Path(tmp) / "moto.log")
        proxy = None
        try:
            t0 = time.perf_counter()
            uploaded = upload(f"http://127.0.0.1:{moto_port}", source)
            log(f"uploaded {uploaded} files in {time.perf_counter() - t0:.1f} s")
            proxy = CountingProxy(moto_port, delay=args.delay)
            uri = f"s3://{BUCKET}/{PREFIX}?endpoint_override=127.0.0.1:{proxy.port}&scheme=http"
            via_proxy = f"http://127.0.0.1:{proxy.port}"

            log("a bare listing through the proxy (the floor) ...")
            start = len(proxy.requests)
            t0 = time.perf_counter()
            listed = len(list_keys(via_proxy))
            floor = Phase("bare listing (boto3 ListObjectsV2)", list(proxy.requests[start:]),
                          time.perf_counter() - t0, proxy.max_in_flight)
            log("streamctl inspect epochs ...")
            inspect, r = run_phase(proxy, "inspect epochs --json", [exe, "inspect", "epochs", uri, "--json"], env)
            parse(r, "inspect epochs", (0, 1))  # 1: a finding, not a failure
            trim = [exe, "trim", uri, "--keep-epochs", str(args.keep_epochs), "--json"]
            log(f"streamctl trim --keep-epochs {args.keep_epochs} (plan) ...")
            plan, r = run_phase(proxy, f"trim --keep-epochs {args.keep_epochs} (plan)", trim, env)
            moved_paths = [s["path"] for s in parse(r, "trim (plan)")["plan"]["steps"]]
            copies = []
            for what, src, dest in (("S3 -> S3", uri, uri.replace(f"/{PREFIX}?", f"/{PREFIX}-copy?")),
                                    ("local -> S3", str(source), uri.replace(f"/{PREFIX}?", f"/{PREFIX}-upload?"))):
                log(f"streamctl copy {what} --keep-epochs {args.keep_epochs} --execute ...")
                ph, r = run_phase(proxy, f"copy {what} --execute", [exe, "copy", src, dest, "--keep-epochs",
                                                                  str(args.keep_epochs), "--execute", "--json"], env)
                doc = parse(r, f"copy {what}")
                if not doc.get("verified"):
                    raise SystemExit(f"bench-s3: copy {what} did not verify")
                copies.append((ph, sum(1 for s in doc["plan"]["steps"] if s["action"] in ("copy", "write"))))
            log(f"streamctl trim --keep-epochs {args.keep_epochs} --execute ({len(moved_paths)} files) ...")
            execute, r = run_phase(proxy, f"trim --keep-epochs {args.keep_epochs} --execute", [*trim, "--execute"], env)
            done = parse(r, "trim --execute")
            if not done.get("verified"):
                raise SystemExit("bench-s3: trim --execute did not verify")
            moved = len(done["plan"]["steps"])
            left = [k for k in list_keys(f"http://127.0.0.1:{moto_port}") if "/_streamctl/" not in k]
        finally:
            if proxy is not None:
                proxy.close()
            moto.terminate()
            moto.wait(timeout=10)

    # the requests on a moved file's own keys: its source and its copy in the backup folder
    sources = {f"{PREFIX}/{rel}" for rel in moved_paths}
    tails = tuple("/" + rel for rel in moved_paths)
    on_source = sum(1 for _m, path in execute.requests if key_of(path) in sources)
    on_copy = sum(1 for _m, path in execute.requests
                  if "/_streamctl/" in key_of(path) and key_of(path).endswith(tails))
    files = info["files"]
    g = bi.git_info()
    result = {
        "streamctl": {"executable": exe, "git": g},
        "machine": {"cpus": os.cpu_count(), "loadavg_at_start": load_at_start, "loadavg_at_end": os.getloadavg()[0]},
        "checkpoint": {"files": files, "uploaded": uploaded, "listed": listed, "partitions": args.partitions,
                       "left_after_trim": len(left)},
        "proxy_delay_s": args.delay,
        "thread_pools": pool_bounds(),
        "phases": [{"name": ph.name, "requests": len(ph.requests), "by_kind": dict(sorted(ph.kinds.items())),
                    "max_in_flight": ph.in_flight, "seconds": round(ph.seconds, 2)}
                   for ph in (floor, inspect, plan, execute)],
        "copies": [{"name": ph.name, "files": n, "requests": len(ph.requests), "per_file": len(ph.requests) / n,
                    "max_in_flight": ph.in_flight, "seconds": round(ph.seconds, 2),
                    "files_per_s": round(n / ph.seconds, 1)} for ph, n in copies],
        "per_file": {
            "bare_listing_per_listed_file": len(floor.requests) / listed,
            "inspect_per_listed_file": len(inspect.requests) / listed,
            "trim_plan_per_listed_file": len(plan.requests) / listed,
            "trim_execute_per_moved_file": len(execute.requests) / moved if moved else None,
            "on_moved_keys_per_moved_file": (on_source + on_copy) / moved if moved else None,
            "moved": moved, "on_source": on_source, "on_copy": on_copy,
            "bound_per_moved_file": BOUND_PER_MOVED_FILE,
        },
    }
    if args.json:
        print(json.dumps(result, indent=2, default=str))
        return 0

    print(f"streamctl from git commit {g['short'] or '?'} ({g['branch']}: {g['subject']})")
    if g["uncommitted_outside_bench"]:
        print(f"  note: editable install with {len(g['uncommitted_outside_bench'])} uncommitted path(s) outside bench/")
    print(f"S3: moto {moto_version()} server on loopback, every request of each command through a counting proxy "
          f"(delay {args.delay * 1000:g} ms per request); {os.cpu_count()} CPUs; load average (1 min) at start / end: "
          f"{load_at_start:.2f} / {os.getloadavg()[0]:.2f}")
    print(f"checkpoint: {files} files ({args.partitions} partitions x 3 operators, batches {bi.FIRST_BATCH}..{bi.LAST_BATCH}, "
          f".crc sidecars), {uploaded} objects uploaded, {listed} listed; trim moved {moved}, {len(left)} left")
    print()
    methods = sorted({k for ph in (floor, inspect, plan, execute) for k in ph.kinds})
    header = ("command", "requests", *methods, "most in flight", "seconds")
    rows = [(ph.name, str(len(ph.requests)), *(str(ph.kinds.get(k, 0)) for k in methods), str(ph.in_flight),
             f"{ph.seconds:.2f}") for ph in (floor, inspect, plan, execute)]
    print(table(header, rows))
    print(f"thread pools (bounds in the code): {result['thread_pools']}")
    print()
    bound = f"<= {BOUND_PER_MOVED_FILE:g}"
    status = (lambda x: "PASS" if x <= BOUND_PER_MOVED_FILE else "MISS")
    rows = [
        ("inspect epochs, per listed file", str(len(inspect.requests)), str(listed),
         per(len(inspect.requests), listed), f"bare listing {per(len(floor.requests), listed)}", "-", "INFO"),
        ("trim plan, per listed file", str(len(plan.requests)), str(listed),
         per(len(plan.requests), listed), f"bare listing {per(len(floor.requests), listed)}", "-", "INFO"),
    ]
    if moved:
        rows += [
            ("trim --execute, all requests per moved file", str(len(execute.requests)), str(moved),
             per(len(execute.requests), moved), "-", bound, status(len(execute.requests) / moved)),
            ("  of which on the moved files' keys (source, backup copy)", str(on_source + on_copy), str(moved),
             per(on_source + on_copy, moved), "-", bound, status((on_source + on_copy) / moved)),
            ("  the rest: listings, lock, plan, journal, manifest, DeleteObjects",
             str(len(execute.requests) - on_source - on_copy), str(moved),
             per(len(execute.requests) - on_source - on_copy, moved), "-", "-", "INFO"),
        ]
    print(table(("requests", "count", "files", "per file", "floor per file", "bound", "status"), rows))
    print()
    print(table(("copy (what trim keeps), whole command", "files", "requests", "per file", "most in flight",
                 "seconds", "files/s"),
                [(c["name"], str(c["files"]), str(c["requests"]), f"{c['per_file']:.2f}", str(c["max_in_flight"]),
                  f"{c['seconds']:.2f}", f"{c['files_per_s']:.1f}") for c in result["copies"]]))
    return 0


def moto_version() -> str:
    try:
        import moto

        return moto.__version__
    except ImportError:
        return "?"


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


if __name__ == "__main__":
    sys.exit(main())

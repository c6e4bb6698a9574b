"""Builders of checkpoints and sinks in Spark's on-disk layout (no Spark run): a checkpoint's
offsets/commits/metadata, a file sink's `_spark_metadata/` with compactions, a Delta table with
`txn` app transactions (deltalake), streamctl's coordinated sink; and the `inspect epochs` call
the sink tests share."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

QID = "11111111-2222-3333-4444-555555555555"
META = '{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{"spark.sql.shuffle.partitions":"2"}}'


def source_log(root: Path, first: int, last: int) -> None:
    """`sources/0/<b>` for b in first..last: the file source's own log, one input file per batch
    (in `<root>-input/`, beside the checkpoint), which Spark writes before the offsets naming its
    `logOffset` (a restart reads it, and the input folder it names)."""
    log = root / "sources" / "0"
    log.mkdir(parents=True, exist_ok=True)
    inp = root.with_name(root.name + "-input")
    inp.mkdir(parents=True, exist_ok=True)
    for b in range(first, last + 1):
        (inp / f"part-{b:05d}.json").write_text('{"id": %d}\n' % b)
        (log / str(b)).write_text('v1\n{"path":"file://%s/part-%05d.json","timestamp":1700000000000,'
                                  '"batchId":%d}' % (inp, b, b))


def checkpoint(root: Path, planned: int, committed: int | None, qid: str = QID, file_source: bool = True) -> Path:
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(json.dumps({"id": qid}))
    if file_source:
        source_log(root, 0, planned)
    for b in range(planned + 1):
        (root / "offsets" / str(b)).write_text(f'v1\n{META}\n{{"logOffset":{b}}}')
    for b in range((committed if committed is not None else -1) + 1):
        (root / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


def file_sink(root: Path, latest: int, compact_every: int = 0, drop: tuple[int, ...] = ()) -> Path:
    log = root / "_spark_metadata"
    log.mkdir(parents=True)
    entries: list[str] = []
    for b in range(latest + 1):
        entry = json.dumps({"path": f"file:{root}/part-{b:05d}.parquet", "size": 10, "isDir": False,
                            "modificationTime": 1, "blockReplication": 1, "blockSize": 1, "action": "add"})
        (root / f"part-{b:05d}.parquet").write_bytes(b"PAR1")
        entries.append(entry)
        compact = compact_every and (b + 1) % compact_every == 0
        if b in drop:
            continue
        (log / (f"{b}.compact" if compact else str(b))).write_text("v1\n" + "\n".join(entries if compact else [entry]))
    # Spark deletes log files older than the newest compaction (after a delay); mimic that.
    compacts = [b for b in range(latest + 1) if compact_every and (b + 1) % compact_every == 0]
    if compacts:
        for f in log.iterdir():
            if f.name.isdigit() and int(f.name) < compacts[-1]:
                f.unlink()
    return root


def epochs(cli, chk: Path, sink: Path, *extra: str):
    r = cli("inspect", "epochs", str(chk), "--sink", str(sink), "--json", *extra)
    assert "Traceback" not in r.stderr, r
    return r.code, r.json()["queries"][0]


def codes(q: dict) -> list[str]:
    return sorted(f["code"] for f in q["findings"])


def delta_table(path: Path, app_id: Optional[str], versions: range) -> None:
    """Commits of a streaming writer (`app_id`'s txn per version), or plain appends (None)."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    for v in versions:
        txn = CommitProperties(app_transactions=[Transaction(app_id=app_id, version=v)]) if app_id else None
        write_deltalake(str(path), pa.table({"batch": [v], "value": [v * 10]}), mode="append", commit_properties=txn)


def coordinated(root: Path, epochs_: int, writers: int = 2) -> Path:
    for e in range(epochs_ + 1):
        recs = []
        for p in range(writers):
            rel = f"data/epoch={e}/part-{p:05d}-0-{e:04d}.jsonl"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text('{"key": "k"}\n')
            recs.append({"partition": p, "attempt": 0, "rows": 1, "files": [rel]})
        (root / "_commits").mkdir(parents=True, exist_ok=True)
        (root / "_commits" / f"{e}.json").write_text(json.dumps(
            {"version": 1, "epoch": e, "query_id": QID, "committed_at_ms": 1, "num_writers": writers,
             "writers": recs, "rows": writers}))
    return root


def quiet_pipeline(root: Path, last: int) -> tuple[Path, Path]:
    """A checkpoint committed through `last` and its file sink, every log file old (no sign of a
    running query)."""
    chk, out = checkpoint(root / "chk", last, last), file_sink(root / "out", last)
    for d in ("offsets", "commits"):
        for f in (chk / d).iterdir():
            os.utime(f, (1, 1))
    return chk, out


def build(root: Path, planned: int = 3, committed: int | None = 3, first: int = 0, qid: str = QID,
          state: dict[str, list[str]] | None = None, offsets_missing: tuple[int, ...] = (),
          commits_missing: tuple[int, ...] = (), meta: str = META, commit_body: dict[int, str] | None = None) -> Path:
    """A checkpoint with Spark's file layout, crc files and state stores. state: 'op/part[/store]' -> file names."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(json.dumps({"id": qid}, separators=(",", ":")))
    source_log(root, 0, planned)
    for b in range(first, planned + 1):
        if b not in offsets_missing:
            (root / "offsets" / str(b)).write_text(f'v1\n{meta}\n{{"logOffset":{b}}}')
            (root / "offsets" / f".{b}.crc").write_bytes(b"crc")
    if committed is not None:
        for b in range(first, committed + 1):
            if b not in commits_missing:
                body = (commit_body or {}).get(b, '{"nextBatchWatermarkMs":0}')
                (root / "commits" / str(b)).write_text(f"v1\n{body}")
    for store, files in (state or {}).items():
        d = root / "state" / store
        d.mkdir(parents=True, exist_ok=True)
        for f in files:
            (d / f).write_bytes(_state_bytes(f, files))
    return root


def _state_bytes(name: str, files: list[str]) -> bytes:
    """A state file's bytes: an empty LZ4 stream (its end block alone); a checkpoint-format-2
    changelog `<v>_<id>.changelog` as Spark's changelog writer v3 starts one: `writeUTF("v3")`,
    then its lineage (`writeUTF` of JSON): the versions below v back to the newest zip among
    `files` (or to 1), each with the first id `files` name for it, then the end of records."""
    from streamctl.formats.state import changelog_with_lineage, state_file

    parsed = state_file(name)
    if parsed is None or parsed.unique_id is None or not name.endswith(".changelog"):
        return b"LZ4Block\x15" + bytes(12)
    known = [p for p in (state_file(f) for f in files) if p is not None and p.unique_id is not None]
    zips = [p.version for p in known if p.ext == "zip" and p.version < parsed.version]
    ids: dict[int, str] = {}
    for p in known:
        ids.setdefault(p.version, p.unique_id)
    lineage = [(v, ids[v]) for v in range(max(zips, default=1), parsed.version) if v in ids]
    return changelog_with_lineage(lineage)


def deltas(lo: int, hi: int) -> list[str]:
    return [f"{v}.delta" for v in range(lo, hi + 1)]


def healthy_state(hi: int = 4) -> dict[str, list[str]]:
    return {"0/0": deltas(1, hi), "0/1": deltas(1, hi)}

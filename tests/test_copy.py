"""`streamctl copy` judged by real restarts: a stateful query with a file sink
(dropDuplicates, HDFS state, sink-log compaction every 3 batches) built once per module, its
pristine tree copied per test. After a copy the query restarts at the new place with more input
and the new sink holds every id exactly once (a lost state entry would let a repeated id through,
a sink log still naming the old place would hide rows), and the old place is byte for byte and
mtime for mtime what it was; the same for RocksDB with changelogs and checkpoint format 2. Also: the input folder moved (--source-path), a non-empty
destination refused with nothing written, a live query refused, a crash mid-copy resumed (a real
process killed while it copies, to the local disk and to the S3 server), undo, a Delta sink kept
byte for byte, and local -> the S3 server (moto) -> local, and S3 -> GCS -> Azure -> local. `--move`:
the new place restarts exactly once, the old place is retired (a real restart there fails on the
tombstone, streamctl's mutations refuse it), on the local disk and from the S3 server home, undo
brings it back, a batch planned at the old place during the copy stops the move at its gate, a
crash while retiring resumes; `--new-query-id`: the restart at the new place with the new id, a Delta sink keyed by
the query id refused.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import align_pipeline as ap
from helpers import cloud_fixtures as _cf
from helpers import s3_fixtures as _s3f
from helpers.layouts import epochs
from helpers.trees import copy_tree, snapshot_tree, tree

pytestmark = [pytest.mark.spark, pytest.mark.spark_lines]

s3, gcs, azure = _s3f.s3, _cf.gcs, _cf.azure
KIND = "dedup_file"
FILES = 5  # batches 0..4: sink log 0, 1, 2.compact, 3, 4
STREAMCTL = Path(sys.executable).parent / "streamctl"


@pytest.fixture(scope="module")
def pristine(spark, tmp_path_factory) -> Path:
    """The pipeline folder (input, checkpoint, output) of one real run, never changed."""
    p = ap.build(tmp_path_factory.mktemp("copy-pristine"), KIND, spark, FILES)
    return p.base


@pytest.fixture(scope="module")
def pristine_rocksdb_v2(spark, tmp_path_factory) -> Path:
    """RocksDB with changelog checkpointing and checkpoint format 2 (state unique ids in commits/)."""
    p = ap.build(tmp_path_factory.mktemp("copy-pristine-rocksdb"), "dedup_rocksdb", spark, FILES,
                 extra_confs={"spark.sql.streaming.stateStore.checkpointFormatVersion": "2"})
    return p.base


def as_if_written_here(src: Path, dest: Path) -> None:
    """The sink log and the file source's log of a plain copy name the original's paths: put
    them as Spark would have written them at `dest` (sidecars and mtimes kept in step)."""
    from streamctl.formats.checksum import hadoop_crc

    for log in list(dest.rglob("_spark_metadata")) + list(dest.glob("checkpoint/sources/*")):
        for f in log.iterdir():
            text = f.read_bytes() if f.is_file() and not f.name.startswith(".") else b""
            new = text.replace(str(src).encode(), str(dest).encode())
            if new != text:
                for path, data in ((f, new), (f.with_name(f".{f.name}.crc"), hadoop_crc(new))):
                    if path.exists():
                        st = path.stat()
                        path.write_bytes(data)
                        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def old_place(pristine: Path, tmp_path: Path, spark: Any, kind: str = KIND, **kw: Any) -> ap.Pipeline:
    copy_tree(pristine, tmp_path / "old")
    as_if_written_here(pristine, tmp_path / "old")
    p = ap.Pipeline(tmp_path, kind, spark, name="old", **kw)
    p.files = FILES
    return p


def at(p: ap.Pipeline, checkpoint: Path, output: Path, input_dir: Path | None = None) -> ap.Pipeline:
    """The same query pointed at another place (its input where it is unless moved)."""
    q = ap.Pipeline(p.base.parent, p.kind, p.spark, name=p.base.name, extra_confs=p.extra)
    q.checkpoint, q.output, q.input, q.files = checkpoint, output, input_dir or p.input, p.files
    return q


def restart(p: ap.Pipeline, more: int = 2) -> None:
    p.add_input(p.files, more)
    p.run()
    d = p.delivery()
    assert d["ok"], d


def old_state(p: ap.Pipeline) -> list[Any]:
    """The old place (checkpoint and sink) byte for byte, and every file's size and mtime."""
    return [tree(p.checkpoint), tree(p.output), snapshot_tree(p.checkpoint), snapshot_tree(p.output)]


def copy_args(p: ap.Pipeline, dest: Path | str, sink_dest: Path | str, *extra: str) -> list[str]:
    return ["copy", str(p.checkpoint), str(dest), "--sink", str(p.output), "--sink-dest", str(sink_dest), *extra]


def executed(cli: Any, *args: str) -> dict:
    r = cli(*args, "--execute", "--json")
    assert "Traceback" not in r.stderr, r
    assert r.code == 0, r
    doc = r.json()
    assert doc["kind"] == "CopyResult" and doc["verified"] is True, doc
    return doc


def test_copy_restarts_exactly_once_and_leaves_the_old_place_unchanged(cli, spark, pristine, tmp_path):
    p = old_place(pristine, tmp_path, spark)
    before = old_state(p)
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    r = cli(*copy_args(p, dest, sink_dest), "--json")
    assert r.code == 0, r
    plan = r.json()["plan"]
    assert r.json()["kind"] == "CopyPlan" and not dest.exists() and not sink_dest.exists()
    parts = plan["after"]["parts"]
    assert parts["state"]["files"] and parts["logs"]["files"] and parts["sink_log"]["files"] and parts["sink_data"]["files"]
    rewritten = {rw["path"] for rw in plan["after"]["rewrites"]}
    assert "_spark_metadata/2.compact" in rewritten and "_spark_metadata/4" in rewritten, rewritten
    assert {s["action"] for s in plan["steps"]} == {"copy", "write"}
    assert any(s["path"] == "_spark_metadata/.4.crc" and s["action"] == "write" for s in plan["steps"])

    doc = executed(cli, *copy_args(p, dest, sink_dest))
    after = doc["after"]
    assert after["old"]["committed"] == after["new"]["committed"] == FILES - 1
    assert after["new"]["verdict"] == "aligned" and after["new"]["query_id"] == after["old"]["query_id"]
    assert old_state(p) == before, "the copy changed the old place"
    # every sidecar travelled; the new log names the new place only
    assert (dest / "offsets" / ".4.crc").exists() and (dest / "state/0/0/.1.delta.crc").exists()
    assert str(p.output) not in (sink_dest / "_spark_metadata" / "4").read_text()

    restart(at(p, dest, sink_dest))
    assert old_state(p) == before, "the restart at the new place changed the old place"


@pytest.mark.spark4  # checkpoint format 2
def test_rocksdb_checkpoint_format_2_with_changelogs(cli, spark, pristine_rocksdb_v2, tmp_path):
    p = old_place(pristine_rocksdb_v2, tmp_path, spark, "dedup_rocksdb",
                  extra_confs={"spark.sql.streaming.stateStore.checkpointFormatVersion": "2"})
    before = old_state(p)
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    doc = executed(cli, *copy_args(p, dest, sink_dest, "--keep-epochs", "2"))
    names = [s["path"].rsplit("/", 1)[-1] for s in doc["plan"]["steps"]]
    assert any(n.endswith(".changelog") and "_" in n for n in names), names  # v2: <version>_<uuid>.changelog
    assert doc["after"]["new"]["state_epoch"] == doc["after"]["old"]["state_epoch"] == FILES - 1
    assert old_state(p) == before
    restart(at(p, dest, sink_dest))


def test_input_folder_moved_too(cli, spark, pristine, tmp_path):
    p = old_place(pristine, tmp_path, spark)
    new_input = tmp_path / "new" / "input"
    copy_tree(p.input, new_input)
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    doc = executed(cli, *copy_args(p, dest, sink_dest, "--source-path", f"{p.input}={new_input}", "--keep-epochs", "2"))
    assert doc["plan"]["after"]["left_out"]["files"] > 0  # only what trim --keep-epochs 2 keeps
    assert not (dest / "commits" / "0").exists() and (dest / "commits" / "3").exists()
    assert any(rw["root"] == "checkpoint" and rw["path"].startswith("sources/0/") for rw in doc["plan"]["after"]["rewrites"])
    logged = (dest / "sources/0/4").read_text()
    assert str(new_input) in logged and f"{p.input}/" not in logged
    restart(at(p, dest, sink_dest, new_input))


def test_source_path_matching_nothing_is_refused(cli, spark, pristine, tmp_path):
    p = old_place(pristine, tmp_path, spark)
    r = cli(*copy_args(p, tmp_path / "n/ck", tmp_path / "n/out", "--source-path", f"{tmp_path}/nowhere=/x"), "--json")
    assert r.code == 4 and "no input path" in r.stdout + r.stderr, r


def test_non_empty_destination_refused_with_nothing_written(cli, spark, pristine, tmp_path):
    p = old_place(pristine, tmp_path, spark)
    before = old_state(p)
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    dest.mkdir(parents=True)
    (dest / "notes.txt").write_text("someone's file\n")
    held = tree(tmp_path / "new")
    r = cli(*copy_args(p, dest, sink_dest), "--execute", "--json")
    assert r.code == 4, r
    assert r.json()["kind"] == "CopyRefusal" and "notes.txt" in r.json()["reason"], r
    assert tree(tmp_path / "new") == held and not sink_dest.exists()
    assert old_state(p) == before
    # a destination inside the old checkpoint is refused too
    r = cli(*copy_args(p, p.checkpoint / "copy", sink_dest), "--execute")
    assert r.code == 4 and not (p.checkpoint / "copy").exists(), r


def test_live_query_refused(cli, spark, pristine, tmp_path):
    p = old_place(pristine, tmp_path, spark)
    os.utime(p.checkpoint / "commits" / str(FILES - 1))  # the newest commit written just now
    r = cli(*copy_args(p, tmp_path / "n/ck", tmp_path / "n/out"), "--execute", "--quiet-period", "60", "--json")
    assert r.code == 4 and "LIVE_QUERY" in r.stdout, r
    assert not (tmp_path / "n").exists()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMCTL_")}
    env.update(STREAMCTL_QUIET_PERIOD="0", NO_COLOR="1", **extra)
    return env


def _files(folder: Path) -> int:
    return sum(len(files) for _d, _s, files in os.walk(folder))


def test_crash_mid_copy_resumed(cli, spark, pristine, tmp_path):
    """A real process killed (SIGKILL) while it copies, some files at the new place, the rest not:
    `--resume` finishes the copy, verified, and the query restarts there exactly once."""
    p = old_place(pristine, tmp_path, spark)
    before = old_state(p)
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    proc = subprocess.Popen([str(STREAMCTL), *copy_args(p, dest, sink_dest), "--execute"],
                            env=_env(STREAMCTL_TEST_STEP_DELAY="0.05"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while _files(dest) < 20 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()
    assert proc.wait(timeout=30) == -9, proc.stderr.read() if proc.stderr else ""
    assert 20 <= _files(dest) and not (dest / "metadata").exists(), "the copy was not cut short mid-way"
    backups = list((dest / "_streamctl" / "backups").iterdir())
    assert len(backups) == 1 and (dest / "_streamctl" / "lock.json").exists()
    r = subprocess.run([str(STREAMCTL), "copy", "--resume", str(backups[0]), "--json"], env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert json.loads(r.stdout)["verified"] is True and json.loads(r.stdout)["resumed"] is True
    assert not (dest / "_streamctl" / "lock.json").exists()
    assert old_state(p) == before
    restart(at(p, dest, sink_dest))


def test_local_to_s3_and_back(cli, spark, pristine, tmp_path, s3):
    _fs, port = s3
    p = old_place(pristine, tmp_path, spark)
    before = old_state(p)
    ck_uri, out_uri = _s3f.s3_uri(port, "moved/checkpoint"), _s3f.s3_uri(port, "moved/output")
    doc = executed(cli, *copy_args(p, ck_uri, out_uri))
    assert doc["after"]["new"]["verdict"] == "aligned"
    assert old_state(p) == before
    back_ck, back_out = tmp_path / "back" / "checkpoint", tmp_path / "back" / "output"
    doc = executed(cli, "copy", ck_uri, str(back_ck), "--sink", out_uri, "--sink-dest", str(back_out))
    assert doc["after"]["new"]["committed"] == FILES - 1
    restart(at(p, back_ck, back_out))


def test_from_store_to_store_s3_gcs_azure_then_home(cli, spark, pristine, tmp_path, s3, gcs, azure):
    """Each hop copies from one object store to another (the S3 server, fake-gcs-server,
    Azurite): every copy inspects aligned at the same committed epoch, and the copy brought home
    from Azure restarts exactly once; the old place is unchanged."""
    p = old_place(pristine, tmp_path, spark)
    before = old_state(p)
    hops = [(str(p.checkpoint), str(p.output)),
            (_s3f.s3_uri(s3[1], "hop/checkpoint"), _s3f.s3_uri(s3[1], "hop/output")),
            (_cf.gcs_uri(gcs[1], "hop/checkpoint"), _cf.gcs_uri(gcs[1], "hop/output")),
            (_cf.azure_uri(azure[1], "hop/checkpoint"), _cf.azure_uri(azure[1], "hop/output")),
            (str(tmp_path / "home" / "checkpoint"), str(tmp_path / "home" / "output"))]
    for (ck, out), (dest, sink_dest) in zip(hops, hops[1:], strict=False):
        doc = executed(cli, "copy", ck, dest, "--sink", out, "--sink-dest", sink_dest)
        assert doc["after"]["new"]["verdict"] == "aligned" and doc["after"]["new"]["committed"] == FILES - 1, (dest, doc)
    assert old_state(p) == before
    restart(at(p, tmp_path / "home" / "checkpoint", tmp_path / "home" / "output"))


def test_undo_takes_the_copy_out(cli, spark, pristine, tmp_path):
    p = old_place(pristine, tmp_path, spark)
    before = old_state(p)
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    doc = executed(cli, *copy_args(p, dest, sink_dest, "--all"))
    r = cli("copy", "--undo", doc["backup"], "--json")
    assert r.code == 0 and r.json()["verified"] is True, r
    left = [f for f in tree(dest) if not f.startswith("_streamctl/")]
    assert left == [] and tree(sink_dest) == {}, left
    assert old_state(p) == before


def test_delta_sink_keeps_its_relative_paths(cli, layouts, tmp_path):
    """A Delta table names its files relative to the table: copied byte for byte, not rewritten."""
    chk = layouts.checkpoint(tmp_path / "old" / "chk", 3, 3)
    for d in ("offsets", "commits"):
        for f in (chk / d).iterdir():
            os.utime(f, (1, 1))
    table = tmp_path / "old" / "table"
    layouts.delta_table(table, layouts.QID, range(4))
    before = tree(tmp_path / "old")
    dest, sink_dest = tmp_path / "new" / "chk", tmp_path / "new" / "table"
    doc = executed(cli, "copy", str(chk), str(dest), "--sink", str(table), "--sink-dest", str(sink_dest))
    assert doc["plan"]["after"]["rewrites"] == [] and doc["after"]["new"]["sink_epoch"] == 3, doc["after"]
    assert tree(sink_dest) == tree(table) and tree(tmp_path / "old") == before


def _without_metadata(folder: Path) -> dict:
    return {k: v for k, v in tree(folder).items() if k not in ("metadata", ".metadata.crc")}


def test_move_retires_the_old_place_and_restarts_exactly_once_at_the_new(cli, spark, pristine, tmp_path):
    """--move: the copy verifies, then the old checkpoint's `metadata` becomes the tombstone (its
    other files and the old sink untouched); a real restart there fails before it writes, every
    streamctl mutation there is refused (RETIRED), and the new place restarts exactly once."""
    p = old_place(pristine, tmp_path, spark)
    ck_before, out_before = _without_metadata(p.checkpoint), tree(p.output)
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    doc = executed(cli, *copy_args(p, dest, sink_dest, "--move"))
    last = doc["plan"]["steps"][-1]
    assert (last["root"], last["path"], last["action"]) == ("from_checkpoint", "metadata", "write"), last
    stone = json.loads((p.checkpoint / "metadata").read_text())
    assert stone["moved_to"] == str(dest) and stone["query_id_was"] == doc["plan"]["before"]["query_id"], stone
    assert not (p.checkpoint / ".metadata.crc").exists()
    assert _without_metadata(p.checkpoint) == ck_before and tree(p.output) == out_before
    code, q = epochs(cli, p.checkpoint, p.output)
    found = {f["code"]: f for f in q["findings"]}
    assert "RETIRED" in found and found["RETIRED"]["undo"] == f"streamctl copy --undo {doc['backup']}", q["findings"]
    r = cli("trim", str(p.checkpoint), "--execute", "--json")
    assert r.code == 4 and "RETIRED" in r.stdout + r.stderr, r
    r = cli(*copy_args(p, tmp_path / "again/ck", tmp_path / "again/out"), "--json")
    assert r.code == 4 and "RETIRED" in r.stdout + r.stderr, r
    with pytest.raises(Exception) as failed:  # noqa: B017 - Spark's own error: the tombstone is no stream metadata
        p.run()
    assert "No usable value for id" in str(failed.value), str(failed.value)[:2000]
    assert _without_metadata(p.checkpoint) == ck_before and tree(p.output) == out_before
    restart(at(p, dest, sink_dest))
    r = cli("copy", "--undo", doc["backup"], "--json")
    assert r.code == 4 and "ran at the new place" in r.stdout + r.stderr, r


def test_move_undone_brings_the_old_place_back(cli, spark, pristine, tmp_path):
    p = old_place(pristine, tmp_path, spark)
    before = [tree(p.checkpoint), tree(p.output)]
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    doc = executed(cli, *copy_args(p, dest, sink_dest, "--move"))
    assert "streamctl" in (p.checkpoint / "metadata").read_text()
    r = cli("copy", "--undo", doc["backup"], "--json")
    assert r.code == 0 and r.json()["verified"] is True, r
    assert [tree(p.checkpoint), tree(p.output)] == before
    assert [f for f in tree(dest) if not f.startswith("_streamctl/")] == [] and tree(sink_dest) == {}
    restart(p)


def test_move_refused_when_the_old_place_changed_during_the_copy(cli, spark, pristine, tmp_path):
    """A batch planned at the old place while the copy runs (a real process, slowed per step):
    the gate refuses (exit 4), the old place is not retired, the copy is kept for --undo."""
    p = old_place(pristine, tmp_path, spark)
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    proc = subprocess.Popen([str(STREAMCTL), *copy_args(p, dest, sink_dest, "--move"), "--execute", "--json"],
                            env=_env(STREAMCTL_TEST_STEP_DELAY="0.02"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while _files(dest) < 5 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    (p.checkpoint / "offsets" / str(FILES)).write_bytes((p.checkpoint / "offsets" / str(FILES - 1)).read_bytes())
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 4 and "changed during the copy" in out + err, (out, err)
    assert "streamctl" not in (p.checkpoint / "metadata").read_text()
    assert not (dest / "_streamctl" / "lock.json").exists()
    backup = next((dest / "_streamctl" / "backups").iterdir())
    r = cli("copy", "--undo", str(backup), "--json")
    assert r.code == 0 and r.json()["verified"] is True, r


def test_new_query_id_restarts_exactly_once(cli, spark, pristine, tmp_path):
    from streamctl.formats.metadata import serialize_query_metadata

    p = old_place(pristine, tmp_path, spark)
    old_id = json.loads((p.checkpoint / "metadata").read_text())["id"]
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    doc = executed(cli, *copy_args(p, dest, sink_dest, "--new-query-id"))
    new_id = doc["after"]["new"]["query_id"]
    assert new_id != old_id and doc["after"]["old"]["query_id"] == old_id and doc["plan"]["after"]["query_id"] == new_id
    assert (dest / "metadata").read_bytes() == serialize_query_metadata(new_id)
    assert any("new query id" in n for n in doc["plan"]["notes"])
    restart(at(p, dest, sink_dest))
    assert json.loads((dest / "metadata").read_text())["id"] == new_id


def test_move_crashed_while_retiring_resumed(cli, spark, pristine, tmp_path):
    """A real process dies (the journal's crash hook) after the old `metadata` became the
    tombstone but before its done record: `--resume` passes the gate again (the tombstone is this
    copy's), finishes, verifies; the old place is retired, the new one verified."""
    p = old_place(pristine, tmp_path, spark)
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    plan = cli(*copy_args(p, dest, sink_dest, "--move"), "--json").json()["plan"]
    copies, retiring = plan["settings"]["retire_from"], len(plan["steps"]) - plan["settings"]["retire_from"]
    assert retiring == 2, plan["steps"][copies:]  # .metadata.crc moved, metadata written
    crash = 1 + 2 * copies + retiring + 1  # start, the copy's begin and done records, the gate, 2 begins, 1 done
    r = subprocess.run([str(STREAMCTL), *copy_args(p, dest, sink_dest, "--move"), "--execute"],
                       env=_env(STREAMCTL_TEST_CRASH_AFTER=str(crash)), capture_output=True, text=True, timeout=120)
    assert r.returncode == 86, (r.stdout, r.stderr)
    assert "streamctl" in (p.checkpoint / "metadata").read_text() and (dest / "_streamctl" / "lock.json").exists()
    backup = next((dest / "_streamctl" / "backups").iterdir())
    records = [json.loads(line) for line in (backup / "journal.jsonl").read_text().splitlines()]
    done = [r["step"] for r in records if r["event"] == "done"] + [s for r in records if r["event"] == "done_chunk"
                                                                for s in r["steps"]]  # local moves: one record per group
    assert [s for s in done if s >= copies] == [copies], records[-4:]
    r = cli("copy", "--resume", str(backup), "--json")
    assert r.code == 0 and r.json()["verified"] is True and r.json()["resumed"] is True, r
    assert r.json()["after"]["old"]["retired"] == r.json()["plan"]["op_id"]
    assert not (dest / "_streamctl" / "lock.json").exists()


def test_new_query_id_refused_for_a_delta_sink_keyed_by_the_query_id(cli, layouts, tmp_path):
    """A Delta sink's txn appId is the query id unless the writer names its own: refused, nothing written."""
    chk = layouts.checkpoint(tmp_path / "old" / "chk", 3, 3)
    for d in ("offsets", "commits"):
        for f in (chk / d).iterdir():
            os.utime(f, (1, 1))
    layouts.delta_table(tmp_path / "old" / "table", layouts.QID, range(4))
    args = ("copy", str(chk), str(tmp_path / "new/chk"), "--sink", str(tmp_path / "old/table"), "--sink-dest",
            str(tmp_path / "new/table"), "--new-query-id")
    r = cli(*args, "--execute", "--json")
    assert r.code == 4 and "txn appId" in r.json()["reason"], r
    assert not (tmp_path / "new").exists()


def _keys(fs: Any, prefix: str) -> list[str]:
    """The objects under chk/<prefix>/ on the S3 server, by their path below it; streamctl's own aside."""
    import pyarrow.fs as pafs

    base = f"chk/{prefix}"
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    rels = [i.path[len(base) + 1:] for i in infos if i.type == pafs.FileType.File]
    return sorted(r for r in rels if not r.startswith("_streamctl/"))


def _objects(fs: Any, prefix: str) -> dict[str, bytes]:
    """The objects of `_keys` with their bytes."""
    out = {}
    for rel in _keys(fs, prefix):
        with fs.open_input_stream(f"chk/{prefix}/{rel}") as fh:
            out[rel] = fh.read()
    return out


def test_crash_mid_copy_to_s3_resumed(cli, spark, pristine, tmp_path, s3):
    """A real process copying to the S3 server (moto; its copies on threads) killed (SIGKILL)
    mid-way, some objects written and `metadata` not: `--resume` (its journal on the store)
    finishes the copy, verified, and the query restarts exactly once from there. This Spark has no
    S3 connector, so the restart runs on a plain copy of the resumed place brought home."""
    fs, port = s3
    p = old_place(pristine, tmp_path, spark)
    before = old_state(p)
    ck_uri, out_uri = _s3f.s3_uri(port, "crashed/checkpoint"), _s3f.s3_uri(port, "crashed/output")
    proc = subprocess.Popen([str(STREAMCTL), *copy_args(p, ck_uri, out_uri), "--execute"],
                            env=_env(STREAMCTL_TEST_STEP_DELAY="0.1"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(_keys(fs, "crashed/checkpoint")) < 20 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()
    assert proc.wait(timeout=30) == -9, proc.stderr.read() if proc.stderr else ""
    copied = _keys(fs, "crashed/checkpoint")
    assert len(copied) >= 20 and "metadata" not in copied, "the copy was not cut short mid-way"
    import pyarrow.fs as pafs

    ops = fs.get_file_info(pafs.FileSelector("chk/crashed/checkpoint/_streamctl/backups"))
    assert len(ops) == 1 and fs.get_file_info("chk/crashed/checkpoint/_streamctl/lock.json").is_file
    r = cli("copy", "--resume", _s3f.s3_uri(port, f"crashed/checkpoint/_streamctl/backups/{ops[0].base_name}"),
            "--json")
    assert r.code == 0 and r.json()["verified"] is True and r.json()["resumed"] is True, r
    assert not fs.get_file_info("chk/crashed/checkpoint/_streamctl/lock.json").is_file
    assert old_state(p) == before
    home_ck, home_out = tmp_path / "home" / "checkpoint", tmp_path / "home" / "output"
    executed(cli, "copy", ck_uri, str(home_ck), "--sink", out_uri, "--sink-dest", str(home_out))
    restart(at(p, home_ck, home_out))


def test_move_from_s3_home_retires_the_s3_place(cli, spark, pristine, tmp_path, s3):
    """`copy --move` from the S3 server (moto) to the local disk: the query restarts exactly once
    at the new place; the old place on S3 is retired (its `metadata` the tombstone, every other
    object as it was, the old sink too), streamctl's mutations there are refused (RETIRED) and
    Spark refuses to start on its bytes. This Spark has no S3 connector (no hadoop-aws), so that
    start runs on a download of the retired place: the only stand-in for a restart on the store."""
    fs, port = s3
    p = old_place(pristine, tmp_path, spark)
    ck_uri, out_uri = _s3f.s3_uri(port, "old/checkpoint"), _s3f.s3_uri(port, "old/output")
    executed(cli, *copy_args(p, ck_uri, out_uri))  # the query's place on S3, as a copy there leaves it
    ck_before, out_before = _objects(fs, "old/checkpoint"), _objects(fs, "old/output")
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    doc = executed(cli, "copy", ck_uri, str(dest), "--sink", out_uri, "--sink-dest", str(sink_dest), "--move")
    assert doc["after"]["old"]["retired"] == doc["plan"]["op_id"], doc["after"]["old"]
    ck_after = _objects(fs, "old/checkpoint")
    stone_bytes = ck_after.pop("metadata")
    stone = json.loads(stone_bytes)
    assert stone["moved_to"] == str(dest) and stone["query_id_was"] == doc["plan"]["before"]["query_id"], stone
    assert ck_after == {k: v for k, v in ck_before.items() if k not in ("metadata", ".metadata.crc")}
    assert _objects(fs, "old/output") == out_before
    _code, q = epochs(cli, ck_uri, out_uri)
    assert "RETIRED" in {f["code"] for f in q["findings"]}, q["findings"]
    r = cli("trim", ck_uri, "--execute", "--json")
    assert r.code == 4 and "RETIRED" in r.stdout + r.stderr, r
    r = cli("copy", ck_uri, str(tmp_path / "again/ck"), "--execute", "--json")
    assert r.code == 4 and "RETIRED" in r.stdout + r.stderr and not (tmp_path / "again").exists(), r
    _s3f.download(fs, "old/checkpoint", tmp_path / "retired")
    with pytest.raises(Exception) as failed:  # noqa: B017 - Spark's own error: the tombstone is no stream metadata
        at(p, tmp_path / "retired", tmp_path / "retired-output").run()
    assert "No usable value for id" in str(failed.value), str(failed.value)[:2000]
    restart(at(p, dest, sink_dest))
    assert _objects(fs, "old/checkpoint") == dict(ck_after, metadata=stone_bytes)  # nothing there changed since

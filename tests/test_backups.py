"""`streamctl backups`: the backup folders align and trim leave in a checkpoint, their
size and state, and the removal of old finished ones; never an unfinished one (what --resume and
--undo need) and never drop-sink's archives."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def _old(folder: Path) -> Path:
    """The backup folder renamed as if made in 2020 (its name carries its time)."""
    older = folder.with_name(folder.name.split("-20", 1)[0] + "-20200101T000000Z-0000")
    folder.rename(older)
    return older


def test_list_and_drop_old_finished_backups_only(cli: Any, layouts: Any, tmp_path: Path) -> None:
    chk = layouts.checkpoint(tmp_path / "chk", 30, 30)
    for d in ("offsets", "commits"):
        for f in (chk / d).iterdir():
            os.utime(f, (1, 1))
    done = cli("trim", str(chk), "--keep-epochs", "2", "--execute", "--json")
    assert done.code == 0, done
    finished = _old(Path(done.json()["backup"]))
    crashed = chk / "_streamctl/backups/align-20200101T000000Z-dead"  # a crashed operation: journal without an end
    crashed.mkdir()
    (crashed / "journal.jsonl").write_text(json.dumps({"event": "start", "op_id": crashed.name, "steps": 1}) + "\n")
    (crashed / "plan.json").write_text("{}")
    archive = chk / "_streamctl/retired/drop-sink-20200101T000000Z-beef"  # drop-sink's archive of an earlier query
    archive.mkdir(parents=True)

    r = cli("backups", str(chk), "--json")
    rows = {b["name"]: b for b in r.json()["backups"]}
    assert r.code == 0 and set(rows) == {finished.name, crashed.name, archive.name}, rows
    assert rows[finished.name]["state"] == "verified" and rows[finished.name]["files"] == len(done.json()["plan"]["steps"]), rows
    assert rows[finished.name]["undo"] == f"streamctl trim --undo {finished}"
    assert rows[crashed.name]["state"] == "unfinished" and rows[archive.name]["kind"] == "archive"

    plan = cli("backups", str(chk), "--drop-older-than", "30", "--json")
    assert plan.json()["drop"]["backups"] == [finished.name] and finished.exists()
    assert cli("backups", str(chk), "--execute").code == 2  # --execute needs --drop-older-than
    young = cli("backups", str(chk), "--drop-older-than", "1000000", "--json")
    assert young.json()["drop"]["backups"] == []
    gone = cli("backups", str(chk), "--drop-older-than", "30", "--execute")
    assert gone.code == 0 and "Dropped 1 backup(s)" in gone.stdout, gone
    assert not finished.exists() and crashed.exists() and archive.exists()
    code = cli("inspect", "epochs", str(chk), "--quiet-period", "0").code
    assert code == 0

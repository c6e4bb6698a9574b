"""The names of the on-disk layout: the folders and files of a checkpoint's root and of streamctl's
own `_streamctl/` folder and backup folders (docs/formats/checkpoint.md, docs/formats/streamctl.md).
Every module spells these names through the constants here, so a path part is defined once.

Names that belong to one format are defined by that format's module instead (one owner each):

- `SSTs/` (`SST_DIR`) and `_metadata/schema` of a RocksDB state store: state.py;
- `_spark_metadata/` (`FILE_SINK_LOG`): file_sink_log.py; `_delta_log/` (`DELTA_LOG`): delta_txn.py;
- an Iceberg table's `metadata/` (`METADATA_DIR`) and `version-hint.text`: iceberg.py;
- `journal.jsonl` and `journal/` of a backup folder (`JOURNAL_FILE`, `SEGMENT_DIR`): journal.py;
- the coordinated sink's `_commits/`, `_staging/`, `data/`: coordinated_log.py.
"""
from __future__ import annotations

# A checkpoint's root (docs/formats/checkpoint.md#layout). Each is also a JSON key of streamctl's own
# documents ("offsets", "commits", "state"): those keys are not path parts and do not use these.
METADATA_FILE = "metadata"  # the query id (metadata.py)
OFFSETS_DIR = "offsets"  # offsets/<batch> (offsets.py)
COMMITS_DIR = "commits"  # commits/<batch> (commits.py)
SOURCES_DIR = "sources"  # sources/<source>/ (source_log.py)
STATE_DIR = "state"  # state/<operator>/<partition>[/<store>] (state.py)
CHECKPOINT_LOGS = (OFFSETS_DIR, COMMITS_DIR)  # the two batch logs every micro-batch query writes

# streamctl's own folder in a checkpoint (docs/formats/streamctl.md)
STREAMCTL_DIR = "_streamctl"
LOCK_NAME, LEASE_NAME, STOP_NAME, WRITTEN_NAME = "lock.json", "lease.json", "stop.json", "written.json"
LOCK_FILE = f"{STREAMCTL_DIR}/{LOCK_NAME}"  # a mutating command's exclusive lock (operations/lock.py)
LEASE_FILE = f"{STREAMCTL_DIR}/{LEASE_NAME}"  # the agent's lease (inspectors/lease.py, pipeline/agent.py)
STOP_FILE = f"{STREAMCTL_DIR}/{STOP_NAME}"  # a stop request (`streamctl stop`)
WRITTEN_FILE = f"{STREAMCTL_DIR}/{WRITTEN_NAME}"  # the checkpoint log files the last operation wrote
BACKUPS_DIR = f"{STREAMCTL_DIR}/backups"  # the default backup folders: backups/<operation id>
RETIRED_DIR = f"{STREAMCTL_DIR}/retired"  # drop-sink's archives: retired/<operation id>
SAVEPOINTS_DIR = f"{STREAMCTL_DIR}/savepoints"  # named rollback points: savepoints/<name>.json (savepoint.py)


# A backup folder (the one of an operation, docs/formats/streamctl.md#the-backup-folder)
PLAN_FILE = "plan.json"
MANIFEST_FILE = "manifest.json"
BACKED_UP_DIR = "files"  # files/<root>/<path>: the backed-up files
UNDONE_DIR = "undone"  # undone/<root>/<path>: files `--undo` took out again
HANDOFF_FILE = "handoff.json"  # drop-sink's archive: the successor's starting point

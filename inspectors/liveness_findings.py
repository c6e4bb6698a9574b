"""Whether the query is running: the agent's lease (LIVE_QUERY, STALE_LEASE), else the age of
the newest log file against the quiet period (LIVE_QUERY), leaving out the files streamctl wrote
itself (docs/model.md#liveness)."""
from __future__ import annotations

from typing import Any, Optional

from streamctl.formats.errors import StreamctlError
from streamctl.formats.layout import COMMITS_DIR, OFFSETS_DIR, WRITTEN_FILE
from streamctl.formats.offsets import OffsetEntry
from streamctl.formats.reader import load_json
from streamctl.inspectors.checkpoint_reads import CheckpointReads
from streamctl.inspectors.findings import Finding, shown


class LivenessFindings(CheckpointReads):
    def _lease(self) -> Optional[dict[str, Any]]:
        """The agent's lease (streamctl.pipeline.agent): a live one is LIVE_QUERY, one left by a
        driver that died without releasing it is STALE_LEASE."""
        import time

        from streamctl.inspectors.lease import LEASE_FILE, lease_status, read_lease

        try:
            lease = read_lease(self.st)
        except StreamctlError as exc:
            self.unreadable(exc)
            return None
        if lease is None:
            return None
        now_ms = self.now_ms if self.now_ms is not None else int(time.time() * 1000)
        status = lease_status(lease, now_ms)
        record: dict[str, Any] = {"status": status, "state": lease.state, "query_id": lease.query_id, "run_id": lease.run_id,
                  "host": lease.host, "pid": lease.pid, "last_batch": lease.last_batch,
                  "heartbeat_age_s": round(max(now_ms - lease.heartbeat_ms, 0) / 1000.0, 3),
                  "expires_in_s": round((lease.expires_at_ms - now_ms) / 1000.0, 3)}
        self.lease_record = record
        where = f"run {lease.run_id} on {lease.host} (pid {lease.pid})"
        if status == "live":
            self.findings.append(Finding(
                "LIVE_QUERY",
                f"the query is running: {LEASE_FILE} is held by {where}, heartbeat {record['heartbeat_age_s']:g} s ago, "
                f"last batch {shown(lease.last_batch)}; mutating commands refuse",
                details={"lease": record, "last_change_age_s": None, "quiet_period_s": None}))
        elif status == "stale":
            self.findings.append(Finding(
                "STALE_LEASE",
                f"{LEASE_FILE} of {where} expired {-record['expires_in_s']:g} s ago without being released: "
                f"the driver died (last batch {shown(lease.last_batch)}); nothing holds the query",
                details={"lease": record}))
        return record

    def _liveness(self, planned: Optional[int], committed: Optional[int], latest: Optional[OffsetEntry],
                  prev: Optional[OffsetEntry]) -> None:
        """LIVE_QUERY when the newest log file changed within the quiet period. A negative quiet
        period is derived: three trigger intervals (from the two newest batchTimestampMs), at
        least 10 s and at most 10 min; 60 s when unknown."""
        import time

        quiet = float(self.quiet_period_s or 0)
        basis = ""  # how the quiet period was set, when not given
        if quiet < 0:
            interval = None
            if latest is not None and prev is not None:
                a, b = latest.timestamp_ms, prev.timestamp_ms
                if a is not None and b is not None and a > b:
                    interval = (a - b) / 1000.0
            quiet = 60.0 if interval is None else min(max(3 * interval, 10.0), 600.0)
            basis = (" (the default: the trigger interval is unknown)" if interval is None
                     else f" (three trigger intervals of {interval:g} s, within 10 s..10 min)")
        now_ms = self.now_ms if self.now_ms is not None else int(time.time() * 1000)
        entries = {}
        for rel in ([f"{OFFSETS_DIR}/{planned}"] if planned is not None else []) + \
                   ([f"{COMMITS_DIR}/{committed}"] if committed is not None else []):
            entry = self.st.lookup(rel)
            if entry is not None and entry.mtime_ns is not None:
                entries[rel] = entry

        def age_of(found: dict[str, Any]) -> Optional[float]:
            newest = max((e.mtime_ns for e in found.values()), default=None)
            return None if newest is None else max(now_ms - newest // 1_000_000, 0) / 1000.0

        age = age_of(entries)
        if age is not None and age < quiet:
            # files streamctl wrote itself (an align's commit) are no sign of a running query
            own = self._own_writes()
            entries = {rel: e for rel, e in entries.items() if own.get(rel) != [int(e.size or 0), int(e.mtime_ns or 0)]}
            age = age_of(entries)
        if age is not None and age < quiet:
            # on a tie the commit, written after its offsets
            newest = max(entries, key=lambda rel: (entries[rel].mtime_ns or 0, rel.startswith(COMMITS_DIR)))
            self.findings.append(Finding(
                "LIVE_QUERY",
                f"the query looks alive: its newest log file {newest} changed {age:.1f} s ago, within the quiet period "
                f"of {quiet:g} s{basis}, and no agent lease is live; mutating commands refuse. This also follows a "
                "run that just ended or a hand edit: if the query is stopped, rerun with "
                "--quiet-period 0 or --assume-stopped where the command has it",
                details={"last_change_age_s": round(age, 3), "quiet_period_s": quiet, "lease": None,
                         "newest_file": newest}))

    def _own_writes(self) -> dict[str, list[int]]:
        """The checkpoint log files the last streamctl operation wrote: rel -> [size, mtime_ns]
        (`_streamctl/written.json`, operations/runner.py); {} when there is none or it is not that."""
        try:
            doc = load_json(self.st.read(WRITTEN_FILE, 1 << 20))
        except (StreamctlError, ValueError):
            return {}
        files = doc.get("files") if isinstance(doc, dict) else None
        return {k: v for k, v in files.items() if isinstance(v, list)} if isinstance(files, dict) else {}

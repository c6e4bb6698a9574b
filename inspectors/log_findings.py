"""Findings of the checkpoint's two logs, `offsets/` and `commits/`: the newest batch in flight,
a commit or a plan ahead (COMMIT_AHEAD, WAL_AHEAD), gaps (LOG_GAP), stale checksums, async
progress tracking (ASYNC_PROGRESS) and Spark's offline state repartition (REPARTITION_BATCH,
REPARTITION_UNFINISHED), with the tests on offsets files they rest on."""
from __future__ import annotations

from typing import Any, Optional

from streamctl.formats.checksum import crc_name
from streamctl.formats.layout import COMMITS_DIR, OFFSETS_DIR
from streamctl.formats.offsets import OffsetEntry
from streamctl.inspectors.checkpoint_reads import CheckpointReads
from streamctl.inspectors.findings import ERROR, INFO, WARNING, Finding, count_of, ids_of, ranges_text, summarize
from streamctl.inspectors.logs import LogListing

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


class LogFindings(CheckpointReads):
    def _repartition_findings(self, planned: Optional[int], committed: Optional[int],
                              newest: list[Optional[OffsetEntry]]) -> bool:
        """REPARTITION_BATCH / REPARTITION_UNFINISHED for the newest two batches; True when the
        newest batch is an unfinished repartition. Spark tells a repartition batch the way
        `OfflineStateRepartitionUtils.isRepartitionBatch` does: batch b > 0 whose offsets conf
        `spark.sql.shuffle.partitions` differs from batch b-1's (the runner copies the last
        committed batch's offsets with only that key changed, and commits it with a copy of the
        last commit; the batch reads no input)."""
        unfinished = False
        for i, entry in enumerate(newest[:2]):
            older = newest[i + 1] if i + 1 < len(newest) else None
            change = repartition_change(entry, older)
            if entry is None or change is None:
                continue
            b, (old, new) = entry.batch_id, change
            details = {"epoch": b, "from_partitions": old, "to_partitions": new}
            if committed is not None and b <= committed:
                self.findings.append(repartition_batch_finding(b, old, new))
            elif b == planned:
                unfinished = True
                self.findings.append(Finding(
                    "REPARTITION_UNFINISHED",
                    f"offsets/{b} is an unfinished state repartition from {old} to {new} partitions (planned, no "
                    f"commits/{b}): Spark refuses to start (STREAMING_UNFINISHED_REPARTITION_DETECTED). "
                    f"`streamctl align` goes back to batch {committed}; or run the repartition again with "
                    f"spark._streamingCheckpointManager.repartition(checkpoint, {new})", details=details))
        return unfinished

    def _log_findings(self, offsets: LogListing, commits: LogListing, async_progress: bool,
                      unfinished_repartition: bool = False, async_evidence: str = "log_pattern") -> None:
        P, C = offsets.latest, commits.latest
        if P is None and C is None:
            return
        c = -1 if C is None else C
        if P is not None and P == c + 1 and not unfinished_repartition:
            self.findings.append(Finding(
                "IN_FLIGHT", f"batch {P} is planned in offsets/{P} but not committed; Spark replays it on restart",
                details={"epoch": P}))
        if C is not None and (P is None or C > P):
            self.findings.append(Finding(
                "COMMIT_AHEAD",
                f"commits/{C} names batch {C} but the newest offsets file is "
                f"{'missing' if P is None else f'{OFFSETS_DIR}/{P}'}; the restart fails with a concurrent-update error",
                details={"committed": C, "planned": P}))
        if P is not None and P > c + 1:
            sev = WARNING if async_progress else ERROR
            what = "no commit log" if C is None else f"the newest commit is {C}"
            prior = max((b for b in offsets.batch_ids if b < P), default=None)
            self.findings.append(Finding(
                "WAL_AHEAD",
                f"offsets/{P} is planned but {what}: Spark reruns only batch {P}; batches {c + 1}..{P - 1} are never committed"
                + (f" (expected with async progress tracking: batch {P} reruns from "
                   f"{'the start' if prior is None else f'{OFFSETS_DIR}/{prior}'} through offsets/{P}, covering their data)"
                   if async_progress else ""),
                severity=sev, details={"committed": C, "planned": P}))
        for name, log in ((OFFSETS_DIR, offsets), (COMMITS_DIR, commits)):
            stale = log.stale_checksums()
            if stale:
                files = [crc_name(f"{name}/{b}") for b in stale]
                self.findings.append(Finding(
                    "STALE_CHECKSUM",
                    f"{summarize(files)} without {name}/{stale[0]}: a batch file was deleted without its hidden "
                    f"checksum; Spark's next write of batch {stale[0]} fails (\"Multiple streaming queries are "
                    f"concurrently using {name}\"). Delete the .crc file too",
                    details={"log": name, "files": [self.st.uri(f) for f in files]}))
        if async_progress:
            self._async_finding(offsets, commits, async_evidence)
            return
        for name, log in ((OFFSETS_DIR, offsets), (COMMITS_DIR, commits)):
            gaps = log.gap_ranges()
            if gaps:
                self.findings.append(Finding(
                    "LOG_GAP",
                    f"{name}/: batch files missing inside the retained window "
                    f"{log.oldest}..{log.latest}: {ranges_text(gaps)}",
                    details={"log": name, "missing": ids_of(gaps), "missing_count": count_of(gaps)}))
        if P is not None and P > 0 and P - 1 not in offsets.batch_ids and P - 1 not in offsets.gaps():
            self.findings.append(Finding(
                "LOG_GAP",
                f"offsets/{P - 1} is missing: Spark needs two consecutive offsets files to restart",
                details={"log": OFFSETS_DIR, "missing": [P - 1]}))

    def _async_finding(self, offsets: LogListing, commits: LogListing, evidence: str) -> None:
        """ASYNC_PROGRESS: the gaps async progress tracking leaves, and what a restart does with
        them (docs/formats/checkpoint.md#async-progress-tracking)."""
        P, C = offsets.latest, commits.latest
        gaps = offsets.gap_ranges()
        prev_missing = P is not None and P > 0 and P - 1 not in offsets.batch_ids
        if not gaps and not commits.gap_ranges() and not prev_missing:
            return
        why = ("the offsets conf turns async progress tracking on" if evidence == "offsets_conf" else
               "offsets/ and commits/ skip the same batches and the query is stateless: Spark persists both logs "
               "only every asyncProgressTrackingCheckpointIntervalMs")
        resume = "nothing committed yet" if C is None else f"resumes after batch {C}"
        fails = (f"; a restart without it fails (\"batch {P - 1} doesn't exist\": Spark reads offsets/{P - 1})"
                 if prev_missing and P is not None else "")
        # The outcome hangs on a writer option Spark leaves no trace of: unless the offsets conf
        # proves it, take the failing outcome (docs/model.md#verdicts-and-exit-codes): an error, and align rolls
        # back to a restartable epoch unless told `--async-progress`.
        unproven = prev_missing and evidence != "offsets_conf"
        if unproven:
            fails += (". Nothing on disk proves the option is on, so streamctl takes the failing outcome: "
                      "`streamctl align` rolls back to a restartable epoch, or `streamctl align --async-progress` "
                      "keeps the gaps when the query runs with the option")
        self.findings.append(Finding(
            "ASYNC_PROGRESS",
            f"async progress tracking: batch files {ranges_text(gaps) if gaps else 'below ' + str(P)} were never "
            f"persisted ({why}). A restart with asyncProgressTrackingEnabled=true reads the newest files on disk "
            f"({resume}; at-least-once: batches after the newest persisted commit run again){fails}",
            severity=ERROR if unproven else INFO,
            details={"missing": ids_of(gaps), "missing_count": count_of(gaps), "evidence": evidence,
                     "restart_needs_async": prev_missing}))


def async_progress_pattern(offsets: LogListing, commits: LogListing) -> bool:
    """True when the gaps of `offsets/` are the ones async progress tracking leaves
    (docs/formats/checkpoint.md#async-progress-tracking). Spark writes nothing else that tells
    (the writer option is not in the offsets conf): `AsyncOffsetSeqLog.addAsync` persists
    `offsets/N` only when the checkpoint interval has passed, and
    `AsyncProgressTrackingMicroBatchExecution.markMicroBatchEnd` persists `commits/N` exactly for
    the batches whose offsets it persisted (and the first batch of a run). So: `offsets/` has a
    gap, every commit has its offsets file, and over the window both logs retain up to the newest
    commit they hold the same batch ids (offsets may hold newer, uncommitted batches). The caller
    also requires a stateless query (Spark refuses async progress tracking on stateful ones).
    Cost follows the files that exist."""
    O, K = offsets.batch_ids, commits.batch_ids
    if not K or not offsets.gap_ranges():
        return False
    present = set(O)
    if any(k not in present for k in K):
        return False
    lo, hi = max(O[0], K[0]), K[-1]
    return [b for b in O if lo <= b <= hi] == [k for k in K if k >= lo]


def repartition_change(entry: Optional[OffsetEntry], older: Optional[OffsetEntry]) -> Optional[tuple[int, int]]:
    """(old, new) partition counts when `entry` is a repartition batch against `older` (its
    predecessor), the test of Spark's `OfflineStateRepartitionUtils.isRepartitionBatch`."""
    if entry is None or older is None or entry.batch_id == 0 or older.batch_id != entry.batch_id - 1:
        return None
    new, old = conf_count(entry.conf), conf_count(older.conf)
    if new is None or old is None or new == old:
        return None
    return old, new


def conf_count(conf: Any) -> Optional[int]:
    value = str(conf.get(SHUFFLE_PARTITIONS)) if conf and conf.get(SHUFFLE_PARTITIONS) is not None else ""
    # ASCII digits, at most a Long's 19 (a 5,000-digit value is no count: found by the fuzz suite; an
    # absurd but readable one is judged where it is used, tests/test_hostile.py)
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 19 else None



def repartition_batch_finding(b: int, old: int, new: int) -> Finding:
    return Finding(
        "REPARTITION_BATCH",
        f"batch {b} is Spark's offline state repartition from {old} to {new} partitions "
        f"(offsets/{b} conf {SHUFFLE_PARTITIONS}={new}, batch {b - 1} had {old}); it read no input "
        f"and a restart resumes with {new} state partitions",
        details={"epoch": b, "from_partitions": old, "to_partitions": new})

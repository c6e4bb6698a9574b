"""Findings of the query's sources (`sources/<n>/`): the newest batch's input folder moved or
gone (SOURCE_MOVED, SOURCE_GONE), the in-flight batch's input files gone (SOURCE_NOT_REPLAYABLE),
and the file-source log files a restart reads that are missing (LOG_GAP)."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from streamctl.formats.errors import LogParseError, StreamctlError
from streamctl.formats.layout import OFFSETS_DIR, SOURCES_DIR
from streamctl.formats.offsets import OffsetEntry, SourceId, kafka_rewound, offsets_go_back
from streamctl.inspectors.checkpoint_reads import CheckpointReads
from streamctl.inspectors.findings import Finding, count_of, ids_of, ranges_text
from streamctl.inspectors.sources import SourceInfo


class SourceFindings(CheckpointReads):
    def _moved_input_finding(self, sources: list[SourceInfo], start: Optional[OffsetEntry], end: OffsetEntry) -> set[SourceId]:
        """SOURCE_MOVED: the newest batch's input folder moved with the checkpoint (docs/model.md#moved-input);
        returns the sources it names (their replay is judged at the new place, after align's rewrite)."""
        from streamctl.inspectors.replay import GoneInput, moved_input

        gone: list[GoneInput] = []
        try:
            found = moved_input(self.st, sources, start, end, gone)
        except StreamctlError as exc:
            self.unreadable(exc)
            return set()
        for g in gone:
            self.findings.append(Finding(
                "SOURCE_GONE", g.text(), details={"source": g.source_id, "epochs": [g.batch], "folder": g.folder}))
        for m in found:
            self.findings.append(Finding(
                "SOURCE_MOVED", f"{m.text()}; align rewrites the source's log to {m.new_base}",
                details={"source": m.source_id, "epochs": [m.batch], "old_folder": m.old_folder,
                         "new_folder": m.new_folder, "old_base": m.old_base, "new_base": m.new_base}))
        return {m.source_id for m in found} | {g.source_id for g in gone}

    def _offsets_order_finding(self, prev: Optional[OffsetEntry], latest: OffsetEntry, committed: Optional[int]) -> None:
        """UNREADABLE: the newest offsets hold a source offset Spark never writes after the batch
        before's (offsets_go_back: a file source's logOffset going back or below -1, a Kafka
        offset below 0): an edit or changed bytes the checksum did not catch. The restart's replay
        of that batch fails (getBatch's range: `assertion failed`, observed 4.3.0; a Kafka
        source's data-loss check); committed, the next batch starts there and fails or reads the
        input between again. align moves an in-flight one aside as it does a torn one. A Kafka
        offset below the batch before's is SOURCE_REWOUND instead (Spark's connector writes one)."""
        why = offsets_go_back(prev, latest)
        if why is not None:
            self.unreadable(LogParseError(
                self.st.uri(f"{OFFSETS_DIR}/{latest.batch_id}"),
                f"{why}: Spark never writes that (an edit, or changed bytes); a restart fails on it or reads input again"))
            return
        self._rewound_finding(prev, latest, committed)

    def _rewound_finding(self, prev: Optional[OffsetEntry], latest: OffsetEntry, committed: Optional[int]) -> None:
        """SOURCE_REWOUND: the newest offsets take a Kafka partition back below the batch before's,
        or drop it (formats/offsets.kafka_rewound). Spark's connector logs that only after the
        topic was recreated, and its planning of the batch then reports data loss. In flight, the
        replay fails (failOnDataLoss=true, the default); with false, or where the sink holds the
        batch and skips it without reading (a file sink), the next batch starts there and reads the
        records between again; committed, the restart does the same (observed 4.3.0, streamctl's
        Kafka source, a stateless query into a file sink: those records twice, in flight and
        committed). failOnDataLoss is not on disk: the failing outcome is named with the other."""
        back = kafka_rewound(prev, latest)
        if not back or prev is None:
            return
        n = latest.batch_id
        parts = [{"source": r.source_id, "topic": r.topic, "partition": r.partition, "offset": r.offset,
                  "before": r.before} for r in back]
        what = "; ".join(f"{r.topic}-{r.partition} {'gone' if r.offset is None else f'at {r.offset}'} "
                         f"(batch {prev.batch_id}: {r.before})" for r in back[:3]) + (" ..." if len(back) > 3 else "")
        if committed is not None and committed >= n:
            harm = (f"batch {n} is committed, so the restart starts there and reads the records in between again "
                    "(a sink that does not drop them writes them twice; a partition gone, if the query still reads its "
                    "topic, from its earliest offset)")
        else:
            harm = (f"batch {n} is in flight: its replay fails on data loss (failOnDataLoss=true, the default), or, "
                    "where the sink holds the batch and skips it or with failOnDataLoss=false, the next batch reads "
                    "the records in between again")
        self.findings.append(Finding(
            "SOURCE_REWOUND",
            f"{OFFSETS_DIR}/{n} takes Kafka offsets back from batch {prev.batch_id}'s: {what}: a topic recreated "
            f"under the query, or an edit; {harm}",
            details={"source": back[0].source_id, "epochs": [n], "committed": committed is not None and committed >= n,
                     "partitions": parts}))

    def _outside_base_findings(self, sources: list[SourceInfo], start: Optional[OffsetEntry],
                               end: Optional[OffsetEntry]) -> None:
        """UNREADABLE: the newest batch read files (its `logOffset` is the log's newest) and an
        entry of it lies outside the folder every other entry lies in, where no file is: on
        restart Spark's getBatch of that batch fails (`Wrong basePath`). A file that is there
        (the query's path changed with that batch) is not judged."""
        from streamctl.inspectors.replay import log_offset

        for s in sources:
            if s.kind != "file" or not s.file_log_outside or s.file_log_latest is None:
                continue
            hi = log_offset(end, s.source_id)
            lo = log_offset(start, s.source_id) if start is not None else -1
            if hi != s.file_log_latest or lo is None or lo >= hi:
                continue
            lost = [p for p in s.file_log_outside if not self._input_exists(p)]
            if lost:
                path = self.st.uri(f"{SOURCES_DIR}/{s.source_id}")
                self.unreadable(LogParseError(
                    path, f"batch {end.batch_id if end else '?'} read {lost[0]}, which is not there and lies outside "
                          f"{s.file_log_base}, where every other entry of the source's log lies: the entry was changed, "
                          "and a restart reads that batch's files again with the query's path as their base and fails "
                          "(\"Wrong basePath\")"))

    @staticmethod
    def _input_exists(uri: str) -> bool:
        """Whether the input file a logged path names is there (unknown: taken as there)."""
        from streamctl.inspectors.storage import Storage

        head, _, name = uri.partition("?")[0].rpartition("/")
        try:
            return Storage.open(head).lookup(name) is not None
        except StreamctlError:
            return True

    def _source_log_gaps(self, sources: list[SourceInfo], latest: Optional[OffsetEntry], unread: set[SourceId],
                         prev: Optional[OffsetEntry] = None) -> None:
        """LOG_GAP of a file source's log: the files a restart reads (the newest compaction and
        every batch after it, up to the newest offsets' `logOffset`) that are missing. Where only
        the newest are missing and the newest batch read none of them (a no-data batch), the
        restart runs but logs the input they listed again under that committed offset: with
        maxFilesPerTrigger 1 it reads them once; without it, the new files logged with them are
        never read (observed 4.3.0: a windowed query ended on a no-data batch, its newest log
        file deleted, two new files lost). The option is not on disk: the finding says both."""
        from streamctl.inspectors.replay import log_offset

        for s in self._sources_behind_offsets(sources, latest, unread):
            if s.file_log_missing:
                gaps = list(s.file_log_missing)
                hi, lo = log_offset(latest, s.source_id), log_offset(prev, s.source_id)
                have = s.file_log_latest if s.file_log_latest is not None else -1
                if hi is not None and lo is not None and lo >= hi and all(a > have for a, _b in gaps):
                    effect = (f"the restart runs, but logs the input files they listed again under log offset {gaps[0][0]}, "
                              "which a committed batch covers: with maxFilesPerTrigger 1 it reads them once, without it "
                              "the new files logged with them are never read (lost)")
                else:
                    effect = f"the restart fails (\"sources/{s.source_id}/{gaps[0][0]} doesn't exist\")"
                self.findings.append(Finding(
                    "LOG_GAP",
                    f"sources/{s.source_id}/: batch files of the file source's log missing where a restart reads it "
                    f"(the newest compaction and every batch after it): {ranges_text(gaps)}; {effect}",
                    details={"log": f"{SOURCES_DIR}/{s.source_id}", "missing": ids_of(gaps), "missing_count": count_of(gaps)}))

    @staticmethod
    def _sources_behind_offsets(sources: list[SourceInfo], latest: Optional[OffsetEntry],
                                unread: set[SourceId]) -> list[SourceInfo]:
        """`sources` with the file-source log files the newest offsets name and the log lacks
        added to their missing ones: the restart reads its log up to the newest batch's
        `logOffset` (`getBatch` of that batch), so a lost newest `sources/<n>/N` fails it as a
        lost middle one does. A file source whose log folder is gone counts from batch 0 when no
        source has a folder (`sources/` lost); one whose log could not be read (`unread`) is
        UNREADABLE already."""
        from streamctl.inspectors.replay import log_offset

        if latest is None:
            return sources
        by_id = {s.source_id: s for s in sources}
        out = []
        for src in latest.sources:
            hi = log_offset(latest, src.source_id)
            info = by_id.pop(src.source_id, None)
            if src.source_id in unread:  # UNREADABLE already names its log
                continue
            if info is None and sources:
                # no folder of its own while others exist: a source the plan names twice (a
                # self-join of one DataFrame) shares the first one's log (PySpark 3.5)
                continue
            if hi is None or hi < 0 or (info is not None and info.kind not in ("file", "empty")):
                if info is not None:
                    out.append(info)
                continue
            have = info.file_log_latest if info is not None and info.file_log_latest is not None else -1
            missing = list(info.file_log_missing) if info is not None else []
            if have < hi:
                missing.append((have + 1, hi))
            out.append(replace(info, file_log_missing=tuple(missing)) if info is not None
                       else SourceInfo(src.source_id, "file", file_log_missing=tuple(missing)))
        return out + list(by_id.values())

    def _replay_finding(self, sources: list[SourceInfo], start: Optional[OffsetEntry], end: OffsetEntry) -> None:
        """SOURCE_NOT_REPLAYABLE: the in-flight batch, which the restart replays, reads input
        files that are gone (docs/model.md#replayable-batches)."""
        from streamctl.inspectors.replay import log_offset, unreplayable

        for s in sources:  # a batch file of the replayed range holding another batch's entry
            hi, lo = log_offset(end, s.source_id), log_offset(start, s.source_id) if start is not None else -1
            bad = [f for f in s.file_log_foreign if hi is not None and lo is not None and lo < f[0] <= hi]
            if bad:
                b, path, what = bad[0]
                self.unreadable(LogParseError(path, f"{what}: the replay of batch {end.batch_id} reads that file's "
                                              f"entries of batch {b} only, and skips the other's input file (its "
                                              "rows are lost unless the sink holds the batch)"))
        try:
            gone = unreplayable(self.st, sources, start, end)
        except StreamctlError as exc:
            self.unreadable(exc)
            return
        for u in gone:
            self.findings.append(Finding(
                "SOURCE_NOT_REPLAYABLE",
                f"batch {end.batch_id} is replayed on restart but {u.text()}: Spark skips them and their rows are lost",
                details={"epochs": [end.batch_id], "source": u.source_id, "missing": list(u.missing[:1000]),
                         "missing_count": len(u.missing)}))

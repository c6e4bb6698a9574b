"""SPARK_LINE_REFUSES / SPARK_LINE_CHECKED (`--target-spark`): the log files and the
stream-stream joins' state schema files a restart reads, against what the named Spark line reads
(inspectors/lines.py, docs/model.md#spark-lines)."""
from __future__ import annotations

from typing import Optional

from streamctl.formats.commits import CommitEntry
from streamctl.formats.errors import StreamctlError
from streamctl.formats.layout import COMMITS_DIR, OFFSETS_DIR
from streamctl.formats.offsets import OffsetEntry
from streamctl.inspectors.checkpoint_reads import CheckpointReads
from streamctl.inspectors.findings import Finding
from streamctl.inspectors.state_listing import StateFiles


class SparkLineFindings(CheckpointReads):
    def _line_findings(self, target: tuple[int, int], offsets: Optional[OffsetEntry], commit: Optional[CommitEntry],
                       state: StateFiles) -> None:
        """SPARK_LINE_REFUSES / SPARK_LINE_CHECKED: the newest log files and the stream-stream joins'
        state schema files a restart on `target` reads, against what that line reads
        (docs/model.md#spark-lines)."""
        from streamctl.inspectors.lines import join_schema_refusals, line_text, log_refusals, written_at_least

        versions = {}
        if offsets is not None:
            versions["offsets"] = (f"{OFFSETS_DIR}/{offsets.batch_id}", offsets.version)
        if commit is not None:
            versions["commits"] = (f"{COMMITS_DIR}/{commit.batch_id}", commit.version)
        wrote = written_at_least(offsets.conf) if offsets is not None else None
        wrote_text = (f"written by Spark {line_text(wrote[0])}+ (its offsets conf holds {wrote[1]})" if wrote
                      else "the offsets conf shows no line newer than 3.5")
        schemas = self._join_schemas(state)
        refusals = log_refusals(target, versions) + join_schema_refusals(target, schemas)
        details = {"target": line_text(target), "written_at_least": line_text(wrote[0]) if wrote else None,
                   "logs": {k: v[1] for k, v in versions.items()}}
        if refusals:
            needs = [r.needs for r in refusals]
            errors = sorted({r.error for r in refusals if r.error})
            self.findings.append(Finding(
                "SPARK_LINE_REFUSES",
                f"a restart on Spark {line_text(target)} fails: " + "; ".join(r.why for r in refusals) + f"; {wrote_text}"
                + ("; restart on the line that wrote it" if errors else ""),
                details=dict(details, files=[self.st.uri(r.file) for r in refusals],
                             needs=line_text(max(n for n in needs if n is not None)) if None not in needs else None,
                             **({"restart_errors": errors} if errors else {}))))
        else:
            logs = ", ".join(f"{k} v{v[1]}" for k, v in sorted(versions.items())) or "no log files"
            if schemas:
                logs += f"; {len(schemas)} stream-stream join state schema file(s)"
            self.findings.append(Finding(
                "SPARK_LINE_CHECKED", f"Spark {line_text(target)} reads what a restart reads ({logs}); {wrote_text}",
                details=details))

    def _join_schemas(self, state: StateFiles) -> dict[str, tuple[list[tuple[str, str, bool]], list[tuple[str, str, bool]]]]:
        """Each stream-stream join's `keyWithIndexToValue` schema files (partition 0's, v1/v2: the
        ones a restart compares) with their key and value fields."""
        from streamctl.formats.state import SCHEMA_FILE, parse_state_schema, schema_fields
        from streamctl.inspectors.lines import JOIN_VALUE_STORES

        out = {}
        for op in state.operators.values():
            for name, store in sorted(op.partitions.get(0, {}).items()):
                if name not in JOIN_VALUE_STORES or not store.has_schema:
                    continue
                rel = f"{store.path}/{SCHEMA_FILE}"
                try:
                    parsed = parse_state_schema(self.st.read(rel), self.st.uri(rel))
                except StreamctlError as exc:
                    if self.st.kind(rel) != "missing":  # a missing one Spark writes anew
                        self.unreadable(exc)
                    continue
                if parsed is not None:  # v3 and newer: not a join of state format 1 or 2
                    out[rel] = (schema_fields(parsed[0]), schema_fields(parsed[1]))
        return out

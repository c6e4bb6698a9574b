"""`streamctl kafka commit-offsets`: publish a checkpoint's Kafka positions to a consumer group,
through the runner (plan, journal, backup of the group's previous offsets, read-back), and its
--resume and --undo. The plan and the documents are operations/group_offsets.py's."""
from __future__ import annotations

from typing import Any, Optional

import typer

from streamctl.commands import kafka_options, options
from streamctl.commands.options import BREAK_LOCK_OPT, CHECKPOINT_ARG
from streamctl.console import render
from streamctl.inspectors.documents import document


def _show_commit(doc: dict[str, Any], output: str) -> None:
    from streamctl.operations.plan import NotVerified, Refused

    if output == "json":
        render.emit_json(doc)
    else:
        rows = doc["partitions"]
        render.emit_table(["topic", "partition", "group offset", "checkpoint offset", "change"],
                          [[r["topic"], r["partition"], r["current"], r["target"], r["change"]] for r in rows], output,
                          title=f"group {doc['group']} ({doc['group_state'] or 'new'}) <- {doc['checkpoint']} epoch {doc['epoch']}")
        if doc["refused"]:
            note = f"refused: {doc['refusal']}; nothing was changed"
        elif not doc["changes"]:
            note = "nothing to do: the group already holds these offsets"
        elif doc["executed"]:
            note = f"committed {doc['changes']} offset(s)" + ("" if doc["verified"] else "; read-back differs!") \
                + f" (undo: streamctl kafka commit-offsets --undo {doc['backup']})"
        else:
            note = f"plan: {doc['changes']} offset(s) to commit; run again with --execute"
        render.emit_lines([note], output)
    if doc["refused"]:  # exit 4 through console/errors.py's table
        raise Refused(f"{doc['checkpoint']}: {doc['refusal']}; nothing was changed")
    if doc["executed"] and not doc["verified"]:
        raise NotVerified(f"{doc['checkpoint']}: committed, but group {doc['group']} reads back other offsets")


def _earlier_commit(resume: Optional[str], undo: Optional[str], bootstrap: Optional[str], kafka_config: Optional[list[str]],
                    kafka_timeout: Optional[float], break_lock: bool, output: Optional[str], config: Any) -> None:
    """`--resume` / `--undo` of an earlier commit, through the runner; the broker as the flags,
    the environment or else the operation's plan name it."""
    from streamctl.inspectors.kafka import KafkaBroker
    from streamctl.operations import group_offsets, runner
    from streamctl.operations.backup_folder import load
    from streamctl.operations.plan import NotVerified, Refused

    earlier, _backup = load(resume or undo)  # type: ignore[arg-type]
    ks = kafka_options.kafka_settings(bootstrap, kafka_config, kafka_timeout, None, config,
                        default_bootstrap=earlier.settings.get("bootstrap"))
    assert ks is not None
    with KafkaBroker(ks.bootstrap, ks.config, ks.timeout) as broker:
        op = group_offsets.operation(broker)
        try:
            with render.progress(output != "json") as tick:  # partitions done on a terminal's stderr
                if resume:
                    outcome = runner.resume(op, resume, break_lock, meter=tick)
                else:
                    done = runner.undo(op, undo, break_lock, meter=tick)  # type: ignore[arg-type]
        except Refused as exc:
            if output == "json":
                render.emit_json(document("KafkaCommitOffsetsRefusal", {"reason": str(exc)}))
            raise
    if resume:
        _show_commit(group_offsets.commit_document(outcome.plan, outcome.plan.roots["checkpoint"], outcome, None), output or "table")
        return
    doc = group_offsets.undo_document(done)
    if output == "json":
        render.emit_json(doc)
    else:
        render.emit_lines([f"Undone: group {doc['group']}: {len(done.restored)} partition(s) back to their offsets before "
                           f"the operation ({', '.join(done.restored) or 'none changed'}); verified: "
                           f"{'yes' if done.verified else 'NO'}"], output or "table")
    if not done.verified:
        raise NotVerified(f"group {doc['group']}: undo ran but the offsets differ from before the operation")


def commit_offsets(
    checkpoint: Optional[str] = CHECKPOINT_ARG,
    group: Optional[str] = typer.Option(None, "--group", help="The consumer group to publish the positions to."),
    bootstrap: Optional[str] = kafka_options.BOOTSTRAP_OPT,
    kafka_config: Optional[list[str]] = kafka_options.KAFKA_CONFIG_OPT,
    kafka_timeout: Optional[float] = kafka_options.KAFKA_TIMEOUT_OPT,
    epoch: str = typer.Option("committed", "--epoch", help="committed (default), planned, a batch id or an ISO-8601 time."),
    execute: bool = typer.Option(False, "--execute", help="Write the offsets; without it only the plan is shown."),
    backup_dir: Optional[str] = typer.Option(None, "--backup-dir", help="Where the plan, the journal and the group's "
                                             "previous offsets go (default CHECKPOINT/_streamctl/backups/<operation id>)."),
    break_lock: bool = BREAK_LOCK_OPT,
    resume: Optional[str] = typer.Option(None, "--resume", help="Finish a crashed --execute (its backup folder)."),
    undo: Optional[str] = typer.Option(None, "--undo", help="Put the group's previous offsets back (the backup folder "
                                       "of an earlier --execute)."),
    fmt: Optional[str] = typer.Option(None, "--format", "-o", help="table, plain, markdown or json."),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Publish the checkpoint's Kafka positions to a consumer group.

    Spark never commits its Kafka offsets where Kafka tools look; this makes
    kafka-consumer-groups --describe, Burrow and lag exporters see the query. A plan by default;
    --execute locks the checkpoint, plans again, records the group's previous offsets in the
    backup folder (plan, journal, manifest), commits, then reads the group back. Refuses (exit 4)
    while the group has active members. Idempotent: offsets already in place are left alone.
    --undo BACKUP puts the previous offsets back.

    Examples:

    \b
      streamctl kafka commit-offsets /data/chk/orders --group orders-spark --bootstrap broker:9092
      streamctl kafka commit-offsets orders --group orders-spark --execute
      streamctl kafka commit-offsets --undo /data/chk/orders/_streamctl/backups/kafka-commit-offsets-20261121T030000Z-1a2b
    """
    from streamctl.formats.errors import UsageError
    from streamctl.inspectors.kafka import KafkaBroker, epoch_offsets
    from streamctl.operations import group_offsets, runner
    from streamctl.operations.plan import Refused

    if resume and undo:
        raise UsageError("--resume and --undo cannot be combined")
    if resume or undo:
        if checkpoint or group:
            raise UsageError("--resume/--undo take the operation's backup folder; do not also name a checkpoint or --group")
        config = options.settings()
        output = options.output_format(fmt, as_json, config)
        _earlier_commit(resume, undo, bootstrap, kafka_config, kafka_timeout, break_lock, output, config)
        return
    if not checkpoint or not group:
        raise UsageError("name a CHECKPOINT and its --group (or use --resume / --undo)")
    config, pipeline, location = kafka_options.load(checkpoint)
    output = options.output_format(fmt, as_json, config)
    ks = kafka_options.kafka_settings(bootstrap, kafka_config, kafka_timeout, pipeline, config)
    assert ks is not None
    q, chosen, target, _raws = epoch_offsets(location, epoch)
    with KafkaBroker(ks.bootstrap, ks.config, ks.timeout) as broker:
        plan = group_offsets.plan_commit(broker, location, group, q.query_id, chosen, target)
        refusal = group_offsets.refusal(plan)
        outcome = None
        if execute and plan.steps and refusal is None:

            planner = group_offsets.locked_planner(broker, location, group, epoch)
            try:
                with render.progress(output != "json") as tick:  # partitions done on a terminal's stderr
                    outcome = runner.execute(group_offsets.operation(broker),
                                             runner.Request(location, planner, backup_dir, break_lock), meter=tick)
            except Refused as exc:
                refusal = str(exc)
    _show_commit(group_offsets.commit_document(plan, q.checkpoint, outcome, refusal), output)

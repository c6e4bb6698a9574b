"""`streamctl kafka ...` and the Kafka options shared with `inspect kafka` / `inspect epochs`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import typer

from streamctl.console import context, render
from streamctl.console.errors import handle_errors
from streamctl.commands import options
from streamctl.commands.options import BREAK_LOCK_OPT, CHECKPOINT_ARG
from streamctl.console.exit_codes import EXIT_CODES_HELP
from streamctl.inspectors.findings import API_VERSION

app = typer.Typer(
    help="Publish a checkpoint's Kafka positions, or print where a successor should start.",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
    rich_markup_mode=None,
)

BOOTSTRAP_HELP = "Kafka bootstrap servers (host:port,...). [env: STREAMCTL_KAFKA_BOOTSTRAP; config: [pipelines.X.kafka] bootstrap]"
KAFKA_CONFIG_HELP = "A Kafka client setting KEY=VALUE (security.protocol, sasl.*, ssl.*); repeatable. Secrets never appear in output."
TIMEOUT_HELP = "Seconds to wait for the broker before giving up (exit 3). [env: STREAMCTL_KAFKA_TIMEOUT; default 10]"


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap: str
    config: dict[str, str]
    timeout: float


def kafka_settings(bootstrap: Optional[str], kafka_config: Optional[list[str]], timeout: Optional[float],
                   pipeline: Any, config: Any, required: bool = True,
                   default_bootstrap: Optional[str] = None) -> Optional[KafkaSettings]:
    """Flags beat environment beat the pipeline's [kafka] table beat defaults (`default_bootstrap`:
    the broker an earlier operation's plan names)."""
    import os

    from streamctl.console.config import setting
    from streamctl.inspectors.errors import UsageError

    piped = dict(pipeline.kafka) if pipeline is not None else {}
    servers = bootstrap or os.environ.get("STREAMCTL_KAFKA_BOOTSTRAP") or piped.pop("bootstrap", None) \
        or piped.pop("bootstrap.servers", None) or default_bootstrap
    piped.pop("bootstrap", None)
    piped.pop("bootstrap.servers", None)
    if not servers:
        if required:
            raise UsageError("no Kafka bootstrap servers: give --bootstrap, STREAMCTL_KAFKA_BOOTSTRAP or a pipeline's kafka.bootstrap")
        return None
    settings = dict(piped)
    for item in kafka_config or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError("invalid value for --kafka-config: expected KEY=VALUE (the value given is not shown: "
                             "it may hold a secret)")
        settings[key.strip()] = value
    seconds = setting("kafka_timeout", timeout, "STREAMCTL_KAFKA_TIMEOUT", config, 10.0, flag="--kafka-timeout")
    return KafkaSettings(servers, settings, float(seconds))


def _load(checkpoint: str) -> tuple[Any, Any, str]:
    from streamctl.console.config import load_config, resolve_checkpoint

    config = load_config(context.CONFIG_PATH)
    location, pipeline = resolve_checkpoint(checkpoint, config)
    return config, pipeline, location


def _epoch_offsets(location: str, epoch: str) -> tuple[Any, int, dict[tuple[str, int], int], list[tuple[int, str]]]:
    """The query, the epoch chosen, its merged Kafka offsets and each Kafka source's raw line."""
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.errors import UsageError
    from streamctl.inspectors.kafka import parse_kafka_offsets
    from streamctl.inspectors.logs import parse_offsets
    from streamctl.inspectors.storage import Storage
    from streamctl.operations.plan import raise_unreadable

    q = inspect_checkpoint(location)
    raise_unreadable(q)
    if epoch == "committed":
        chosen = q.committed
    elif epoch == "planned":
        chosen = q.planned
    elif epoch.isdigit():
        chosen = int(epoch)
    else:
        raise UsageError(f"invalid value for --epoch: {epoch!r} (committed, planned or a batch id)")
    if chosen is None:
        raise UsageError(f"{location}: no {epoch} epoch in this checkpoint")
    st = Storage.open(location)
    if chosen not in q.offsets.batch_ids:
        raise UsageError(f"{location}: offsets/{chosen} does not exist (retained: "
                         f"{q.offsets.oldest}..{q.offsets.latest})")
    entry = parse_offsets(st.read(f"offsets/{chosen}"), st.uri(f"offsets/{chosen}"), chosen)
    merged: dict[tuple[str, int], int] = {}
    raws: list[tuple[Any, str]] = []
    for src in entry.sources:
        parsed = parse_kafka_offsets(src.raw)
        if parsed is None or src.raw is None:
            continue
        raws.append((src.source_id, src.raw))
        for topic, parts in parsed.items():
            for p, off in parts.items():
                if (topic, p) in merged and merged[(topic, p)] != off:
                    raise UsageError(f"{topic}/{p} is read by two sources at different offsets")
                merged[(topic, p)] = off
    if not raws:
        raise UsageError(f"{location}: offsets/{chosen} has no Kafka source")
    return q, chosen, merged, raws


def _commit_doc(plan: Any, checkpoint: str, outcome: Any, refusal: Optional[str]) -> dict[str, Any]:
    """The KafkaCommitOffsets document of a plan (and of its outcome when it ran)."""
    from streamctl.operations.group_offsets import offsets_of

    if outcome is not None:  # the plan made under the lock
        plan = outcome.plan
    current, target = offsets_of(plan.before["offsets"]), offsets_of(plan.after["offsets"])
    done = outcome is not None and outcome.executed
    rows = [{"topic": t, "partition": p, "current": current.get((t, p)), "target": off,
             "change": "none" if current.get((t, p)) == off else ("set" if current.get((t, p)) is None else "move")}
            for (t, p), off in sorted(target.items())]
    return {"api_version": API_VERSION, "kind": "KafkaCommitOffsets", "checkpoint": checkpoint,
            "query_id": plan.settings.get("query_id"), "group": plan.settings["group"],
            "group_state": plan.before.get("group_state"), "epoch": plan.target, "executed": done,
            "refused": refusal is not None, "refusal": refusal, "verified": outcome.verified if done else None,
            "changes": sum(1 for r in rows if r["change"] != "none"), "partitions": rows,
            "backup": outcome.backup.location if done else None}


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
    from streamctl.operations.executor import load
    from streamctl.operations.plan import NotVerified, Refused

    earlier, _backup = load(resume or undo)  # type: ignore[arg-type]
    ks = kafka_settings(bootstrap, kafka_config, kafka_timeout, None, config,
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
                render.emit_json({"api_version": API_VERSION, "kind": "KafkaCommitOffsetsRefusal", "reason": str(exc)})
            raise
    if resume:
        _show_commit(_commit_doc(outcome.plan, outcome.plan.roots["checkpoint"], outcome, None), output or "table")
        return
    doc = {"api_version": API_VERSION, "kind": "KafkaCommitOffsetsUndo", "group": done.plan.settings["group"],
           "backup": done.backup.location, "restored": len(done.restored), "partitions": done.restored,
           "after": done.after, "before_operation": done.plan.before, "verified": done.verified}
    if output == "json":
        render.emit_json(doc)
    else:
        render.emit_lines([f"Undone: group {doc['group']}: {len(done.restored)} partition(s) back to their offsets before "
                           f"the operation ({', '.join(done.restored) or 'none changed'}); verified: "
                           f"{'yes' if done.verified else 'NO'}"], output or "table")
    if not done.verified:
        raise NotVerified(f"group {doc['group']}: undo ran but the offsets differ from before the operation")


@app.command("commit-offsets")
@handle_errors
def commit_offsets(
    checkpoint: Optional[str] = CHECKPOINT_ARG,
    group: Optional[str] = typer.Option(None, "--group", help="The consumer group to publish the positions to."),
    bootstrap: Optional[str] = typer.Option(None, "--bootstrap", help=BOOTSTRAP_HELP),
    kafka_config: Optional[list[str]] = typer.Option(None, "--kafka-config", help=KAFKA_CONFIG_HELP),
    kafka_timeout: Optional[float] = typer.Option(None, "--kafka-timeout", help=TIMEOUT_HELP),
    epoch: str = typer.Option("committed", "--epoch", help="committed (default), planned, or a batch id."),
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
    from streamctl.console.config import load_config
    from streamctl.inspectors.errors import UsageError
    from streamctl.inspectors.kafka import KafkaBroker
    from streamctl.operations import group_offsets, runner
    from streamctl.operations.plan import Refused

    if resume and undo:
        raise UsageError("--resume and --undo cannot be combined")
    if resume or undo:
        if checkpoint or group:
            raise UsageError("--resume/--undo take the operation's backup folder; do not also name a checkpoint or --group")
        config = load_config(context.CONFIG_PATH)
        output = options.output_format(fmt, as_json, config)
        _earlier_commit(resume, undo, bootstrap, kafka_config, kafka_timeout, break_lock, output, config)
        return
    if not checkpoint or not group:
        raise UsageError("name a CHECKPOINT and its --group (or use --resume / --undo)")
    config, pipeline, location = _load(checkpoint)
    output = options.output_format(fmt, as_json, config)
    ks = kafka_settings(bootstrap, kafka_config, kafka_timeout, pipeline, config)
    assert ks is not None
    q, chosen, target, _raws = _epoch_offsets(location, epoch)
    with KafkaBroker(ks.bootstrap, ks.config, ks.timeout) as broker:
        plan = group_offsets.plan_commit(broker, location, group, q.query_id, chosen, target)
        refusal = group_offsets.refusal(plan)
        outcome = None
        if execute and plan.steps and refusal is None:

            def planner(_op_id: str, _backup: Any) -> Any:  # under the lock: the checkpoint and the group again
                q2, chosen2, target2, _r = _epoch_offsets(location, epoch)
                again = group_offsets.plan_commit(broker, location, group, q2.query_id, chosen2, target2)
                why = group_offsets.refusal(again)
                if why:
                    raise Refused(why)
                return again

            try:
                with render.progress(output != "json") as tick:  # partitions done on a terminal's stderr
                    outcome = runner.execute(group_offsets.operation(broker),
                                             runner.Request(location, planner, backup_dir, break_lock), meter=tick)
            except Refused as exc:
                refusal = str(exc)
    _show_commit(_commit_doc(plan, q.checkpoint, outcome, refusal), output)
    raise typer.Exit(0)


@app.command("starting-offsets")
@handle_errors
def starting_offsets(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name."),
    epoch: str = typer.Option("committed", "--epoch", help="committed (default), planned, or a batch id."),
    as_json: bool = typer.Option(False, "--json", help="A JSON document instead of the bare option value."),
) -> None:
    """Print the startingOffsets JSON a successor query needs to continue exactly where this
    checkpoint stops (one line per Kafka source, byte-exact as Spark logged it).

    Examples:

    \b
      streamctl kafka starting-offsets /data/chk/orders
      spark.readStream.format("kafka").option("startingOffsets", "$(streamctl kafka starting-offsets orders)")
    """
    import sys

    _config, _pipeline, location = _load(checkpoint)
    q, chosen, _merged, raws = _epoch_offsets(location, epoch)
    if as_json:
        render.emit_json({"api_version": API_VERSION, "kind": "StartingOffsets", "checkpoint": q.checkpoint,
                          "query_id": q.query_id, "epoch": chosen,
                          "sources": [{"source": sid, "starting_offsets": raw} for sid, raw in raws]})
    else:
        for _sid, raw in raws:
            sys.stdout.write(raw + "\n")


@app.command("retention-floor")
@handle_errors
def retention_floor(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name."),
    keep_epochs: int = typer.Option(10, "--keep-epochs", min=1, help="The newest epochs kept as restart/rollback points (as trim)."),
    keep_rollback_to: Optional[int] = typer.Option(None, "--keep-rollback-to", help="Keep `align --to EPOCH` possible."),
    fmt: Optional[str] = typer.Option(None, "--format", "-o", help="table, plain, markdown or json."),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Print, per Kafka partition, the oldest offset a restart or any kept rollback may replay
    from: the safe retention floor of the topic. Records below it may be deleted by retention;
    records at or above it must stay for `streamctl align --to` within the kept window (the same
    window `streamctl trim` keeps).

    Examples:

    \b
      streamctl kafka retention-floor /data/chk/orders --keep-epochs 20
      streamctl kafka retention-floor orders --keep-rollback-to 1200 --json
    """
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.errors import UsageError
    from streamctl.operations.plan import Refused
    from streamctl.operations.trim import oldest_kept_epoch

    config, _pipeline, location = _load(checkpoint)
    output = options.output_format(fmt, as_json, config)
    q = inspect_checkpoint(location)
    try:
        low = oldest_kept_epoch(q, keep_epochs, keep_rollback_to)
    except Refused as exc:
        raise UsageError(str(exc)) from None
    if low == 0:
        sources = [s for s in q.sources if s.kafka_initial is not None]
        if not sources:
            raise UsageError(f"{location}: the oldest kept epoch is 0 and no Kafka initial offsets are recorded "
                             "(sources/<n>/0): the floor is whatever the query started from")
        floor = {(t, int(p)): off for s in sources for t, parts in s.kafka_initial.offsets.items()  # type: ignore[union-attr]
                 for p, off in parts.items()}
        source_epoch = None
    else:
        _q, source_epoch, floor, _raws = _epoch_offsets(location, str(low - 1))
    rows = [{"topic": t, "partition": p, "floor": off} for (t, p), off in sorted(floor.items())]
    doc = {"api_version": API_VERSION, "kind": "KafkaRetentionFloor", "checkpoint": q.checkpoint,
           "query_id": q.query_id, "oldest_kept_epoch": low, "from_offsets_of": source_epoch,
           "committed": q.committed, "partitions": rows}
    if output == "json":
        render.emit_json(doc)
        return
    render.emit_table(["topic", "partition", "retention floor"], [[r["topic"], r["partition"], r["floor"]] for r in rows],
                      output, title=f"{q.checkpoint}: replays from epoch {low} (kept window {low}..{q.committed}) start here")

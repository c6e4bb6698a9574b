"""`streamctl kafka ...`: the group; commit-offsets is commands/kafka_commit_cmd.py's, the Kafka
options commands/kafka_options.py's."""
from __future__ import annotations

from typing import Optional

import typer

from streamctl.commands import kafka_commit_cmd, kafka_options, options
from streamctl.console import render
from streamctl.console.exit_codes import EXIT_CODES_HELP
from streamctl.inspectors.documents import document

app = typer.Typer(
    help="Publish a checkpoint's Kafka positions, or print where a successor should start.",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
    rich_markup_mode=None,
)

app.command("commit-offsets")(kafka_commit_cmd.commit_offsets)


@app.command("starting-offsets")
def starting_offsets(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name."),
    epoch: str = typer.Option("committed", "--epoch", help="committed (default), planned, a batch id, or an ISO-8601 "
                              "time with its zone (the epoch `align --to TIME` rewinds to)."),
    as_json: bool = typer.Option(False, "--json", help="A JSON document instead of the bare option value."),
) -> None:
    """Print the startingOffsets JSON a successor query needs to continue exactly where this
    checkpoint stops (one line per Kafka source, byte-exact as Spark logged it).

    Examples:

    \b
      streamctl kafka starting-offsets /data/chk/orders
      streamctl kafka starting-offsets /data/chk/orders --epoch 2026-11-21T02:55:00Z
      spark.readStream.format("kafka").option("startingOffsets", "$(streamctl kafka starting-offsets orders)")
    """

    from streamctl.inspectors.kafka import epoch_offsets as kafka_epoch_offsets

    _config, _pipeline, location = kafka_options.load(checkpoint)
    q, chosen, _merged, raws = kafka_epoch_offsets(location, epoch)
    if as_json:
        render.emit_json(document("StartingOffsets", {"checkpoint": q.checkpoint,
                          "query_id": q.query_id, "epoch": chosen,
                          "sources": [{"source": sid, "starting_offsets": raw} for sid, raw in raws]}))
    else:
        for _sid, raw in raws:
            render.emit_text(raw + "\n")


@app.command("retention-floor")
def retention_floor(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name."),
    keep_epochs: int = typer.Option(10, "--keep-epochs", min=1, help="The newest epochs kept as restart/rollback points (as trim)."),
    keep_rollback_to: Optional[str] = typer.Option(None, "--keep-rollback-to", help="Keep `align --to EPOCH` possible: "
                                                   "an epoch, or an ISO-8601 time with its zone."),
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
      streamctl kafka retention-floor orders --keep-rollback-to 2026-11-21T02:55:00+01:00
    """
    from streamctl.formats.errors import UsageError
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.kafka import epoch_offsets as kafka_epoch_offsets
    from streamctl.inspectors.rewind_time import check_epoch_or_time, epoch_or_time
    from streamctl.inspectors.window import NoKeptWindow, oldest_kept_epoch

    check_epoch_or_time(keep_rollback_to, "--keep-rollback-to")
    config, _pipeline, location = kafka_options.load(checkpoint)
    output = options.output_format(fmt, as_json, config)
    q = inspect_checkpoint(location)
    keep_to = epoch_or_time(q, keep_rollback_to, "--keep-rollback-to")[0] if keep_rollback_to is not None else None
    try:
        low = oldest_kept_epoch(q, keep_epochs, keep_to)
    except NoKeptWindow as exc:
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
        _q, source_epoch, floor, _raws = kafka_epoch_offsets(location, str(low - 1))
    rows = [{"topic": t, "partition": p, "floor": off} for (t, p), off in sorted(floor.items())]
    doc = document("KafkaRetentionFloor", {"checkpoint": q.checkpoint,
           "query_id": q.query_id, "oldest_kept_epoch": low, "from_offsets_of": source_epoch,
           "committed": q.committed, "partitions": rows})
    if output == "json":
        render.emit_json(doc)
        return
    render.emit_table(["topic", "partition", "retention floor"], [[r["topic"], r["partition"], r["floor"]] for r in rows],
                      output, title=f"{q.checkpoint}: replays from epoch {low} (kept window {low}..{q.committed}) start here")

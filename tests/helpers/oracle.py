"""The restart oracle: streamctl's verdicts and repairs judged by real restarts of real queries.

For every case (a query shape of tests/helpers/oracle_shapes.py and an action of
tests/helpers/oracle_damage.py) the harness

1. puts the shape's clean pipeline (built once, batches 0..FILES-1) back in place and applies
   the action;
2. runs ``streamctl inspect epochs`` (a real process) and checks it changed nothing;
3. restarts the real query on a copy of the damaged folders with NEW_FILES more input files and
   compares what a reader of the sink sees with an undisturbed run over the same input
   (``exact``), or records Spark's failure (``fails``) or the difference (``differs``);
4. plans ``streamctl align``; when it has an exactly-once plan, executes it, restarts the query
   and compares again; checks that nothing outside the named roots changed.

A case **agrees** when: exit 0 only where the restart is ``exact``; an executed repair is
verified and its restart ``exact``; a refusal (exit 4) says why; nothing outside the roots
changed. A non-zero verdict where the restart is exact is reported as ``alarm`` (conservative:
the verdict names damage the restart does not show) and counts as a disagreement unless its
codes are the ones whose harm lies outside the restart (:data:`HARM_OUTSIDE_RESTART`).

``./dev oracle`` runs the CI sample (:func:`sample`), ``./dev oracle --all`` the whole grammar,
``--seed N`` a random draw; docs/oracle.md records the last full run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from helpers.oracle_damage import (
    CRCS,
    FIELDS,
    HOWS,
    LOGS,
    MOVES,
    NOT_AHEAD,
    SCENES,
    SIDES,
    WHICH,
    Action,
    NoTarget,
    blocked_on_pipe,
    damage,
    fifos,
    log_files,
    move,
    pick,
    release_readers,
    unblock,
)
from helpers.oracle_shapes import CHANGES, SHAPES, Layout, Shape
from helpers.trees import copy_tree, remove_tree, wait_quiet

FILES = 5  # the clean pipeline's input files (one batch each)
NEW_FILES = 1  # input added before every restart
EXIT_JVM_DIED = 75  # ./dev oracle's exit when Spark's JVM crashed under it (EX_TEMPFAIL: resume)
RESTART_TIMEOUT_S = 30.0  # a restart here takes seconds; one blocked on a named pipe waits forever
# Findings whose harm a restart of the query does not show, by code and a piece of the message:
# the operator must hear about them even when the query restarts and delivers (docs/oracle.md).
HARM_OUTSIDE_RESTART = (
    ("STALE_CHECKSUM", "", "the restart runs; Spark's next write of that batch fails"),
    # a restart reads the newest two offsets files and the newest commit only; a file lost below
    # them breaks the kept window: a roll back to it or below (align --to, a savepoint) has no plan
    ("LOG_GAP", "missing inside the retained window", "a gap below the restart's files: the rollback window is broken"),
    # Spark reads these numbers with json4s, which wraps a BigInt into a Long without a word: the
    # restart runs on a value nobody wrote (a watermark of Long.MinValue); streamctl refuses it
    ("UNREADABLE", "out of the Long range", "a number Spark wraps silently"),
    ("UNREADABLE", "is not a Long", "a number Spark wraps silently"),
    # a changed file-source log entry: the restart reads its input file again; a stateless query
    # writes its rows twice (observed), a deduplication or a watermark drops them, and cleanSource
    # (a read option, not on disk) archives the newest batch's file before the listing (observed)
    ("UNREADABLE", "again as a new file",
     "the input file is read again, unless cleanSource (not on disk) archived it first; a query's state may drop its rows"),
    # a Delta txn version gone back (or below zero): the next commit writes the true one; until
    # then a replay of a batch the table holds (a crash in flight) writes its rows twice, and
    # align's reading of the table's epoch from it would replay them
    ("UNREADABLE", "would write its rows twice", "a replay of a batch the table holds writes it twice"),
    # a lost newest file-source log file after a no-data batch: the restart re-logs its files under
    # the committed offset; the new files logged with them are lost unless maxFilesPerTrigger is 1
    # (the harness's queries set it; observed without it: two new files never read)
    ("LOG_GAP", "which a committed batch covers", "a setting not on disk decides: without maxFilesPerTrigger 1, new input is lost"),
    # a new checkpoint over a sink that skips the batch ids it holds (file, coordinated): the new
    # query's batches 0..N write nothing; exact only when they are the very batches the old query
    # wrote (the shapes' maxFilesPerTrigger 1 over the same input), which nothing on disk says
    ("SINK_FOREIGN_BATCHES", "unless it plans the very batches",
     "exact only because the new query plans the old one's batches (a read option, not on disk)"),
    # the outcome hangs on the restart's Spark line, which is not on disk: the failing one is taken
    ("UNREADABLE", "metadata: missing (the query id is lost",
     "a lost metadata: Spark 4.2+ refuses to restart, older lines take a new query id"),
)


def harm_outside_restart(v: Verdict) -> Optional[str]:
    """Why a non-zero verdict is right although the restart delivered: every error it names is
    one of HARM_OUTSIDE_RESTART; None otherwise."""
    reasons = []
    for code, message in v.errors:
        why = [w for c, part, w in HARM_OUTSIDE_RESTART if c == code and part in message]
        if not why:
            return None
        reasons.append(why[0])
    return "; ".join(sorted(set(reasons))) or None


def blind_spot(shape: Shape, action: Action, lay: Layout) -> Optional[str]:
    """Why the damaged checkpoint is one an undamaged run writes too, so that nothing on disk or at
    the broker tells the damage (docs/oracle.md, "The judgment"); None when it is not. Proven from
    the damaged files, not taken from the action's name:

    * a Kafka offset of the newest offsets set lower, yet no partition below the batch before's:
      a batch that took nothing from that partition writes the same file (streamctl's source's
      rate limit may give a partition no share; with any source, the partition's records came
      after the batch was planned), and the restart reads the records above it again."""
    if not (shape.source == "kafka" and action.kind == "damage" and action.log == "offsets"
            and action.which == "newest" and action.how.startswith("set.") and action.how.split(".")[1].isdigit()):
        return None
    from streamctl.formats.errors import StreamctlError
    from streamctl.formats.offsets import kafka_rewound, offsets_go_back, parse_offsets

    folder = lay.checkpoint / "offsets"
    n = max(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    try:
        prev, cur = (parse_offsets((folder / str(b)).read_bytes(), str(folder / str(b)), b) for b in (n - 1, n))
    except (OSError, StreamctlError):
        return None
    if offsets_go_back(prev, cur) is None and not kafka_rewound(prev, cur):
        return ("no Kafka offset of the newest batch lies below the batch before's: a batch that took nothing from "
                "that partition writes the same offsets")
    return None


@dataclass
class Outcome:
    """What a real restart did: ``exact`` (the sink equals the undisturbed run's), ``fails``
    (Spark raised, or the run hung), ``differs`` (rows missing or twice)."""

    kind: str
    detail: str = ""

    def __str__(self) -> str:
        return self.kind + (f" ({self.detail})" if self.detail else "")


@dataclass
class Verdict:
    code: int
    verdict: str = ""
    findings: list[str] = field(default_factory=list)
    text: str = ""
    errors: list[tuple[str, str]] = field(default_factory=list)  # (code, message) of the error findings


@dataclass
class Result:
    shape: str
    action: str
    inspect: Optional[Verdict] = None
    restart: Optional[Outcome] = None
    align: Optional[Verdict] = None
    repaired: Optional[Outcome] = None
    disagreements: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str = ""
    blind: str = ""  # exit 0 with a bad restart on damage a run writes too (blind_spot): why nothing tells

    @property
    def agrees(self) -> bool:
        return not self.disagreements

    def line(self) -> str:
        if self.skipped:
            return f"{self.shape} {self.action}: n/a ({self.skipped})"
        ins = self.inspect
        parts = [f"{self.shape} {self.action}: inspect exit {ins.code} {ins.verdict} {','.join(ins.findings)}"
                 if ins else f"{self.shape} {self.action}:", f"restart {self.restart}"]
        if self.align is not None:
            parts.append(f"align exit {self.align.code}")
        if self.repaired is not None:
            parts.append(f"repaired restart {self.repaired}")
        if self.blind:  # counted apart: neither an agreement nor a disagreement
            parts.append(f"BLIND: {self.blind}")
        if not self.agrees:
            parts.append("DISAGREES: " + "; ".join(self.disagreements))
        elif not self.blind:
            parts.append("AGREES")
        return " | ".join(parts)

    def detail(self) -> str:
        """The line with what streamctl said (findings' messages) and the notes."""
        said = self.inspect.text if self.inspect else ""
        return "\n".join([self.line()] + [f"    {ln}" for ln in said.splitlines() if ln.strip()]
                         + [f"    note: {n}" for n in self.notes])


def streamctl(*args: str, home: Path, timeout: float = 120.0, env: Optional[dict[str, str]] = None) -> tuple[int, str, str]:
    """streamctl as a real process (the venv's console script), with no user config (`env`: more
    variables)."""
    exe = Path(sys.executable).with_name("streamctl")
    env = dict(os.environ, STREAMCTL_QUIET_PERIOD="0", NO_COLOR="1", COLUMNS="200", HOME=str(home),
               XDG_CONFIG_HOME=str(home), **(env or {}))
    env.pop("STREAMCTL_CONFIG", None)
    env.pop("STREAMCTL_FORMAT", None)
    try:
        p = subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"streamctl {' '.join(args[:2])}: timed out after {timeout:g}s"
    return p.returncode, p.stdout, p.stderr


def tree(root: Path) -> dict[str, tuple]:
    """Every entry below `root` with its type, size and mtime (symlinks not followed)."""
    import stat

    out: dict[str, tuple] = {}
    if not root.exists():
        return out
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(dirpath, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            kind = "d" if stat.S_ISDIR(st.st_mode) else "f" if stat.S_ISREG(st.st_mode) else "o"
            out[os.path.relpath(p, root)] = (kind, st.st_size if kind == "f" else 0,
                                             st.st_mtime_ns if kind == "f" else 0)
    return out


class Harness:
    """One Spark session, the clean pipeline and undisturbed result of each shape (built on first
    use), and the cases judged against them. `root` is a scratch folder the harness owns."""

    def __init__(self, spark: Any, root: Path, broker: Any = None) -> None:
        """`broker`: a running Tansu broker for the Kafka shapes (else one starts on first use)."""
        if broker is not None:
            from helpers import oracle_kafka

            oracle_kafka.use(broker)
        self.spark = spark
        self.root = Path(root)
        self.home = self.root / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.clean: dict[str, Path] = {}  # shape -> saved clean pipeline folder
        self.reference: dict[str, Any] = {}  # shape -> the undisturbed run's rows after NEW_FILES more

    # -- the clean pipeline and the undisturbed run --------------------------------------------------
    def work(self, shape: Shape) -> Path:
        return self.root / "w" / shape.name

    def base(self, shape: Shape) -> Path:
        return self.work(shape) / "pipeline"

    def ensure(self, shape: Shape) -> None:
        if shape.name in self.clean:
            return
        base = self.base(shape)
        remove_tree(self.work(shape))
        lay = Layout.under(base)
        shape.add_input(lay, 0, FILES)
        shape.run(self.spark, lay)
        saved = self.root / "clean" / shape.name
        copy_tree(base, saved, replace=True)
        self.clean[shape.name] = saved
        out = self._restart(shape, lay)
        if out.kind != "exact":
            raise AssertionError(f"{shape.name}: the undisturbed restart: {out}")
        self.reference[shape.name] = self._last_rows
        remove_tree(self.work(shape))

    def fresh(self, shape: Shape) -> Layout:
        remove_tree(self.work(shape))
        copy_tree(self.clean[shape.name], self.base(shape))
        return Layout.under(self.base(shape))

    # -- the restart --------------------------------------------------------------------------------
    _last_rows: Any = None

    def _restart(self, shape: Shape, lay: Layout, add: bool = True, change: str = "") -> Outcome:
        """Restart the query on `lay` with NEW_FILES more input files (`add`: else they are there);
        its outcome against the undisturbed run (the first call per shape makes that run). With a
        `change` the next version of the query restarts, and ``exact`` means it ran and read
        the new files' rows only (its results differ from the old query's by design)."""
        if add:
            shape.add_input(lay, FILES, NEW_FILES)
        # the query runs in this thread (a Python data source is looked up by the starting thread's
        # session); a watchdog stops it once the time is up, or once a task or the micro-batch
        # thread waits to open a named pipe of the case (three looks, 1.5 s: nobody writes it),
        # and opens the pipes so that the blocked thread returns and the stop can end
        done = threading.Event()
        hung: list[str] = []
        pipes = bool(fifos(lay.checkpoint) + fifos(lay.output))

        def stopper() -> None:
            while not done.wait(0.5):
                for q in self.spark.streams.active:
                    try:
                        q.stop()
                    except Exception:  # noqa: BLE001 - the oracle records the hang, not the stop's error
                        pass

        def watchdog() -> None:
            looks = 0
            deadline = time.monotonic() + RESTART_TIMEOUT_S
            while not done.wait(0.5):
                looks = looks + 1 if pipes and blocked_on_pipe() else 0
                if looks >= 3 or time.monotonic() >= deadline:
                    break
            else:
                return
            hung.append("hung opening a named pipe" if looks >= 3 else f"hung for {RESTART_TIMEOUT_S:g}s")
            threading.Thread(target=stopper, daemon=True).start()
            while not done.wait(0.2):
                for f in fifos(lay.checkpoint) + fifos(lay.output):
                    unblock(f)

        threading.Thread(target=watchdog, daemon=True).start()
        error: list[BaseException] = []
        query: Any = None
        try:
            query = shape.run(self.spark, lay, change=change)
            if shape.op == "window" and not change:
                # a windowed count emits a window once a batch runs with a watermark past its end:
                # where the restart re-planned or replayed batches, one waits in state for the next
                # batch (observed 4.3.0), and a wrong count of it would show only then; one more
                # file, and its batch, emits them (the undisturbed run takes the same step)
                shape.add_input(lay, FILES + NEW_FILES, 1)
                query = shape.run(self.spark, lay)
        except Exception as exc:  # noqa: BLE001 - Spark's Py4J errors included
            error.append(exc)
        finally:
            done.set()
            self._stop_all(lay)
            release_readers(fifos(lay.checkpoint) + fifos(lay.output))
        if hung:
            wait_quiet(lay.checkpoint.parent)
            return Outcome("fails", hung[0])
        wait_quiet(lay.checkpoint.parent if lay.checkpoint.parent.exists() else lay.checkpoint)
        if error:
            return Outcome("fails", _spark_error(error[0]))
        if change:
            read = sum(int(p["numInputRows"]) for p in query.recentProgress)
            new = shape.input_rows(FILES, NEW_FILES)
            return Outcome("exact") if read == new else Outcome("differs", f"read {read} input rows, the new files hold {new}")
        try:
            rows = shape.rows(lay)
        except Exception as exc:  # noqa: BLE001 - an unreadable sink is the outcome
            return Outcome("fails", f"the sink cannot be read: {exc}"[:300])
        self._last_rows = rows
        ref = self.reference.get(shape.name)
        if ref is None:
            return Outcome("exact")
        if rows == ref:
            return Outcome("exact")
        missing = ref - rows
        extra = rows - ref
        return Outcome("differs", f"{sum(missing.values())} row(s) missing, {sum(extra.values())} extra")

    def _stop_all(self, lay: Layout, timeout: float = 60.0) -> None:
        """No query of the restart left running: a processing-time query (the Kafka shape's) the
        watchdog's stop timed out on, blocked on a named pipe, would run on after the pipe opens."""
        deadline = time.monotonic() + timeout
        while self.spark.streams.active and time.monotonic() < deadline:
            for f in fifos(lay.checkpoint) + fifos(lay.output):
                unblock(f)
            for q in self.spark.streams.active:
                try:
                    q.stop()
                except Exception:  # noqa: BLE001 - stopped or not, the loop looks again
                    pass
            time.sleep(0.2)

    def restart_copy(self, shape: Shape, lay: Layout, change: str = "") -> Outcome:
        """The restart of the damaged folders as they are, then the damage put back in place."""
        work = self.work(shape)
        saved = self.root / "damaged" / shape.name
        copy_tree(work, saved, replace=True)
        try:
            return self._restart(shape, lay, change=change)
        finally:
            copy_tree(saved, work, replace=True)
            remove_tree(saved)

    # -- one case -------------------------------------------------------------------------------------
    def judge(self, shape_name: str, action: Action) -> Result:
        shape = SHAPES[shape_name]
        res = Result(shape_name, action.id())
        self.ensure(shape)
        lay = self.fresh(shape)
        try:
            lay = self.apply(shape, action, lay)
        except NoTarget as exc:
            res.skipped = str(exc)
            return res
        if action.kind == "scene" and action.what == "retired":
            return self._judge_retired(shape, lay, res)
        if action.kind == "scene" and action.what.startswith("live_"):
            return self._judge_live(shape, lay, res, action.what)
        if action.kind == "change":
            return self._judge_change(shape, lay, res, action.what)
        return self.judge_damaged(shape, lay, res, action)

    def judge_damaged(self, shape: Shape, lay: Layout, res: Result, action: Optional[Action] = None) -> Result:
        """Judge the damaged pipeline at `lay` (what an action, or a test's own steps, left)."""
        outside = self._outside(shape, lay)
        before = tree(self.work(shape))
        args = [str(lay.checkpoint), "--sink", str(lay.output)] + (["--app-id", shape.app_id] if shape.app_id else [])
        if shape.source == "kafka":  # the operator's broker answers what the checkpoint cannot (SOURCE_RESET)
            from helpers import oracle_kafka

            args += ["--bootstrap", oracle_kafka.broker().bootstrap]
        code, out, err = streamctl("inspect", "epochs", *args, "--json", home=self.home)
        res.inspect = _verdict(code, out, err)
        if tree(self.work(shape)) != before:
            res.disagreements.append("inspect changed files")
        res.disagreements += _none_said("inspect", out)
        res.restart = self.restart_copy(shape, lay)
        exact = res.restart.kind == "exact"
        blind = blind_spot(shape, action, lay) if code == 0 and not exact and action is not None else None
        if blind is not None:
            res.blind = f"exit 0 ({res.inspect.verdict}) and the restart {res.restart}: {blind}"
        elif code == 0 and not exact:
            res.disagreements.append(f"exit 0 ({res.inspect.verdict}) but the restart {res.restart}")
        if code not in (0, 1, 3):
            res.disagreements.append(f"inspect exit {code}: {err.strip()[-300:]}")
        if code != 0 and exact:
            why = harm_outside_restart(res.inspect)
            if why is None:
                res.disagreements.append(f"alarm: exit {code} but the restart is exact")
            else:
                res.notes.append(f"exit {code} with an exact restart: {why}")
        if "Traceback" in err:
            res.disagreements.append("a traceback")
        if code != 0:
            self._judge_repair(shape, lay, res, args, outside)
        return res

    def _judge_repair(self, shape: Shape, lay: Layout, res: Result, args: list[str], outside: dict) -> None:
        code, out, err = streamctl("align", *args, "--json", "--quiet-period", "0", home=self.home)
        res.align = _verdict(code, out, err)
        res.disagreements += _none_said("align", out)
        if code in (3, 4):  # refused, or a file it needs is unreadable: the message must name why
            if not (err.strip() or out.strip()):
                res.disagreements.append("align refused without saying why")
            res.notes.append(f"align exit {code}: {(err or out).strip()[-300:]}")
            return
        if code != 0:
            res.disagreements.append(f"align plan exit {code}: {(err or out).strip()[-300:]}")
            return
        plan = json.loads(out).get("plan") or {}
        if not plan.get("steps"):
            res.disagreements.append("align: no plan for a non-zero verdict")
            return
        if plan.get("classification") != "exactly-once":
            res.notes.append(f"align plan {plan.get('classification')}")
            return
        code, out, err = streamctl("align", *args, "--json", "--quiet-period", "0", "--execute", home=self.home)
        if code != 0 or not _json(out).get("verified"):
            res.disagreements.append(f"align --execute exit {code}: {(err or out).strip()[-300:]}")
            return
        if self._outside(shape, lay) != outside:
            res.disagreements.append("align changed files outside the checkpoint and the sink")
        res.repaired = self._restart(shape, lay)
        if res.repaired.kind != "exact":
            res.disagreements.append(f"align's exactly-once repair, then the restart {res.repaired}")

    def _judge_change(self, shape: Shape, lay: Layout, res: Result, change: str) -> Result:
        """`preflight` with the next version of the query, then that version's real restart on a
        copy: exit 0 only where it runs and reads no input again, exit 1 where it fails or reads
        input again; preflight changes nothing."""
        module = self.root / "queries" / "oracle_next_query.py"
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(_NEXT_QUERY.format(tests=str(Path(__file__).resolve().parents[1]), shape=shape.name,
                                             change=change, input=str(lay.input), checkpoint=str(lay.checkpoint),
                                             output=str(lay.output)))
        before = tree(self.work(shape))
        code, out, err = streamctl("preflight", str(lay.checkpoint), "--query", "oracle_next_query:build", "--json",
                                   home=self.home, timeout=300, env={"PYTHONPATH": str(module.parent)})
        res.inspect = _verdict(code, out, err)
        if tree(self.work(shape)) != before:
            res.disagreements.append("preflight changed files")
        res.disagreements += _none_said("preflight", out)
        res.restart = self.restart_copy(shape, lay, change=change)
        fits = res.restart.kind == "exact"
        if code == 0 and not fits:
            res.disagreements.append(f"preflight exit 0 but the restart of the new query {res.restart}")
        elif code == 1 and fits:
            res.disagreements.append("alarm: preflight exit 1 but the new query restarts and reads only new input")
        elif code not in (0, 1):
            res.disagreements.append(f"preflight exit {code}: {(err or out).strip()[-300:]}")
        if "Traceback" in err:
            res.disagreements.append("a traceback")
        return res

    def _outside(self, shape: Shape, lay: Layout) -> dict:
        """Everything of the case's folder outside the checkpoint and the sink (the input)."""
        whole = tree(self.work(shape))
        inside = [os.path.relpath(p, self.work(shape)) for p in (lay.checkpoint, lay.output)]
        return {k: v for k, v in whole.items() if not any(k == r or k.startswith(r + os.sep) for r in inside)}

    def _judge_retired(self, shape: Shape, lay: Layout, res: Result) -> Result:
        """After drop-sink, every command says the query is retired and none advises a restart;
        the real restart of the old query fails loudly."""
        code, out, err = streamctl("diagnose", str(lay.checkpoint), "--sink", str(lay.output), home=self.home)
        res.inspect = Verdict(code, "retired", [], out)
        text = (out + err).lower()
        if "restart the query" in text or "restart as is" in text:
            res.disagreements.append(f"diagnose advises a restart after the retirement: {out.strip()[-300:]}")
        res.restart = self.restart_copy(shape, lay)
        if res.restart.kind == "exact":
            res.disagreements.append("the retired query restarted and delivered")
        return res

    def _judge_live(self, shape: Shape, lay: Layout, res: Result, how: str) -> Result:
        """A running query without the agent (busy: input arrives while streamctl runs; idle: none
        for longer than the quiet period; stopping: stopped while streamctl runs): drop-sink --safe
        refuses (no proof it stopped); what align and trim do beside it, with no proof either way,
        is judged by the restart once the query is stopped, which must deliver as the undisturbed
        run does."""
        from streamctl.pipeline.session import scenario_confs

        with scenario_confs(self.spark, shape.all_confs()):
            q = shape.writer(self.spark, lay, "oracle_live").trigger(processingTime="300 milliseconds").start()
            try:
                self._beside_live(shape, lay, res, how, q)
            finally:
                if q.isActive:
                    q.stop()
        wait_quiet(lay.checkpoint.parent)
        have = max((int(p.stem[5:]) for p in (lay.input / "a").glob("part-*.json")), default=-1) + 1
        if have < FILES + NEW_FILES:
            shape.add_input(lay, have, FILES + NEW_FILES - have)
        res.restart = self._restart(shape, lay, add=False)
        if res.restart.kind != "exact":
            res.disagreements.append(f"after streamctl ran beside the live query, the restart {res.restart}")
        return res

    def _beside_live(self, shape: Shape, lay: Layout, res: Result, how: str, q: Any) -> None:
        """streamctl's commands while the query `q` runs (busy, idle or stopping)."""
        _wait(lambda: _newest_commit(lay) >= FILES - 1, 120)
        if how == "live_idle":
            time.sleep(2.5)  # idle for longer than the quiet period below
        feeder = None
        if how == "live_busy":
            feeder = threading.Thread(target=lambda: [shape.add_input(lay, FILES + i, 1) or time.sleep(0.4)
                                                      for i in range(NEW_FILES)], daemon=True)
            feeder.start()
        if how == "live_stopping":
            threading.Thread(target=q.stop, daemon=True).start()
        args = [str(lay.checkpoint), "--sink", str(lay.output), "--quiet-period", "1", "--json"]
        code, out, err = streamctl("inspect", "epochs", *args, home=self.home)
        res.inspect = _verdict(code, out, err)
        for cmd in (["drop-sink", str(lay.output), "--checkpoint", str(lay.checkpoint), "--safe", "--execute",
                     "--quiet-period", "1", "--stop-timeout", "5", "--json"],
                    ["align", *args, "--execute"], ["trim", *args[:1], "--keep-epochs", "2", "--execute",
                                                    "--quiet-period", "1", "--json"]):
            code, out, err = streamctl(*cmd, home=self.home)
            if cmd[0] == "drop-sink" and code != 4:
                res.disagreements.append(f"drop-sink --safe --execute on a query without the agent: exit {code}")
            elif code == 0 and (_json(out).get("plan") or {}).get("steps"):
                # no proof either way without the agent: what it did is judged by the restart after
                res.notes.append(f"{cmd[0]} --execute ran beside the live query "
                                 f"({(_json(out).get('plan') or {}).get('before', {}).get('liveness', '')})")
            if "Traceback" in err:
                res.disagreements.append(f"{cmd[0]}: a traceback")
        if feeder is not None:
            feeder.join(30)

    # -- the actions ----------------------------------------------------------------------------------
    def apply(self, shape: Shape, action: Action, lay: Layout) -> Layout:
        if action.kind == "none":
            return lay
        if action.kind == "damage":
            if action.log == "state" and not shape.stateful:
                raise NoTarget("a stateless query has no state")
            path = pick(log_files(lay, action.log, shape.sink), action.which)
            damage(path, action.how, action.crc)
            return lay
        if action.kind == "move":
            if action.what == "input" and shape.source == "kafka":
                raise NoTarget("the input is a topic: nothing to move")
            return move(lay, action.what, self.work(shape))
        if action.kind == "scene":
            return self._scene(shape, action.what, lay)
        if action.kind == "change":
            if action.what not in shape.changes():
                raise NoTarget(f"{shape.name} cannot take {action.what}")
            if action.what == "source_path":  # the input folder under a second name
                os.symlink(lay.input.name, lay.input.parent / "input-link")
            if action.what == "topic_renamed":  # the topic copied under a new name, as in a migration
                from helpers import oracle_kafka

                topic = oracle_kafka.location(lay.input)["topic"] + "-renamed"
                oracle_kafka.produce_files(topic, 0, FILES + NEW_FILES, shape.kafka_rows, shape.input_rows(0, 1))
            return lay
        raise ValueError(action)

    def _scene(self, shape: Shape, what: str, lay: Layout) -> Layout:
        if what.startswith("live_"):  # the query starts in the judgment (_judge_live)
            return lay
        if what == "new_checkpoint":
            return Layout(lay.input, lay.checkpoint.parent / "checkpoint-new", lay.output)
        if what == "reprocess":
            if not shape.stateful:
                raise NoTarget("a stateless query has no state to leave behind")
            for log in ("offsets", "commits"):
                remove_tree(lay.checkpoint / log)
            return lay
        if what == "retired":
            code, out, err = streamctl("drop-sink", str(lay.output), "--checkpoint", str(lay.checkpoint),
                                       "--assume-stopped", "--execute", "--quiet-period", "0", home=self.home)
            if code != 0:
                raise AssertionError(f"drop-sink --assume-stopped --execute: exit {code}: {out}{err}")
            return lay
        raise ValueError(what)


# the module `preflight --query oracle_next_query:build` imports: the next version of the case's query
_NEXT_QUERY = '''"""The next version of the oracle's query (tests/helpers/oracle.py, a change case)."""
import sys
from pathlib import Path

sys.path.insert(0, {tests!r})
from helpers.oracle_shapes import SHAPES, Layout


def build(spark):
    lay = Layout(Path({input!r}), Path({checkpoint!r}), Path({output!r}))
    return SHAPES[{shape!r}].frame(spark, lay, {change!r})
'''


def _spark_error(exc: BaseException) -> str:
    """Spark's own message: a Py4J error's first Java exception line, else the first line."""
    import re

    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    for ln in lines:
        m = re.match(r"^:?\s*(?:[\w.$]+(?:Exception|Error)):\s*(.*)", ln)
        if m and m.group(1):
            return re.sub(r"Query \[id = [^]]*\] ", "", m.group(1))[:300]
    text = lines[0] if lines else type(exc).__name__
    return re.sub(r"Query \[id = [^]]*\] ", "", text)[:300]


def _newest_commit(lay: Layout) -> int:
    folder = lay.checkpoint / "commits"
    return max((int(n) for n in os.listdir(folder) if n.isdigit()), default=-1) if folder.is_dir() else -1


def _wait(pred: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s")
        time.sleep(0.1)


def _none_said(command: str, out: str) -> list[str]:
    """Python's `None` in what streamctl says (JSON says null; a message never says None)."""
    import re

    m = re.search(r".{0,60}\bNone\b.{0,60}", out)
    return [f"{command} says None: {m.group(0)!r}"] if m else []


def _json(text: str) -> dict:
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _verdict(code: int, out: str, err: str) -> Verdict:
    doc = _json(out)
    queries = doc.get("queries") or []
    q = queries[0] if queries else doc  # a Preflight document has its findings at the top
    shown = [f for f in q.get("findings", []) if f.get("severity") != "info" or f["code"] == "IN_FLIGHT"]
    return Verdict(code, str(q.get("verdict") or doc.get("verdict") or ""), [f["code"] for f in shown],
                   "\n".join([f"{f['code']}: {f.get('message', '')[:300]}" for f in shown] + [err.strip()[-400:]]),
                   [(f["code"], f.get("message", "")) for f in shown if f.get("severity") == "error"])


# -- the grammar -----------------------------------------------------------------------------------------

# the Kafka shapes' cases in the sample (the small one takes the first two): a batch Spark re-reads
# from the topic, the whole pipeline moved, the topic renamed under the query, damage of each log
KAFKA_SAMPLE = ("offsets-newest-delete", "move-all", "change-topic_renamed", "commits-newest-truncate-crcdrop",
                "state-newest-corrupt", "sink-newest-delete")


def grammar(spark4: bool = True) -> list[tuple[str, Action]]:
    """Every case: each shape with each action."""
    actions: list[Action] = [Action("none")]
    for log in LOGS:
        for which in (WHICH if log != "metadata" else ("newest",)):
            for how in HOWS:
                for crc in CRCS:
                    actions.append(Action("damage", log, which, how, crc))
    actions += [Action("move", what=m) for m in MOVES]
    actions += [Action("scene", what=s) for s in SCENES]
    actions += [Action("change", what=c) for c in CHANGES]
    actions += [Action("damage", log, "newest", f"set.{name}.{side}", "drop")
                for log, names in FIELDS.items() for name in names for side in SIDES
                if not (side == "ahead" and name in NOT_AHEAD)]
    return [(s.name, a) for s in SHAPES.values() if spark4 or not s.spark4 for a in actions]


def sample(spark4: bool = True, size: int = 0, small: bool = False) -> list[tuple[str, Action]]:
    """CI's fixed sample: every value of every dimension (shape, log, position, damage, checksum
    companion, move, scene) at least once, the other dimensions turned with it so that no two
    cases share more than they must: every log with every kind of damage, or (`small`, the
    second Spark leg's) every log and every kind of damage once. `size` adds cases from a fixed
    draw."""
    import random

    shapes = [s.name for s in SHAPES.values() if spark4 or not s.spark4]
    # the Kafka shapes take their own few cases (KAFKA_SAMPLE): the file shapes' turns stay as they were
    kafka = [s for s in shapes if SHAPES[s].source == "kafka"]
    shapes = [s for s in shapes if s not in kafka]
    out: list[tuple[str, Action]] = []
    # damage: walk the logs, positions and kinds of damage together, shapes turning with them
    stateful = [s for s in shapes if SHAPES[s].stateful]
    pairs = ([(LOGS[k % len(LOGS)], k, how) for k, how in enumerate(HOWS)] if small
             else [(log, k, how) for log in LOGS for k, how in enumerate(HOWS)])
    for i, (log, k, how) in enumerate(pairs):
        which = WHICH[(k + i) % len(WHICH)] if log != "metadata" else "newest"
        pool = stateful if log == "state" else shapes
        out.append((pool[i % len(pool)], Action("damage", log, which, how, CRCS[i % 2])))
    for j, m in enumerate(MOVES):
        out.append((shapes[(j * 3 + 1) % len(shapes)], Action("move", what=m)))
    for j, s in enumerate(SCENES):
        pool = stateful if s == "reprocess" else shapes
        out.append((pool[(j * 5 + 2) % len(pool)], Action("scene", what=s)))
    for j, c in enumerate(CHANGES):
        pool = [s for s in shapes if c in SHAPES[s].changes()]
        if not pool:
            continue
        out.append((pool[(j * 3) % len(pool)], Action("change", what=c)))
    named = {n for n, _a in out}
    for n in shapes:  # every shape judged at least once as it is
        if n not in named:
            out.append((n, Action("none")))
    for n in kafka:
        out += [(n, Action.parse(a)) for a in (KAFKA_SAMPLE[:2] if small else KAFKA_SAMPLE)]
    if size:
        rest = [c for c in grammar(spark4) if c not in out]
        out += random.Random(51).sample(rest, min(size, len(rest)))
    return out


def report_line(r: Result) -> str:
    return json.dumps({"shape": r.shape, "action": r.action, "line": r.line(), "agrees": r.agrees,
                       "skipped": r.skipped, "blind": r.blind})


class JvmDied(Exception):
    """The Spark session's JVM is gone: no later case of this process can be judged."""


def jvm_alive(spark: Any) -> bool:
    try:
        spark.sparkContext._jvm.java.lang.System.currentTimeMillis()
        return True
    except Exception:  # noqa: BLE001 - any failure to reach the JVM means it is gone
        return False


def run_cases(h: Harness, cases: Iterable[tuple[str, Action]], say: Any = print, verbose: bool = False,
              report: Any = None) -> list[Result]:
    """Judge each case in turn; `report` (a text file) gets each result's JSON line as it ends,
    so an interrupted run keeps what it judged (`--resume`)."""
    results = []
    for shape, action in cases:
        started = time.monotonic()
        try:
            r = h.judge(shape, action)
        except Exception as exc:  # noqa: BLE001 - a harness error is reported with its case
            if not jvm_alive(h.spark):  # Spark's own JVM is gone (a native crash): no later case can run
                raise JvmDied(f"{shape} {action.id()}: {type(exc).__name__}: {str(exc)[:200]}") from None
            r = Result(shape, action.id(), disagreements=[f"harness error: {type(exc).__name__}: {exc}"[:400]])
        results.append(r)
        say(f"[{time.monotonic() - started:5.1f}s] {r.detail() if verbose else r.line()}")
        if report is not None:
            report.write(report_line(r) + "\n")
            report.flush()
    return results


def main(argv: Optional[list[str]] = None) -> int:
    """``./dev oracle [--all] [--seed N] [--count K] [--shape S] [--case ACTION]``."""
    import argparse
    import random
    import tempfile

    ap = argparse.ArgumentParser(prog="./dev oracle", description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="the whole grammar (hours)")
    ap.add_argument("--seed", type=int, help="a random draw of --count cases from the grammar")
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--shape", action="append", help="only these shapes")
    ap.add_argument("--case", action="append", help="only these actions (ids as printed)")
    ap.add_argument("--report", type=Path, help="write the results as JSON lines here, each as its case ends")
    ap.add_argument("--resume", action="store_true",
                    help="append to --report, skipping the cases it holds (a long run over several sittings)")
    ap.add_argument("-v", "--verbose", action="store_true", help="every finding's message and align's answer")
    ns = ap.parse_args(argv)
    import pyspark

    from streamctl.pipeline.session import get_spark

    spark4 = int(pyspark.__version__.split(".")[0]) >= 4
    if ns.all:
        cases = grammar(spark4)
    elif ns.seed is not None:
        cases = random.Random(ns.seed).sample(grammar(spark4), ns.count)
    else:
        cases = sample(spark4)
    if ns.shape:
        cases = [c for c in cases if c[0] in ns.shape]
        if ns.case:
            cases = [(s, Action.parse(a)) for s in ns.shape for a in ns.case]
    elif ns.case:
        cases = [c for c in cases if c[1].id() in ns.case]
    if ns.resume and not ns.report:
        ap.error("--resume needs --report")
    held: list[dict[str, Any]] = []
    if ns.resume and ns.report.exists():
        held = [json.loads(line) for line in ns.report.read_text().splitlines() if line.strip()]
        done = {(d["shape"], d["action"]) for d in held}
        cases = [c for c in cases if (c[0], c[1].id()) not in done]
    spark = get_spark("streamctl-oracle", {"spark.sql.streaming.stopTimeout": "20s"})
    spark.sparkContext.setLogLevel("OFF")
    report = open(ns.report, "a" if ns.resume else "w") if ns.report else None
    with tempfile.TemporaryDirectory(prefix="streamctl-oracle-") as tmp:
        h = Harness(spark, Path(tmp))
        print(f"oracle: {len(cases)} case(s) on PySpark {pyspark.__version__}"
              + (f" ({len(held)} judged before, in {ns.report})" if held else ""), flush=True)
        try:
            results = run_cases(h, cases, lambda m: print(m, flush=True), ns.verbose, report)
        except JvmDied as exc:
            # the case it died in is not in the report: --resume judges it again in a new JVM
            print(f"oracle: the Spark JVM died judging {exc}; the report holds every case before it: go on with "
                  "--resume", flush=True)
            if report is not None:
                report.close()
            return EXIT_JVM_DIED
    spark.stop()
    if report is not None:
        report.close()
    judged = [r for r in results if not r.skipped]
    bad = [r for r in judged if not r.agrees]
    blind = [r for r in judged if r.agrees and r.blind]
    before = [d for d in held if not d["skipped"]]
    before_bad = [d for d in before if not d["agrees"]]
    if held:
        print(f"oracle: before this sitting {len(before)} judged, {len(before_bad)} disagree, "
              f"{sum(1 for d in before if d['agrees'] and d.get('blind'))} blind"
              + "".join(f"\n  {d['line']}" for d in before_bad))
    print(f"oracle: {len(judged)} judged, {len(judged) - len(bad) - len(blind)} agree, {len(bad)} disagree, "
          f"{len(blind)} blind (damage a run writes too: docs/oracle.md), {len(results) - len(judged)} not applicable"
          + (f" (seed {ns.seed})" if ns.seed is not None else "") + "".join(f"\n  {r.line()}" for r in blind))
    return 1 if bad or before_bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""The console script's entry (cli/entry.py): its guess of `inspect epochs`, or a plan preview of
`align` or `trim`, of one local checkpoint, which starts the early child of the split inspection
before the CLI's imports (inspectors/split.py).

A wrong guess may only cost a discarded child: tests/test_split.py proves the joined early child
reports what the serial inspection does; here, that the guess reads argv as the CLI does.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamctl.cli.entry import COMMANDS, INSPECT, ROOT_FLAGS, ROOT_VALUE_OPTIONS, early_checkpoint

ALIGN, TRIM = ("align",), ("trim",)


@pytest.mark.parametrize(("args", "want"), [
    (["inspect", "epochs", "/data/chk"], (INSPECT, "/data/chk")),
    (["inspect", "epochs", "/data/chk", "--json"], (INSPECT, "/data/chk")),
    (["--traceback", "inspect", "epochs", "-o", "json", "chk"], (INSPECT, "chk")),
    (["--config", "inspect", "inspect", "epochs", "chk"], (INSPECT, "chk")),  # a value that looks like the command
    (["--config=c.toml", "-v", "inspect", "epochs", "chk"], (INSPECT, "chk")),
    (["inspect", "epochs", "--sink", "/data/tables/orders", "/data/chk"], (INSPECT, "/data/chk")),
    (["inspect", "epochs", "--format=json", "--quiet-period", "0", "file:///data/chk"], (INSPECT, "file:///data/chk")),
    (["inspect", "epochs", "--engine", "local", "--", "-odd-name"], (INSPECT, "-odd-name")),
    (["align", "/data/chk", "--to", "40", "--allow-duplicates", "--json"], (ALIGN, "/data/chk")),
    (["align", "--backup-dir", "/bk", "--sink", "/data/out", "chk"], (ALIGN, "chk")),
    (["trim", "/data/chk", "--keep-epochs", "10"], (TRIM, "/data/chk")),
    (["trim", "--keep-rollback-to=5", "--purge", "chk"], (TRIM, "chk")),
    (["align", "/data/chk", "--to", "40", "--allow-duplicates", "--execute"], None),  # planned under the lock
    (["trim", "--execute", "/data/chk", "--keep-epochs", "10"], None),
    (["inspect", "epochs", "/a", "/b"], None),  # several checkpoints
    (["inspect", "epochs", "/data/chk/*"], None),  # a fleet
    (["inspect", "epochs", "s3://bucket/chk"], None),  # an object store
    (["inspect", "epochs", "--engine", "spark", "/data/chk"], None),
    (["inspect", "epochs", "--engine=spark", "/data/chk"], None),
    (["inspect", "epochs", "--help"], None),
    (["--version"], None),
    (["inspect", "epochs", "--no-such-option", "/data/chk"], None),
    (["inspect", "epochs", "--json=yes", "/data/chk"], None),  # a flag with a value: not ours to judge
    (["inspect", "epochs", "--sink"], None),  # a value missing
    (["inspect", "epochs", "/data/chk", "--traceback"], None),  # a root option after the command: click refuses it
    (["align", "--resume", "/bk/align-1"], None),  # no checkpoint: the backup folder is an option's value
    (["trim", "--undo", "/bk/trim-1"], None),
    (["align", "/data/chk", "--keep-epochs", "3"], None),  # trim's option, not align's
    (["trim", "/data/chk", "--to", "3"], None),  # align's option, not trim's
    (["drop-sink", "/data/out", "--checkpoint", "/data/chk"], None),
    (["inspect", "kafka", "/data/chk"], None),
    ([], None),
])
def test_the_guess_reads_argv_as_the_cli_does(args: list[str], want: Any) -> None:
    assert early_checkpoint(args) == want


def _params(command: Any) -> dict[str, bool]:
    """option name -> whether it is a flag, of a click command's options (--help aside)."""
    out = {}
    for p in command.params:
        if getattr(p, "param_type_name", "") != "option" or p.is_eager:
            continue
        for name in [*p.opts, *p.secondary_opts]:
            out[name] = bool(p.is_flag)
    return out


def test_the_option_lists_are_the_commands_own() -> None:
    """Every option of the root app and of each command in COMMANDS is in its value options or
    flags as it takes a value or not (an option added to a command and not here starts nothing: a
    test failure, not a wrong guess), and nothing else is."""
    import click
    import typer.main

    from streamctl.cli.app import app

    root = typer.main.get_command(app)
    ctx = click.Context(root)
    options = _params(root)
    assert {n for n, flag in options.items() if not flag} == set(ROOT_VALUE_OPTIONS)
    assert {n for n, flag in options.items() if flag} == set(ROOT_FLAGS)
    for words, (values, flags) in COMMANDS.items():
        group, group_ctx = root, ctx
        for word in words:
            group = group.get_command(group_ctx, word)  # type: ignore[attr-defined]
            group_ctx = click.Context(group, parent=group_ctx)
        options = _params(group)
        assert {n for n, flag in options.items() if not flag} == set(values), words
        assert {n for n, flag in options.items() if flag} == set(flags), words
        arguments = [p for p in group.params if getattr(p, "param_type_name", "") == "argument"]
        assert [p.name for p in arguments] in (["checkpoint"], ["checkpoints"]), words  # the word the guess reads


def test_the_console_script_reports_what_the_app_does(tmp_path: Path) -> None:
    """The installed `streamctl` script runs through cli/entry.py: on a checkpoint of 80 partition
    folders, each with its deltas cut to nothing (the early child starts, judges and is joined),
    and on a path that does not exist (it starts and finds nothing), its output and exit code are
    cli/app.py's."""
    script = Path(sys.executable).parent / "streamctl"
    assert script.exists(), script
    assert "streamctl.cli.entry" in script.read_text(encoding="utf-8")
    chk = tmp_path / "chk"
    (chk / "offsets").mkdir(parents=True)
    (chk / "commits").mkdir()
    (chk / "metadata").write_text('{"id":"5f8a62a4-6c6e-4a1f-9d2b-0e6f3c1e7d11"}\n')
    for b in range(3):
        (chk / "offsets" / str(b)).write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{"t":{"0":%d}}\n' % b)
        (chk / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    for p in range(80):
        part = chk / "state" / "0" / str(p)
        part.mkdir(parents=True)
        for v in (1, 2, 3):
            (part / f"{v}.delta").write_bytes(b"")
    env = dict(os.environ, STREAMCTL_QUIET_PERIOD="0")
    for target in (chk, tmp_path / "nothing"):
        args = ["inspect", "epochs", str(target), "--json"]
        via_script = subprocess.run([str(script), *args], capture_output=True, text=True, env=env, timeout=120)
        via_app = subprocess.run([sys.executable, "-c", "from streamctl.cli.app import main; main()", *args],
                                 capture_output=True, text=True, env=env, timeout=120)
        assert (via_script.returncode, via_script.stdout, via_script.stderr) == (
            via_app.returncode, via_app.stdout, via_app.stderr), target
        if target == chk:  # its empty deltas are torn: every store fails its restart
            assert via_script.returncode == 1 and "STATE_UNRESTORABLE" in via_script.stdout, via_script.stdout[:400]
        else:
            assert via_script.returncode == 3 and "does not exist" in via_script.stdout, via_script.stdout[:400]


EXIT_PROBE = r"""
import atexit, importlib, sys
mode, patched, args = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.argv = ["streamctl", *args]
atexit.register(lambda: print("EARLIER HANDLER RAN", flush=True))  # before the start: counted as there
if mode == "registers":  # something in the run asks for an exit handler: the usual exit, which runs it
    module, _, name = patched.rpartition(".")
    module = importlib.import_module(module)
    real = getattr(module, name)
    def registers(*args, **kwargs):
        atexit.register(lambda: print("RUN'S HANDLER RAN", flush=True))
        return real(*args, **kwargs)
    setattr(module, name, registers)
from streamctl.cli.entry import main
main()
"""


def _probe(mode: str, patched: str, *args: str) -> subprocess.CompletedProcess[str]:
    """EXIT_PROBE's run of `streamctl args`; mode "registers": `patched` (module.function) registers
    an exit handler when called."""
    return subprocess.run([sys.executable, "-c", EXIT_PROBE, mode, patched, *args], capture_output=True, text=True,
                          env=dict(os.environ, STREAMCTL_QUIET_PERIOD="0"), timeout=120)


def test_an_inspection_ends_at_once_unless_the_run_asked_for_an_exit_handler(tmp_path: Path) -> None:
    """cli/entry.py `_leave`: after `inspect epochs` of one local checkpoint the process ends with
    os._exit (the output flushed, the exit code kept) when nothing registered an exit handler
    during the run; when something did, the interpreter's exit runs it as usual."""
    args = ("streamctl.inspectors.fleet.run_local", "inspect", "epochs", str(tmp_path / "none"), "--json")
    fast = _probe("plain", *args)
    assert fast.returncode == 3 and '"verdict": "unreadable"' in fast.stdout, fast
    assert "HANDLER RAN" not in fast.stdout  # ended at once: not even the handler of before the start
    usual = _probe("registers", *args)
    assert usual.returncode == 3 and '"verdict": "unreadable"' in usual.stdout, usual
    assert "RUN'S HANDLER RAN" in usual.stdout and "EARLIER HANDLER RAN" in usual.stdout


@pytest.mark.parametrize("mode", ["plain", "registers"])
def test_an_executed_mutation_ends_at_once_once_its_journal_is_closed(tmp_path: Path, mode: str) -> None:
    """cli/entry.py `_leave` after an executed trim of a local checkpoint (the verification's
    early child was forked and joined; its exit handler is the split inspection's own): the
    process ends with os._exit, and by then the journal is closed (`verified` its last record,
    durable), manifest.json written and the lock released; the output is the whole result.
    When the run registered another exit handler, the interpreter's exit runs it as usual."""
    import json
    import shutil

    from helpers.paths import SPARK35

    ck = tmp_path / "ck"
    shutil.copytree(SPARK35 / "agg_rocksdb" / "checkpoint", ck)
    run = _probe(mode, "streamctl.operations.runner._note_written", "trim", str(ck), "--keep-epochs", "1", "--execute",
                 "--json")
    assert run.returncode == 0, run.stderr
    result, end = json.JSONDecoder().raw_decode(run.stdout)
    assert result["verified"] is True and result["executed"] is True
    after = run.stdout[end:].splitlines()[1:]  # what was printed after the document's line break
    if mode == "plain":
        assert after == []  # ended at once: not even the handler of before the start
    else:
        assert after == ["RUN'S HANDLER RAN", "EARLIER HANDLER RAN"]
    backup = Path(result["backup"])
    events = [json.loads(line)["event"] for line in (backup / "journal.jsonl").read_text().splitlines()]
    assert events[0] == "start" and events[-2:] == ["finished", "verified"]
    assert (backup / "manifest.json").exists() and not (ck / "_streamctl" / "lock.json").exists()


STEP_BACK_PROBE = r"""
import sys
from streamctl.operations import runner
real = runner.execute
def spy(op, req, *args, **kwargs):
    print("STEP_BACK", req.step_back, flush=True)
    return real(op, req, *args, **kwargs)
runner.execute = spy
sys.argv = ["streamctl", *sys.argv[1:]]
from streamctl.cli.entry import main
main()
"""


def test_only_streamctl_s_own_process_steps_back(tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An executed mutation asks the runner to lower its process's priority once the renames run
    (`Request.step_back`) only in the console script's own process (cli/entry.py `main`); the
    app run inside another program (CliRunner here) keeps that program's priority."""
    import shutil

    from helpers.paths import SPARK35
    from streamctl.operations import runner

    for name in ("own", "hosted"):
        shutil.copytree(SPARK35 / "agg_rocksdb" / "checkpoint", tmp_path / name)
    own = subprocess.run([sys.executable, "-c", STEP_BACK_PROBE, "trim", str(tmp_path / "own"), "--keep-epochs", "1",
                          "--execute", "--json"], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, STREAMCTL_QUIET_PERIOD="0"))
    assert own.returncode == 0 and own.stdout.startswith("STEP_BACK True\n"), own
    seen: list[bool] = []
    real = runner.execute

    def spy(op: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(req.step_back)
        return real(op, req, *args, **kwargs)

    monkeypatch.setattr(runner, "execute", spy)
    monkeypatch.setenv("STREAMCTL_QUIET_PERIOD", "0")
    hosted = cli("trim", str(tmp_path / "hosted"), "--keep-epochs", "1", "--execute", "--json")
    assert hosted.code == 0 and seen == [False], hosted

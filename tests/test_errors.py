"""Exit codes and errors under hostile input, on copies of a checkpoint PySpark
3.5 wrote (tests/fixtures/spark-3.5/agg_hdfs: an HDFS-state aggregation, batches 0..3).

Every case asserts the exact outcome: the documented exit code (README "Exit codes": usage 2,
unreadable 3), one line on stderr naming the file and the problem, under --json exactly one JSON
document on stdout (the command's report, or an `Error` document with the code and the message),
and not a byte changed on disk (no lock left either). The closed pipe, the non-UTF-8 path and the
permission error run the installed `streamctl` in a real process: those are properties of the
process's streams and credentials, which typer's CliRunner does not have.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers.paths import TESTS, copy_spark35

FIXTURE = TESTS / "fixtures" / "spark-3.5" / "agg_hdfs" / "checkpoint"
PROGRAM = Path(sys.executable).with_name("streamctl")
SECRET = "hunter2-errors-secret"


def digests(base: Path) -> dict[str, str]:
    """relative path -> sha256 of every file below base (folders as 'dir')."""
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(base):
        for d in dirs:
            out[os.path.relpath(os.path.join(dirpath, d), base)] = "dir"
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, base)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


@pytest.fixture
def ck(tmp_path: Path) -> Path:
    dest = tmp_path / "chk" / "orders"
    copy_spark35(FIXTURE, dest)
    return dest


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamctl: "), stderr
    return lines[0][len("streamctl: "):]


def error_doc(r: Any, code: int) -> dict[str, Any]:
    """The one JSON document of a failed --json run: an Error with the code and stderr's message."""
    assert r.code == code, r
    message = one_line(r.stderr)
    doc = json.loads(r.stdout)  # exactly one document: json.loads fails on a second one
    assert doc == {"api_version": "streamctl/v1", "kind": "Error", "code": code,
                   "error": {2: "usage", 3: "unreadable"}[code], "message": message}, doc
    return doc


# ------------------------------------------------------------------ unreadable input: exit 3

def _nested(ck: Path) -> str:
    f = ck / "offsets" / "3"
    head = f.read_bytes().split(b"\n")[:2]
    f.write_bytes(b"\n".join(head) + b"\n" + b"[" * 100_000 + b"]" * 100_000 + b"\n")
    return "offsets/3"


def _folder_for(rel: str) -> Callable[[Path], str]:
    def damage(ck: Path) -> str:
        (ck / rel).unlink()
        (ck / rel).mkdir()
        return rel
    return damage


def _file_for(rel: str) -> Callable[[Path], str]:
    def damage(ck: Path) -> str:
        shutil.rmtree(ck / rel)
        (ck / rel).write_bytes(b"not a folder\n")
        return rel
    return damage


DAMAGE: dict[str, Callable[[Path], str]] = {
    "nested-json-in-offsets": _nested,
    "offsets-file-is-a-folder": _folder_for("offsets/2"),
    "commits-file-is-a-folder": _folder_for("commits/3"),  # the newest: the one a restart reads
    "source-log-file-is-a-folder": _folder_for("sources/0/0"),
    "state-is-a-file": _file_for("state"),
    "offsets-is-a-file": _file_for("offsets"),
}
REASONS = {"nested-json-in-offsets": "not valid JSON (nested too deeply)",
           "offsets-file-is-a-folder": "is a folder, not a regular file",
           "commits-file-is-a-folder": "is a folder, not a regular file",
           }


def test_a_folder_where_the_state_file_a_restart_loads_belongs_is_unrestorable(cli: Callable, ck: Path) -> None:
    """Spark's store listing counts a folder named `4.delta` as version 4 and fails opening it:
    the version is not restorable (exit 1), the folder named; nothing changed."""
    _folder_for("state/0/0/4.delta")(ck)
    before = digests(ck.parent)
    r = cli("inspect", "epochs", str(ck), "--json")
    found = {f["code"]: f for f in r.json()["queries"][0]["findings"]}
    assert r.code == 1 and "4.delta (torn: a folder, not a file)" in found["STATE_UNRESTORABLE"]["message"], found
    assert digests(ck.parent) == before


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_unreadable_input_is_exit_3_naming_the_file_for_every_command(cli: Callable, ck: Path, damage: str) -> None:
    rel = DAMAGE[damage](ck)
    path = str(ck / rel)
    reason = REASONS.get(damage) or ("is a folder, expected a file" if "folder" in damage else "is a file, expected a folder")
    before = digests(ck.parent)
    for args in (["inspect", "epochs"], ["inspect", "state"], ["inspect", "writers"]):
        r = cli(*args, str(ck), "--json")
        assert r.code == 3 and "Traceback" not in r.stderr, (args, r)
        doc = r.json()
        found = doc.get("findings", []) + [f for q in doc.get("queries", []) for f in q["findings"]]
        errors = [f for f in found if f["severity"] == "error"]
        assert [f["code"] for f in errors] == ["UNREADABLE"], found  # never skipped into other findings
        assert errors[0]["path"] == path and reason in errors[0]["message"], found
    repairs = damage == "commits-file-is-a-folder"  # align moves it aside as a torn newest commit
    for args in ([] if repairs else [["align"], ["align", "--execute"]]) + [["trim"], ["trim", "--execute"]]:
        r = cli(*args, str(ck), "--json")
        doc = error_doc(r, 3)
        assert doc["message"].startswith(path) and reason in doc["message"], (args, doc)
    assert digests(ck.parent) == before  # nothing written: no backup, no lock
    if repairs:  # taken as missing, so the plan replays batch 3, whose input files the fixture lacks
        r = cli("align", str(ck), "--json")
        assert r.code == 4 and "SOURCE_NOT_REPLAYABLE" in r.stderr and "is a folder" not in r.stderr, r
        assert digests(ck.parent) == before


# ------------------------------------------------------------------ usage errors: exit 2

USAGE = {
    "align --sink-kind bogus": (["align", "{ck}", "--sink-kind", "bogus"], "'bogus' is not one of"),
    "trim --sink-kind bogus": (["trim", "{ck}", "--sink-kind", "bogus"], "'bogus' is not one of"),
    "drop-sink --sink-kind bogus": (["drop-sink", "{ck}/sink", "--checkpoint", "{ck}", "--assume-stopped",
                                     "--sink-kind", "bogus"], "'bogus' is not one of"),
    "drop-sink --execute --sink-kind bogus": (["drop-sink", "{ck}/sink", "--checkpoint", "{ck}", "--assume-stopped",
                                               "--execute", "--sink-kind", "bogus"], "'bogus' is not one of"),
    "inspect epochs --sink-kind bogus": (["inspect", "epochs", "{ck}", "--sink-kind", "bogus"], "'bogus' is not one of"),
    "--interval nan": (["inspect", "epochs", "{ck}", "--watch", "--interval", "nan"], "--interval must be a positive finite"),
    "--interval inf": (["inspect", "epochs", "{ck}", "--watch", "--interval", "inf"], "--interval must be a positive finite"),
    "--interval -1": (["inspect", "epochs", "{ck}", "--watch", "--interval", "-1"], "--interval must be a positive finite"),
    "trim --keep-epochs 0": (["trim", "{ck}", "--keep-epochs", "0"], "'--keep-epochs': 0 is not in the range x>=1"),
    "trim --execute --keep-epochs 0": (["trim", "{ck}", "--execute", "--keep-epochs", "0"],
                                       "'--keep-epochs': 0 is not in the range x>=1"),
    "inspect --reclaimable --keep-epochs -1": (["inspect", "epochs", "{ck}", "--reclaimable", "--keep-epochs", "-1"],
                                               "'--keep-epochs': -1 is not in the range x>=1"),
    "retention-floor --keep-epochs 0": (["kafka", "retention-floor", "{ck}", "--keep-epochs", "0"],
                                        "'--keep-epochs': 0 is not in the range x>=1"),
    "inspect --quiet-period -5": (["inspect", "epochs", "{ck}", "--quiet-period", "-5"],
                                  "invalid value for --quiet-period: must be a number of at least 0"),
    "align --quiet-period -5": (["align", "{ck}", "--quiet-period", "-5"],
                                "invalid value for --quiet-period: must be a number of at least 0"),
    "trim --quiet-period nan": (["trim", "{ck}", "--quiet-period", "nan"],
                                "invalid value for --quiet-period: must be a finite number"),
    "drop-sink --stop-timeout nan": (["drop-sink", "{ck}/sink", "--checkpoint", "{ck}", "--safe", "--stop-timeout", "nan"],
                                     "--stop-timeout: must be a finite number >= 0"),
    "an unknown option": (["trim", "{ck}", "--keep-epoch", "3"], "No such option: --keep-epoch"),
}


@pytest.mark.parametrize("case", sorted(USAGE))
def test_usage_errors_are_exit_2_one_line_and_an_error_document(cli: Callable, ck: Path, case: str) -> None:
    args, expected = USAGE[case]
    argv = [a.replace("{ck}", str(ck)) for a in args]
    (ck / "sink").mkdir()
    before = digests(ck.parent)
    r = cli(*argv)
    assert r.code == 2 and r.stdout == "", r
    assert expected in one_line(r.stderr), r
    doc = error_doc(cli(*argv, "--json"), 2)
    assert expected in doc["message"]
    assert digests(ck.parent) == before


def test_sink_kind_in_the_config_file_is_checked(cli: Callable, ck: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "streamctl.toml"
    cfg.write_text(f'[pipelines.orders]\ncheckpoint = "{ck}"\nsink = "{ck}/sink"\nsink_kind = "bogus"\n')
    before = digests(ck.parent)
    for args in (["align", "orders"], ["trim", "orders"], ["drop-sink", "orders", "--assume-stopped"],
                 ["inspect", "epochs", "orders"]):
        r = cli("--config", str(cfg), *args, "--json")
        doc = error_doc(r, 2)
        assert doc["message"] == (f"config file {cfg}: [pipelines.orders]: sink_kind must be one of "
                                  "auto, file, delta, coordinated, iceberg"), doc
    assert digests(ck.parent) == before


def test_format_json_in_the_config_file_alone_prints_the_error_document(cli: Callable, ck: Path, tmp_path: Path) -> None:
    """`format = "json"` in [defaults] is the same choice as --json (console/config.py format_setting):
    a failing run prints the Error document too, not only stderr's line; a flag still beats it."""
    cfg = tmp_path / "streamctl.toml"
    cfg.write_text('[defaults]\nformat = "json"\n')
    before = digests(ck.parent)
    argv = ["inspect", "epochs", str(ck), "--sink", f"{ck}/a", "--sink", f"{ck}/b"]
    doc = error_doc(cli("--config", str(cfg), *argv), 2)
    assert doc["message"] == "--sink was given 2 time(s) for 1 checkpoint(s): give one per checkpoint, in order"
    r = cli("--config", str(cfg), *argv, "--format", "plain")
    assert r.code == 2 and r.stdout == "" and one_line(r.stderr) == doc["message"], r
    assert digests(ck.parent) == before


def test_a_malformed_kafka_config_never_echoes_a_secret(cli: Callable, ck: Path) -> None:
    """Usage errors included: `KEY VALUE` (the value becomes an extra argument), `KEY:VALUE`, and
    credentials inside --bootstrap; no broker is needed to reject any of them."""
    for bad in (["--kafka-config", "sasl.plain.password", SECRET],
                ["--kafka-config", f"sasl.plain.password:{SECRET}"],
                ["--kafka-config", f"sasl.jaas.config=x required password=\"{SECRET}\";", "--kafka-timeout", "-1"]):
        for cmd in (["inspect", "kafka", str(ck)], ["kafka", "commit-offsets", str(ck), "--group", "g"]):
            for extra in ([], ["--json"]):
                r = cli(*cmd, "--bootstrap", "127.0.0.1:9", *bad, *extra)
                assert r.code == 2, (bad, r)
                one_line(r.stderr)
                assert SECRET not in r.stdout + r.stderr, (bad, r)


# ------------------------------------------------------------------ real processes

def run(*args: str, **kw: Any) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, STREAMCTL_QUIET_PERIOD="0", NO_COLOR="1")
    return subprocess.run([str(PROGRAM), *args], capture_output=True, timeout=120, env=env, **kw)


@pytest.mark.parametrize("fmt", ["plain", "json"])
def test_a_closed_pipe_stops_quietly_with_141(ck: Path, fmt: str) -> None:
    """`streamctl inspect epochs ... | head -1`: the reader goes away; no traceback, no exit 70."""
    env = dict(os.environ, STREAMCTL_QUIET_PERIOD="0", NO_COLOR="1")
    proc = subprocess.Popen([str(PROGRAM), "inspect", "epochs", str(ck), str(ck), "--format", fmt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the first write
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, err
    assert err == b"", err


def test_output_is_valid_utf8_for_a_path_that_is_not(tmp_path: Path) -> None:
    folder = os.fsencode(tmp_path) + b"/chk-\xff\xfe"
    copy_spark35(FIXTURE, Path(os.fsdecode(folder)))
    shown = os.fsdecode(folder)  # what Python makes of it: lone surrogates
    r = run("inspect", "epochs", shown, "--json")
    assert r.returncode == 0, r
    doc = json.loads(r.stdout.decode("utf-8"))  # strict UTF-8, then JSON
    assert doc["queries"][0]["checkpoint"] == shown  # the JSON escapes \udcff\udcfe give the path back
    for fmt in ("plain", "markdown"):
        r = run("inspect", "state", shown, "--format", fmt)
        assert r.returncode == 0, r
        assert "chk-\\udcff\\udcfe" in r.stdout.decode("utf-8")
    r = run("trim", shown + "-missing", "--json")
    assert r.returncode == 3, r
    assert json.loads(r.stdout.decode("utf-8"))["kind"] == "Error"
    assert "chk-\\udcff\\udcfe-missing: does not exist" in r.stderr.decode("utf-8")


@pytest.fixture
def ck_outside_pytest_tmp() -> Any:
    """The checkpoint in a folder of its own under the system temp dir: pytest keeps its own
    base folder (pytest-of-<user>) at mode 0700 and re-applies that whenever a pytest starts,
    which would deny `nobody` the way in whatever this test sets."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="streamctl-perm-"))
    base.chmod(0o755)
    dest = base / "chk" / "orders"
    copy_spark35(FIXTURE, dest)
    try:
        yield dest
    finally:
        for p in [base, *base.rglob("*")]:
            if not p.is_symlink():
                p.chmod(0o700 if p.is_dir() else 0o600)
        shutil.rmtree(base)


def test_a_permission_error_is_exit_3_naming_the_file(ck_outside_pytest_tmp: Path) -> None:
    ck = ck_outside_pytest_tmp
    victim = ck / "commits" / "3"
    before = digests(ck.parent)
    victim.chmod(0o000)
    # root reads anything: drop to `nobody` (setpriv, util-linux) to meet the permission check
    prefix: list[str] = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.fail("running as root needs setpriv (util-linux) to drop privileges")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        for p in [*ck.parents]:
            if p == Path("/"):
                break
            p.chmod(p.stat().st_mode | 0o055)
        for p in [ck, *ck.rglob("*")]:  # readable by others, folders writable: only the victim is denied
            if p != victim:
                p.chmod(0o777 if p.is_dir() else 0o644)
    env = dict(os.environ, STREAMCTL_QUIET_PERIOD="0", HOME=str(ck.parent), XDG_CONFIG_HOME=str(ck.parent))
    for args in (["inspect", "epochs", str(ck), "--json"], ["align", str(ck), "--json"], ["trim", str(ck), "--json"]):
        r = subprocess.run([*prefix, str(PROGRAM), *args], capture_output=True, timeout=120, env=env, cwd=ck)
        assert r.returncode == 3, (args, r)
        assert r.stderr.decode() in ("", f"streamctl: {victim}: permission denied\n"), r
        doc = json.loads(r.stdout)
        text = json.dumps(doc)
        assert f"{victim}: permission denied" in text, doc
    victim.chmod(0o644)
    assert digests(ck.parent) == before


# ------------------------------------------------------------------ Kafka client settings

KAFKA_CHECKPOINT = TESTS / "fixtures" / "spark-corpus" / \
    "checkpoint-version-2.4.3-kafka-include-headers-default"  # written by Spark's own Kafka tests


def test_a_client_setting_kafka_python_rejects_is_a_config_error_without_secrets(cli: Callable, kafka_broker: Any,
                                                                                   tmp_path: Path) -> None:
    """Against the real broker: an unknown key or a wrongly typed value is exit 2 naming the
    setting (not "cannot connect", exit 3); credentials in --bootstrap never show; nothing written."""
    ck = tmp_path / "kafka-chk"
    shutil.copytree(KAFKA_CHECKPOINT, ck)
    shutil.rmtree(ck / "sources")  # the corpus keeps sources/0/0 as an empty placeholder (MANIFEST.tsv)
    before = digests(tmp_path)
    secret = ["--kafka-config", f"sasl.plain.password={SECRET}"]
    cases = [(["inspect", "kafka", str(ck)], ["--kafka-config", "bogus.setting=1"], "bogus_setting"),
             (["kafka", "commit-offsets", str(ck), "--group", "cfg", "--epoch", "0", "--execute"],
              ["--kafka-config", "bogus.setting=1"], "bogus_setting"),
             (["inspect", "kafka", str(ck)], ["--kafka-config", "request.timeout.ms=soon"], "")]
    for cmd, bad, named in cases:
        for extra in ([], ["--json"]):
            r = cli(*cmd, "--bootstrap", kafka_broker.bootstrap, "--kafka-timeout", "5", *bad, *secret, *extra)
            assert r.code == 2, (bad, r)
            message = one_line(r.stderr)
            assert "invalid Kafka client setting" in message and named in message, r
            assert SECRET not in r.stdout + r.stderr, r
            if extra:
                error_doc(r, 2)
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    r = cli("inspect", "kafka", str(ck), "--bootstrap", f"svc:{SECRET}@{host}:{port}", "--kafka-timeout", "3", "--json")
    assert r.code in (2, 3), r
    one_line(r.stderr)
    assert SECRET not in r.stdout + r.stderr and r.json()["kind"] == "Error", r
    assert digests(tmp_path) == before

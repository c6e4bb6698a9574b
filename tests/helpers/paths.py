"""Where the tests' data lives, named once."""
from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
CORPUS = TESTS / "fixtures" / "spark-corpus"  # checkpoints written by Apache Spark's own test suite
SPARK35 = TESTS / "fixtures" / "spark-3.5"  # checkpoints PySpark 3.5 wrote (tests/fixtures/README)
GOLDEN = TESTS / "golden"  # the golden JSON documents


def copy_spark35(fixture: Path, dest: Path, inp: Path | None = None) -> Path:
    """A copy of a PySpark 3.5 fixture checkpoint at `dest`, its file source's log naming an input
    folder (`inp`, by default `<dest>/../input`; made here, empty: the fixture's input files were
    deleted after the run): the log names the folder the fixture was produced in, which exists on
    no other machine, and a restart fails when its input folder is gone (SOURCE_GONE)."""
    import shutil

    shutil.copytree(fixture, dest, symlinks=True)
    inp = inp or dest.parent / "input"
    inp.mkdir(parents=True, exist_ok=True)
    repoint_source_logs(dest, inp)
    return dest


def repoint_source_logs(checkpoint: Path, inp: Path) -> None:
    """The file source's log of `checkpoint` naming its input files under folder `inp` (their
    `.crc` sidecars rewritten with them)."""
    import re

    from streamctl.formats.checksum import hadoop_crc

    for log in (checkpoint / "sources").glob("*/*"):
        if log.name.startswith(".") or not log.is_file():
            continue
        text = log.read_bytes()
        new = re.sub(rb'"path":"file:[^"]*/', b'"path":"file://' + str(inp).encode() + b"/", text)
        if new != text:
            log.write_bytes(new)
            crc = log.with_name(f".{log.name}.crc")
            if crc.exists():
                crc.write_bytes(hadoop_crc(new))

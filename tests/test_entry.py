"""The console script's entry (cli/entry.py) runs the root app, cli/app.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_the_console_script_reports_what_the_app_does(tmp_path: Path) -> None:
    """The installed `streamctl` script runs through cli/entry.py: on a checkpoint of 80 partition
    folders, each with its deltas cut to nothing, and on a path that does not exist, its output
    and exit code are cli/app.py's."""
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

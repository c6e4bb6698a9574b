"""Run `streamctl` as a real process with its stderr on a pseudo-terminal (pty), as an operator
at a terminal sees it, or piped; and recognise the progress line of a mutation (files done,
bytes, rate, eta: operations/executor.py Meter)."""
from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple, Optional

from streamctl.operations.journal import CRASH_EXIT  # noqa: F401  (the tests' crash exit, named once)

STREAMCTL = Path(sys.executable).parent / "streamctl"
PROGRESS = re.compile(r"[\d,]+/[\d,]+ (files|partitions), [\d.,]+ MB, [\d,]+ (files|partitions)/s, eta [\d,]+ s")


class Run(NamedTuple):
    code: int
    stdout: str
    stderr: str  # what the terminal showed (control sequences included) or the pipe got

    def progress(self) -> list[str]:
        """The progress lines shown: each status update of the meter."""
        return [m.group(0) for m in PROGRESS.finditer(self.stderr)]


def run(*args: str, terminal: bool, crash_after: Optional[int] = None, timeout: float = 180) -> Run:
    """`streamctl ARGS`; stdout always piped, stderr on a pty when `terminal`, else piped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMCTL_")}
    env.update(STREAMCTL_QUIET_PERIOD="0", TERM="xterm-256color", COLUMNS="200", LINES="50")
    env.pop("NO_COLOR", None)
    if crash_after is not None:
        env["STREAMCTL_TEST_CRASH_AFTER"] = str(crash_after)
    argv = [str(STREAMCTL), *args]
    if not terminal:
        p = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        return Run(p.returncode, p.stdout, p.stderr)
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    chunks: list[bytes] = []

    def pump() -> None:  # the terminal's side: read until the process closes its end
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: no process holds the pty any more
                break
            if not data:
                break
            chunks.append(data)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        reader.join(10)
        os.close(master)
    return Run(proc.returncode, out.decode(), b"".join(chunks).decode("utf-8", "replace"))


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def on_terminal(*args: str, columns: int, no_color: bool = False, timeout: float = 60) -> Run:
    """`streamctl ARGS` with stdout and stderr on one pseudo-terminal `columns` wide, as an
    operator at that terminal sees it; `stdout` is the screen's text without control sequences."""
    import fcntl
    import pty
    import struct
    import termios

    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMCTL_")}
    env.update(STREAMCTL_QUIET_PERIOD="0", TERM="xterm-256color", COLUMNS=str(columns), LINES="50")
    env.pop("NO_COLOR", None)
    if no_color:
        env["NO_COLOR"] = "1"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen([str(STREAMCTL), *args], env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    code = proc.wait(timeout)
    os.close(master)
    raw = b"".join(chunks).decode("utf-8", "replace")
    return Run(code, ANSI.sub("", raw).replace("\r\n", "\n"), raw)


def run_in_pty(args: list[str], env: dict[str, str], timeout: float = 60.0) -> str:
    """Run a command with a pseudo-terminal as its stdout (what an operator's terminal is)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdout=slave, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=10)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")

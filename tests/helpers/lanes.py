"""Two pytest processes sharing one test run, a test file at a time (`./dev test`: the first lane
runs the newest PySpark leg from the first file on; the second runs the PySpark 3.5 leg, then
the newest leg's files from the last one back). Each lane claims a file before it runs it, by
creating a file named after it in the shared folder `STREAMCTL_TEST_CLAIMS` (an exclusive
create: exactly one lane runs each file); a file the other lane claimed is left out. Without
that variable pytest's own loop runs every test.

A lane claims its next file before the last test of the current one, so that the fixtures both
share (the Spark session, the object-store servers) stay up between them, as in pytest's loop.
"""
from __future__ import annotations

import os
import time
from typing import Any, Iterator, Optional

import pytest

CLAIMS = "STREAMCTL_TEST_CLAIMS"
LANE = "STREAMCTL_TEST_LANE"  # "first" (files in collection order) or "last" (from the end)


def _claim(folder: str, name: str) -> bool:
    try:
        os.close(os.open(os.path.join(folder, name.replace("/", "__")), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Optional[bool]:
    folder = os.environ.get(CLAIMS)
    if not folder or session.config.option.collectonly:
        return None  # pytest's own loop
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
    files: dict[str, list[Any]] = {}
    for item in session.items:
        files.setdefault(item.nodeid.partition("::")[0], []).append(item)
    order = list(files)
    if os.environ.get(LANE) == "last":
        order.reverse()
    claimed: Iterator[str] = (f for f in order if _claim(folder, f))
    current = next(claimed, None)
    ran = 0
    seconds: dict[str, float] = {}
    while current is not None:
        items = files[current]
        upcoming = None
        started = time.monotonic()
        for i, item in enumerate(items):
            if i + 1 < len(items):
                nextitem = items[i + 1]
            else:
                upcoming = next(claimed, None)
                nextitem = files[upcoming][0] if upcoming is not None else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            ran += 1
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        seconds[current] = time.monotonic() - started
        current = upcoming
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"lanes: this lane ran {ran} of {len(session.items)} tests; the other lane ran the rest")
        # Each file's wall time in this lane (its module fixtures included), to keep CI in budget.
        slowest = sorted(seconds.items(), key=lambda kv: -kv[1])
        reporter.write_line(f"lanes: {len(seconds)} files in {sum(seconds.values()):.0f} s; the slowest: "
                            + ", ".join(f"{name} {s:.0f} s" for name, s in slowest[:25]))
    return True

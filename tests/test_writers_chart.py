"""`inspect writers` on a terminal: the writers' windows on one epoch axis (console/writers_chart.py).
The pure layout is checked line by line; the whole command is run under a real pseudo-terminal
(the picture appears only on a terminal; piped and JSON output stay as they were)."""
from __future__ import annotations

import os
import sys

from helpers.terminal import run_in_pty
from streamctl.console.writers_chart import axis_lines, bar, chart_lines, chart_rows


def record(writers, common, committed=9):
    return {"writers": [{"writer": n, "kind": k, "first": f, "last": l, "status": s} for n, k, f, l, s in writers],
            "common_window": common, "committed": committed}


def test_parallel_stores_with_one_window_share_a_row_and_a_differing_one_stands_out():
    writers = [("offsets", "wal", 0, 10, "ok"), ("commits", "commit_log", 0, 9, "ok")]
    writers += [(f"state/0/{p}", "state_store", 0, 9, "ok") for p in range(200) if p != 117]
    writers += [("state/0/117", "state_store", 0, 5, "behind")]
    writers += [(f"state/1/{p}/left-keyToNumValues", "state_store", 0, 9, "ok") for p in range(3)]
    rows = chart_rows(record(writers, [0, 5])["writers"])
    assert [(r.label, r.status, r.count) for r in rows] == [
        ("offsets", "ok", 1), ("commits", "ok", 1), ("state/0/*", "ok", 199), ("state/0/117", "behind", 1),
        ("state/1/*/left-keyToNumValues", "ok", 3)]


def test_bars_sit_on_one_axis_with_the_common_window_last():
    rec = record([("offsets", "wal", 0, 10, "ok"), ("state/0/0", "state_store", 5, 8, "behind"),
                  ("sink", "sink_log", 0, 10, "ahead")], [5, 8], committed=9)
    lines = chart_lines(rec, width=80)
    labels = [line[0].strip() for line in lines]
    assert labels == ["epoch", "", "offsets", "state/0/0", "sink", "common"]
    width = len(lines[0][1])
    assert all(len(line[1]) == width for line in lines)
    ruler = lines[1][1]
    assert ruler[0] == "├" and ruler[-1] == "┤" and ruler.count("┼") == 1  # 0, 5, 10: the middle tick
    assert lines[0][1].startswith("0") and lines[0][1].rstrip().endswith("10")
    offsets, state, common = lines[2][1], lines[3][1], lines[5][1]
    assert offsets == "━" * width
    # state 5..8 and the common window 5..8 cover the same columns, inside the offsets bar
    assert state.strip("━ ") == "" and state.index("━") == common.index("░") > 0
    assert state.rindex("━") == common.rindex("░") < width - 1
    assert [line[2] for line in lines[2:]] == ["0..10", "5..8", "0..10", "5..8"]
    assert [line[3] for line in lines[2:5]] == ["ok", "behind", "ahead"]


def test_an_empty_common_window_and_an_empty_writer_are_said_in_words():
    rec = record([("offsets", "wal", 3, 4, "ok"), ("state/0/0", "state_store", None, None, "empty")], None, committed=4)
    lines = chart_lines(rec, width=60)
    assert lines[3][1].strip() == "" and lines[3][2] == "-" and lines[3][3] == "empty"
    assert lines[-1][3] == "empty: no epoch every writer can restart from"
    assert chart_lines(record([("offsets", "wal", None, None, "empty")], None, committed=None), 60) == []


def test_a_single_epoch_axis_and_bar_helpers():
    top, ruler = axis_lines((7, 7), 12)
    assert top.strip() == "7" and ruler[0] == "├" and ruler[-1] == "┤"
    assert bar(2, 4, (0, 10), 11, "━") == "  ━━━      "
    assert bar(None, 4, (0, 10), 11, "━") == " " * 11


def test_inspect_writers_draws_the_chart_on_a_terminal_only(tmp_path, cli):
    from helpers import layouts as m

    state = {"0/0": m.deltas(1, 4), "0/1": m.deltas(1, 2)}  # partition 1 can restart only up to epoch 1
    chk = m.build(tmp_path / "chk", state=state)
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm", "STREAMCTL_QUIET_PERIOD": "0",
           "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    env.pop("NO_COLOR", None)
    env.pop("STREAMCTL_CONFIG", None)
    out = run_in_pty([sys.executable, "-P", "-m", "streamctl.cli.app", "inspect", "writers", str(chk)], env)
    plain = out.replace("\r", "")
    import re

    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", plain)
    lines = plain.splitlines()
    chart = [line for line in lines if line.startswith(("epoch", "offsets", "state/0/1", "common"))]
    assert [line.split()[0] for line in chart[:2]] == ["epoch", "offsets"], plain
    assert any("━" in line and "0..1" in line and "behind" in line for line in lines if line.startswith("state/0/1")), plain
    assert any("░" in line and "0..1" in line for line in lines if line.startswith("common")), plain
    # piped (no terminal): the table only, as before
    piped = cli("inspect", "writers", str(chk))
    assert "━" not in piped.stdout and "state/0/1" in piped.stdout

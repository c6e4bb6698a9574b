"""Shell completion: the checked-in scripts match the program, and the program answers TAB.

A drift failure after adding or renaming a command is expected: run `./dev completions`
and commit completions/streamctl.{bash,zsh,fish}.
"""
from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers.paths import REPO
from streamctl.completions import generate

CHECKED_IN = REPO / "completions"
PROGRAM = generate.entry_point()


def run_program(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "_STREAMCTL_COMPLETE" and not k.startswith(("COMP_", "_TYPER"))}
    return subprocess.run(
        [str(PROGRAM)], env={**clean, **env}, capture_output=True, text=True, timeout=60, check=False
    )


def top_level_commands() -> list[str]:
    import typer

    from streamctl.cli.app import app

    group = typer.main.get_command(app)
    return sorted(name for name, cmd in group.commands.items() if not cmd.hidden)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("completions")
    written = generate.generate(out)
    assert sorted(written) == ["streamctl.bash", "streamctl.fish", "streamctl.zsh"]
    return out


def test_completions_checked_in_scripts_match_the_program(fresh: Path) -> None:
    problems = []
    for shell in generate.SHELLS:
        name = generate.file_name(shell)
        want = (fresh / name).read_text(encoding="utf-8")
        path = CHECKED_IN / name
        have = path.read_text(encoding="utf-8") if path.exists() else ""
        if have != want:
            diff = difflib.unified_diff(
                have.splitlines(True), want.splitlines(True), f"completions/{name}", "regenerated"
            )
            problems.append("".join(diff))
    assert not problems, "completion scripts drifted; run ./dev completions and commit:\n" + "\n".join(problems)


def test_completions_are_machine_independent(fresh: Path) -> None:
    for shell in generate.SHELLS:
        name = generate.file_name(shell)
        text = (fresh / name).read_text(encoding="utf-8")
        for path in {str(REPO), sys.prefix, str(Path.home()), str(PROGRAM.parent)}:
            assert path not in text, f"{name} contains the machine path {path}"
        assert "\r" not in text and text.endswith("\n") and not text.endswith("\n\n")
    zsh = (fresh / "streamctl.zsh").read_text(encoding="utf-8")
    assert zsh.startswith("#compdef streamctl\n")  # zsh reads it on line 1 only


# What each shell's script sends on TAB (see the scripts), asked of the program directly.
REQUESTS = {
    "bash ins": {"_STREAMCTL_COMPLETE": "complete_bash", "COMP_WORDS": "streamctl ins", "COMP_CWORD": "1"},
    "bash top": {"_STREAMCTL_COMPLETE": "complete_bash", "COMP_WORDS": "streamctl ", "COMP_CWORD": "1"},
    "zsh ins": {"_STREAMCTL_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "streamctl ins"},
    "fish ins": {
        "_STREAMCTL_COMPLETE": "complete_fish",
        "_TYPER_COMPLETE_FISH_ACTION": "get-args",
        "_TYPER_COMPLETE_ARGS": "streamctl ins",
    },
}


@pytest.fixture(scope="module")
def answers() -> dict[str, subprocess.CompletedProcess[str]]:
    with ThreadPoolExecutor(max_workers=len(REQUESTS)) as pool:
        results = pool.map(run_program, REQUESTS.values())
        return dict(zip(REQUESTS, results, strict=True))


def test_completion_protocol_bash_completes_subcommands(answers: dict[str, subprocess.CompletedProcess[str]]) -> None:
    result = answers["bash ins"]
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["inspect"]
    result = answers["bash top"]
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == top_level_commands()


def test_completion_protocol_zsh_and_fish_complete_subcommands(
    answers: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    zsh = answers["zsh ins"]
    assert zsh.returncode == 0, zsh.stderr
    assert zsh.stdout.startswith("_arguments ") and '"inspect"' in zsh.stdout
    fish = answers["fish ins"]
    assert fish.returncode == 0, fish.stderr
    assert [line.split("\t")[0] for line in fish.stdout.splitlines()] == ["inspect"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_completion_bash_script_sourced_completes() -> None:
    # What bash does on TAB after `streamctl ins`: call the registered function with
    # COMP_WORDS/COMP_CWORD set; the function runs `streamctl` found on PATH.
    script = f"""
set -u
source {str(CHECKED_IN / 'streamctl.bash')!r}
complete -p streamctl
COMP_WORDS=(streamctl ins)
COMP_CWORD=1
_streamctl_completion streamctl ins streamctl
printf 'reply:%s\\n' "${{COMPREPLY[@]}}"
COMP_WORDS=(streamctl inspect '')
COMP_CWORD=2
_streamctl_completion streamctl '' inspect
printf 'nested:%s\\n' "${{COMPREPLY[@]}}"
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("_STREAMCTL", "COMP_"))}
    env["PATH"] = f"{PROGRAM.parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "complete -o default -F _streamctl_completion streamctl" in lines
    assert [line for line in lines if line.startswith("reply:")] == ["reply:inspect"]
    nested = [line.removeprefix("nested:") for line in lines if line.startswith("nested:")]
    assert nested and all(nested), result.stdout  # the inspect group's commands, whatever they are
    assert "inspect" not in nested


def test_completion_fish_script_sourced_completes() -> None:
    """fish from PATH, or Debian's package unpacked into .cache (helpers/fish.py)."""
    from helpers.fish import fish

    argv, extra = fish()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("_STREAMCTL", "_TYPER"))}
    env.update(extra)
    env["PATH"] = f"{PROGRAM.parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        [*argv, "--no-config", "-c", f"source {CHECKED_IN / 'streamctl.fish'}; complete -C 'streamctl ins'"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert [line.split("\t")[0] for line in result.stdout.splitlines()] == ["inspect"]


def test_completion_command_prints_the_shipped_scripts() -> None:
    from typer.testing import CliRunner

    from streamctl.cli.app import app

    for shell in generate.SHELLS:
        result = CliRunner().invoke(app, ["completion", shell])
        assert result.exit_code == 0, result.output
        assert result.stdout == (CHECKED_IN / generate.file_name(shell)).read_text(encoding="utf-8")


def test_generate_check_reports_drift_without_writing(
    fresh: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the programs' answers were checked by the fixture; replay them to keep this fast
    replay = {generate.file_name(shell): (fresh / generate.file_name(shell)).read_text(encoding="utf-8") for shell in generate.SHELLS}
    monkeypatch.setattr(generate, "render_all", lambda *args, **kwargs: dict(replay))
    for name in ("streamctl.bash", "streamctl.fish"):
        shutil.copy(fresh / name, tmp_path / name)
    stale = tmp_path / "streamctl.bash"
    stale.write_text("# stale\n", encoding="utf-8")  # and streamctl.zsh is missing

    assert generate.main(["--check", "--output-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"drifted: {tmp_path / 'streamctl.bash'}" in out
    assert f"drifted: {tmp_path / 'streamctl.zsh'}" in out
    assert "streamctl.fish" not in out
    assert stale.read_text(encoding="utf-8") == "# stale\n"
    assert not (tmp_path / "streamctl.zsh").exists()

    assert generate.main(["--output-dir", str(tmp_path)]) == 0
    assert generate.main(["--check", "--output-dir", str(tmp_path)]) == 0
    for shell in generate.SHELLS:
        name = generate.file_name(shell)
        assert (tmp_path / name).read_bytes() == (fresh / name).read_bytes()


def test_generate_explains_an_app_that_cannot_complete(tmp_path: Path) -> None:
    # a stand-in program that answers like typer does when no completion class is registered
    fake = tmp_path / "streamctl"
    fake.write_text("#!/bin/sh\necho 'Shell bash not supported.' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(generate.GenerationError, match="completion_init"):
        generate.render("bash", program=fake)

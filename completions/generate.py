"""Regenerate completions/streamctl.{bash,zsh,fish} from the installed `streamctl` program.

    python -m streamctl.completions.generate            # rewrite the files (`./dev completions`)
    python -m streamctl.completions.generate --check    # exit 1 and list the files that drifted

Each script comes from a fresh subprocess of the `streamctl` entry point installed next to
`sys.executable`, run with `_STREAMCTL_COMPLETE=source_<shell>`: the same program, and the
same protocol, that answers every TAB afterwards (`_STREAMCTL_COMPLETE=complete_<shell>`).
A fresh process per shell avoids typer's `--show-completion`, which guesses the shell and
keeps state in-process. The scripts name the program only by its name, never by a path
of this machine, so the output is the same everywhere and can be checked in.

tests/test_completions.py regenerates into a temporary folder and fails on any difference:
after adding or renaming a command, run `./dev completions` and commit the result.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Mapping, Sequence

PROG_NAME = "streamctl"
COMPLETE_VAR = "_STREAMCTL_COMPLETE"
SHELLS: tuple[str, ...] = ("bash", "zsh", "fish")
DEFAULT_OUTPUT_DIR = Path(__file__).resolve().parent
TIMEOUT_SECONDS = 60


class GenerationError(Exception):
    """The installed program did not produce a usable completion script."""


def file_name(shell: str) -> str:
    return f"{PROG_NAME}.{shell}"


def entry_point() -> Path:
    """The `streamctl` console script of the running environment (next to sys.executable)."""
    bin_dir = Path(sys.executable).parent
    for name in (PROG_NAME, f"{PROG_NAME}.exe"):
        candidate = bin_dir / name
        if candidate.is_file():
            return candidate
    raise GenerationError(
        f"no {PROG_NAME} entry point in {bin_dir}: install the project first (pip install -e .)"
    )


def _clean_env(shell: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {
        key: value
        for key, value in (os.environ if base is None else base).items()
        # a stray completion variable would turn this run into a completion request
        if key != COMPLETE_VAR and not key.startswith("_TYPER_COMPLETE")
    }
    env[COMPLETE_VAR] = f"source_{shell}"
    return env


def render(shell: str, program: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    """Ask a fresh `streamctl` process for the completion script of `shell`.

    The text is normalised to start at its first non-blank line (zsh reads `#compdef`
    only on line 1) and to end with exactly one newline.
    """
    if shell not in SHELLS:
        raise GenerationError(f"unknown shell {shell!r}: choose one of {', '.join(SHELLS)}")
    program = program or entry_point()
    try:
        proc = subprocess.run(
            [str(program)],
            env=_clean_env(shell, env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GenerationError(f"running {program} for {shell}: {exc}") from None
    problem = (proc.stderr.strip().splitlines() or [""])[-1]
    if proc.returncode != 0:
        hint = ""
        if "not supported" in problem:
            hint = (
                " (the app must register typer's completion classes; with add_completion=False"
                " call typer.completion.completion_init() in streamctl.cli.app)"
            )
        raise GenerationError(
            f"{PROG_NAME} exited {proc.returncode} for {COMPLETE_VAR}=source_{shell}: {problem}{hint}"
        )
    text = proc.stdout.strip("\n").rstrip() + "\n"
    if f"{COMPLETE_VAR}=complete_{shell}" not in text:
        raise GenerationError(f"{PROG_NAME} printed no {shell} completion script for {COMPLETE_VAR}=source_{shell}")
    for path in _machine_paths(program):
        if path in text:
            raise GenerationError(f"the {shell} script contains the machine-specific path {path}")
    return text


def _machine_paths(program: Path) -> list[str]:
    paths = {str(program.parent), sys.prefix, str(Path.home())}
    return sorted(p for p in paths if len(p) > 1)


def render_all(program: Path | None = None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every shell's script, keyed by file name; the subprocesses run in parallel."""
    program = program or entry_point()
    with ThreadPoolExecutor(max_workers=len(SHELLS)) as pool:
        texts = list(pool.map(lambda shell: render(shell, program, env), SHELLS))
    return {file_name(shell): text for shell, text in zip(SHELLS, texts, strict=True)}


def generate(output_dir: Path | str = DEFAULT_OUTPUT_DIR, *, check: bool = False) -> list[str]:
    """Write (or with `check`, only compare) the scripts in `output_dir`.

    Returns the names of the files that differed from the fresh output (or were
    missing). With `check` nothing is written.
    """
    output_dir = Path(output_dir)
    drifted: list[str] = []
    for name, text in render_all().items():
        target = output_dir / name
        try:
            current = target.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = None
        if current == text:
            continue
        drifted.append(name)
        if not check:
            output_dir.mkdir(parents=True, exist_ok=True)
            # newline="\n": the scripts are byte-identical on every platform
            with open(target, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(text)
    return drifted


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streamctl.completions.generate",
        description="Regenerate the shell completion scripts shipped with streamctl.",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if any file would change")
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="where the scripts go (default: the completions/ folder of this source checkout)",
    )
    args = parser.parse_args(argv)
    output_dir = args.output_dir
    if output_dir is None:
        output_dir = DEFAULT_OUTPUT_DIR
        if not (output_dir.parent / "pyproject.toml").is_file():
            print(
                f"generate: {output_dir} is not in a source checkout (an installed copy?); pass --output-dir",
                file=sys.stderr,
            )
            return 2
    try:
        drifted = generate(output_dir, check=args.check)
    except GenerationError as exc:
        print(f"generate: {exc}", file=sys.stderr)
        return 2
    shown = output_dir if args.output_dir is not None else Path("completions")
    if args.check:
        for name in drifted:
            print(f"drifted: {shown / name}")
        if drifted:
            print("run ./dev completions to regenerate", file=sys.stderr)
            return 1
        return 0
    for name in drifted:
        print(f"wrote {shown / name}")
    if not drifted:
        print("completions are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())

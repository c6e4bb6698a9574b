"""Guardrails for the root-folder layout installed as `streamctl.*` (docs/development.md#packaging, #layers).

- every import goes through `streamctl.` (a bare `import cli` loads a second copy);
- inspectors/ stays free of the presentation layer (no typer/rich/tabulate, no printing);
- `[tool.setuptools] packages` lists every folder with an __init__.py, so nothing is
  silently left out of the wheel while the editable install keeps working;
- `streamctl --help` stays cheap: no PySpark, no Kafka client;
- a wheel built from the working tree, installed in a fresh venv, runs.
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.paths import REPO, TESTS

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
PACKAGES: list[str] = SETUPTOOLS["packages"]
PACKAGE_DIR: dict[str, str] = SETUPTOOLS["package-dir"]
PACKAGE_DATA: dict[str, list[str]] = SETUPTOOLS.get("package-data", {})

# The root folders mapped into `streamctl.*`; importing them bare is the double-import trap.
BARE_NAMES = frozenset({"cli", "commands", "inspectors", "completions", "pipeline"} | set(PACKAGE_DIR.values()))
SCANNED_DIRS = sorted({*PACKAGE_DIR.values(), "tests", "bench", "scripts"})

# The domain layer must not reach up into the presentation layer.
INSPECTOR_FORBIDDEN_IMPORTS = ("typer", "rich", "tabulate", "click", "streamctl.cli", "streamctl.console", "streamctl.commands")
HEAVY_MODULES = ("pyspark", "py4j", "kafka")

BIN = "Scripts" if os.name == "nt" else "bin"
EXE = ".exe" if os.name == "nt" else ""


def python_files(*dirs: str) -> Iterator[Path]:
    for name in dirs:
        base = REPO / name
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(REPO).parts
            if any(part == "__pycache__" or part.startswith(".") for part in rel):
                continue
            yield path


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def module_name(path: Path) -> str | None:
    """The dotted `streamctl.*` name of a file under a mapped root, else None."""
    rel = path.relative_to(REPO)
    for package, folder in PACKAGE_DIR.items():
        if rel.parts[0] == folder:
            parts = list(rel.with_suffix("").parts[1:])
            if parts and parts[-1] == "__init__":
                parts.pop()
            return ".".join([package, *parts])
    return None


def imported_modules(tree: ast.Module, current: str | None) -> Iterator[tuple[int, str, int]]:
    """(line, absolute module name, relative level) for every import in the tree."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, 0
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                yield node.lineno, node.module or "", 0
                continue
            base = (current or "").split(".")
            # a module's package is its name minus the last part (unless it is a package itself)
            package = base if (current and module_is_package(current)) else base[:-1]
            anchor = package[: len(package) - (node.level - 1)] if node.level > 1 else package
            name = ".".join(anchor + ([node.module] if node.module else []))
            yield node.lineno, name, node.level


def module_is_package(name: str) -> bool:
    for package, folder in PACKAGE_DIR.items():
        if name == package or name.startswith(package + "."):
            rel = name[len(package) :].lstrip(".").split(".") if name != package else []
            return (REPO / folder).joinpath(*rel, "__init__.py").is_file()
    return False


# ----------------------------------------------------------------------------- imports


STRING_IMPORTERS = {"import_module", "__import__", "run_module", "patch", "setattr", "delattr", "find_spec"}


def bare_import_problems(tree: ast.Module, current: str | None) -> list[tuple[int, str]]:
    problems = []
    for line, name, level in imported_modules(tree, current):
        if level:
            problems.append((line, f"relative import; write `from {name or 'streamctl...'} import ...`"))
        elif name.split(".")[0] in BARE_NAMES:
            problems.append((line, f"bare import of {name!r}; use 'streamctl.{name}'"))
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        first = node.args[0]
        if called in STRING_IMPORTERS and isinstance(first, ast.Constant) and isinstance(first.value, str):
            top = first.value.split(".")[0]
            if top in BARE_NAMES and (first.value == top or "." in first.value):
                problems.append((node.lineno, f"{called}({first.value!r}) imports a bare module; use 'streamctl.{first.value}'"))
    return problems


def inspector_problems(tree: ast.Module, current: str | None) -> list[tuple[int, str]]:
    problems = []
    for line, name, _level in imported_modules(tree, current):
        for banned in INSPECTOR_FORBIDDEN_IMPORTS:
            if name == banned or name.startswith(banned + "."):
                problems.append((line, f"imports {name} (presentation layer)"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "sys":
            if any(alias.name == "exit" for alias in node.names):
                problems.append((node.lineno, "imports sys.exit"))
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "SystemExit":
                problems.append((node.lineno, "raises SystemExit; raise a typed error instead"))
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("print", "exit", "quit", "breakpoint"):
            problems.append((node.lineno, f"calls {func.id}(); inspectors return data, the CLI prints"))
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and (func.value.id, func.attr) in (("sys", "exit"), ("os", "_exit"))
        ):
            problems.append((node.lineno, f"calls {func.value.id}.{func.attr}(); raise a typed error instead"))
    return problems


def test_no_bare_imports_of_the_mapped_root_folders() -> None:
    """`import cli`, `from inspectors.x import y`, `importlib.import_module("commands")`,
    `monkeypatch.setattr("cli.context.X", ...)` and relative imports are all refused:
    only `streamctl.`-prefixed absolute imports."""
    problems = [
        f"{path.relative_to(REPO)}:{line}: {what}"
        for path in python_files(*SCANNED_DIRS)
        for line, what in bare_import_problems(parse(path), module_name(path))
    ]
    assert not problems, "only `streamctl.`-prefixed imports are allowed:\n" + "\n".join(problems)


def test_inspectors_do_not_depend_on_the_presentation_layer() -> None:
    problems = [
        f"{path.relative_to(REPO)}:{line}: {what}"
        for path in python_files(PACKAGE_DIR.get("streamctl.inspectors", "inspectors"))
        for line, what in inspector_problems(parse(path), module_name(path))
    ]
    assert not problems, "inspectors/ must stay free of typer/rich/tabulate, printing and exiting:\n" + "\n".join(problems)


BAD_IMPORTS = """\
import cli
import inspectors.checkpoint as chk
from commands import inspect_cmd
from pipeline.examples import build
from completions.generate import main
import importlib; importlib.import_module("cli.app")
monkeypatch.setattr("cli.context.CONFIG_PATH", None)
from . import sibling
import streamctl.cli.app, clirunner, pipelines
from streamctl.inspectors import errors
"""

BAD_INSPECTOR = """\
import typer
from rich.console import Console
import tabulate
from streamctl.console import render
from streamctl.commands.inspect_cmd import app
from sys import exit
import sys, os
print("x")
sys.exit(2)
os._exit(1)
raise SystemExit(3)
import pyarrow.fs, logging
from streamctl.formats.errors import UsageError
logging.getLogger(__name__).info("fine")
"""


def test_guardrail_scanners_catch_what_they_should() -> None:
    assert [line for line, _ in bare_import_problems(ast.parse(BAD_IMPORTS), None)] == [1, 2, 3, 4, 5, 8, 6, 7]
    found = inspector_problems(ast.parse(BAD_INSPECTOR), "streamctl.inspectors.x")
    assert sorted(line for line, _ in found) == [1, 2, 3, 4, 5, 6, 8, 9, 10, 11]
    relative = inspector_problems(ast.parse("from ..cli import render\nfrom . import errors\n"), "streamctl.inspectors.x")
    assert [what for _, what in relative] == ["imports streamctl.cli (presentation layer)"]


# ----------------------------------------------------------------------------- pyproject


def discovered_packages() -> tuple[set[str], list[str]]:
    """Dotted names of every folder holding an __init__.py under the mapped roots, and
    folders holding .py files without one (they would be left out of the wheel)."""
    found: set[str] = set()
    unmarked: list[str] = []
    for package, folder in PACKAGE_DIR.items():
        base = REPO / folder
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            rel = Path(dirpath).relative_to(base).parts
            if "__init__.py" in filenames:
                found.add(".".join([package, *rel]))
            elif any(name.endswith(".py") for name in filenames):
                unmarked.append(str(Path(folder, *rel)))
    return found, unmarked


def test_every_mapped_root_exists() -> None:
    missing = [f"{package} -> {folder}/" for package, folder in PACKAGE_DIR.items() if not (REPO / folder).is_dir()]
    assert not missing, f"package-dir maps to missing folders: {missing}"
    assert not (REPO / "__init__.py").exists(), "the repo root must not be a package (docs/development.md#packaging)"


def test_package_dir_keys_are_the_top_packages_listed() -> None:
    roots = {name for name in PACKAGES if not any(name.startswith(other + ".") for other in PACKAGES)}
    assert set(PACKAGE_DIR) == roots, (
        f"[tool.setuptools.package-dir] keys {sorted(PACKAGE_DIR)} differ from the top packages "
        f"listed in [tool.setuptools] packages {sorted(roots)}"
    )
    assert all(name.startswith("streamctl.") for name in PACKAGES), "every package lives under streamctl."


def test_package_list_matches_the_folders_with_init() -> None:
    found, unmarked = discovered_packages()
    listed = set(PACKAGES)
    assert len(PACKAGES) == len(listed), "a package is listed twice"
    message = []
    if found - listed:
        message.append(f"missing from [tool.setuptools] packages (they would not be in the wheel): {sorted(found - listed)}")
    if listed - found:
        message.append(f"listed but no such folder with an __init__.py: {sorted(listed - found)}")
    if unmarked:
        message.append(f"folders with .py files but no __init__.py (left out of the wheel): {unmarked}")
    assert not message, "\n".join(message)


def test_package_data_refers_to_listed_packages_and_existing_files() -> None:
    problems = []
    for package, patterns in PACKAGE_DATA.items():
        if package not in PACKAGES:
            problems.append(f"package-data for unlisted package {package}")
            continue
        top = next(p for p in PACKAGE_DIR if package == p or package.startswith(p + "."))
        sub = package[len(top) :].lstrip(".")
        folder = REPO / PACKAGE_DIR[top] / Path(*sub.split(".")) if sub else REPO / PACKAGE_DIR[top]
        for pattern in patterns:
            if not list(folder.glob(pattern)):
                problems.append(f"{package}: {pattern!r} matches no file in {folder.relative_to(REPO)}/")
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- cheap start


# Runs the app as the entry point does, then reports which heavy modules got loaded.
HELP_PROBE = """
import json, sys
args, heavy_roots = json.loads(sys.argv[1]), set(json.loads(sys.argv[2]))
sys.argv = ["streamctl", *args]
from streamctl.cli.app import main
try:
    main()
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in heavy_roots)
sys.stdout.flush()
sys.stderr.write("\\nPROBE " + json.dumps({"code": code, "heavy": heavy}) + "\\n")
"""


def probe(args: list[str], tmp_path: Path) -> tuple[int, list[str], str]:
    result = subprocess.run(
        [sys.executable, "-P", "-c", HELP_PROBE, json.dumps(args), json.dumps(HEAVY_MODULES)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    line = [ln for ln in result.stderr.splitlines() if ln.startswith("PROBE ")]
    assert line, result.stderr
    data = json.loads(line[-1][len("PROBE ") :])
    return data["code"], data["heavy"], result.stdout


def test_help_does_not_import_pyspark_or_kafka(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["--help"], ["inspect", "--help"]):
        code, heavy, stdout = probe(args, tmp_path)
        assert code == 0, stdout
        assert "Usage:" in stdout
        assert heavy == [], f"`streamctl {' '.join(args)}` imported {heavy}; import them inside the commands that need them"

    program = Path(sys.executable).with_name(f"streamctl{EXE}")
    walls = []
    for _ in range(3):
        start = time.perf_counter()
        result = subprocess.run([str(program), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        walls.append(time.perf_counter() - start)
        assert result.returncode == 0, result.stderr
    with capsys.disabled():
        print(f"\n[timing] streamctl --help: first {walls[0]:.3f}s, best of 3 {min(walls):.3f}s")


# ----------------------------------------------------------------------------- wheel


def copy_source(dest: Path) -> None:
    """What a clean checkout would build from: pyproject, top-level docs, the mapped roots.
    Building from a copy also keeps build/ and *.egg-info out of the working tree, where a
    stale build/ once masked a missing package (docs/development.md#packaging)."""
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.cfg", "setup.py", "MANIFEST.in"):
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, dest / name)
    for path in REPO.iterdir():
        if path.is_file() and path.name.upper().startswith(("README", "LICENSE", "LICENCE", "NOTICE")):
            shutil.copy2(path, dest / path.name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".*")
    for folder in sorted(set(PACKAGE_DIR.values())):
        shutil.copytree(REPO / folder, dest / folder, ignore=ignore)


def clean_env(venv: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP") and not k.startswith("_STREAMCTL")
    }
    env["PATH"] = f"{venv / BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{' '.join(map(str, cmd))} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Build a wheel from the working tree and install it, with its dependencies, into a
    fresh venv (no system site-packages, no editable finder)."""
    tmp = tmp_path_factory.mktemp("wheel")
    timings: dict[str, float] = {}
    venv = tmp / "venv"
    python = venv / BIN / f"python{EXE}"
    # --without-pip and `pip --python`: this venv's pip installs into the new one, which
    # saves the ensurepip step. Dependencies come from the configured index / pip cache.
    pip_into_venv = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile"]

    start = time.perf_counter()
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    # The declared dependencies (the same list the wheel's metadata carries) install while
    # the wheel builds; installing the wheel afterwards still resolves them through pip.
    deps = subprocess.Popen(
        [*pip_into_venv, *PYPROJECT["project"]["dependencies"]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        copy_source(tmp / "src")
        # --no-build-isolation: setuptools from this venv, no download: ~2 s instead of ~10 s
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist"), str(tmp / "src")])
        timings["build wheel"] = time.perf_counter() - start
    finally:
        out, err = deps.communicate(timeout=600)
    assert deps.returncode == 0, f"installing the dependencies failed:\n{out}\n{err}"
    wheels = list((tmp / "dist").glob("streamctl-*.whl"))
    assert len(wheels) == 1, wheels
    run([*pip_into_venv, str(wheels[0])])
    timings["venv + dependencies + wheel"] = time.perf_counter() - start
    return {"wheel": wheels[0], "venv": venv, "python": python, "timings": timings, "cwd": tmp}


def test_wheel_contains_the_namespaced_packages_only(installed: dict[str, object]) -> None:
    with zipfile.ZipFile(installed["wheel"]) as wheel:  # type: ignore[arg-type]
        names = set(wheel.namelist())
    for required in (
        "streamctl/cli/app.py",
        "streamctl/completions/streamctl.bash",
        "streamctl/completions/streamctl.zsh",
        "streamctl/completions/streamctl.fish",
        "streamctl/inspectors/py.typed",
    ):
        assert required in names, f"{required} missing from the wheel"
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"streamctl"}, sorted(tops)
    assert not any(name.startswith(("cli/", "tests/", "commands/", "inspectors/")) for name in names)
    assert "streamctl/__init__.py" not in names  # an implicit namespace package
    # every source module of every listed package made it in
    source = {wheel_path(path) for path in python_files(*PACKAGE_DIR.values())}
    assert not source - names, f"modules missing from the wheel: {sorted(source - names)}"


def wheel_path(path: Path) -> str:
    """Where a source file under a mapped root lands in the wheel (cli/app.py -> streamctl/cli/app.py)."""
    rel = path.relative_to(REPO)
    package = next(p for p, folder in PACKAGE_DIR.items() if rel.parts[0] == folder)
    return "/".join([*package.split("."), *rel.parts[1:]])


def test_installed_wheel_runs(installed: dict[str, object], capsys: pytest.CaptureFixture[str]) -> None:
    venv: Path = installed["venv"]  # type: ignore[assignment]
    python: Path = installed["python"]  # type: ignore[assignment]
    env = clean_env(venv)
    cwd = installed["cwd"]
    program = venv / BIN / f"streamctl{EXE}"

    where = run([str(python), "-c", "import streamctl.cli; print(streamctl.cli.__file__)"], env=env, cwd=cwd)
    imported_from = Path(where.stdout.strip()).resolve()
    assert venv.resolve() in imported_from.parents, f"streamctl.cli came from {imported_from}, not the fresh venv"

    start = time.perf_counter()
    help_run = run([str(program), "--help"], env=env, cwd=cwd)
    help_wall = time.perf_counter() - start
    assert "Usage: streamctl" in help_run.stdout
    assert "inspect" in help_run.stdout

    bash = run([str(program), "completion", "bash"], env=env, cwd=cwd)
    assert bash.stdout == (REPO / "completions" / "streamctl.bash").read_text(encoding="utf-8")
    assert "_STREAMCTL_COMPLETE=complete_bash" in bash.stdout

    timings = installed["timings"]
    with capsys.disabled():
        parts = ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())  # type: ignore[attr-defined]
        print(f"\n[timing] {parts} (total), installed streamctl --help {help_wall:.2f}s (cold .pyc)")


def test_installed_wheel_imports_every_shipped_module_without_extras(installed: dict[str, object]) -> None:
    """Optional dependencies (pyspark, kafka-python) are not installed in the fresh venv, so
    this also proves that no shipped module outside the PySpark side imports them at import time."""
    modules = sorted(filter(None, (module_name(path) for path in python_files(*PACKAGE_DIR.values()))))
    code = (
        "import importlib, json, sys\n"
        "bad = {}\n"
        f"for name in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        bad[name] = f'{type(exc).__name__}: {exc}'\n"
        "print(json.dumps(bad))\n"
    )
    venv: Path = installed["venv"]  # type: ignore[assignment]
    result = run([str(installed["python"]), "-c", code], env=clean_env(venv), cwd=installed["cwd"])
    bad = json.loads(result.stdout.strip().splitlines()[-1])
    # The PySpark side (streamctl.pipeline: data sources, sinks, the reference pipeline) and the
    # fixture builders on it (streamctl.fixtures) need pyspark by nature and ship with the `spark`
    # extra; everything else must import without extras.
    bad = {k: v for k, v in bad.items() if not (
        k.startswith(("streamctl.pipeline.", "streamctl.fixtures.")) and v.startswith("ModuleNotFoundError")
        and ("'pyspark" in v or "'kafka" in v or "'py4j" in v))}
    assert not bad, "modules that fail to import from the installed wheel:\n" + "\n".join(f"{k}: {v}" for k, v in bad.items())


# The rooms and what each may import (README: Layout). Read downwards, one way:
# cli -> commands -> console -> operations -> inspectors. The entry point (`cli/app.py`) registers
# the commands and holds the error boundary; a command builds a request, calls the write side
# (`operations/`) or the readers (`inspectors/`) and renders through `console/` (output settings,
# rendering, exit codes, error messages, the config file), which never imports a command or the
# app; the PySpark side (`pipeline/`) stands apart from the write side; what builds example
# checkpoints for tests and `./dev examples` (`fixtures/`) stands on the PySpark side, and no
# runtime room imports it.
LAYERS: dict[str, set[str]] = {
    "formats": {"formats"},  # the bottom: every on-disk format's bytes, and the error types
    "inspectors": {"inspectors", "formats"},
    "operations": {"operations", "inspectors", "formats"},
    "pipeline": {"pipeline", "inspectors", "formats"},
    "fixtures": {"fixtures", "pipeline", "inspectors", "formats"},  # builds example checkpoints: tests, ./dev examples
    "console": {"console", "operations", "inspectors", "formats"},
    "commands": {"commands", "console", "operations", "inspectors", "pipeline", "formats"},
    "cli": {"cli", "commands", "console", "operations", "inspectors", "formats"},
    "completions": {"completions"},
}
ONLY_THE_APP_REGISTERS_COMMANDS = "streamctl.cli.app"
RUN_THE_PIPELINE = ("streamctl.commands.demo_cmd", "streamctl.commands.preflight_cmd")  # the PySpark side


def _streamctl_imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Every `streamctl.*` module a file imports, at any depth (lazy imports included)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("streamctl."):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("streamctl."):
            yield node.lineno, node.module


def module_layer_problems(room: str, me: str | None, tree: ast.Module, where: str) -> list[str]:
    problems = []
    for line, target in _streamctl_imports(tree):
        other = target.split(".")[1]
        at = f"{where}:{line}: imports {target}"
        if other not in LAYERS[room]:
            problems.append(f"{at} ({room}/ may import only {', '.join(sorted(LAYERS[room]))})")
        elif other == "commands" and room == "cli" and me != ONLY_THE_APP_REGISTERS_COMMANDS:
            problems.append(f"{at} (only {ONLY_THE_APP_REGISTERS_COMMANDS} registers commands)")
        elif room == "commands" and target == ONLY_THE_APP_REGISTERS_COMMANDS:
            problems.append(f"{at} (a command never imports the entry point)")
        elif room == "commands" and other == "pipeline" and me not in RUN_THE_PIPELINE:
            problems.append(f"{at} (only the demo and preflight run the PySpark side)")
    return problems


def test_every_room_imports_only_the_rooms_below_it() -> None:
    assert set(LAYERS) == {p.split(".")[1] for p in PACKAGE_DIR}, "a new room needs its row in LAYERS"
    problems = [problem for package, folder in PACKAGE_DIR.items() for path in python_files(folder)
                for problem in module_layer_problems(package.split(".")[1], module_name(path), parse(path),
                                                     str(path.relative_to(REPO)))]
    assert not problems, "layer violations:\n" + "\n".join(problems)


def test_the_layer_check_sees_each_kind_of_violation() -> None:
    cases = [
        ("operations", "streamctl.operations.x", "def f():\n    from streamctl.pipeline.agent import attach\n"),
        ("inspectors", "streamctl.inspectors.x", "import streamctl.operations.plan\n"),
        ("cli", "streamctl.cli.reference", "from streamctl.commands import inspect_cmd\n"),
        # the cycle: neither commands nor console import the entry point's room
        ("commands", "streamctl.commands.trim_cmd", "from streamctl.cli import reference\n"),
        ("console", "streamctl.console.render", "from streamctl.commands import inspect_cmd\n"),
        ("console", "streamctl.console.errors", "def f():\n    from streamctl.cli.app import app\n"),
        ("commands", "streamctl.commands.trim_cmd", "from streamctl.cli.app import app\n"),
        ("commands", "streamctl.commands.trim_cmd", "from streamctl.pipeline.session import get_spark\n"),
        ("pipeline", "streamctl.pipeline.agent", "from streamctl.operations.files import Root\n"),
        # what builds fixtures ships apart: no runtime room imports it, not even the demo
        ("pipeline", "streamctl.pipeline.reference", "from streamctl.fixtures.examples import build_all\n"),
        ("commands", "streamctl.commands.demo_cmd", "def f():\n    from streamctl.fixtures import examples\n"),
        ("operations", "streamctl.operations.align", "import streamctl.fixtures.state_features\n"),
        ("fixtures", "streamctl.fixtures.examples", "from streamctl.operations.files import Root\n"),
        # formats/ is the bottom: it knows bytes, never who reads or writes them
        ("formats", "streamctl.formats.offsets", "from streamctl.inspectors.storage import Storage\n"),
        ("formats", "streamctl.formats.journal", "def f():\n    from streamctl.operations.files import Root\n"),
    ]
    for room, me, code in cases:
        assert len(module_layer_problems(room, me, ast.parse(code), "x.py")) == 1, (room, code)
    ok = "from streamctl.console import render\nfrom streamctl.operations import runner\n"
    assert module_layer_problems("commands", "streamctl.commands.trim_cmd", ast.parse(ok), "x.py") == []


def test_no_test_reads_outside_the_repository() -> None:
    """A fresh clone runs every test: nothing reads ../shared (Spark's test checkpoints are in
    tests/fixtures/spark-corpus, with their license and provenance)."""
    here = TESTS
    offenders = [f"{p.relative_to(here)}:{i}" for p in sorted(here.rglob("*.py"))
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if ('"shared"' in line or "../shared" in line) and p.name != "test_packaging.py"]
    assert not offenders, offenders
    assert (here / "fixtures" / "spark-corpus" / "LICENSE-Apache-2.0.txt").is_file()


def test_tests_are_a_package_and_load_nothing_by_path() -> None:
    """What tests share lives in tests/helpers/ and is imported (`helpers.<module>`, pytest's
    `pythonpath`); no test builds a module from a file path or imports another test module, so
    each helper exists once in sys.modules."""
    import re

    loaders = re.compile(r"spec_from_file_location|module_from_spec|SourceFileLoader|runpy\.|"
                         r"^\s*(from|import) test_\w+")
    offenders = [f"{p.relative_to(TESTS)}:{i}: {line.strip()}" for p in sorted(TESTS.rglob("*.py"))
                 if p.name != "test_packaging.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1) if loaders.search(line)]
    assert not offenders, offenders
    assert (TESTS / "helpers" / "__init__.py").is_file()
    assert 'pythonpath = ["tests"]' in (REPO / "pyproject.toml").read_text()
    assert not [p.name for p in TESTS.glob("*.py") if not p.name.startswith("test_") and p.name != "conftest.py"], \
        "a shared module belongs in tests/helpers/"


def test_api_version_is_defined_once() -> None:
    """Every JSON document's api_version comes from inspectors/findings.py."""
    import re

    rooms = sorted({d.split("/")[0] for d in PACKAGE_DIR.values() if d})
    hits = [f"{p.relative_to(REPO)}:{i}" for room in rooms for p in (REPO / room).rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"[\"']streamctl/v1[\"']", line)]
    assert hits == ["inspectors/findings.py:7"], hits


COMMAND_MODULE_LINES = 150


def test_command_modules_stay_thin() -> None:
    """A command module parses options, calls one function of the core and renders its result:
    what grows past this belongs below it (console/ for rendering, operations/, inspectors/ or
    pipeline/ for the work)."""
    sizes = {p.name: len(p.read_text().splitlines()) for p in sorted((REPO / "commands").glob("*.py"))}
    assert {n: s for n, s in sizes.items() if s > COMMAND_MODULE_LINES} == {}, sizes


PACKAGE_MODULE_LINES = 600


def test_no_package_module_holds_more_than_one_job() -> None:
    """One job per module: none of the installed package's modules is over 600 lines (a module
    that grows past it holds several jobs; split it by job and name the parts by what they hold)."""
    rooms = sorted({d.split("/")[0] for d in PACKAGE_DIR.values() if d} - {"completions"})
    sizes = {p.relative_to(REPO).as_posix(): len(p.read_text().splitlines()) for room in rooms
             for p in sorted((REPO / room).rglob("*.py"))}
    assert {n: s for n, s in sizes.items() if s > PACKAGE_MODULE_LINES} == {}


def test_commands_exit_through_the_verdict_function_or_the_error_table() -> None:
    """A command's exit code comes from its verdict (console/exit_codes.py `exit_for_verdict`) or
    from an exception through console/errors.py's table: no command module names a code itself
    (`typer.Exit(N)`, `ExitCode`, `fail(message, code)`), and every verdict has its code."""
    import re

    from streamctl.console.exit_codes import VERDICT_CODES
    from streamctl.inspectors.findings import VERDICTS

    assert set(VERDICT_CODES) == set(VERDICTS), VERDICT_CODES
    assert {v: int(c) for v, c in VERDICT_CODES.items()} == {
        "aligned": 0, "recoverable": 0, "misaligned": 1, "unreadable": 3}  # README "Exit codes"
    named = re.compile(r"typer\.Exit\([^)]|\bExitCode\b|\bfail\(")
    hits = [f"{p.relative_to(REPO)}:{i}" for p in sorted((REPO / "commands").glob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if named.search(line)]
    assert hits == [], hits
    callers = sorted(p.name for p in (REPO / "commands").glob("*.py") if "exit_for_verdict(" in p.read_text())
    assert callers == ["demo_cmd.py", "diagnose_cmd.py", "inspect_epochs_cmd.py", "inspect_kafka_cmd.py",
                       "inspect_sink_cmd.py", "inspect_state_cmd.py", "inspect_writers_cmd.py", "preflight_cmd.py"]


OUTPUT_LAYER = ("console/render.py", "console/errors.py")  # stdout and stderr are written here only


def test_every_write_goes_through_the_output_layer() -> None:
    """The CLI side writes to stdout and stderr through console/render.py (and the error
    messages of console/errors.py): no command prints or writes a stream itself."""
    import re

    direct = re.compile(r"\bsys\.(stdout|stderr)\.write\(|(?<![\w.])print\(")
    hits = [f"{p.relative_to(REPO)}:{i}" for room in ("cli", "commands", "console") for p in sorted((REPO / room).glob("*.py"))
            if str(p.relative_to(REPO)) not in OUTPUT_LAYER
            for i, line in enumerate(p.read_text().splitlines(), 1) if direct.search(line)]
    assert hits == [], hits


def test_journal_events_are_named_in_the_journal_module_only() -> None:
    """One journal: its event kinds are formats/journal.py's `Event`; every writer
    names them through it, and no other module spells an event out."""
    import re

    from streamctl.formats.journal import Event

    spelled = re.compile(r"[\"']event[\"']\s*:\s*[\"']|event\s*=\s*[\"']")
    hits = [f"{p.relative_to(REPO)}:{i}" for room in ("cli", "commands", "console", "operations", "inspectors", "formats")
            for p in sorted((REPO / room).glob("*.py")) if p.relative_to(REPO).as_posix() != "formats/journal.py"
            for i, line in enumerate(p.read_text().splitlines(), 1) if spelled.search(line)]
    assert hits == [], hits
    assert {e.value for e in Event} >= {"start", "begin", "done", "finished", "verified", "undo_start", "undo_done",
                                        "undone"}


def test_every_document_gets_its_envelope_from_one_module() -> None:
    """One module owns the JSON envelope: inspectors/documents.py `document(kind,
    body)`; no other module spells `"api_version":` or `"kind":` at the head of a document."""
    import re

    envelope = re.compile(r"(^|[{,])\s*[\"']api_version[\"']\s*:")  # a dict key, not `key == "api_version":`
    rooms = sorted({d.split("/")[0] for d in PACKAGE_DIR.values() if d})
    hits = [f"{p.relative_to(REPO)}:{i}" for room in rooms for p in (REPO / room).rglob("*.py")
            if p.name != "documents.py"
            for i, line in enumerate(p.read_text().splitlines(), 1) if envelope.search(line)]
    assert hits == [], hits
    from streamctl.inspectors.documents import document
    from streamctl.inspectors.findings import API_VERSION

    assert list(document("X", {"a": 1, "b": 2})) == ["api_version", "kind", "a", "b"]
    assert document("X", {})["api_version"] == API_VERSION


# Each on-disk format's markers: its JSON keys, magic bytes, file-name suffixes and folder
# names, which only its owner in formats/ may spell (docs/formats/README.md#owners-in-streamctl). A
# marker counts in a string constant that is data, not prose: docstrings and strings with a space
# (messages, help texts) may name a format; a marker must end at a non-letter, non-underscore
# (`.changelog` in a message, not in `...rocksdb.changelogCheckpointing.enabled`, a Spark conf key;
# `_streamctl` in a path, not in the attribute `_streamctl_boundary`).
FORMAT_MARKERS: dict[str, tuple[str, ...]] = {
    "formats/offsets.py": ("batchWatermarkMs", "batchTimestampMs"),
    "formats/commits.py": ("nextBatchWatermarkMs", "stateUniqueIds"),
    "formats/compactible.py": (".compact",),
    "formats/file_sink_log.py": ("_spark_metadata", "modificationTime", "blockReplication"),
    "formats/delta_txn.py": ("_delta_log", "appId", "lastUpdated"),
    "formats/coordinated_log.py": ("_commits", "_staging", "num_writers", "committed_at_ms", "epoch="),
    "formats/state.py": (".snapshot", ".changelog", ".zip", "operatorInfo", "stateStoreInfo", "stateSchemaFilePaths",
                         "LZ4Block", "PK\x05\x06", "PK\x03\x04", "sstFiles", "dfsSstFileName", "_metadata/schema",
                         "_stateSchema"),
    "formats/checksum.py": (".crc", "crc\x00", "mainFileSize"),
    "formats/journal.py": ("journal.jsonl", "time_ms", "undo_start", "purge_begin"),  # `time_ms`, not `mtime_ms`
    "formats/layout.py": ("_streamctl", "lock.json", "lease.json", "stop.json", "written.json", "plan.json",
                          "manifest.json", "handoff.json"),
    "formats/iceberg.py": ("version-hint.text", ".metadata.json", "metadata-log", "snapshot-log", "snapshot-id",
                           "last-updated-ms", "added-data-files", "added-records", "spark.sql.streaming.queryId",
                           "spark.sql.streaming.epochId"),
}
FORMAT_MARKERS["formats/state.py"] += ("SSTs",)

# The checkpoint's folder and file names are words too (JSON keys of streamctl's own documents:
# "offsets", "commits", "state"), so they are no markers; as path parts they are spelled through
# formats/layout.py (an Iceberg table's `metadata/` through formats/iceberg.py). A name counts as a
# path part in a data string or f-string (no space in its text) where a `/` touches it
# ("offsets/", f"{root}/state"), and as the whole string in an operand of `/`, an argument of
# os.path.join, Path or .joinpath, the path argument of a storage call (`st.read("metadata")`,
# `crc_name("metadata")`) or a plan step's path (`Step("write", "checkpoint", "metadata", ...)`); also
# as the elements of a tuple, list or set of nothing but layout names (`("offsets", "commits")`), as
# the first elements of a tuple of pairs (`(("offsets", o), ("commits", c))`), and as one side of
# `==`, `!=`, `in` or `not in` whose other side is a variable or attribute named like a path or name
# (`name == "commits"`, `"state" in root`, `"metadata" in set(names)`). A JSON key stays a word:
# `doc["offsets"]`, `{"offsets": 1}`, `"offsets" in doc` and a tuple of keys with other words in it
# (`("offsets", "commits", "ssts")`, trim's categories) are not path parts.
LAYOUT_NAMES = ("offsets", "commits", "sources", "state", "metadata")
_JOIN_CALLS = frozenset({"join", "joinpath", "Path", "PurePath", "PurePosixPath"})
_PATH_CALLS = frozenset({"read", "read_all", "uri", "exists", "lookup", "stat", "kind", "list_dir", "list_names",
                         "delete", "write_atomic", "write_atomic_started", "create_exclusive", "remove_empty_dirs",
                         "local", "crc_name", "read_compactible_log", "list_log", "_names", "_newest", "_drop_batch",
                         "prefetch", "log_listing", "_try_read"})
# a variable or attribute a layout name is compared with as a path part (`name`, `e.name`, `op_rel`, `root`)
_PATHLIKE = r"(?:^|_)(?:name|names|rel|rels|path|paths|part|parts|folder|folders|dir|dirs|root|top|entry|entries|log|logs)$"

def _data_strings(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, text) of every str/bytes constant that is not a docstring and has no space."""
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)) and id(node) not in docs:
            text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            if " " not in text:
                yield node.lineno, text


def format_marker_problems(rel: str, tree: ast.Module) -> list[str]:
    import re

    found = []
    for line, text in _data_strings(tree):
        for owner, markers in FORMAT_MARKERS.items():
            if rel == owner:
                continue
            for marker in markers:
                left = r"(?<![A-Za-z_])" if marker[0].isalpha() else ""
                if re.search(left + re.escape(marker) + r"(?![A-Za-z_])", text):
                    found.append(f"{rel}:{line}: {marker!r} is {owner}'s")
    return found


def _path_part(text: str) -> str | None:
    import re

    for name in LAYOUT_NAMES:
        if re.search(rf"(?:^|/){name}/|/{name}$", text):
            return name
    return None


def layout_name_problems(rel: str, tree: ast.Module) -> list[str]:
    """`rel:line: 'offsets' ...` for each layout name spelled as a path part outside formats/."""
    import re

    if rel.startswith("formats/"):
        return []
    found: list[tuple[int, str]] = []
    pieces = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}

    def whole(node: ast.AST) -> str | None:
        return node.value if isinstance(node, ast.Constant) and node.value in LAYOUT_NAMES else None

    def first(node: ast.AST) -> str | None:  # `"offsets"` of a pair `("offsets", o)`
        return whole(node.elts[0]) if isinstance(node, ast.Tuple) and node.elts else None

    def pathlike(node: ast.AST) -> bool:  # `name`, `e.name`, `set(root)`
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"set", "frozenset"} \
                and node.args:
            node = node.args[0]
        named = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        return bool(re.search(_PATHLIKE, named))

    for node in ast.walk(tree):
        named: list[str | None] = []
        if isinstance(node, ast.JoinedStr):
            texts = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            if not any(" " in t for t in texts):
                named.append(_path_part("\x00".join(v.value if isinstance(v, ast.Constant) else "\x00"
                                                     for v in node.values)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in pieces | docs:
            if " " not in node.value:
                named.append(_path_part(node.value))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            named += [whole(node.left), whole(node.right)]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in _JOIN_CALLS:
                named += [whole(a) for a in node.args]
            elif name in _PATH_CALLS and node.args:
                named.append(whole(node.args[0]))
            elif name == "Step" and len(node.args) >= 3:
                named.append(whole(node.args[2]))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2:
            for pick in (whole, first):
                picked = [pick(e) for e in node.elts]
                if all(picked):
                    named += picked
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 \
                and isinstance(node.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
            left, right = node.left, node.comparators[0]
            named += [whole(a) for a, b in ((left, right), (right, left)) if pathlike(b)]
        found += [(getattr(node, "lineno", 0), n) for n in named if n]
    return [f"{rel}:{line}: {name!r} as a path part (formats/layout.py)" for line, name in sorted(set(found))]


def test_each_format_is_known_in_its_owner_only() -> None:
    rooms = sorted({d for d in PACKAGE_DIR.values()} - {"completions"})
    problems = [p for path in python_files(*rooms)
                for check in (format_marker_problems, layout_name_problems)
                for p in check(path.relative_to(REPO).as_posix(), parse(path))]
    assert problems == [], "format bytes outside their owner in formats/:\n" + "\n".join(problems)
    assert all((REPO / owner).is_file() for owner in FORMAT_MARKERS)


def test_the_format_check_sees_what_it_should() -> None:
    code = ('"""Reads `offsets/3` and its batchWatermarkMs."""\n'
            'W = "batchWatermarkMs"\n'
            'def f(b):\n    return f"{b}.compact"\n'
            'MSG = "the stateUniqueIds are missing"\n'
            'KEY = "newest_mtime_ms"\n'
            'CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"\n'
            'MAGIC = b"PK\\x05\\x06"\n'
            'LOCK = "_streamctl/lock.json"\n'
            'MARK = "_streamctl_boundary"\n'  # an attribute, not the folder
            'HINT = "version-hint.text"\n'
            'ROCKS = f"{b}/SSTs/{b}"\n')
    found = format_marker_problems("operations/x.py", ast.parse(code))
    assert sorted(p.split(": ")[1] for p in found) == sorted(["'batchWatermarkMs' is formats/offsets.py's",
                                                  "'.compact' is formats/compactible.py's",
                                                  "'PK\\x05\\x06' is formats/state.py's",
                                                  "'_streamctl' is formats/layout.py's",
                                                  "'lock.json' is formats/layout.py's",
                                                  "'version-hint.text' is formats/iceberg.py's",
                                                  "'SSTs' is formats/state.py's"]), found
    assert format_marker_problems("formats/offsets.py", ast.parse('W = "batchWatermarkMs"\n')) == []


def test_the_layout_name_check_sees_what_it_should() -> None:
    """The checkpoint's folder names as path parts are caught, as JSON keys, labels and in
    messages not; formats/ may spell them."""
    code = ('"""Reads `offsets/<n>` and `state/`."""\n'
            'import os\n'
            'def f(st, ck, b):\n'
            '    st.read(f"offsets/{b}")\n'  # 4: an f-string path
            '    ck / "commits"\n'  # 5: an operand of `/`
            '    os.path.join(ck, "state", "0")\n'  # 6: os.path.join
            '    st.uri("metadata")\n'  # 7: a storage call's path
            '    rel = "sources/0"\n'  # 8: a data string
            '    Step("write", "checkpoint", "metadata", "its id")\n'  # 9: a plan step's path
            '    crc_name(f"{ck}/offsets")\n'  # 10
            '    logs = ("offsets", "commits")\n'  # 11: a tuple of log folders
            '    pairs = [("offsets", o), ("commits", c)]\n'  # 12: each log folder with its listing
            '    e.name == "state" or "metadata" in root or "sources" not in set(names)\n'  # 13: path parts compared
            '    st.prefetch("state") if name != "commits" else None\n'  # 14
            '    keys = ("offsets", "commits", "ssts")\n'  # a tuple of keys with other words in it
            '    pairs = [("offsets", 1), ("sink", 2)]\n'
            '    "offsets" in doc or rec["log"] == "offsets" or kind == "state"\n'  # keys and labels compared
            '    doc = {"offsets": 1, "commits": [], "state": "running"}\n'  # JSON keys and values
            '    msg = f"offsets/{b} is missing"\n'  # a message
            '    return doc["offsets"], msg, st.read(OFFSETS_DIR), name == OFFSETS_DIR\n')
    found = layout_name_problems("operations/x.py", ast.parse(code))
    assert [p.split(": ")[0].split(":")[1] + " " + p.split("'")[1] for p in found] == [
        "4 offsets", "5 commits", "6 state", "7 metadata", "8 sources", "9 metadata", "10 offsets",
        "11 commits", "11 offsets", "12 commits", "12 offsets", "13 metadata", "13 sources", "13 state",
        "14 commits", "14 state"], found
    assert layout_name_problems("formats/x.py", ast.parse(code)) == []


def test_a_command_loads_its_own_command_module_only(tmp_path: Path) -> None:
    """The command tree loads lazily (console/lazy_group.py): `inspect epochs`
    imports its own command module and no other command's; the error boundary still wraps it (a
    missing checkpoint is exit 3, one line). `--help` lists every command (tests/test_docs.py)."""
    from helpers.layouts import checkpoint

    chk = checkpoint(tmp_path / "t", 3, 3)
    for target, want in ((str(chk), 0), (str(tmp_path / "missing"), 3)):
        r = subprocess.run([sys.executable, "-P", "-c", HELP_PROBE, json.dumps(["inspect", "epochs", target, "--json",
                                                                              "--quiet-period", "0"]), json.dumps(["streamctl"])],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
        data = json.loads([ln for ln in r.stderr.splitlines() if ln.startswith("PROBE ")][-1][len("PROBE "):])
        assert data["code"] == want, r.stdout + r.stderr
        commands = [m for m in data["heavy"] if m.startswith("streamctl.commands.") and m.endswith("_cmd")]
        assert commands == ["streamctl.commands.inspect_cmd", "streamctl.commands.inspect_epochs_cmd"], commands
    assert "Traceback" not in r.stderr and json.loads(r.stdout)["kind"] == "EpochReport", r.stderr


def test_a_plain_inspection_does_not_load_the_write_side(tmp_path: Path) -> None:
    """Read-only commands stay read-only in what they load: `inspect epochs` without
    `--reclaimable` imports nothing of operations/ (the trim planner is loaded for that flag only),
    nor PySpark or Kafka; with the flag it does, and says what trim would reclaim."""
    from helpers.layouts import checkpoint

    chk = checkpoint(tmp_path / "t", 3, 3)
    probe_roots = json.dumps([*HEAVY_MODULES, "streamctl.operations"])
    code_of = HELP_PROBE.replace("m.split(\".\")[0] in heavy_roots",
                                 "(m.split('.')[0] in heavy_roots or m.startswith('streamctl.operations'))")
    for extra, loads_trim in (([], False), (["--reclaimable"], True)):
        r = subprocess.run([sys.executable, "-P", "-c", code_of, json.dumps(["inspect", "epochs", str(chk), "--json",
                                                                              "--quiet-period", "0", *extra]), probe_roots],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
        data = json.loads([ln for ln in r.stderr.splitlines() if ln.startswith("PROBE ")][-1][len("PROBE "):])
        assert data["code"] == 0, r.stdout + r.stderr
        assert ("streamctl.operations.trim" in data["heavy"]) is loads_trim, data["heavy"]
        assert not [m for m in data["heavy"] if m.split(".")[0] in HEAVY_MODULES], data["heavy"]
        assert (json.loads(r.stdout)["queries"][0].get("reclaimable") is not None) is loads_trim

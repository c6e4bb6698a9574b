#!/usr/bin/env bash
# Rebuild tests/fixtures/spark-3.5/ with real PySpark 3.5 runs (see its README.md).
# Installs pyspark==3.5.* into .venv-spark35/ (git-ignored, ~300 MB) on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${SPARK35_VENV:-$PWD/.venv-spark35}"
PY="$VENV/bin/python"
if ! { [ -x "$PY" ] && "$PY" -c 'import sys, pyspark; sys.exit(not pyspark.__version__.startswith("3.5."))' 2>/dev/null; }; then
  echo "make_spark35_fixture: installing pyspark==3.5.* into $VENV" >&2
  python3 -m venv "$VENV"
  "$PY" -m pip install -q 'pyspark==3.5.*'
fi
export PYSPARK_PYTHON="$PY" PYSPARK_DRIVER_PYTHON="$PY"
"$PY" -P tests/spark35/produce.py tests/fixtures/spark-3.5 "$@"

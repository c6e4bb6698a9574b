"""Where the tests' data lives, named once."""
from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
CORPUS = TESTS / "fixtures" / "spark-corpus"  # checkpoints written by Apache Spark's own test suite
SPARK35 = TESTS / "fixtures" / "spark-3.5"  # checkpoints PySpark 3.5 wrote (tests/fixtures/README)
GOLDEN = TESTS / "golden"  # the golden JSON documents

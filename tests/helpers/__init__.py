"""What the tests share: builders of real checkpoints (a real PySpark session, pipelines and their
delivery check), the Kafka broker, object-store servers, a pseudo-terminal, layouts written by
hand, tree snapshots and the data paths. pytest puts tests/ on sys.path (`pythonpath` in
pyproject.toml), so test modules import these as `helpers.<module>`; nothing is loaded by path."""

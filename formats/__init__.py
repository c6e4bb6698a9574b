"""One module per on-disk format, below both sides (docs/development.md#layers, docs/formats/).

Each module parses its format's bytes into values and serializes values into bytes; nothing else in
the tree knows those bytes (tests/test_packaging.py greps for each format's markers outside its
owner). Reading and writing files is Storage's (inspectors/storage.py) and the write side's
(operations/files.py); these modules take and return bytes and names only, and import nothing
of streamctl but each other.

- errors.py: the error types every room raises (LogParseError for a file that would be refused);
- reader.py: the one bounded reader (text, lines, version lines, bounded JSON);
- layout.py: the names of the layout (the checkpoint's folders, `_streamctl/`, a backup folder);
- names.py: the names inside log folders (batch files, compactions, temp files, checksums);
- metadata.py, offsets.py, commits.py: the checkpoint's `metadata`, `offsets/`, `commits/`;
- kafka_offsets.py: Spark's Kafka offset JSON (a Kafka source's line of `offsets/<n>`);
- source_log.py: `sources/<n>/` (Kafka initial offsets, the rate source's start, the file-source
  log) and the compactible log format it shares with file_sink_log.py (`_spark_metadata/`);
- delta_txn.py: a Delta table's `txn` action; coordinated_log.py: streamctl's coordinated sink;
- iceberg.py: an Iceberg table's metadata files (names, table metadata JSON, a rollback's metadata);
- state.py: state stores (HDFS delta/snapshot, RocksDB zip/changelog, operator metadata, schema);
- journal.py: the records of streamctl's own journal (operations/journal.py writes them durably).
"""

"""isrwatch's functional core: Kafka replica semantics as plain data and pure functions (no Spark, no I/O)."""

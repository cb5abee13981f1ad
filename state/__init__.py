"""isrwatch's functional core: Kafka replica semantics as plain data and pure functions, time passed in.

The core modules (events, config, order, schedule, partition, engine, propagation, records, step,
replay, metrics) import no Spark, no HTTP, no database and read no clock; no room above (`store/`, the
shells, `cli/`) is imported here (lint-imports checks both).
"""

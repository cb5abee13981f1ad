"""isrwatch: a Kafka ISR replication monitor. Its rooms are the repository's top-level folders (state/, store/,
streaming/, ...), mapped under this package at build time (pyproject.toml); this file is the package's own, so that
`isrwatch` is a regular package: Python imports a regular package from a zip (`--py-files`, `isrwatch package
--zip`), never a namespace package."""

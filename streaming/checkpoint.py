"""The job's checkpoint location: a local directory, or any Hadoop filesystem URL (s3a://, gs://, abfss://).

Spark writes its offsets and state there itself; isrwatch only reads and writes a few small files
next to them (the bucket layout) and asks whether a query has run there before. For URLs that goes
through the session's Hadoop FileSystem, so whatever connector and credentials Spark uses apply.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class Checkpoint:
    """A checkpoint directory by location; `uri` is what Spark's checkpointLocation option gets."""

    def __init__(self, location: str, spark: SparkSession) -> None:
        self.remote = "://" in location
        if self.remote:
            self.uri = location.rstrip("/")
            jvm = spark._jvm
            self._hadoop_path = jvm.org.apache.hadoop.fs.Path
            self._fs = self._hadoop_path(self.uri).getFileSystem(spark._jsc.hadoopConfiguration())
            self._io = jvm.org.apache.commons.io.IOUtils
        else:
            self.uri = str(Path(location).resolve())

    @property
    def name(self) -> str:
        return self.uri.rsplit("/", 1)[-1]

    def has_entries(self, name: str) -> bool:
        """Whether the sub-directory `name` exists and holds anything (e.g. Spark's `offsets`)."""
        if not self.remote:
            path = Path(self.uri, name)
            return path.is_dir() and any(path.iterdir())
        path = self._hadoop_path(f"{self.uri}/{name}")
        return bool(self._fs.exists(path)) and len(self._fs.listStatus(path)) > 0

    def read_text(self, name: str) -> str | None:
        if not self.remote:
            path = Path(self.uri, name)
            return path.read_text() if path.exists() else None
        path = self._hadoop_path(f"{self.uri}/{name}")
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            return str(self._io.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write_text(self, name: str, text: str) -> None:
        if not self.remote:
            Path(self.uri).mkdir(parents=True, exist_ok=True)
            Path(self.uri, name).write_text(text)
            return
        out = self._fs.create(self._hadoop_path(f"{self.uri}/{name}"), True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()

"""File-system access through Hadoop's FileSystem API, so every job works unchanged on
local paths, ``hdfs://``, ``abfss://`` and ``wasbs://`` storage roots."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import SparkSession


def _jvm(spark: SparkSession) -> Any:
    """The driver's py4j view of the JVM (these functions run in the driver only)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # None only where no SparkContext runs (an executor's Python worker)
    return jvm


def _fs_and_path(spark: SparkSession, path: str):
    hadoop_path = _jvm(spark).org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hadoop_path


def path_exists(spark: SparkSession, path: str) -> bool:
    fs, hadoop_path = _fs_and_path(spark, path)
    return bool(fs.exists(hadoop_path))


def list_files(spark: SparkSession, folder: str, suffix: str = "") -> list[str]:
    """Fully qualified paths of the files directly in ``folder`` ending in ``suffix``, sorted."""
    fs, hadoop_path = _fs_and_path(spark, folder)
    return sorted(
        status.getPath().toString()
        for status in fs.listStatus(hadoop_path)
        if status.isFile() and status.getPath().getName().endswith(suffix)
    )


def delete_path(spark: SparkSession, path: str) -> None:
    fs, hadoop_path = _fs_and_path(spark, path)
    fs.delete(hadoop_path, True)


def local_os_path(spark: SparkSession, path: str) -> str | None:
    """The operating-system path behind ``path`` when its file system is the local one
    (a plain path or ``file:``), else None: callers then use the Hadoop calls below."""
    fs, hadoop_path = _fs_and_path(spark, path)
    if fs.getScheme() != "file":
        return None
    return str(fs.makeQualified(hadoop_path).toUri().getPath())


def list_children(spark: SparkSession, folder: str) -> list[tuple[str, bool]]:
    """``(name, is_directory)`` of each entry directly in ``folder``; empty when it is absent."""
    fs, hadoop_path = _fs_and_path(spark, folder)
    if not fs.exists(hadoop_path):
        return []
    return [(status.getPath().getName(), bool(status.isDirectory())) for status in fs.listStatus(hadoop_path)]


def rename_path(spark: SparkSession, src: str, dst: str) -> None:
    """Rename ``src`` to ``dst``, which must not exist: Hadoop moves a directory *into* an
    existing ``dst`` directory, so callers check first. Raises when the rename fails."""
    fs, src_path = _fs_and_path(spark, src)
    if not fs.rename(src_path, _jvm(spark).org.apache.hadoop.fs.Path(dst)):
        raise OSError(f"could not rename {src} to {dst}")


def make_dirs(spark: SparkSession, path: str) -> None:
    fs, hadoop_path = _fs_and_path(spark, path)
    fs.mkdirs(hadoop_path)


def read_text(spark: SparkSession, path: str) -> str:
    """A small UTF-8 file read directly through the file system (no Spark job)."""
    fs, hadoop_path = _fs_and_path(spark, path)
    stream = fs.open(hadoop_path)
    try:
        return bytes(stream.readAllBytes()).decode("utf-8")
    finally:
        stream.close()


def write_text(spark: SparkSession, path: str, text: str, *, overwrite: bool = True) -> bool:
    """Write a small UTF-8 file. With ``overwrite=False`` returns False when ``path`` exists
    (an atomic create-if-absent on HDFS; a check, then a create, on object stores)."""
    fs, hadoop_path = _fs_and_path(spark, path)
    if not overwrite and fs.exists(hadoop_path):
        return False
    try:
        stream = fs.create(hadoop_path, overwrite)
    except Exception as err:  # py4j wraps org.apache.hadoop.fs.FileAlreadyExistsException
        if not overwrite and "FileAlreadyExistsException" in str(err):
            return False
        raise
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()
    return True


def copy_from_local(spark: SparkSession, local_path: str, path: str) -> None:
    """Copy a file of the driver's local disk to ``path`` (any storage root), replacing it."""
    fs, hadoop_path = _fs_and_path(spark, path)
    source = _jvm(spark).org.apache.hadoop.fs.Path(f"file://{local_path}")
    fs.copyFromLocalFile(False, True, source, hadoop_path)


def read_head(spark: SparkSession, path: str, max_bytes: int) -> bytes:
    """The first ``max_bytes`` of a file as Spark's text reader sees them: decompressed when
    the name ends in a Hadoop codec suffix (``.gz``, ``.bz2``, ...). A corrupt or truncated
    compressed stream raises the codec's Java exception."""
    jvm = _jvm(spark)
    fs, hadoop_path = _fs_and_path(spark, path)
    codecs = jvm.org.apache.hadoop.io.compress.CompressionCodecFactory(spark.sparkContext._jsc.hadoopConfiguration())
    codec = codecs.getCodec(hadoop_path)
    stream = fs.open(hadoop_path)
    try:
        if codec is not None:
            stream = codec.createInputStream(stream)
        return bytes(stream.readNBytes(max_bytes))
    finally:
        stream.close()


def write_json(spark: SparkSession, path: str, payload: dict[str, Any]) -> None:
    """Write a small JSON document (the hand-off between steps), replacing any old one."""
    fs, hadoop_path = _fs_and_path(spark, path)
    stream = fs.create(hadoop_path, True)
    try:
        stream.write(bytearray(json.dumps(payload, indent=2, sort_keys=True).encode("utf-8")))
    finally:
        stream.close()


def read_json(spark: SparkSession, path: str) -> dict[str, Any]:
    if not path_exists(spark, path):
        raise FileNotFoundError(f"{path} does not exist (did the upstream step run?)")
    text = "\n".join(row.value for row in spark.read.text(path).collect())
    return json.loads(text)

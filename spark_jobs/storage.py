"""File-system access through Hadoop's FileSystem API, so every job works unchanged on
local paths, ``hdfs://``, ``abfss://`` and ``wasbs://`` storage roots."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import SparkSession


def _fs_and_path(spark: SparkSession, path: str):
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
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


def read_head(spark: SparkSession, path: str, max_bytes: int) -> bytes:
    """The first ``max_bytes`` of a file as Spark's text reader sees them: decompressed when
    the name ends in a Hadoop codec suffix (``.gz``, ``.bz2``, ...). A corrupt or truncated
    compressed stream raises the codec's Java exception."""
    jvm = spark.sparkContext._jvm
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

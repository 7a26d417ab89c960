"""The driver JVM's class-data sharing archive (scripts/spark_cds.py): named in the jobs'
JVM options only where it exists, and, where it does, the source of Spark's classes."""

from __future__ import annotations

from ml_platform import config
from ml_platform.config import SHORT_JOB_JVM_OPTIONS, PlatformConfig

JOB = "from pyspark.sql import SparkSession\nSparkSession.builder.getOrCreate().range(1000).count()\n"


def test_the_archive_is_named_only_where_it_exists(tmp_path, monkeypatch):
    archive = tmp_path / "spark-cds.jsa"
    monkeypatch.setattr(config, "SPARK_CDS_ARCHIVE", archive)
    monkeypatch.delenv("ML_SPARK_DRIVER_JAVA_OPTIONS", raising=False)
    assert config.short_job_jvm_options() == SHORT_JOB_JVM_OPTIONS
    archive.write_bytes(b"")
    assert config.short_job_jvm_options() == f"{SHORT_JOB_JVM_OPTIONS} -XX:SharedArchiveFile={archive}"
    assert f"-XX:SharedArchiveFile={archive}" in PlatformConfig().spark_conf()["spark.driver.extraJavaOptions"]
    monkeypatch.setenv("ML_SPARK_DRIVER_JAVA_OPTIONS", "")  # a cluster's choice wins
    assert "SharedArchiveFile" not in PlatformConfig().spark_conf()["spark.driver.extraJavaOptions"]


def test_a_jobs_driver_maps_sparks_classes_from_the_archive(tmp_path, spark_submit):
    """-Xshare:on: the JVM refuses to start unless it can map the archive (same runtime, same
    jars); the class-loading log says where each class came from."""
    from local_stack import job_spark_conf

    assert config.SPARK_CDS_ARCHIVE.is_file(), (
        f"no {config.SPARK_CDS_ARCHIVE}: scripts/setup_env.sh writes it (scripts/spark_cds.py); "
        "its output says why it could not"
    )

    job = tmp_path / "job.py"
    job.write_text(JOB)
    loaded = tmp_path / "classes.log"
    options = f"{job_spark_conf()['spark.driver.extraJavaOptions']} -Xshare:on -Xlog:class+load=info:file={loaded}"
    done = spark_submit(job, [], options)
    assert done.returncode == 0, done.stderr[-3000:]
    # Each loaded class's source: the archive, a jar file, or (lambdas) the class defining it.
    spark_classes = [line for line in loaded.read_text().splitlines() if " org.apache.spark." in line]
    from_archive = sum("source: shared objects file" in line for line in spark_classes)
    from_jars = sum("source: file:" in line for line in spark_classes)
    assert from_archive > 1000, from_archive
    assert from_jars <= 0.05 * (from_archive + from_jars), (from_jars, from_archive)

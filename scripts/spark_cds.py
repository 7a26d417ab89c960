"""Write the class-data sharing archive of this environment's Spark driver JVM.

Every job's driver JVM (on ``local[N]`` also its executor) loads and verifies thousands of
Spark classes before it runs a line of the job. With the archive it maps them from one file
instead (``-XX:SharedArchiveFile``, added by ``PlatformConfig`` when the file exists): a
small job on 2 cores took 12.5 -> 8.6 CPU seconds and 12.6 -> 7.9 s of wall time. The
archive records the classes a representative job loads (CSV text, a Python UDF over Arrow,
Parquet written and read, a shuffle), dumped by that job's JVM as it exits.

It belongs to one Java runtime and one set of Spark jars: ``scripts/setup_env.sh`` writes it
into the environment (``.venv/spark-cds.jsa``) and rewrites it whenever it reinstalls the
packages. A JVM whose runtime or class path no longer matches the archive runs without it.

Usage: python scripts/spark_cds.py [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# ml_platform (dags/) imports the contract (plugins/ml_contract), as on the scheduler's path.
sys.path[:0] = [str(REPO / "dags"), str(REPO / "plugins")]
from ml_platform.config import SHORT_JOB_JVM_OPTIONS, SPARK_CDS_ARCHIVE  # noqa: E402

# The job whose JVM the archive is dumped from: the kinds of work the platform's jobs do.
REPRESENTATIVE_JOB = """
import sys
from pyspark.sql import SparkSession, functions as F

work = sys.argv[1]
spark = SparkSession.builder.appName("spark-cds-archive").getOrCreate()
lines = spark.createDataFrame([(f"{i % 10}," + ",".join(["0"] * 8),) for i in range(2000)], "value string")
lines.write.mode("overwrite").text(f"{work}/raw")
parsed = spark.read.text(f"{work}/raw").select(F.split("value", ",").alias("fields"))
rows = parsed.select(F.col("fields")[0].cast("int").alias("label"), F.size("fields").alias("n"))


def widened(batches):
    for batch in batches:
        yield batch.set_column(0, "label", batch.column(0).cast("int64"))


rows = rows.mapInArrow(widened, "label long, n int")
rows.write.mode("overwrite").parquet(f"{work}/curated")
spark.read.parquet(f"{work}/curated").groupBy("label").count().collect()
spark.stop()
"""


def submit(job: Path, args: list[str], java_options: str) -> subprocess.CompletedProcess:
    """``spark-submit`` of this interpreter's environment on local[2], the driver JVM with
    ``java_options`` (also for the test that checks the archive is mapped)."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    conf = {
        "spark.driver.extraJavaOptions": java_options,
        "spark.pyspark.python": sys.executable,
        "spark.ui.showConsoleProgress": "false",
    }
    command = [str(bin_dir / "spark-submit"), "--master", "local[2]"]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return subprocess.run([*command, str(job), *args], env=env, capture_output=True, text=True, timeout=600)


def write_archive(out: Path) -> None:
    """Run the representative job under spark-submit, its JVM dumping the archive to ``out``
    (atomically: a JVM never maps a half-written file)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="spark-cds-") as work:
        job = Path(work) / "job.py"
        job.write_text(REPRESENTATIVE_JOB)
        partial = out.with_suffix(".jsa.partial")
        partial.unlink(missing_ok=True)
        done = submit(job, [work], f"{SHORT_JOB_JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial}")
        if done.returncode != 0 or not partial.exists():
            raise SystemExit(f"[spark_cds] the archive was not written (rc {done.returncode}):\n{done.stderr[-3000:]}")
        partial.replace(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SPARK_CDS_ARCHIVE, help=f"(default: {SPARK_CDS_ARCHIVE})")
    args = parser.parse_args()
    write_archive(args.out)
    print(f"[spark_cds] {args.out} ({args.out.stat().st_size / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()

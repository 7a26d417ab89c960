"""A Spark job that holds its Python workers busy until it is killed: the process tree of
a real job (spark-submit, the JVM, the Python driver, the pyspark daemon and workers), plus
one descendant in a session of its own, as Horovod's rank launcher makes them (``setsid``),
which nothing but a kill of the whole tree stops: killing spark-submit alone leaves it
running. For the tests of how Airflow kills a running Spark task."""

from __future__ import annotations

import subprocess
import sys
import time

from pyspark.sql import SparkSession


def hold(_partition) -> None:
    time.sleep(3600)


if __name__ == "__main__":
    spark = SparkSession.builder.getOrCreate()
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)
    print("holding two Python workers and a detached descendant", flush=True)
    spark.sparkContext.parallelize(range(2), 2).foreachPartition(hold)

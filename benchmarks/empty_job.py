"""An empty Spark application: the fixed cost every spark-submit step pays.

Builds the jobs' SparkSession (JVM, context, Python driver), runs one trivial Spark job
(so Python workers start too, as in every real step), and stops.
"""

from __future__ import annotations

from spark_jobs.session import build_spark_session


def main() -> None:
    spark = build_spark_session("empty job")
    try:
        spark.sparkContext.parallelize([1, 2], 2).map(lambda x: x).count()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()

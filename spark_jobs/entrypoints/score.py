"""spark-submit entry point for :mod:`spark_jobs.score`."""

from spark_jobs.score import main

if __name__ == "__main__":
    main()

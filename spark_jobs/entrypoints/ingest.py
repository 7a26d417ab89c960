"""spark-submit entry point for :mod:`spark_jobs.ingest`."""

from spark_jobs.ingest import main

if __name__ == "__main__":
    main()

"""spark-submit entry point for :mod:`spark_jobs.feedback`."""

from spark_jobs.feedback import main

if __name__ == "__main__":
    main()

"""spark-submit entry point for :mod:`spark_jobs.register`."""

from spark_jobs.register import main

if __name__ == "__main__":
    main()

"""spark-submit entry point for :mod:`spark_jobs.train`."""

from spark_jobs.train import main

if __name__ == "__main__":
    main()

"""spark-submit entry point for :mod:`spark_jobs.train`."""

import time

# The driver's first statement: what came before it is spark-submit's JVM starting the
# Python driver (the start-up breakdown of the job's manifest begins here).
STARTED_AT = time.time()

from spark_jobs.train import main  # noqa: E402

if __name__ == "__main__":
    main(started_at=STARTED_AT)

"""How a job tells the task that submitted it that a retry would fail the same way.

A job exits with :data:`EXIT_NOT_RETRYABLE` when its own arguments are at fault, not the
machine or a service: a training run that diverged with no usable epoch diverges again with
the same rate, window and seed. spark-submit (client deploy mode, the default) exits with
its driver's status, and the DAGs' operator (``ml_registry.spark_submit``) fails such a task
at once, without the retries an ordinary failure gets. In cluster deploy modes spark-submit
reports only that the application failed: there the task retries as before.
"""

from __future__ import annotations

# Not 1 (Python's status for an uncaught exception) nor 2 (argparse's usage error).
EXIT_NOT_RETRYABLE = 3

"""A bounded sample of the rows a Spark job scores, gathered in the same pass.

The drift check and shadow scoring need, per scored day, a few columns of at most
``max_rows`` rows (the predictions, the declared statistics of the features, the shadow's
predictions). Gathering them while the rows are scored, instead of caching the scored rows
and reading them again, keeps those columns out of the JVM altogether: each Python task
keeps, per day, its rows of smallest ``row_id`` (a content hash, so in effect a random
sample of them), and hands them to the driver once, through an accumulator, when its last
batch is scored. The driver keeps the ``max_rows`` rows of smallest ``row_id`` of each day
over all tasks: the same rows whatever the number of tasks or their order.

Each task's rows are keyed by (day, partition): a task that runs again (a lost executor,
a recomputed stage) replaces its rows instead of adding them twice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from pyspark.accumulators import AccumulatorParam

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.accumulators import Accumulator

KEY = "row_id"

Columns = dict[str, np.ndarray]
# What the tasks hand in: {(ds, partition id): that task's rows of the day}.
TaskRows = dict[tuple[str, int], Columns]


class _ByTask(AccumulatorParam):
    def zero(self, value: TaskRows) -> TaskRows:
        return {}

    def addInPlace(self, value1: TaskRows, value2: TaskRows) -> TaskRows:  # noqa: N802 (pyspark's name)
        value1.update(value2)
        return value1


def smallest_keys(columns: Mapping[str, np.ndarray], k: int) -> Columns:
    """The rows of ``columns`` with the ``k`` smallest :data:`KEY` values (ties by
    position), in key order; every column has one value a row."""
    order = np.argsort(columns[KEY], kind="stable")[: max(k, 0)]
    return {name: np.asarray(values)[order] for name, values in columns.items()}


def _joined(parts: list[Columns]) -> Columns:
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


class TaskSample:
    """One task's rows, day by day, bounded by ``k`` rows a day (compacted as it grows)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self._parts: dict[str, list[Columns]] = defaultdict(list)
        self._held: dict[str, int] = defaultdict(int)

    def add(self, days: np.ndarray, columns: Mapping[str, np.ndarray]) -> None:
        """Rows of a batch: ``days`` their ``ds``, ``columns`` their values (:data:`KEY` among them)."""
        for day in np.unique(days) if len(days) else ():
            rows = days == day
            part = dict(columns) if rows.all() else {name: np.asarray(v)[rows] for name, v in columns.items()}
            ds = str(day)
            self._parts[ds].append(smallest_keys(part, self.k))
            self._held[ds] += len(self._parts[ds][-1][KEY])
            if self._held[ds] > 2 * self.k:
                self._parts[ds] = [smallest_keys(_joined(self._parts[ds]), self.k)]
                self._held[ds] = len(self._parts[ds][0][KEY])

    def rows(self, partition: int) -> TaskRows:
        return {(ds, partition): smallest_keys(_joined(parts), self.k) for ds, parts in self._parts.items()}


def accumulator(sc: SparkContext) -> Accumulator:
    """A fresh accumulator for the tasks' :meth:`TaskSample.rows`."""
    return sc.accumulator({}, _ByTask())


def day_samples(value: TaskRows, k: int) -> dict[str, Columns]:
    """Per day, the ``k`` rows of smallest key over every task's rows (an accumulator's
    value), in key order."""
    by_day: dict[str, list[Columns]] = defaultdict(list)
    for (ds, _), columns in sorted(value.items(), key=lambda item: item[0]):
        by_day[ds].append(columns)
    return {ds: smallest_keys(_joined(parts), k) for ds, parts in sorted(by_day.items())}
